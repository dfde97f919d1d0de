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
in-process execution API); `wall` adds the `airflow` process start-up too.
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
from datetime import datetime
from pathlib import Path

from logical_bench import du

from lastline.core.option_files import option_file
from lastline_dev.compare import compare
from lastline_dev.peaks import SessionPeaks
from lastline_dev.sandbox import Instance

ROOT = Path(__file__).resolve().parents[1]
PEAKS: dict[str, dict] = {}  # dag_id: the peak RSS of its `dags test` process and of the largest process it started


def sh(cmd: str, env: dict | None = None) -> float:
    """Run a bash pipeline with pipefail; return seconds."""
    t0 = time.monotonic()
    subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def raw_pipeline(src: Instance, tgt: Instance, art: Path, n: int, use_memory: int) -> tuple[float, float]:
    """The shell pipeline by hand, `n` threads: `mariabackup --stream | zstd > art`; then stop the target, extract,
    prepare, chown and start it. Returns the backup's and the restore's seconds (the artifact is removed)."""
    with option_file(src.server(), ("client", "mariabackup")) as opt:
        backup = sh(f"mariabackup --defaults-extra-file={opt} --backup --stream=xbstream --parallel={n} "
                    f"--datadir={src.datadir} --target-dir=/tmp | zstd -q -T{n} -c > {art}")
    t0 = time.monotonic()
    tgt.stop()
    shutil.rmtree(tgt.datadir)
    tgt.datadir.mkdir()
    sh(f"zstd -q -d -c {art} | mbstream -x --parallel={n} -C {tgt.datadir}")
    sh(f"mariabackup --prepare --target-dir={tgt.datadir} --use-memory={use_memory}")
    sh(f"chown -R --reference={tgt.datadir.parent} {tgt.datadir}")
    tgt.start()
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
    return wall, float(re.findall(r"run_duration=([\d.]+)", text)[-1]), _ts(last) - _ts(first)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gb", type=float, default=1.0, help="size of generated data (default 1 GB)")
    p.add_argument("--work", default=str(ROOT / "bench" / "results" / "physical"))
    p.add_argument("--no-codecs", action="store_true", help="skip the comparison of compressors (zstd is the default)")
    p.add_argument("--record", default="", help="also write the figures as JSON to this file")
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

    hand_b, hand_r = raw_pipeline(src, tgt, files / "hand.xbstream.zst", 2, 2 << 30)
    assert compare(s, t) == [], "hand-run restore differs from the source"

    env = dict(os.environ)
    env["AIRFLOW_CONN_BENCH_SOURCE"] = json.dumps(src.connection("bench_source"))
    env["AIRFLOW_CONN_BENCH_TARGET"] = json.dumps(tgt.connection("bench_target"))
    dest = f"file://{files / 'dag'}"
    b_wall, b_run, b_span = dag("physical_backup", {"source_conn_id": "bench_source", "destination": dest}, env, work / "backup.log")
    r_wall, r_run, r_span = dag("physical_restore", {"target_conn_id": "bench_target", "backup": f"{dest}/latest",
                                             "force": True, "use_memory": 2 << 30}, env, work / "restore.log")
    assert compare(s, t) == [], "DAG restore differs from the source"

    hand = hand_b + hand_r
    print(f"\nbackup + restore of a {datadir_mb:,.0f} MB datadir (zstd -T2, parallel 2; the DAG restore also verifies row counts):")
    print(f"  by hand (shell pipeline)   backup {hand_b:6.1f} s  restore {hand_r:6.1f} s  total {hand:6.1f} s")
    print(f"  DAGs, tasks' span          backup {b_span:6.1f} s  restore {r_span:6.1f} s  total {b_span + r_span:6.1f} s"
          f"  ratio {(b_span + r_span) / hand:.2f}x")
    print(f"  DAGs, run duration         backup {b_run:6.1f} s  restore {r_run:6.1f} s  total {b_run + r_run:6.1f} s"
          f"  ratio {(b_run + r_run) / hand:.2f}x")
    print(f"  DAGs, wall (dags test)     backup {b_wall:6.1f} s  restore {r_wall:6.1f} s  total {b_wall + r_wall:6.1f} s"
          f"  ratio {(b_wall + r_wall) / hand:.2f}x")
    for dag_id, peak in PEAKS.items():
        print(f"  peak RSS of {dag_id} (`dags test`, its tasks in-process): {peak['process_mb']} MB; the largest process "
              f"it started: {peak['largest_child']['command']} {peak['largest_child']['mb']:.0f} MB")
    print("  checksums: source == target after both restores")
    if args.record:
        Path(args.record).write_text(json.dumps({
            "datadir_mb": round(datadir_mb), "codecs": {n: {"seconds": round(x, 1), "mb": round(m, 1)} for n, x, m in rows},
            "hand": {"backup": round(hand_b, 1), "restore": round(hand_r, 1)},
            "dag_span": {"backup": round(b_span, 1), "restore": round(r_span, 1)},
            "dag_run": {"backup": round(b_run, 1), "restore": round(r_run, 1)},
            "dag_wall": {"backup": round(b_wall, 1), "restore": round(r_wall, 1)}, "peak_rss": PEAKS}, indent=1))
    src.stop()
    tgt.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
