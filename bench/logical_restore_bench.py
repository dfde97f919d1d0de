"""Logical restore speed: lastline's DAG under the real scheduler against myloader, `mariadb < dump.sql`
and a hand-run parallel LOAD DATA of the same chunks, on the same tuned target, one run.

    make bench-restore ARGS="--tables 8 --rows 1000000"
    (or: .venv/bin/python bench/logical_restore_bench.py --tables 8 --rows 1000000)

Data: `--tables` sysbench-shaped tables of `--rows` rows plus one table `--big` times bigger
(sbtest_big), generated in-server. Target: one sandbox with the restore profile in its my.cnf
(buffer pool, redo 1G, doublewrite off, flush_log_at_trx_commit=0, skip-log-bin, autoinc lock mode 2,
no adaptive hash index, max_allowed_packet 1G, io_capacity 2000), the same for every method:

- lastline: `logical_backup` (the dump task) then the `logical_restore` DAG triggered on a running
  `airflow standalone` (LocalExecutor, SQLite) with `parallel` lanes; timed from the run's start to
  its end as the metadata DB records them (scheduling, task start-up, finalize's index builds,
  verify's checksums and the report included), and its load step alone;
- direct: lastline without Airflow, the same steps with the same settings (the first of
  `--index-builds`) called in order by this process, its lanes as N forked processes: lastline's own
  work (checks, ledger, verify, report) apart from what the scheduler and task processes add;
- `myloader -t N` of a `mydumper --rows 250000` dump (Debian's 0.10);
- with `--myloader1 DIR` (or LASTLINE_MYDUMPER1_DIR): myloader 1.0 in its fastest setting
  (`--optimize-keys=AFTER_IMPORT_ALL_TABLES`) of a `mydumper 1.0 --format=LOAD_DATA` dump; the bench
  does not build it: build mydumper 1.0 from its source beside the project and point it there;
- `mariadb < dump.sql` of a `mariadb-dump` (one thread: what most restores still are);
- by hand: tables created with their primary key only, `zstd -dc <chunks> | mariadb -e "LOAD DATA LOCAL
  INFILE '/dev/stdin' ..."`, one table per loader, N loaders, then each table's secondary indexes in one
  ALTER, N at a time (the practical limit of a client-side load: no checksum, no ledger, no scheduler).

`--memory quarter` runs every method against a target whose buffer pool is a quarter of the data and
whose redo log is small (128 MB; lastline is told not to grow it): the regime of production restores.
The first lastline run after the scheduler came up is printed apart (cold: the workers' first imports);
the runs that follow are warm and make the means.

Each competitor, and lastline without Airflow (its log lines in `direct.log` beside the record), runs twice,
before lastline's DAG and after it (a fresh target's first restore pays for touching its buffer pool; the
machine's speed drifts), and the ratios use the mean of the two. Every restore
starts from an empty database and is checked by row counts. Prints seconds, MB/s (raw TSV bytes) and
each method's time over lastline's; writes a JSON record.
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import multiprocessing
import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from logical_bench import SCHEDULES_OFF, dataset, sh  # noqa: E402

from lastline.core.option_files import option_file, option_file_text  # noqa: E402
from lastline.logical.backup import stages as logical_backup  # noqa: E402
from lastline.logical.restore import report as restore_report  # noqa: E402
from lastline.logical.restore import stages as logical_restore  # noqa: E402
from lastline.logical.restore.schema_tables import split_deferred  # noqa: E402
from lastline.manifest import read_manifest  # noqa: E402
from lastline.storage import open_storage  # noqa: E402
from lastline_dev.deployment import SHARED_SETTINGS  # noqa: E402
from lastline_dev.sandbox import Instance  # noqa: E402
from lastline_dev.standalone import Standalone  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TUNED = (
    "[mysqld]\ninnodb-buffer-pool-size=6G\ninnodb-log-file-size=1G\ninnodb-doublewrite=0\n"
    "innodb-flush-log-at-trx-commit=0\nskip-log-bin\ninnodb-autoinc-lock-mode=2\ninnodb-adaptive-hash-index=0\n"
    "max-allowed-packet=1G\ninnodb-io-capacity=2000\ninnodb-io-capacity-max=4000\n"
)


SMALL_REDO = 128 << 20
# --index-builds settings: how the secondary indexes come (held back and built by finalize after all rows,
# held back and built by the lane that completes a table, or created with the table and kept up by the load)
# and where verify's checksums are taken (right after a table's index build, by finalize or the lane; with
# with_data by verify, with with_data_checks by the lane right after a table's last chunk)
BUILDS = {
    "after_all": {"defer_indexes": True, "index_build": "after_all"},
    "per_table": {"defer_indexes": True, "index_build": "per_table"},
    "with_data": {"defer_indexes": False, "index_build": "after_all"},
    "with_data_checks": {"defer_indexes": False, "index_build": "per_table"},
}


def target(work: Path, buffer_pool: int | None) -> Instance:
    """The tuned target sandbox (fresh every run); `buffer_pool` bytes and a small redo log if given."""
    inst = Instance(work / "sandbox", "rtgt")
    if inst.exists():
        inst.destroy()
    inst.create()
    tuned = TUNED
    if buffer_pool:
        tuned = tuned.replace("innodb-buffer-pool-size=6G", f"innodb-buffer-pool-size={buffer_pool}").replace(
            "innodb-log-file-size=1G", f"innodb-log-file-size={SMALL_REDO}")
    (inst.conf_d / "tuned.cnf").write_text(tuned)
    inst.stop()
    inst.start()
    return inst


def process_seconds(pid: int | str) -> float:
    """CPU seconds (user + system) the process `pid` has used so far."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> tuple[float, float]:
    """CPU seconds the machine has spent busy (all but idle and iowait) and those the process `pid` used."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK"), process_seconds(pid) if pid else 0.0


def cpu_since(start: tuple[float, float], pid: int | None) -> tuple[float, float]:
    """cpu_seconds now minus `start`."""
    now = cpu_seconds(pid)
    return now[0] - start[0], now[1] - start[1]


def rows_on(inst: Instance) -> int:
    return int(inst.server().query("SELECT SUM(c) FROM (SELECT COUNT(*) c FROM sbtest.sbtest1 UNION ALL "
                                   "SELECT COUNT(*) FROM sbtest.sbtest_big) x")[0][0] or 0)


def drop(inst: Instance) -> None:
    inst.server().query("DROP DATABASE IF EXISTS sbtest")


def hand(src: Instance, tgt: Instance, manifest, dumps: Path, work: Path, topt: str, n: int, record, timed) -> None:
    """By hand, the practical limit: tables created with their primary key only, each table's chunks in key
    order through one LOAD DATA, n tables at a time, then each table's secondary indexes in one ALTER, n at a
    time (no checksum, no ledger, no task). Unique checks stay on: with them off, MariaDB 10.6+ takes its
    bulk-insert path into the empty table, which cost the server 1.6x the CPU here (107 against 67 s in one
    in-memory run; bench/load_shape_bench.py compares the paths)."""
    drop(tgt)
    ddl = src.server().query("SHOW CREATE DATABASE sbtest")[0][1]
    tgt.server().query(ddl)
    indexes = {}
    for t in manifest.tables:
        create, indexes[t.name], _fks = split_deferred(src.server().query(f"SHOW CREATE TABLE sbtest.`{t.name}`")[0][1])
        tgt.server().query(create.replace("CREATE TABLE `", "CREATE TABLE sbtest.`", 1))
    jobs = work / "hand-jobs"
    shutil.rmtree(jobs, ignore_errors=True)
    (jobs / "load").mkdir(parents=True)
    (jobs / "index").mkdir()
    for i, t in enumerate(sorted(manifest.tables, key=lambda t: -t.raw_bytes)):
        files = " ".join(str(dumps / "lastline" / manifest.backup_id / c.file) for c in t.chunks)
        (jobs / "load" / f"{i:03d}.sh").write_text(
            f"zstd -q -dc {files} | mariadb --defaults-extra-file={topt} --local-infile=1 -e \"SET SESSION "
            "sql_log_bin=0, foreign_key_checks=0; LOAD DATA LOCAL INFILE '/dev/stdin' INTO TABLE "
            f"sbtest.{t.name} CHARACTER SET binary FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\\\\\' "
            "LINES TERMINATED BY '\\n'\"\n"
        )
        if indexes[t.name]:
            (jobs / "index" / f"{i:03d}.sh").write_text(
                f"mariadb --defaults-extra-file={topt} -e \"SET SESSION sql_log_bin=0; ALTER TABLE sbtest.{t.name} "
                + ", ".join(f"ADD {d}" for d in indexes[t.name]).replace("`", "\\`") + '"\n')
    record(f"by hand: zstd -dc | LOAD DATA per table, {n} at a time, then the indexes",
           timed(f"ls {jobs}/load/*.sh | xargs -P {n} -n 1 bash -o pipefail && "
                 f"ls {jobs}/index/*.sh | xargs -r -P {n} -n 1 bash -o pipefail"))


@contextmanager
def logs_to(path: Path) -> Iterator[None]:
    """lastline's log lines go to `path` (appended) instead of this bench's output, as a task's go to its log."""
    logger = logging.getLogger("lastline")
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(processName)s %(name)s %(levelname)s %(message)s"))
    saved = logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate, logger.level = False, logging.INFO
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()
        logger.propagate, logger.level = saved


def without_airflow(conf: dict, run_id: str) -> tuple[float, dict, float]:
    """lastline's own work, without Airflow: the DAG's steps called in its order in this process (preflight,
    snapshot_config, prepare, then its lanes as `parallel` forked processes, finalize, revert, verify and the
    report), as task_groups.logical_restore_steps calls them. Its seconds, the report, and the lanes' seconds spent
    reading chunks back for their checks."""
    t0 = time.monotonic()
    plan = logical_restore.preflight(conf)
    snap = logical_restore.snapshot_config(plan, run_id)
    try:
        steps, lanes = logical_restore.prepare(plan)
        with ProcessPoolExecutor(len(lanes), mp_context=multiprocessing.get_context("fork")) as pool:
            loads = list(pool.map(functools.partial(logical_restore.load_lane, plan), lanes))
        finalized = logical_restore.finalize(plan)
    finally:
        reverted = logical_restore.revert(plan)  # the DAG's teardown: after a failure too
    verified = logical_restore.verify(plan, snap)
    report = restore_report.write(plan, {**steps, "finalize": finalized, "revert": reverted, "verify": verified}, loads,
                                  "logical_restore_without_airflow", run_id)
    checks = sum(unit.check_seconds for lane in loads for unit in lane)
    return time.monotonic() - t0, report, checks


# a standalone scheduler (its own executor) with the deployment's settings (docker-compose.yaml, held to them by
# tests/e2e/test_deploy.py): the scheduler loop sleeps 0.2 s when idle, not 1 s (each serial task would wait for it);
# the DAG files are parsed every 300 s, not 30; the nightly schedules off (logical_bench.SCHEDULES_OFF)
DEPLOYMENT_ENV = {**{k: v for k, v in SHARED_SETTINGS.items() if k != "AIRFLOW__CORE__EXECUTOR"},
                  "AIRFLOW__API__HOST": "127.0.0.1", "LASTLINE_RETRIES": "0", **SCHEDULES_OFF}


def task_timeline(db: Path, dag_id: str, run_id: str) -> list[dict]:
    """Each task instance's start (from the run's first task start) and duration, from the metadata DB."""
    with sqlite3.connect(db) as c:
        rows = c.execute(
            "SELECT task_id, map_index, rendered_map_index, start_date, end_date FROM task_instance "
            "WHERE dag_id = ? AND run_id = ? AND start_date IS NOT NULL ORDER BY start_date", (dag_id, run_id),
        ).fetchall()
    if not rows:
        return []
    t0 = datetime.fromisoformat(rows[0][3])
    return [
        {"task": f"{task}[{idx}] {name}" if idx >= 0 else task,
         "start": round((datetime.fromisoformat(start) - t0).total_seconds(), 2),
         "seconds": round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 2)}
        for task, idx, name, start, end in rows
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--big", type=int, default=4, help="the extra table is this many times bigger")
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--myloader1", default=os.environ.get("LASTLINE_MYDUMPER1_DIR", ""),
                   help="a folder with mydumper and myloader 1.0 built from their source (github.com/mydumper/mydumper, "
                        "tag v1.0.1-3; not in Debian): runs myloader 1.0 in its fastest setting too")
    p.add_argument("--reuse", action="store_true", help="keep the generated source dataset from an earlier run")
    p.add_argument("--index-builds", default="per_table,after_all,after_all,per_table",
                   help="lastline's index settings to run, in order (comma list of " + ", ".join(BUILDS) + "; ABBA by "
                        "default, since the run in second place is faster by itself); the first setting's mean is the ratios' base")
    p.add_argument("--methods", default="hand,direct,myloader,sql,lastline", help="which to run (comma list); ratios need lastline")
    p.add_argument("--memory", choices=("in", "quarter"), default="in",
                   help="in: the data fits the target's buffer pool (6G); quarter: the buffer pool is a quarter of the "
                        "data and the redo log 128 MB, for every method")
    p.add_argument("--work", default=str(ROOT / "bench" / "results" / "restore"))
    p.add_argument("--airflow-env", nargs="*", default=[], metavar="KEY=VALUE",
                   help="settings added to the standalone that runs lastline (e.g. AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL=600)")
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    n = args.parallel
    sizes = {f"sbtest{i}": args.rows for i in range(1, args.tables + 1)} | {"sbtest_big": args.rows * args.big}
    src = dataset(work, "rsrc", sizes, args.reuse, "[mysqld]\ninnodb-buffer-pool-size=4G\ninnodb-log-file-size=1G\n")
    env = dict(os.environ)
    env["AIRFLOW_CONN_BENCH_RSRC"] = json.dumps(src.connection("bench_rsrc"))
    os.environ["AIRFLOW_CONN_BENCH_RSRC"] = env["AIRFLOW_CONN_BENCH_RSRC"]
    expected = args.rows + args.rows * args.big
    results: dict[str, dict] = {}

    # the backups every method restores from
    dumps = work / "dumps"
    shutil.rmtree(dumps, ignore_errors=True)
    dumps.mkdir()
    plan = logical_backup.preflight({"source_conn_id": "bench_rsrc", "destination": f"file://{dumps / 'lastline'}",
                         "databases": ["sbtest"], "parallel": n})
    logical_backup.dump(plan)
    manifest = read_manifest(open_storage(f"file://{dumps / 'lastline'}"), plan.backup_id, "logical")
    raw_mb = manifest.raw_bytes / 1e6
    buffer_pool = max(128 << 20, manifest.raw_bytes // 4 // (128 << 20) * (128 << 20)) if args.memory == "quarter" else None
    tgt = target(work, buffer_pool)
    env["AIRFLOW_CONN_BENCH_RTGT"] = json.dumps(tgt.connection("bench_rtgt"))
    os.environ["AIRFLOW_CONN_BENCH_RTGT"] = env["AIRFLOW_CONN_BENCH_RTGT"]
    memory = (f"buffer pool {buffer_pool >> 20} MB (a quarter of the data), redo {SMALL_REDO >> 20} MB" if buffer_pool
              else "buffer pool 6G, redo 1G (the data fits in memory)")
    print(f"restoring {raw_mb:,.0f} MB of rows ({manifest.rows:,} rows, {len(manifest.tables)} tables), {n} threads; "
          f"target: {memory}", flush=True)

    last_cpu: list[tuple[float, float]] = [(0.0, 0.0)]

    def timed(cmd: str) -> float:
        """sh(cmd)'s seconds; the CPU it took (machine busy, target server) kept for record()."""
        start = cpu_seconds(tgt.pid())
        seconds = sh(cmd)
        last_cpu[0] = cpu_since(start, tgt.pid())
        return seconds

    def record(name: str, seconds: float, check: bool = True, cpu: tuple[float, float] | None = None) -> None:
        busy, server = cpu or last_cpu[0]
        if check and rows_on(tgt) != expected:
            raise SystemExit(f"{name}: sbtest1 + sbtest_big hold {rows_on(tgt)} rows, expected {expected}")
        # where the 2 cores went: the target server, and everything else (the client or lastline with its
        # scheduler, api-server and task processes); what neither used was idle or waiting on the disk
        results[name] = {"seconds": round(seconds, 1), "mb_per_s": round(raw_mb / seconds, 1),
                         "cpu_server_s": round(server, 1), "cpu_rest_s": round(busy - server, 1)}
        print(f"  {name:<58} {seconds:7.1f} s  {raw_mb / seconds:6.1f} MB/s  CPU s: server {server:5.1f}, "
              f"rest {busy - server:5.1f}", flush=True)

    methods = set(args.methods.split(","))
    if methods & {"myloader", "sql"}:
        with option_file(src.server(), ("client", "mydumper", "mariadb-dump")) as sopt:
            sh(f"mydumper --defaults-file={sopt} -B sbtest -t {n} --rows 250000 -o {dumps / 'mydumper'}")
            sh(f"mariadb-dump --defaults-extra-file={sopt} --single-transaction --databases sbtest > {dumps / 'dump.sql'}")
    one = Path(args.myloader1) if args.myloader1 else None
    if ("myloader1" in methods or "myloader" in methods) and one and (one / "mydumper").exists():
        s1 = work / "mydumper1-source.cnf"  # 1.0 refuses the `protocol` line of the shared option files
        s1.write_text("".join(line + "\n" for line in option_file_text(src.server(), ("mydumper",)).splitlines()
                              if not line.startswith("protocol=")))
        s1.chmod(0o600)
        sh(f"{one / 'mydumper'} --defaults-file={s1} -B sbtest -t {n} --rows 250000 --format=LOAD_DATA "
           f"-o {dumps / 'mydumper1'}")

    conf = {"target_conn_id": "bench_rtgt", "backup": f"file://{dumps / 'lastline'}/{manifest.backup_id}",
            "parallel": n, "force": True, "redo_log_bytes": SMALL_REDO if buffer_pool else 1 << 30,
            "databases": [], "tune": True, "restart_allowed": False, "defer_indexes": True, "aws_conn_id": None}
    builds = args.index_builds.split(",")
    os.environ["LASTLINE_REPORT_DIR"] = str(work / "reports")

    def anchors(suffix: str) -> None:
        """Every competitor in `methods` once, each into an empty database, its name ending in `suffix`."""
        with option_file(tgt.server(), ("client", "myloader", "mariadb")) as topt:
            if "hand" in methods:
                hand(src, tgt, manifest, dumps, work, topt, n, lambda name, *a, **k: record(name + suffix, *a, **k), timed)
            if "direct" in methods:
                drop(tgt)
                start = cpu_seconds(tgt.pid())
                with logs_to(work / "direct.log"):
                    seconds, report, checks = without_airflow({**conf, **BUILDS[builds[0]]}, f"direct{suffix.replace(' ', '')}")
                record(f"lastline without Airflow: its steps called in order, {n} lanes as processes, "
                       f"index_build={builds[0]}{suffix}", seconds, cpu=cpu_since(start, tgt.pid()))
                print(f"  {'  of which: load step':<58} {report['load_seconds']:7.1f} s (lanes reading chunks back for "
                      f"their checks: {checks:.1f} s)", flush=True)
            if "myloader" in methods:
                drop(tgt)
                record(f"myloader -t {n} (mydumper --rows 250000){suffix}",
                       timed(f"myloader --defaults-file={topt} -t {n} -d {dumps / 'mydumper'}"))
            if "myloader1" in methods or ("myloader" in methods and one):
                if not one or not (one / "myloader").exists():
                    print("  myloader 1.0: not run (no --myloader1 folder with mydumper and myloader 1.0 built from "
                          "github.com/mydumper/mydumper, tag v1.0.1-3)", flush=True)
                else:  # 1.0 refuses the `protocol` line of the shared option files: a file of its own, without it
                    t1 = work / "mydumper1-target.cnf"
                    t1.write_text("".join(line + "\n" for line in option_file_text(tgt.server(), ("myloader",)).splitlines()
                                          if not line.startswith("protocol=")))
                    t1.chmod(0o600)
                    drop(tgt)
                    record(f"myloader 1.0 -t {n} --optimize-keys=AFTER_IMPORT_ALL_TABLES (mydumper 1.0 --format=LOAD_DATA){suffix}",
                           timed(f"{one / 'myloader'} --defaults-file={t1} -t {n} --optimize-keys=AFTER_IMPORT_ALL_TABLES "
                                 f"-d {dumps / 'mydumper1'}"))
            if "sql" in methods:
                drop(tgt)
                record(f"mariadb < dump.sql (mariadb-dump){suffix}",
                       timed(f"mariadb --defaults-extra-file={topt} < {dumps / 'dump.sql'}"))

    # each competitor runs before lastline and again after it (a fresh target's first restore pays for touching
    # its buffer pool; the machine's speed drifts): the ratios use the mean of the two
    anchors(", run 1")
    if "lastline" not in methods:
        anchors(", run 2")
        src.stop()
        tgt.stop()
        return 0

    drop(tgt)
    (ROOT / ".airflow").mkdir(exist_ok=True)
    env.update(DEPLOYMENT_ENV, LASTLINE_REPORT_DIR=str(work / "reports"))
    env.update(dict(a.split("=", 1) for a in args.airflow_env))
    with Standalone(env, work / "standalone.log") as af:
        # the first run after `standalone` starts pays the workers' first imports (once per deployment):
        # printed apart as the cold run; the runs after it are warm
        runs = []
        for build in [builds[0], *builds]:
            drop(tgt)
            start = cpu_seconds(tgt.pid())  # the trigger (two REST calls) is counted
            run = af.wait("logical_restore", af.trigger("logical_restore", {**conf, **BUILDS[build]}))
            run["cpu"] = cpu_since(start, tgt.pid())
            run["peak_rss"] = af.task_peaks("logical_restore", run["run_id"])
            if run["state"] == "success" and rows_on(tgt) != expected:
                raise SystemExit(f"index_build={build}: sbtest1 + sbtest_big hold {rows_on(tgt)} rows, expected {expected}")
            runs.append((build, run))
    timelines = {}
    by_build: dict[str, list[float]] = {}
    for position, (build, run) in enumerate(runs):
        if run["state"] != "success":
            raise SystemExit(f"logical_restore {run['run_id']} failed: see {work / 'standalone.log'} and .airflow/logs")
        report = json.loads((work / "reports" / "logical_restore" / run["run_id"] / "logical_restore.json").read_text())
        if position == 0:
            name = f"lastline DAG, {n} lanes, index_build={build}, cold: first run after the scheduler started"
        else:
            name = f"lastline DAG, {n} lanes, index_build={build}, warm run {position} (whole run)"
            by_build.setdefault(build, []).append(run["seconds"])
        record(name, run["seconds"], check=False, cpu=run["cpu"])  # rows checked right after the run
        results[name]["load_step"] = {"seconds": report["load_seconds"], "mb_per_s": report["load_mb_per_s"],
                                      "stages": report["stages"]}
        results[name]["peak_rss"] = peaks = run["peak_rss"]
        print(f"  {'  peak RSS: largest task process':<58} {peaks['largest_task']['mb']:7.0f} MB "
              f"({peaks['largest_task']['task']}; the largest process a task started: "
              f"{peaks['largest_child']['command']} {peaks['largest_child']['mb']:.0f} MB)", flush=True)
        print(f"  {'  of which: load step (lanes, in-lane index builds included)':<58} {report['load_seconds']:7.1f} s", flush=True)
        print(f"  {'  stages':<58} " + ", ".join(f"{k} {v:.1f} s" for k, v in report["stages"].items()), flush=True)
        timelines[name] = timeline = task_timeline(af.db, "logical_restore", run["run_id"])
        print("  task timeline (seconds from the run's first task start: start, duration):", flush=True)
        for t in timeline:
            print(f"    {t['task']:<48} {t['start']:6.1f} {t['seconds']:6.1f}", flush=True)
    results["lastline task timelines"] = timelines
    anchors(", run 2")
    for name in [k[:-len(", run 1")] for k in results if k.endswith(", run 1")]:
        if f"{name}, run 2" in results:
            mean = (results[f"{name}, run 1"]["seconds"] + results[f"{name}, run 2"]["seconds"]) / 2
            results[f"{name}: mean of 2 runs"] = {"seconds": round(mean, 1), "mb_per_s": round(raw_mb / mean, 1)}
            print(f"  {name[:46] + ': mean of 2 runs':<58} {mean:7.1f} s", flush=True)

    for build, seconds in by_build.items():
        mean = sum(seconds) / len(seconds)
        results[f"lastline DAG, {n} lanes, index_build={build}: mean of {len(seconds)} runs"] = {
            "seconds": round(mean, 1), "mb_per_s": round(raw_mb / mean, 1)}
        print(f"  {f'lastline, index_build={build}: mean of ' + str(len(seconds)) + ' runs':<58} {mean:7.1f} s", flush=True)
    base = results[f"lastline DAG, {n} lanes, index_build={builds[0]}: mean of {len(by_build[builds[0]])} runs"]["seconds"]
    print(f"\ntime over lastline's whole warm DAG run (index_build={builds[0]}, mean); above 1.00 means lastline is faster:")
    for name, res in results.items():
        if "seconds" not in res:
            continue
        res["ratio_to_lastline"] = round(res["seconds"] / base, 2)
        print(f"  {name:<58} {res['ratio_to_lastline']:5.2f}x")
    out = work / f"restore-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps({"tables": args.tables, "rows": args.rows, "big": args.big, "parallel": n,
                               "memory": memory, "raw_mb": round(raw_mb, 1), "results": results}, indent=1))
    print(f"\nrecorded in {out}; the DAG runs' reports and charts: {work / 'reports' / 'logical_restore'}")
    src.stop()
    tgt.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
