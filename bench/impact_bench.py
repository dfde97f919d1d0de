"""What a backup costs production: sysbench write latency with and without a backup running, one run.

    make bench-impact ARGS="--tables 4 --rows 250000 --rate 200"   (or: .venv/bin/python bench/impact_bench.py)

A source sandbox with sysbench's tables; `sysbench oltp_write_only` at a fixed rate (--rate transactions a
second: an open-loop load, the same work in every round) over the server's socket as root (no password on any
command line). Each round runs the load for the same window (30 s, 45 s with the batch write) and, in the backup rounds,
backups one after the other for the whole window (so every latency sample is taken while one runs):
  baseline                   nothing
  logical / physical         a backup with its defaults
  ... + 40 s batch write     an `UPDATE ... SLEEP(40)` on another table, running when the backup starts
  ... + DDL mid-backup       `ALTER TABLE sbtest1 ADD COLUMN` issued once the backup has run a few seconds
and a probe that inserts a row every 0.1 s into its own table gives the worst single write wait. Printed per
round: sysbench p99 and max latency (ms), p99 / baseline p99, the probe's worst wait, the backup's time and the
longest time one held commits. The goals (issue 28): no write waits over 1 s; p99 at most 1.5x baseline.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="lastline-bench-airflow-"))

from lastline.logical.backup import stages as logical_backup  # noqa: E402
from lastline.physical import backup as physical_backup  # noqa: E402
from lastline_dev.sandbox import Instance  # noqa: E402

DB = "sbtest"


def sysbench(inst: Instance, *args: str) -> list[str]:
    """sysbench oltp_write_only against the sandbox's socket, as root (no password)."""
    return ["sysbench", "oltp_write_only", "--db-driver=mysql", f"--mysql-socket={inst.sock}", "--mysql-user=root",
            f"--mysql-db={DB}", *args]


def setup(root: Path, tables: int, rows: int) -> Instance:
    inst = Instance(root, "impact")
    if not inst.exists():
        print(f"creating the source: {tables} sysbench tables of {rows:,} rows (once; kept in {root})", flush=True)
        inst.create()
        inst.server().query(f"CREATE DATABASE {DB}")
        subprocess.run(sysbench(inst, f"--tables={tables}", f"--table-size={rows}", "--threads=2", "prepare"),
                       check=True, stdout=subprocess.DEVNULL)
        with inst.server().session() as cur:
            cur.execute("CREATE TABLE sbtest.batch (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
            cur.execute("INSERT INTO sbtest.batch VALUES (1, 0), (2, 0)")
            cur.execute("CREATE TABLE sbtest.probe (id INT AUTO_INCREMENT PRIMARY KEY, t DATETIME(6)) ENGINE=InnoDB")
            cur.connection.commit()
    inst.start()
    conn = inst.connection("b_impact")
    os.environ["AIRFLOW_CONN_B_IMPACT"] = json.dumps(conn)
    return inst


class Probe(threading.Thread):
    """One INSERT every 0.1 s; the worst wait (an insert still waiting counts)."""

    def __init__(self, inst: Instance) -> None:
        super().__init__(daemon=True)
        self.inst, self.waits, self.stop, self.started = inst, [0.0], threading.Event(), None

    def run(self) -> None:
        conn = self.inst.server().connect()
        conn.autocommit(True)
        cur = conn.cursor()
        while not self.stop.is_set():
            self.started = time.monotonic()
            cur.execute("INSERT INTO sbtest.probe (t) VALUES (NOW(6))")
            self.waits.append(time.monotonic() - self.started)
            self.started = None
            time.sleep(0.1)
        conn.close()

    def worst(self) -> float:
        return max(self.waits + ([time.monotonic() - self.started] if self.started else []))


def batch_write(inst: Instance) -> threading.Thread:
    """The retention job: a 40 s UPDATE on its own table, started now."""
    def run() -> None:
        conn = inst.server().connect()
        conn.cursor().execute("UPDATE sbtest.batch SET v = v + 1 + SLEEP(40) WHERE id = 1")
        conn.commit()
        conn.close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(1.0)
    return t


def ddl_later(inst: Instance, after: float, column: str) -> threading.Thread:
    """An ALTER TABLE on a table the load writes, `after` seconds from now (online: ALGORITHM=INSTANT where it can)."""
    def run() -> None:
        time.sleep(after)
        inst.server().query(f"ALTER TABLE sbtest.sbtest1 ADD COLUMN {column} INT NULL")
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def backup(kind: str, dest: Path) -> dict:
    """One backup with its defaults (plus --conf); its seconds and the seconds it held commits."""
    base = {"source_conn_id": "b_impact", "destination": f"file://{dest}", **json.loads(ARGS.conf)}
    t0 = time.monotonic()
    if kind == "logical":
        result = logical_backup.dump(logical_backup.preflight({**base, "databases": [DB]}))
        return {"seconds": time.monotonic() - t0, "held": result.commits_held_seconds}
    plan = physical_backup.preflight(base)
    physical_backup.finish(plan, physical_backup.stream(plan))
    return {"seconds": time.monotonic() - t0, "held": None}


def load(inst: Instance, seconds: float, rate: int, threads: int) -> subprocess.Popen:
    return subprocess.Popen(
        sysbench(inst, f"--tables={ARGS.tables}", f"--table-size={ARGS.rows}", f"--threads={threads}", f"--rate={rate}",
                 f"--time={int(seconds)}", "--percentile=99", "--report-interval=0", "run"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def latencies(out: str) -> tuple[float, float]:
    """(p99, max) in ms from sysbench's summary."""
    p99 = re.search(r"99th percentile:\s+([\d.]+)", out)
    mx = re.search(r"max:\s+([\d.]+)", out)
    if not p99 or not mx:
        raise SystemExit(f"cannot read sysbench's latencies from:\n{out[-2000:]}")
    return float(p99[1]), float(mx[1])


def round_(inst: Instance, work: Path, name: str, window: float, kind: str | None, extra: str | None) -> dict:
    probe = Probe(inst)
    probe.start()
    bench = load(inst, window, ARGS.rate, ARGS.threads)
    time.sleep(2.0)  # the load's warm-up is in every round alike
    side = None
    if extra == "batch":
        side = batch_write(inst)
    elif extra == "ddl":
        side = ddl_later(inst, 5.0, f"c{int(time.time())}")
    result: dict = {"seconds": None, "held": None, "backups": 0}
    while kind and bench.poll() is None:  # back to back for the whole window: every sample is taken during a backup
        one = backup(kind, work / name)
        shutil.rmtree(work / name, ignore_errors=True)  # dozens of backups a round: keep none
        result = {"seconds": one["seconds"], "held": max(result["held"] or 0, one["held"] or 0) if one["held"] is not None
                  else None, "backups": result["backups"] + 1}
    out, _ = bench.communicate()
    probe.stop.set()
    probe.join()
    p99, mx = latencies(out)
    if side is not None and extra == "ddl":
        side.join()
    return {"round": name, "p99_ms": p99, "max_ms": mx, "worst_probe_s": probe.worst(), **result}


def main() -> int:
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", type=int, default=4)
    ap.add_argument("--rows", type=int, default=250_000)
    ap.add_argument("--rate", type=int, default=100, help="sysbench transactions a second (fixed: open loop)")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--window", type=float, default=30.0, help="seconds of load per round (45 at least with the batch write)")
    ap.add_argument("--conf", default="{}", help='Params for every backup, as JSON (e.g. \'{"max_read_mb_per_s": 50}\')')
    ap.add_argument("--kinds", default="logical,physical", help="which backups to run beside the load")
    ap.add_argument("--dest", type=Path, help="where the backups go (default: under --work, on the server's disk; "
                    "/dev/shm takes the backup's own writes off the disk the server fsyncs to)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "lastline-bench-impact")
    ap.add_argument("--keep", action="store_true", help="keep the sandbox (stopped) for the next run")
    ARGS = ap.parse_args()
    ARGS.work.mkdir(parents=True, exist_ok=True)
    inst = setup(ARGS.work / "sandbox", ARGS.tables, ARGS.rows)
    try:
        work = Path(tempfile.mkdtemp(prefix="lastline-impact-backups-", dir=ARGS.dest or ARGS.work))
        window = ARGS.window
        print(f"window: {window:.0f} s per round; load: sysbench oltp_write_only, {ARGS.rate} tx/s, {ARGS.threads} threads; "
              f"backups to {work} with {ARGS.conf}", flush=True)
        rounds = [("baseline", None, None)]
        for kind in ARGS.kinds.split(","):
            rounds += [(kind, kind, None), (f"{kind} + 40 s batch write", kind, "batch"), (f"{kind} + DDL mid-backup", kind, "ddl")]
        results = []
        for name, kind, extra in rounds:
            if extra == "batch":
                window_here = max(window, 45.0)
            else:
                window_here = window
            r = round_(inst, work, name.replace(" ", "_").replace("+", "").replace("__", "_"), window_here, kind, extra)
            r["round"] = name
            results.append(r)
            base = results[0]["p99_ms"]
            print(f"{name:32s} p99 {r['p99_ms']:8.2f} ms ({r['p99_ms'] / base:4.2f}x baseline)  max {r['max_ms']:8.1f} ms  "
                  f"worst probe write {r['worst_probe_s'] * 1000:7.1f} ms"
                  + (f"  {r['backups']} backups of {r['seconds']:.1f} s" if r["seconds"] else "")
                  + (f", commits held {r['held'] * 1000:.1f} ms" if r["held"] is not None else ""), flush=True)
        worst = max(r["worst_probe_s"] for r in results[1:])
        worst_ratio = max(r["p99_ms"] for r in results[1:]) / results[0]["p99_ms"]
        print(f"\ngoal: no write waits over 1 s because of a backup: worst probe write {worst * 1000:.0f} ms, worst sysbench "
              f"max {max(r['max_ms'] for r in results[1:]):.0f} ms -> {'met' if worst < 1 else 'NOT met'}")
        print(f"goal: p99 during a backup at most 1.5x baseline: worst {worst_ratio:.2f}x -> "
              f"{'met' if worst_ratio <= 1.5 else 'NOT met'}")
        record = ROOT / "bench" / "records" / f"impact-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
        record.write_text(json.dumps({"args": {k: str(v) for k, v in vars(ARGS).items()}, "rounds": results}, indent=1))
        print(f"recorded: {record.relative_to(ROOT)}")
        shutil.rmtree(work, ignore_errors=True)
    finally:
        if ARGS.keep:
            inst.stop()
        else:
            inst.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
