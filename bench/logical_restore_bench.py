"""Logical restore speed: lastline's DAG under the real scheduler against myloader 1.0 on the same tuned target,
at two buffer pools: the canonical race, one command.

    make bench-restore
    (or: .venv/bin/python bench/logical_restore_bench.py; a quick check: ARGS="--tables 2 --rows 50000 --pools 512M")

The default race (about 12 minutes here, 2 of them generating the data; `--reuse` keeps it):

- data: 8 sysbench-shaped tables of `--rows` 1M rows plus one table `--big` 4 times bigger (sbtest_big), 12M rows,
  about 2.3 GB of TSV, generated in-server; the dump step: lastline's dump and `mydumper 1.0 --format=LOAD_DATA --rows
  250000`, 2 threads each, timed on a warm source (every table read first) and on a cold one (restarted, its buffer
  pool empty), each after the source's dirty pages are flushed (dump_race); the warm dumps are what the restores use;
- target: one sandbox with the restore profile in its my.cnf (redo 1G, doublewrite off, flush_log_at_trx_commit=0,
  skip-log-bin, autoinc lock mode 2, no adaptive hash index, max_allowed_packet 1G, io_capacity 2000), fresh for each
  of `--pools` 4G (the data fits in memory) and 512M (the data about 4x the pool), the same for both methods;
- lastline: the `logical_restore` DAG triggered (REST API) on `bin/airflow standalone`, the embedded Airflow as
  `make setup` makes it, with the deployment's settings bin/airflow gives it (include/lastline/airflow/embedded.py;
  the bench adds none but no retries, the nightly schedules off and ports of its own), 2 lanes: a warm-up run (the
  workers' first imports, the target's first touch of its buffer pool), then one run, timed from the run's start to
  its end as the metadata DB records them (scheduling, task start-up, finalize's index builds, verify, the report);
- myloader 1.0 (`-t 2 --optimize-keys=AFTER_IMPORT_ALL_TABLES`), once, after lastline's runs (the standalone is
  stopped by then), from bench/.mydumper1, which bench/build_mydumper1.sh builds from a checkout named by
  LASTLINE_MYDUMPER1_SRC (`git clone --branch v1.0.1-3 https://github.com/mydumper/mydumper`), or from `--myloader1
  DIR` / LASTLINE_MYDUMPER1_DIR. Without it the bench says so and races Debian's myloader 0.10, labelled.

Per pool it prints the ratio (myloader 1.0's time over lastline's whole run: above 1.00x lastline is faster), and for
lastline's run: the load step and what lies outside it; trigger to first row (the DAG run's queued_at to when this
bench first saw a committed ledger row on the target: the first chunk's rows in; it reads the ledger every POLL s
while the run goes, since finalize drops it) and last row to end (when it last saw the ledger grow to the run's
end); each task's queued, start and
end from the metadata DB, with the scheduler's hop to it and its start-up; the CPU seconds each process group used
from the trigger to the end, read from /proc per process before and after (scheduler; the LocalExecutor's workers with
the task processes they start; dag-processor, api-server, triggerer; the target's mariadbd; this bench; the rest of
the machine). At its end, the issue's goals, each met or NOT met, with where the CPU went for a whole run short of
myloader 1.0 (print_goals). Writes a JSON record to bench/records/.

Other methods and the older race, behind flags:

- `--methods` adds `hand` (tables created with their primary key only, `zstd -dc <chunks> | mariadb -e "LOAD DATA
  LOCAL INFILE '/dev/stdin' ..."`, one table per loader, N loaders, then each table's secondary indexes in one ALTER,
  N at a time: the practical limit of a client-side load), `direct` (lastline without Airflow: the DAG's steps called
  in order by this process, its lanes as N forked processes, its log lines in `direct.log`), `myloader` (Debian's
  0.10 of a `mydumper --rows 250000` dump) and `sql` (`mariadb < dump.sql` of a `mariadb-dump`, one thread);
- `--index-builds` runs more lastline runs after the warm-up (ABBA, `per_table,after_all,after_all,per_table`, as the
  older race did: the run in second place is faster by itself); the first setting's mean is the ratios' base;
- `--rounds 2` runs each competitor before lastline's runs and again after them, the ratios on the mean of the two;
- `--memory in` (buffer pool 6G) or `--memory quarter` (a quarter of the data, redo 128 MB, lastline told not to grow
  it) instead of `--pools`: the older regimes.

The older race: `--methods hand,direct,myloader,sql,lastline --index-builds per_table,after_all,after_all,per_table
--rounds 2 --memory in`. Every restore starts from an empty database and is checked by row counts.
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
import subprocess
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
from lastline.core.sql import META_DB  # noqa: E402
from lastline.logical.backup import stages as logical_backup  # noqa: E402
from lastline.logical.restore import report as restore_report  # noqa: E402
from lastline.logical.restore import stages as logical_restore  # noqa: E402
from lastline.logical.restore.schema_tables import split_deferred  # noqa: E402
from lastline.manifest import read_manifest  # noqa: E402
from lastline.storage import open_storage  # noqa: E402
from lastline_dev.deployment import SHARED_SETTINGS, free_port  # noqa: E402
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


def target(work: Path, buffer_pool: int | None, pool: str | None = None) -> Instance:
    """The tuned target sandbox (fresh every run); `buffer_pool` bytes and a small redo log if given, or a buffer
    pool of `pool` (as my.cnf writes it: 4G, 512M) with the tuned redo log."""
    inst = Instance(work / "sandbox", "rtgt")
    if inst.exists():
        inst.destroy()
    inst.create()
    tuned = TUNED
    if buffer_pool:
        tuned = tuned.replace("innodb-buffer-pool-size=6G", f"innodb-buffer-pool-size={buffer_pool}").replace(
            "innodb-log-file-size=1G", f"innodb-log-file-size={SMALL_REDO}")
    elif pool:
        tuned = tuned.replace("innodb-buffer-pool-size=6G", f"innodb-buffer-pool-size={pool}")
    (inst.conf_d / "tuned.cnf").write_text(tuned)
    inst.stop()
    inst.start()
    return inst


def process_seconds(pid: int | str) -> float:
    """CPU seconds (user + system) the process `pid` has used so far (ProcessLookupError, an OSError, once it is gone)."""
    st = _stat(int(pid))
    if st is None:
        raise ProcessLookupError(f"process {pid} is gone")
    return st[1]


def cpu_seconds(pid: int | None) -> tuple[float, float]:
    """CPU seconds the machine has spent busy (all but idle and iowait) and those the process `pid` used."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK"), process_seconds(pid) if pid else 0.0


def cpu_since(start: tuple[float, float], pid: int | None) -> tuple[float, float]:
    """cpu_seconds now minus `start`."""
    now = cpu_seconds(pid)
    return now[0] - start[0], now[1] - start[1]


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
    """Each task instance's start (from the run's first task start) and duration, from the metadata DB (run_times)."""
    tasks = [t for t in run_times(db, dag_id, run_id)["tasks"] if t["end"] is not None]
    if not tasks:
        return []
    t0 = tasks[0]["start"]
    return [{"task": t["task"], "start": round(t["start"] - t0, 2), "seconds": round(t["end"] - t["start"], 2)}
            for t in tasks]


def epoch(stamp: str | None) -> float | None:
    """A metadata DB time (ISO, UTC; SQLite keeps it without its zone) as epoch seconds."""
    if not stamp:
        return None
    when = datetime.fromisoformat(stamp)
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def run_times(db: Path, dag_id: str, run_id: str) -> dict:
    """The run as the metadata DB records it (epoch seconds): its trigger (queued_at), start and end, and each task
    instance's queued, start and end, in the order they started."""
    with sqlite3.connect(db) as c:
        queued, start, end, state = c.execute(
            "SELECT queued_at, start_date, end_date, state FROM dag_run WHERE dag_id = ? AND run_id = ?",
            (dag_id, run_id)).fetchone()
        tis = c.execute(
            "SELECT task_id, map_index, rendered_map_index, queued_dttm, start_date, end_date FROM task_instance "
            "WHERE dag_id = ? AND run_id = ? AND start_date IS NOT NULL ORDER BY start_date, map_index",
            (dag_id, run_id)).fetchall()
    return {"state": state, "triggered": epoch(queued), "start": epoch(start), "end": epoch(end),
            "tasks": [{"task": f"{task}[{idx}] {name or ''}".rstrip() if idx >= 0 else task, "queued": epoch(q),
                       "start": epoch(s), "end": epoch(e)} for task, idx, name, q, s, e in tis]}


def timeline_rows(times: dict) -> list[dict]:
    """Each task's queued, start and end in seconds from the run's start, its duration, and the scheduler's hop to it:
    `after` = queued minus the last end of a task that ended before it was queued (the scheduler seeing the
    upstream done and queueing this one), `startup` = start minus queued (the executor starting its process)."""
    t0, out = times["start"], []
    for t in times["tasks"]:
        before = [o["end"] for o in times["tasks"] if o["end"] is not None and t["queued"] is not None and o["end"] <= t["queued"]]
        prev = max(before, default=t0)
        out.append({"task": t["task"],
                    "queued": round(t["queued"] - t0, 2) if t["queued"] else None,
                    "start": round(t["start"] - t0, 2), "end": round(t["end"] - t0, 2) if t["end"] else None,
                    "seconds": round(t["end"] - t["start"], 2) if t["end"] else None,
                    "hop": round(t["queued"] - prev, 2) if t["queued"] else None,
                    "startup": round(t["start"] - t["queued"], 2) if t["queued"] else None})
    return out


def _stat(pid: int) -> tuple[int, float, float] | None:
    """A process's parent, its own CPU seconds and those of its children it reaped (None if gone)."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(f[1]), (int(f[11]) + int(f[12])) / tick, (int(f[13]) + int(f[14])) / tick


COMPONENTS = ("scheduler", "dag-processor", "api-server", "triggerer")
POLL = 0.5  # seconds between this bench's looks at a running restore (its ledger, its state): each costs CPU the run shares
TASKS = "task processes (LocalExecutor workers, tasks, what they run)"


def group_cpu(sid: int, server_pid: int | None) -> dict[str, float]:
    """CPU seconds so far per process group: each part `airflow standalone` starts (its direct children: scheduler,
    dag-processor, api-server, triggerer; the processes each starts counted with it, but the scheduler's: the
    LocalExecutor's workers and the task processes they start, a group of their own), the target's mariadbd, this
    bench (triggering, polling), and the machine's busy total. A process counts its own CPU and that of the children
    it reaped, so a task process that ended between two readings is in its worker's figure; the difference of two
    readings is what each group used in between."""
    procs: dict[int, tuple[int, float, float]] = {}
    titles: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if os.getsid(pid) != sid:
                continue
            st = _stat(pid)
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if st:
            procs[pid], titles[pid] = st, title
    out: dict[str, float] = {}

    def add(group: str, seconds: float) -> None:
        out[group] = out.get(group, 0.0) + seconds

    for pid, (_ppid, own, reaped) in procs.items():
        if pid == sid:
            add("standalone (the parent)", own + reaped)
            continue
        child = pid  # the direct child of standalone this process descends from
        while procs.get(child, (sid,))[0] != sid and child in procs:
            child = procs[child][0]
        words = titles.get(child, "").replace("_", "-").split()  # the api-server calls itself `airflow api_server -- ...`
        name = next((c for c in COMPONENTS if c in words), "other " + " ".join(words[1:3]))
        if name == "scheduler":
            if pid == child:
                add("scheduler", own)
                add(TASKS, reaped)
            else:
                add(TASKS, own + reaped)
        else:
            add(name, own + reaped)
    if server_pid and (st := _stat(server_pid)):
        add("mariadbd (target)", st[1] + st[2])
    me = os.times()
    add("this bench (trigger, polling)", me.user + me.system)
    add("machine busy (all cores)", cpu_seconds(None)[0])
    return out


def cpu_between(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What each group used between two group_cpu readings, and the rest of the machine (other processes)."""
    used = {k: round(after.get(k, 0.0) - before.get(k, 0.0), 1) for k in after}
    machine = used.pop("machine busy (all cores)")
    used["rest of the machine"] = round(machine - sum(used.values()), 1)
    used["machine busy (all cores)"] = machine
    return used


def lastline_run(af: Standalone, tgt: Instance, conf: dict, backup_id: str, chunks: int, timeout: float = 7200) -> dict:
    """Trigger a logical_restore with `conf` and follow it to its end: its times from the metadata DB; when the first
    committed ledger row showed on the target and when the last one did (this bench's clock, read every POLL s while
    it runs: finalize drops the ledger; a row is committed with its chunk, so these are rows loaded), besides the
    ledger's own loaded_at (a chunk's transaction's start); and the CPU each process group used from just before the
    trigger to the run's end."""
    before = group_cpu(af.proc.pid if af.proc else 0, tgt.pid())
    run_id = af.trigger("logical_restore", conf)
    first = last = started = None
    seen = 0
    deadline = time.monotonic() + timeout
    with tgt.server().session() as cur:
        cur.execute("SET SESSION autocommit = 1")
        while True:
            with sqlite3.connect(af.db) as c:
                state = c.execute("SELECT state FROM dag_run WHERE dag_id = 'logical_restore' AND run_id = ?",
                                  (run_id,)).fetchone()
            if state and state[0] in ("success", "failed"):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"logical_restore {run_id} did not finish in {timeout:.0f} s; see {af.log}")
            try:
                cur.execute(f"SELECT UNIX_TIMESTAMP(MIN(loaded_at)), UNIX_TIMESTAMP(MAX(loaded_at)), COUNT(*) FROM "
                            f"{META_DB}.ledger WHERE backup_id = %s", (backup_id,))
                lo, _hi, n = cur.fetchone()
                if n:
                    now = time.time()
                    first = first or now
                    if n > seen:
                        last, seen = now, int(n)
                    started = started or float(lo)
            except Exception:  # noqa: BLE001 - the ledger is not there yet, or finalize dropped it
                pass
            time.sleep(POLL)
    after = group_cpu(af.proc.pid if af.proc else 0, tgt.pid())
    times = run_times(af.db, "logical_restore", run_id)
    return {"run_id": run_id, "state": times["state"], "seconds": times["end"] - times["start"], "times": times,
            "first_row": first, "last_row": last, "first_chunk_started": started, "ledger_rows_seen": seen,
            "chunks": chunks,
            "cpu": cpu_between(before, after)}


def clean(inst: Instance, limit: float = 600) -> None:
    """Wait until `inst`'s buffer pool holds no dirty page (flushing them at once meanwhile: innodb_max_dirty_pages_pct 0,
    then back), at most `limit` seconds."""
    server = inst.server()
    pct = server.query("SELECT @@GLOBAL.innodb_max_dirty_pages_pct")[0][0]
    server.query("SET GLOBAL innodb_max_dirty_pages_pct = 0")
    try:
        deadline = time.monotonic() + limit
        while int(server.query("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")[0][1]) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        server.query(f"SET GLOBAL innodb_max_dirty_pages_pct = {float(pct)}")


def dump_race(src: Instance, dumps: Path, work: Path, n: int, one: Path | None, tables: list[str]) -> dict:
    """The race's dump step, one run each on the same source, both ways a source is found: warm (every table read once
    before each dump: both read from memory) and cold (the source restarted before each: its buffer pool empty, every
    page read from disk). lastline's dump is its dump task's own work (one snapshot, `n` C workers, zstd, every file
    durable before the manifest); mydumper 1.0 is `--format=LOAD_DATA --rows 250000 -t n` (uncompressed, left in the page
    cache; also timed with a sync(2) after it). Before each, the disk is settled (sync: none pays for what was written
    before it). The warm lastline dump is the one the restores use (dumps/lastline; mydumper 1.0's: dumps/mydumper1).
    Returns the figures and that dump's backup_id."""
    s1 = work / "mydumper1-source.cnf"  # 1.0 refuses the `protocol` line of the shared option files
    out: dict = {}

    def ready(how: str) -> None:
        clean(src)  # no dump pays for flushing what the data's generation (or a dump before it) left dirty
        if how == "cold":
            src.stop()
            (src.datadir / "ib_buffer_pool").unlink(missing_ok=True)  # else the server reloads its pages as it starts
            src.start()
        else:
            for t in tables:
                src.server().query(f"SELECT SUM(LENGTH(c) + LENGTH(pad) + k) FROM sbtest.`{t}`")
        os.sync()

    def timed(name: str, how: str, run) -> None:
        ready(how)
        start, t0 = cpu_seconds(src.pid()), time.monotonic()
        run()
        seconds, cpu = time.monotonic() - t0, cpu_since(start, src.pid())
        out.setdefault(how, {})[name] = {"seconds": round(seconds, 2), "cpu_server_s": round(cpu[1], 1),
                                         "cpu_rest_s": round(cpu[0] - cpu[1], 1)}
        if name == "mydumper1":
            os.sync()
            out[how]["mydumper1_synced_seconds"] = round(time.monotonic() - t0, 2)

    def lastline(folder: Path) -> None:
        plan = logical_backup.preflight({"source_conn_id": "bench_rsrc", "destination": f"file://{folder}",
                                         "databases": ["sbtest"], "parallel": n})
        logical_backup.dump(plan)
        out.setdefault("backup_id", plan.backup_id)

    def mydumper1(folder: Path) -> None:
        assert one is not None
        s1.touch(0o600)
        s1.chmod(0o600)  # (a file left by a killed run keeps its mode on touch)
        try:  # the option file holds the source's password: never left behind
            s1.write_text("".join(line + "\n" for line in option_file_text(src.server(), ("mydumper",)).splitlines()
                                  if not line.startswith("protocol=")))
            subprocess.run([str(one / "mydumper"), f"--defaults-file={s1}", "-B", "sbtest", "-t", str(n), "--rows",
                            "250000", "--format=LOAD_DATA", "-o", str(folder)], check=True, stdout=subprocess.DEVNULL)
        finally:
            s1.unlink(missing_ok=True)

    print("the dump step, 2 threads each, on a warm source (every table read first) and a cold one (restarted):",
          flush=True)
    for how in ("warm", "cold"):
        aside = dumps / f"{how}-only"  # the cold round's dumps are timed, then removed
        timed("lastline", how, lambda: lastline(dumps / "lastline" if how == "warm" else aside / "lastline"))  # noqa: B023
        if one:
            timed("mydumper1", how, lambda: mydumper1(dumps / "mydumper1" if how == "warm" else aside / "mydumper1"))  # noqa: B023
        shutil.rmtree(aside, ignore_errors=True)
        r = out[how]
        for name, label in (("lastline", "lastline's dump (zstd, durable)"),
                            ("mydumper1", f"mydumper 1.0 -t {n} --rows 250000 --format=LOAD_DATA")):
            if name in r:
                print(f"  {how}: {label:<52} {r[name]['seconds']:7.1f} s  CPU s: server {r[name]['cpu_server_s']:5.1f}, "
                      f"rest {r[name]['cpu_rest_s']:5.1f}", flush=True)
        if one:
            r["ratio"] = round(r["mydumper1"]["seconds"] / r["lastline"]["seconds"], 2)
            r["ratio_synced"] = round(r["mydumper1_synced_seconds"] / r["lastline"]["seconds"], 2)
            print(f"  {how}: RATIO of the dump step: mydumper 1.0 {r['mydumper1']['seconds']:.1f} s (with a sync after it "
                  f"{r['mydumper1_synced_seconds']:.1f} s) / lastline {r['lastline']['seconds']:.1f} s = {r['ratio']:.2f}x "
                  f"({r['ratio_synced']:.2f}x with its sync)", flush=True)
    return out


def myloader1_folder(given: str) -> Path | None:
    """The folder of mydumper and myloader 1.0: `given` (--myloader1 or LASTLINE_MYDUMPER1_DIR) if it holds them, else
    bench/.mydumper1, built there by bench/build_mydumper1.sh from LASTLINE_MYDUMPER1_SRC when it does not yet hold
    1.0.1; None when there is neither."""
    if given and (Path(given) / "myloader").exists() and (Path(given) / "mydumper").exists():
        return Path(given)
    folder = Path(given) if given else ROOT / "bench" / ".mydumper1"
    built = subprocess.run([str(ROOT / "bench" / "build_mydumper1.sh"), "", str(folder)], check=False)
    return folder if built.returncode == 0 else None


def version(binary: Path | str) -> str:
    """A mydumper or myloader's --version line."""
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else "unknown"


def print_run(run: dict, report: dict, timeline: bool = True) -> dict:
    """A lastline run's figures (printed) and its record: the whole run, the load step and what lies outside it, the
    trigger to the first row and the last row to the end, the task timeline, CPU per process group."""
    times = run["times"]
    whole = run["seconds"]
    outside = whole - report["load_seconds"]
    out = {"seconds": round(whole, 2), "load_seconds": report["load_seconds"], "outside_load_seconds": round(outside, 2),
           "trigger_to_start": round(times["start"] - times["triggered"], 2) if times["triggered"] else None,
           "stages": report["stages"], "cpu": run["cpu"], "timeline": timeline_rows(times)}
    print(f"    the run's start to its end in the metadata DB: {whole:.1f} s (triggered {out['trigger_to_start']} s "
          "before its start)", flush=True)
    print(f"    load step {report['load_seconds']:.1f} s ({report['load_mb_per_s']:.1f} MB/s); outside the load step "
          f"{outside:.1f} s; stages: " + ", ".join(f"{k} {v:.1f}" for k, v in report["stages"].items()), flush=True)
    if run["first_row"] and times["triggered"]:
        out["trigger_to_first_row"] = round(run["first_row"] - times["triggered"], 2)
        out["start_to_first_row"] = round(run["first_row"] - times["start"], 2)
        out["last_row_to_end"] = round(times["end"] - run["last_row"], 2)
        loads = [t for t in times["tasks"] if t["task"].startswith("load")]
        out["start_to_first_load_task"] = round(loads[0]["start"] - times["start"], 2) if loads else None
        complete = run["ledger_rows_seen"] == run["chunks"]
        out["ledger_complete"] = complete
        print(f"    trigger -> first row {out['trigger_to_first_row']:.1f} s (run start -> first row "
              f"{out['start_to_first_row']:.1f} s; the first load task started {out['start_to_first_load_task']} s "
              f"after the run; first row = the first committed ledger row seen, read every {POLL} s)", flush=True)
        print(f"    last row -> end {out['last_row_to_end']:.1f} s (the ledger last seen growing, to the run's end"
              + ("" if complete else f"; only {run['ledger_rows_seen']} of {run['chunks']} chunks' rows were seen before "
                 "finalize dropped the ledger: the last row may be later") + ")", flush=True)
    else:
        print("    the ledger was not seen (no row read while the run went): no first or last row", flush=True)
    if timeline:
        print("    task timeline, seconds from the run's start (hop: queued after the last end before it; startup: "
              "queued to start):", flush=True)
        print(f"      {'task':<44} {'queued':>7} {'start':>7} {'end':>7} {'dur':>7} {'hop':>6} {'startup':>7}", flush=True)
        for t in out["timeline"]:
            print(f"      {t['task'][:44]:<44} {t['queued'] or 0:7.2f} {t['start']:7.2f} {t['end'] or 0:7.2f} "
                  f"{t['seconds'] or 0:7.2f} {t['hop'] or 0:6.2f} {t['startup'] or 0:7.2f}", flush=True)
        print("    CPU seconds from the trigger to the run's end, per process group:", flush=True)
        for group, seconds in run["cpu"].items():
            print(f"      {group:<62} {seconds:7.1f}", flush=True)
    return out


def pools_of(args: argparse.Namespace, raw_bytes: int) -> list[dict]:
    """The targets to race on: --memory (the older regimes) if given, else each of --pools."""
    if args.memory == "in":
        return [{"label": "6G", "buffer_pool": None, "pool": None, "redo": 1 << 30,
                 "memory": "buffer pool 6G, redo 1G (the data fits in memory)"}]
    if args.memory == "quarter":
        quarter = max(128 << 20, raw_bytes // 4 // (128 << 20) * (128 << 20))
        return [{"label": f"{quarter >> 20}M", "buffer_pool": quarter, "pool": None, "redo": SMALL_REDO,
                 "memory": f"buffer pool {quarter >> 20} MB (a quarter of the data), redo {SMALL_REDO >> 20} MB"}]
    out = []
    for pool in args.pools.split(","):
        size = int(pool[:-1]) << {"K": 10, "M": 20, "G": 30}[pool[-1].upper()] if pool[-1].isalpha() else int(pool)
        fits = "the data fits in memory" if size > raw_bytes * 1.3 else f"the data {raw_bytes / size:.1f}x the pool"
        out.append({"label": pool, "buffer_pool": None, "pool": pool, "redo": 1 << 30,
                    "memory": f"buffer pool {pool}, redo 1G ({fits})"})
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--big", type=int, default=4, help="the extra table is this many times bigger (0: none)")
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--myloader1", default=os.environ.get("LASTLINE_MYDUMPER1_DIR", ""),
                   help="a folder with mydumper and myloader 1.0 built from their source (github.com/mydumper/mydumper, "
                        "tag v1.0.1-3; not in Debian); default bench/.mydumper1, which bench/build_mydumper1.sh "
                        "builds from LASTLINE_MYDUMPER1_SRC")
    p.add_argument("--reuse", action="store_true", help="keep the generated source dataset from an earlier run")
    p.add_argument("--index-builds", default="per_table",
                   help="lastline's index settings to run after the warm-up, in order (comma list of " + ", ".join(BUILDS)
                        + "); the warm-up takes the first; the first setting's mean is the ratios' base "
                        "(the older race: per_table,after_all,after_all,per_table)")
    p.add_argument("--methods", default="myloader1,lastline",
                   help="which to run (comma list of hand, direct, myloader (Debian's 0.10), myloader1, sql, lastline); "
                        "ratios need lastline (the older race: hand,direct,myloader,sql,lastline)")
    p.add_argument("--pools", default="4G,512M", help="the target's buffer pools, one race each (comma list)")
    p.add_argument("--memory", choices=("in", "quarter"), default=None,
                   help="instead of --pools, the older regimes: in: buffer pool 6G; quarter: a quarter of the data and "
                        "the redo log 128 MB, for every method")
    p.add_argument("--rounds", type=int, choices=(1, 2), default=1,
                   help="1: each competitor once, after lastline's runs; 2: before them and after (the older race; "
                        "the ratios use the mean of the two)")
    p.add_argument("--work", default=str(ROOT / "bench" / "results" / "restore"))
    p.add_argument("--records", default=str(ROOT / "bench" / "records"), help="where the JSON record goes")
    p.add_argument("--airflow-env", nargs="*", default=[], metavar="KEY=VALUE",
                   help="settings added to the standalone that runs lastline (e.g. AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL=600)")
    args = p.parse_args()
    started = time.monotonic()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    n = args.parallel
    methods = set(args.methods.split(","))
    one = myloader1_folder(args.myloader1) if methods & {"myloader1", "myloader"} else None
    if "myloader1" in methods and not one:
        print("myloader 1.0: NOT FOUND (no --myloader1 / LASTLINE_MYDUMPER1_DIR folder holding it, no bench/.mydumper1, "
              "and no LASTLINE_MYDUMPER1_SRC to build it from: git clone --branch v1.0.1-3 "
              "https://github.com/mydumper/mydumper and set LASTLINE_MYDUMPER1_SRC to the clone). Racing Debian's "
              "myloader 0.10 instead, labelled so: its ratio is not the race's.", flush=True)
        methods = (methods - {"myloader1"}) | {"myloader"}
    run_one = bool(one) and bool(methods & {"myloader1", "myloader"})
    run_debian = "myloader" in methods
    sizes = {f"sbtest{i}": args.rows for i in range(1, args.tables + 1)}
    if args.big:
        sizes["sbtest_big"] = args.rows * args.big
    src = dataset(work, "rsrc", sizes, args.reuse, "[mysqld]\ninnodb-buffer-pool-size=4G\ninnodb-log-file-size=1G\n")
    env = dict(os.environ)
    env["AIRFLOW_CONN_BENCH_RSRC"] = json.dumps(src.connection("bench_rsrc"))
    os.environ["AIRFLOW_CONN_BENCH_RSRC"] = env["AIRFLOW_CONN_BENCH_RSRC"]
    big = "sbtest_big" if args.big else "sbtest1"
    expected = args.rows + args.rows * (args.big or 1)

    def rows_on(inst: Instance) -> int:
        return int(inst.server().query("SELECT SUM(c) FROM (SELECT COUNT(*) c FROM sbtest.sbtest1 UNION ALL "
                                       f"SELECT COUNT(*) FROM sbtest.{big}) x")[0][0] or 0)

    # the backups every method restores from; lastline's and mydumper 1.0's dumps are the race's dump step, timed
    dumps = work / "dumps"
    shutil.rmtree(dumps, ignore_errors=True)
    dumps.mkdir()
    versions: dict[str, str] = {}
    dumped = dump_race(src, dumps, work, n, one if run_one else None, list(sizes))
    manifest = read_manifest(open_storage(f"file://{dumps / 'lastline'}"), dumped.pop("backup_id"), "logical")
    raw_mb = manifest.raw_bytes / 1e6
    chunks = sum(len(t.chunks) for t in manifest.tables)
    if run_debian or "sql" in methods:
        with option_file(src.server(), ("client", "mydumper", "mariadb-dump")) as sopt:
            if run_debian:
                sh(f"mydumper --defaults-file={sopt} -B sbtest -t {n} --rows 250000 -o {dumps / 'mydumper'}")
                versions["myloader"] = version("myloader")
            if "sql" in methods:
                sh(f"mariadb-dump --defaults-extra-file={sopt} --single-transaction --databases sbtest > {dumps / 'dump.sql'}")
    if run_one and one:
        versions["myloader1"] = version(one / "myloader")
    builds = args.index_builds.split(",")
    os.environ["LASTLINE_REPORT_DIR"] = str(work / "reports")
    print(f"restoring {raw_mb:,.0f} MB of rows ({manifest.rows:,} rows, {len(manifest.tables)} tables, {chunks} chunks), "
          f"{n} threads; methods: {', '.join(sorted(methods))}; " + "; ".join(versions.values()), flush=True)
    pools = {}
    for pool in pools_of(args, manifest.raw_bytes):
        pools[pool["label"]] = race(args, pool, src, manifest, dumps, work, env, methods, builds, one if run_one else None,
                                    rows_on, expected, raw_mb, chunks)

    one_name = next((k for k in next(iter(pools.values()))["results"] if k.startswith("myloader 1.0")), None)
    ref = "myloader 1.0" if one_name else "Debian's myloader 0.10"
    if any(res.get("headline") for res in pools.values()):
        print(f"\nthe race ({ref} time over lastline's whole run; above 1.00x lastline is faster):", flush=True)
    for label, res in pools.items():
        if res.get("headline"):
            h = res["headline"]
            print(f"  buffer pool {label:<6} {h['reference']} {h['reference_seconds']:7.1f} s, lastline {h['lastline_seconds']:7.1f} s"
                  f" (outside the load step {h['outside_load_seconds']:.1f} s): {h['ratio']:.2f}x", flush=True)
    goals = print_goals(pools, dumped, canonical=args.memory is None)
    records = Path(args.records)
    records.mkdir(parents=True, exist_ok=True)
    out = records / f"restore-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps({"tables": args.tables, "rows": args.rows, "big": args.big, "parallel": n,
                               "raw_mb": round(raw_mb, 1), "chunks": chunks, "methods": sorted(methods),
                               "index_builds": builds, "rounds": args.rounds, "versions": versions,
                               "bench_seconds": round(time.monotonic() - started), "dump": dumped, "goals": goals,
                               "pools": pools}, indent=1))
    print(f"\nrecorded in {out} ({(time.monotonic() - started) / 60:.0f} min in all); the DAG runs' reports and charts: "
          f"{work / 'reports' / 'logical_restore'}")
    src.stop()
    return 0


def print_goals(pools: dict, dumped: dict, canonical: bool = True) -> dict:
    """The race's goals, each met or not with its figures; for a whole run short of myloader 1.0, where the CPU went
    (the machine is CPU-bound on its 2 cores: a run lasts about all the CPU it takes over 2): lastline's run per process
    group against myloader 1.0's server and client. Returns them for the record."""
    goals: dict = {}
    print("\nthe race's goals (one run each):" if canonical else "\nthe race's goals, held to this run (--memory: not the "
          "canonical race's buffer pools; bench/scale_data.py holds its own run to its own goal):", flush=True)
    for label, res in pools.items():
        h = res.get("headline")
        if not h:
            continue
        met = h["ratio"] >= 1.0
        goals[f"whole run at buffer pool {label}"] = {"ratio": h["ratio"], "goal": 1.0, "met": met}
        print(f"  whole run >= 1.00x {h['reference']}, buffer pool {label:<5}: {h['ratio']:.2f}x  "
              f"{'met' if met else 'NOT MET'}", flush=True)
        if not met:
            run = next(d for k, d in res["lastline_runs"].items() if "warm-up" not in k)
            ref = next(r for k, r in res["results"].items() if k.startswith(h["reference"]))
            goals[f"whole run at buffer pool {label}"].update(causes(run, h["reference"], ref))
    outside = {label: res["headline"]["outside_load_seconds"] for label, res in pools.items() if res.get("headline")}
    if outside:
        met = max(outside.values()) <= 3.0
        goals["outside the load step"] = {"seconds": outside, "goal": 3.0, "met": met}
        print("  outside the load step <= 3 s: " + ", ".join(f"{v:.1f} s at {k}" for k, v in outside.items())
              + f"  {'met' if met else 'NOT MET'}", flush=True)
    for how in ("warm", "cold"):
        if "ratio" in (r := dumped.get(how, {})):
            met = r["ratio"] >= 1.0
            goals[f"dump step, {how} source"] = {"ratio": r["ratio"], "goal": 1.0, "met": met}
            print(f"  dump step >= 1.00x mydumper 1.0 --format=LOAD_DATA, {how} source: {r['ratio']:.2f}x  "
                  f"{'met' if met else 'NOT MET'} (lastline {r['lastline']['seconds']:.1f} s, zstd and durable; mydumper 1.0 "
                  f"{r['mydumper1']['seconds']:.1f} s uncompressed, {r['mydumper1_synced_seconds']:.1f} s with a sync after "
                  f"it; CPU s of the source's server {r['lastline']['cpu_server_s']:.1f} against "
                  f"{r['mydumper1']['cpu_server_s']:.1f}: lastline's server also hashes every row)", flush=True)
    print("  at 10 GB and at 10,000 tables >= 1.20x myloader 1.0: make bench-scale", flush=True)
    if not all(g["met"] for g in goals.values()):
        print(f"  what was tried against the goals not met, each measured, and why it was kept or not: {TRIED}", flush=True)
    return goals


TRIED = "docs/benchmarks/logical-restore.md, \"What was tried\""


def causes(run: dict, reference: str, ref: dict) -> dict:
    """Under a whole-run goal not met, printed: where the CPU went (the machine is CPU-bound on its 2 cores: a run
    lasts about all the CPU it takes over 2), lastline's run per process group against the reference's server and
    client, then the run's time step by step (per_step). `run` as print_run records it (seconds, cpu, timeline);
    `ref` the reference's result (seconds, cpu_server_s, cpu_rest_s: absent when it was not measured)."""
    cpu = {k: v for k, v in run["cpu"].items() if v >= 0.1 and k != "machine busy (all cores)"}
    print(f"    CPU s, lastline's run ({run['seconds']:.1f} s): " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items())
          + f"; all {run['cpu']['machine busy (all cores)']:.1f}", flush=True)
    out: dict = {"lastline_cpu": run["cpu"]}
    if "cpu_server_s" in ref:
        print(f"    CPU s, {reference} ({ref['seconds']:.1f} s): mariadbd (target) {ref['cpu_server_s']:.1f}, "
              f"myloader and the rest {ref['cpu_rest_s']:.1f}; all {ref['cpu_server_s'] + ref['cpu_rest_s']:.1f}", flush=True)
        out["reference_cpu"] = {"server": ref["cpu_server_s"], "rest": ref["cpu_rest_s"]}
    out["per_step"] = per_step(run, ref["seconds"])
    return out


def per_step(run: dict, reference_seconds: float) -> dict:
    """Where a lastline run's time went, step by step (its timeline): the lanes (the first one's start to the last
    one's end) against the reference's whole restore, and outside them each step's own seconds, the scheduler's hops
    between steps and the task processes' start-ups (the rest: the run's start and end as the metadata DB records
    them). Printed under a whole-run goal not met."""
    rows = [t for t in run["timeline"] if t["queued"] is not None]  # (a step skipped, as approve, never queued)
    lanes = [t for t in rows if t["task"].startswith("load")]
    serial = [t for t in rows if t not in lanes] + sorted(lanes, key=lambda t: t["start"])[:1]  # the lanes start together
    steps = {t["task"]: t["seconds"] or 0.0 for t in rows if t not in lanes}
    out = {"lanes_seconds": round(max(t["end"] or 0.0 for t in lanes) - min(t["start"] for t in lanes), 2) if lanes else 0.0,
           "reference_seconds": reference_seconds, "steps": steps,
           "hops": round(sum(t["hop"] or 0.0 for t in serial), 2), "startups": round(sum(t["startup"] or 0.0 for t in serial), 2)}
    out["rest"] = round(run["seconds"] - out["lanes_seconds"] - sum(steps.values()) - out["hops"] - out["startups"], 2)
    print(f"    per step: the lanes {out['lanes_seconds']:.1f} s against the reference's whole restore "
          f"{reference_seconds:.1f} s; outside them " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items())
          + f", the scheduler's hops {out['hops']:.2f}, start-ups {out['startups']:.2f}, the rest {out['rest']:.2f} s",
          flush=True)
    return out


def race(args: argparse.Namespace, pool: dict, src: Instance, manifest, dumps: Path, work: Path, env: dict,
         methods: set[str], builds: list[str], one: Path | None, rows_on, expected: int, raw_mb: float,
         chunks: int) -> dict:
    """Every method in `methods` on one fresh target of the `pool`'s buffer pool: lastline's DAG on a standalone (a
    warm-up run, then each of `builds`), the competitors after it (and before it too with --rounds 2)."""
    n = args.parallel
    tgt = target(work, pool["buffer_pool"], pool["pool"])
    env["AIRFLOW_CONN_BENCH_RTGT"] = json.dumps(tgt.connection("bench_rtgt"))
    os.environ["AIRFLOW_CONN_BENCH_RTGT"] = env["AIRFLOW_CONN_BENCH_RTGT"]
    print(f"\n== target: {pool['memory']}", flush=True)
    results: dict[str, dict] = {}
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
            raise SystemExit(f"{name}: the tables counted hold {rows_on(tgt)} rows, expected {expected}")
        # where the 2 cores went: the target server, and everything else (the client or lastline with its
        # scheduler, api-server and task processes); what neither used was idle or waiting on the disk
        results[name] = {"seconds": round(seconds, 1), "mb_per_s": round(raw_mb / seconds, 1),
                         "cpu_server_s": round(server, 1), "cpu_rest_s": round(busy - server, 1)}
        print(f"  {name:<58} {seconds:7.1f} s  {raw_mb / seconds:6.1f} MB/s  CPU s: server {server:5.1f}, "
              f"rest {busy - server:5.1f}", flush=True)

    conf = {"target_conn_id": "bench_rtgt", "backup": f"file://{dumps / 'lastline'}/{manifest.backup_id}",
            "parallel": n, "force": True, "redo_log_bytes": pool["redo"],
            "databases": [], "tune": True, "restart_allowed": False, "defer_indexes": True, "aws_conn_id": None}

    def anchors(suffix: str) -> None:
        """Every competitor in `methods` once, each into an empty database, its name ending in `suffix`."""
        with option_file(tgt.server(), ("client", "myloader", "mariadb")) as topt:
            if "hand" in methods:
                hand(src, tgt, manifest, dumps, work, topt, n, lambda name, *a, **k: record(name + suffix, *a, **k), timed)
            if "direct" in methods:
                drop(tgt)
                start = cpu_seconds(tgt.pid())
                with logs_to(work / "direct.log"):
                    seconds, report, checks = without_airflow({**conf, **BUILDS[builds[0]]}, f"direct{suffix.replace(' ', '').replace(',', '')}")
                record(f"lastline without Airflow: its steps called in order, {n} lanes as processes, "
                       f"index_build={builds[0]}{suffix}", seconds, cpu=cpu_since(start, tgt.pid()))
                print(f"  {'  of which: load step':<58} {report['load_seconds']:7.1f} s (lanes reading chunks back for "
                      f"their checks: {checks:.1f} s)", flush=True)
            if "myloader" in methods:
                drop(tgt)
                record(f"Debian's myloader 0.10 -t {n} (mydumper --rows 250000){suffix}",
                       timed(f"myloader --defaults-file={topt} -t {n} -d {dumps / 'mydumper'}"))
            if one:  # 1.0 refuses the `protocol` line of the shared option files: a file of its own, without it
                t1 = work / "mydumper1-target.cnf"
                t1.write_text("".join(line + "\n" for line in option_file_text(tgt.server(), ("myloader",)).splitlines()
                                      if not line.startswith("protocol=")))
                t1.chmod(0o600)
                drop(tgt)
                try:  # the option file holds the target's password: never left behind
                    seconds = timed(f"{one / 'myloader'} --defaults-file={t1} -t {n} --optimize-keys=AFTER_IMPORT_ALL_TABLES "
                                    f"-d {dumps / 'mydumper1'}")
                finally:
                    t1.unlink(missing_ok=True)
                record(f"myloader 1.0 -t {n} --optimize-keys=AFTER_IMPORT_ALL_TABLES (mydumper 1.0 --format=LOAD_DATA){suffix}",
                       seconds)
            if "sql" in methods:
                drop(tgt)
                record(f"mariadb < dump.sql (mariadb-dump){suffix}",
                       timed(f"mariadb --defaults-extra-file={topt} < {dumps / 'dump.sql'}"))

    two = args.rounds == 2 or "lastline" not in methods
    if two:
        anchors(", run 1")
    if "lastline" not in methods:
        anchors(", run 2")
        tgt.stop()
        return {"memory": pool["memory"], "results": results}

    drop(tgt)
    (ROOT / ".airflow").mkdir(exist_ok=True)
    # bin/airflow gives the standalone the deployment's settings (include/lastline/airflow/embedded.py): the bench
    # adds no tuning of its own, only what a bench needs (no retries; the nightly schedules off) and --airflow-env
    env.update({"LASTLINE_RETRIES": "0", **SCHEDULES_OFF}, LASTLINE_REPORT_DIR=str(work / "reports"))
    env.update(dict(a.split("=", 1) for a in args.airflow_env))
    if "AIRFLOW__API__PORT" not in env:  # ports of its own: another Airflow on this machine may hold the defaults
        port = str(free_port())
        env.update({"AIRFLOW__API__PORT": port, "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
                    "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                    "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port())})
    runs = []
    print(f"  lastline: logical_restore on `bin/airflow standalone`, {n} lanes; a warm-up run (index_build={builds[0]}), "
          "then " + ", ".join(f"index_build={b}" for b in builds), flush=True)
    log = work / f"standalone-{pool['label']}.log"
    with Standalone(env, log) as af:
        # the first run after `standalone` starts pays the workers' first imports (once per deployment) and a fresh
        # target's first touch of its buffer pool: the warm-up, printed apart
        for build in [builds[0], *builds]:
            drop(tgt)
            run = lastline_run(af, tgt, {**conf, **BUILDS[build]}, manifest.backup_id, chunks)
            run["peak_rss"] = af.task_peaks("logical_restore", run["run_id"])
            if run["state"] != "success":
                raise SystemExit(f"logical_restore {run['run_id']} failed: see {log} "
                                 "and .airflow/logs")
            if rows_on(tgt) != expected:
                raise SystemExit(f"index_build={build}: the tables counted hold {rows_on(tgt)} rows, expected {expected}")
            runs.append((build, run))
    by_build: dict[str, list[float]] = {}
    detail = {}
    for position, (build, run) in enumerate(runs):
        report = json.loads((work / "reports" / "logical_restore" / run["run_id"] / "logical_restore.json").read_text())
        if position == 0:
            name = f"lastline DAG, {n} lanes, index_build={build}, warm-up: first run after the scheduler started"
        else:
            name = f"lastline DAG, {n} lanes, index_build={build}, run {position} (whole run)"
            by_build.setdefault(build, []).append(run["seconds"])
        busy = run["cpu"]["machine busy (all cores)"]
        server = run["cpu"].get("mariadbd (target)", 0.0)
        record(name, run["seconds"], check=False, cpu=(busy, server))  # rows checked right after the run
        results[name]["load_step"] = {"seconds": report["load_seconds"], "mb_per_s": report["load_mb_per_s"],
                                      "stages": report["stages"]}
        results[name]["peak_rss"] = peaks = run["peak_rss"]
        detail[name] = print_run(run, report, timeline=position > 0)
        print(f"    peak RSS: largest task process {peaks['largest_task']['mb']:.0f} MB ({peaks['largest_task']['task']}); "
              f"the largest process a task started: {peaks['largest_child']['command']} {peaks['largest_child']['mb']:.0f} MB",
              flush=True)
    anchors(", run 2" if two else "")
    if two:
        for name in [k[:-len(", run 1")] for k in results if k.endswith(", run 1")]:
            if f"{name}, run 2" in results:
                mean = (results[f"{name}, run 1"]["seconds"] + results[f"{name}, run 2"]["seconds"]) / 2
                results[f"{name}: mean of 2 runs"] = {"seconds": round(mean, 1), "mb_per_s": round(raw_mb / mean, 1)}
                print(f"  {name[:46] + ': mean of 2 runs':<58} {mean:7.1f} s", flush=True)
    for build, seconds in by_build.items():
        if len(seconds) > 1:
            mean = sum(seconds) / len(seconds)
            results[f"lastline DAG, {n} lanes, index_build={build}: mean of {len(seconds)} runs"] = {
                "seconds": round(mean, 1), "mb_per_s": round(raw_mb / mean, 1)}
            print(f"  {f'lastline, index_build={build}: mean of ' + str(len(seconds)) + ' runs':<58} {mean:7.1f} s", flush=True)
    base_seconds = by_build[builds[0]]
    base = sum(base_seconds) / len(base_seconds)
    print(f"\n  time over lastline's whole DAG run (index_build={builds[0]}"
          + (", mean" if len(base_seconds) > 1 else "") + "); above 1.00 means lastline is faster:", flush=True)
    for name, res in results.items():
        res["ratio_to_lastline"] = round(res["seconds"] / base, 2)
        print(f"    {name:<58} {res['ratio_to_lastline']:5.2f}x", flush=True)
    out: dict = {"memory": pool["memory"], "results": results, "lastline_runs": detail}
    ref = next((k for k in results if k.startswith("myloader 1.0") and ("mean" in k or not two)), None) or \
        next((k for k in results if k.startswith("Debian's myloader") and ("mean" in k or not two)), None)
    if ref:
        measured = [d for k, d in detail.items() if "warm-up" not in k and f"index_build={builds[0]}," in k]
        outside = sum(d["outside_load_seconds"] for d in measured) / len(measured)
        out["headline"] = {"reference": ref.split(" -t ")[0], "reference_seconds": results[ref]["seconds"],
                           "lastline_seconds": round(base, 1), "ratio": round(results[ref]["seconds"] / base, 2),
                           "outside_load_seconds": round(outside, 2)}
        print(f"\n  RATIO at buffer pool {pool['label']}: {ref.split(' -t ')[0]} {results[ref]['seconds']:.1f} s / lastline "
              f"{base:.1f} s = {out['headline']['ratio']:.2f}x", flush=True)
    tgt.stop()
    return out


if __name__ == "__main__":
    sys.exit(main())
