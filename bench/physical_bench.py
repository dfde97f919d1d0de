"""Physical backup + restore: the DAGs against the same shell pipeline run by hand, same data, one run.

    make bench-physical ARGS="--gb 1"        (or: .venv/bin/python bench/physical_bench.py --gb 1)

Measures, on one sandbox source of about --gb GB:
1. the raw backup pipeline `mariabackup --stream | <codec> > file` for zstd, pigz and pigz --fast
   (time and size: which compressor is the default, and why);
2. backup + restore by hand (the shell pipeline: stream | zstd > file; stop; zstd -dc | mbstream -x;
   prepare; chown; start);
3. the physical_backup and physical_restore DAGs run by `airflow dags test` on the same data;
and prints the DAGs' time over the hand-run pipeline's. `span` runs from the first task's start to
the last task's end; `run` is the DAG run's duration (adds the one-time start-up of `dags test`'s
in-process execution API); `wall` adds the `airflow` process start-up too. `--rounds 2` runs hand and DAGs
twice each, in turns (hand first, then the DAGs first), and `--cold` drops the page cache before every
backup and restore, so that no leg reads what the one before left in memory; each task's seconds are printed,
and each round's ratio with their median. `--stream-costs N` times only the backup stream, by hand and as the
stream task runs it (sha256 in Python), each at normal and at the default priority, N rounds in turns.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from logical_bench import SCHEDULES_OFF, du

from lastline.core.option_files import option_file
from lastline_dev.compare import compare
from lastline_dev.keys import throwaway_storage_key
from lastline_dev.peaks import SessionPeaks
from lastline_dev.sandbox import Instance

ROOT = Path(__file__).resolve().parents[1]
PEAKS: dict[str, dict] = {}  # dag_id: the peak RSS of its `dags test` process and of the largest process it started
HAND_STEPS: dict[int, dict[str, float]] = {}  # each raw_pipeline call: its steps' seconds
TASKS: dict[str, dict[str, float]] = {}  # dag_id: each task's seconds, of its last run


def sh(cmd: str, env: dict | None = None) -> float:
    """Run a bash pipeline with pipefail; return seconds."""
    t0 = time.monotonic()
    subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def raw_pipeline(src: Instance, tgt: Instance, art: Path, n: int, use_memory: int, drop: bool = False) -> tuple[float, float]:
    """The shell pipeline by hand, `n` threads: `mariabackup --stream | zstd > art`; then stop the target, extract,
    prepare, chown and start it. Returns the backup's and the restore's seconds (the artifact is removed). `drop`:
    the page cache is dropped before each (cold)."""
    cold(drop)
    with option_file(src.server(), ("client", "mariabackup")) as opt:
        backup = sh(f"mariabackup --defaults-extra-file={opt} --backup --stream=xbstream --parallel={n} "
                    f"--datadir={src.datadir} --target-dir=/tmp | zstd -q -T{n} -c > {art}")
    cold(drop)
    t0 = time.monotonic()
    steps = HAND_STEPS.setdefault(len(HAND_STEPS), {"backup": round(backup, 1)})  # one entry per call

    def timed(name: str, step: Callable[[], object]) -> None:
        t = time.monotonic()
        step()
        steps[name] = round(time.monotonic() - t, 1)

    timed("stop", tgt.stop)
    timed("remove", lambda: (shutil.rmtree(tgt.datadir), tgt.datadir.mkdir()))
    timed("extract", lambda: sh(f"zstd -q -d -c {art} | mbstream -x --parallel={n} -C {tgt.datadir}"))
    timed("prepare", lambda: sh(f"mariabackup --prepare --target-dir={tgt.datadir} --use-memory={use_memory}"))
    timed("chown", lambda: sh(f"chown -R --reference={tgt.datadir.parent} {tgt.datadir}"))
    timed("start", tgt.start)
    restore = time.monotonic() - t0
    art.unlink()
    return backup, restore


def _ts(line: str) -> float:
    return datetime.fromisoformat(line[:26]).timestamp()


def dag(dag_id: str, conf: dict, env: dict, log: Path) -> tuple[float, float, float]:
    """Run a DAG with `airflow dags test`; return (wall seconds, the run's duration, its tasks' span).

    The span runs from the first task's start to the last task's end: it leaves out the one-time
    start-up of the in-process execution API that `dags test` pays before its first task (~8 s here),
    which a deployed Airflow, whose api-server keeps running, does not pay per run."""
    t0 = time.monotonic()
    with open(log, "w") as fh:
        proc = subprocess.Popen([str(ROOT / "bin/airflow"), "dags", "test", dag_id, "-c", json.dumps(conf)],
                                stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        peaks = SessionPeaks(proc.pid).start()
        try:
            if proc.wait() != 0:
                raise subprocess.CalledProcessError(proc.returncode, f"airflow dags test {dag_id}")
        except BaseException:  # Ctrl-C too: its own session gets no SIGINT from the terminal
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
            raise
        finally:
            peaks.stop()
    wall = time.monotonic() - t0
    PEAKS[dag_id] = peaks.session(proc.pid)
    text = log.read_text()
    if "state=success" not in text:
        sys.exit(f"{dag_id} failed: see {log}")
    lines = text.splitlines()
    first = next(line for line in lines if "Task started" in line)
    last = [line for line in lines if "[DAG TEST] end task" in line][-1]
    TASKS[dag_id] = tasks(lines)
    return wall, float(re.findall(r"run_duration=([\d.]+)", text)[-1]), _ts(last) - _ts(first)


def tasks(lines: list[str]) -> dict[str, float]:
    """Each task's seconds in a `dags test` log: from its `Task started` to its `end task`."""
    current, started, took = None, {}, {}
    for line in lines:
        if m := re.search(r"\[DAG TEST\] starting task_id=(\S+)", line):
            current = m.group(1)
        elif "Task started" in line and current and current not in started:
            started[current] = _ts(line)
        elif (m := re.search(r"\[DAG TEST\] end task task_id=(\S+)", line)) and m.group(1) in started:
            took[m.group(1)] = round(_ts(line) - started[m.group(1)], 1)
    return took


def cold(enabled: bool) -> None:
    """With --cold: write back and drop the page cache, so that every leg starts from the same state (each reads
    the datadir or the artifact from disk, as a server whose data outgrows its memory does)."""
    if enabled:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


def stream_costs(s, files: Path, rounds: int, drop: bool) -> dict[str, list[float]]:
    """The backup stream alone, four ways in turns, the page cache dropped before each (with `drop`): the hand
    pipeline at normal priority and at the DAG's default one, and the stream task's own pipeline (run_pipeline:
    sha256 and byte count in Python, into the destination's writer, fsynced) at both. No Airflow: what the task's
    stream costs over `mariabackup --stream | zstd > file`, and why."""
    from lastline.core.hosts import LOCAL
    from lastline.core.impact import DEFAULT_PRIORITY
    from lastline.core.pipeline import run_pipeline
    from lastline.mariabackup import commands
    from lastline.storage import open_storage

    art = files / "costs.xbstream.zst"
    storage = open_storage(f"file://{files / 'costs'}")
    took: dict[str, list[float]] = {}
    open_files = commands.check_open_files(LOCAL, s.datadir, "the bench's source")  # as the stream task runs it
    with option_file(s, ("client", "mariabackup")) as opt:
        def stages(priority: str) -> list:
            return commands.backup_stages(opt, s.datadir, 2, "zstd", priority=priority, open_files=open_files)

        def hand(priority: str) -> None:
            sh(" | ".join(st.display() for st in stages(priority)) + f" > {art}")
            art.unlink()

        def task(priority: str) -> None:
            with storage.writer("costs.xbstream.zst") as writer:
                run_pipeline(stages(priority), sink=writer.write, label="backup stream", progress_every=None)
            shutil.rmtree(files / "costs")

        ways: dict[str, Callable[[], None]] = {
            "by hand, normal priority": lambda: hand("normal"),
            f"by hand, priority {DEFAULT_PRIORITY}": lambda: hand(DEFAULT_PRIORITY),
            "run_pipeline (sha256 in Python), normal priority": lambda: task("normal"),
            f"run_pipeline (sha256 in Python), priority {DEFAULT_PRIORITY}": lambda: task(DEFAULT_PRIORITY),
        }
        for rnd in range(rounds):
            for name in (list(ways) if rnd % 2 == 0 else list(reversed(ways))):
                cold(drop)
                t0 = time.monotonic()
                ways[name]()
                took.setdefault(name, []).append(round(time.monotonic() - t0, 1))
                print(f"  {name}: {took[name][-1]} s", flush=True)
    base = median(took["by hand, normal priority"])
    print(f"\nthe backup stream alone, {rounds} rounds in turns{', page cache dropped before each' if drop else ''} (median; "
          "over the hand pipeline at normal priority):")
    for name, xs in took.items():
        print(f"  {name:<52} {median(xs):6.1f} s  {median(xs) / base:.2f}x   ({', '.join(map(str, xs))})")
    return took


def median(xs: list[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count)."""
    ys, n = sorted(xs), len(xs)
    return ys[n // 2] if n % 2 else (ys[n // 2 - 1] + ys[n // 2]) / 2


def main() -> int:
    throwaway_storage_key()  # its backups are signed and checked as a deployment's are
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gb", type=float, default=1.0, help="size of generated data (default 1 GB)")
    p.add_argument("--work", default=str(ROOT / "bench" / "results" / "physical"))
    p.add_argument("--no-codecs", action="store_true", help="skip the comparison of compressors (zstd is the default)")
    p.add_argument("--record", default="", help="also write the figures as JSON to this file")
    p.add_argument("--rounds", type=int, default=1, help="hand and DAGs this many times each, alternating which goes first")
    p.add_argument("--cold", action="store_true", help="drop the page cache before every backup and restore (needs root)")
    p.add_argument("--stream-costs", type=int, default=0, metavar="N",
                   help="only time the backup stream four ways (by hand and as the task streams, each at normal and at the "
                        "default priority), N rounds in turns, then stop")
    args = p.parse_args()
    work = Path(args.work)
    root = work / "sandbox"
    src, tgt = Instance(root, "source"), Instance(root, "target")
    if not src.exists():
        print(f"bench: generating ~{args.gb} GB on a sandbox source...", flush=True)
        src.create()
        # what a server of this size is given (the sandbox's 256 MB buffer pool and 64 MB redo make generating 10 GB
        # crawl): mariabackup copies the redo written meanwhile, the same for the raw pipeline and the DAG
        (src.conf_d / "bench.cnf").write_text("[mysqld]\ninnodb-buffer-pool-size=2G\ninnodb-log-file-size=512M\n")
        src.stop()
        src.start()
        src.load_bulk(int(args.gb * 1000), tables=8)
    src.start()
    if not tgt.exists():
        tgt.create()
    tgt.start()
    s, t = src.server(), tgt.server()
    datadir_mb = du(Path(s.datadir))
    print(f"bench: source datadir {datadir_mb:,.0f} MB, 2 threads everywhere", flush=True)
    files = work / "files"
    shutil.rmtree(files, ignore_errors=True)
    files.mkdir(parents=True)
    if args.stream_costs:
        took = stream_costs(s, files, args.stream_costs, args.cold)
        if args.record:
            Path(args.record).write_text(json.dumps({"datadir_mb": round(datadir_mb), "cold": args.cold,
                                                     "stream_costs": took}, indent=1))
        src.stop()
        tgt.stop()
        return 0
    rows = []
    with option_file(s, ("client", "mariabackup")) as opt:
        mb = f"mariabackup --defaults-extra-file={opt} --backup --stream=xbstream --parallel=2 --datadir={s.datadir} --target-dir=/tmp"
        codecs = () if args.no_codecs else (("zstd -T2", "zstd -q -T2 -c"), ("pigz -p2", "pigz -c -p 2"),
                                            ("pigz --fast -p2", "pigz --fast -c -p 2"))
        for name, comp in codecs:
            out = files / f"codec.{name.split()[0]}"
            secs = sh(f"{mb} | {comp} > {out}")
            rows.append((name, secs, out.stat().st_size / 1e6))
            out.unlink()
    print("\nbackup stream by compressor (mariabackup --stream | compressor > file):")
    for name, secs, size in rows:
        print(f"  {name:<16} {secs:7.1f} s  {size:8.1f} MB  {datadir_mb / secs:6.1f} MB/s of datadir")

    env = {**os.environ, **SCHEDULES_OFF}
    env["AIRFLOW_CONN_BENCH_SOURCE"] = json.dumps(src.connection("bench_source"))
    env["AIRFLOW_CONN_BENCH_TARGET"] = json.dumps(tgt.connection("bench_target"))
    dest = f"file://{files / 'dag'}"
    hands, dags = [], []
    for rnd in range(args.rounds):  # hand then DAGs, then DAGs then hand: what one leg leaves in the page cache evens out
        for leg in ("hand", "dags") if rnd % 2 == 0 else ("dags", "hand"):
            if leg == "hand":
                hands.append(raw_pipeline(src, tgt, files / "hand.xbstream.zst", 2, 2 << 30, drop=args.cold))
                assert compare(s, t) == [], "hand-run restore differs from the source"
                continue
            cold(args.cold)
            b = dag("physical_backup", {"source_conn_id": "bench_source", "destination": dest}, env, work / "backup.log")
            cold(args.cold)
            r = dag("physical_restore", {"target_conn_id": "bench_target", "backup": f"{dest}/latest", "force": True,
                                          "use_memory": 2 << 30}, env, work / "restore.log")
            assert compare(s, t) == [], "DAG restore differs from the source"
            dags.append((b, r, dict(TASKS)))
            shutil.rmtree(files / "dag")  # the next round's backup is the only one there

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    hand_b, hand_r = mean([h[0] for h in hands]), mean([h[1] for h in hands])
    (b_wall, b_run, b_span), (r_wall, r_run, r_span) = [tuple(mean([d[i][j] for d in dags]) for j in range(3)) for i in (0, 1)]
    hand = hand_b + hand_r
    how = f"mean of {args.rounds} rounds, alternating which goes first" if args.rounds > 1 else "one run"
    print(f"\nbackup + restore of a {datadir_mb:,.0f} MB datadir (zstd -T2, parallel 2; the DAG restore also verifies row "
          f"counts; {how}{', page cache dropped before each' if args.cold else ''}):")
    print(f"  by hand (shell pipeline)   backup {hand_b:6.1f} s  restore {hand_r:6.1f} s  total {hand:6.1f} s")
    print(f"  DAGs, tasks' span          backup {b_span:6.1f} s  restore {r_span:6.1f} s  total {b_span + r_span:6.1f} s"
          f"  ratio {(b_span + r_span) / hand:.2f}x")
    pairs = sorted((d[0][2] + d[1][2]) / (hb + hr) for (hb, hr), d in zip(hands, dags, strict=True))
    mid = median(pairs)
    if len(pairs) > 1:  # each round's DAGs over the hand run beside them: the machine's drift cancels pair by pair
        print(f"  round by round, DAGs' span over by hand: {', '.join(f'{x:.2f}x' for x in pairs)}; median {mid:.2f}x")
    print(f"  DAGs, run duration         backup {b_run:6.1f} s  restore {r_run:6.1f} s  total {b_run + r_run:6.1f} s"
          f"  ratio {(b_run + r_run) / hand:.2f}x")
    print(f"  DAGs, wall (dags test)     backup {b_wall:6.1f} s  restore {r_wall:6.1f} s  total {b_wall + r_wall:6.1f} s"
          f"  ratio {(b_wall + r_wall) / hand:.2f}x")
    for i, ((hb, hr), d) in enumerate(zip(hands, dags, strict=True)):
        print(f"  round {i + 1}: by hand {hb:.1f} + {hr:.1f} s ({', '.join(f'{k} {v}' for k, v in HAND_STEPS[i].items())}); "
              f"DAGs' span {d[0][2]:.1f} + {d[1][2]:.1f} s; tasks: "
              + "; ".join(f"{dag_id} " + ", ".join(f"{k} {v}" for k, v in took.items()) for dag_id, took in d[2].items()))
    for dag_id, peak in PEAKS.items():
        print(f"  peak RSS of {dag_id} (`dags test`, its tasks in-process): {peak['process_mb']} MB; the largest process "
              f"it started: {peak['largest_child']['command']} {peak['largest_child']['mb']:.0f} MB")
    print("  checksums: source == target after every restore")
    if args.record:
        Path(args.record).write_text(json.dumps({
            "datadir_mb": round(datadir_mb), "codecs": {n: {"seconds": round(x, 1), "mb": round(m, 1)} for n, x, m in rows},
            "rounds": args.rounds, "cold": args.cold, "span_ratio_by_round": [round(x, 3) for x in pairs],
            "span_ratio_median": round(mid, 3),
            "hand": {"backup": round(hand_b, 1), "restore": round(hand_r, 1)},
            "dag_span": {"backup": round(b_span, 1), "restore": round(r_span, 1)},
            "dag_run": {"backup": round(b_run, 1), "restore": round(r_run, 1)},
            "dag_wall": {"backup": round(b_wall, 1), "restore": round(r_wall, 1)},
            "each_round": [{"hand": [round(hb, 1), round(hr, 1)], "hand_steps": HAND_STEPS[i], "dag_span": [round(d[0][2], 1), round(d[1][2], 1)],
                            "tasks": d[2]} for i, ((hb, hr), d) in enumerate(zip(hands, dags, strict=True))],
            "peak_rss": PEAKS}, indent=1))
    src.stop()
    tgt.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
