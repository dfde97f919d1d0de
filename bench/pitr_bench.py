"""Point-in-time recovery, measured in one run (issue 29): how far the binlog archive falls behind a source under
a steady write load (the RPO), and how fast archived binlogs replay onto a restored base, through the target's
own parallel applier against `mariadb-binlog | mariadb`.

    make bench-pitr ARGS="--binlog-mb 500"   (or: .venv/bin/python bench/pitr_bench.py)

1. A source sandbox with sysbench's tables.
2. RPO: `sysbench oltp_write_only` at a steady rate (--rate) for --rpo-seconds, with the held stream (the default:
   one run holding the stream open, a look every 0.5 s; the `@continuous` schedule's next run starts when one ends);
   then the same load with the DAG run by `bin/airflow standalone` across three run boundaries (a run triggered by
   hand taking over, the schedule's next run after it, a second one by hand: bench/pitr_airflow.py; each boundary's
   gap between one `ship` task's end and the next one's start, and the worst lag around it); and, with
   --rpo-until-current, with `until_current: true` runs on the old per-minute schedule. Two probes: the
   source's binlog position every 0.05 s, and the archive's stored chain every 0.2 s; the lag at each chain sample is
   how long the oldest byte the source had written and the archive did not hold had been waiting (0 when it held
   everything): the data a source lost at that moment would take with it. Printed: worst and p99 against the goals
   (worst at most 2 s, p99 at most 1 s), the age of the covered position the chain confirms (whole seconds, one
   second held back: 1-2 s above the lag), and the segments written per hour.
3. Replay: a physical base is taken, then sysbench writes at full speed (--threads) until the binlog since the base holds --binlog-mb; the
   time the source took to write it is recorded. The base is restored into a target sandbox and rolled forward to
   `latest` by each method in turn; each result is checked against the source (CHECKSUM TABLE of every table).
   Printed: seconds, MB/s and transactions/s of each, parallel / pipe, and replay / the source's write time.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="lastline-bench-airflow-"))

from pitr_airflow import airflow_round  # noqa: E402

from lastline.core.servers import Server  # noqa: E402
from lastline.manifest import read_manifest  # noqa: E402
from lastline.physical import backup as physical_backup  # noqa: E402
from lastline.physical import restore as physical_restore  # noqa: E402
from lastline.pitr import archive, replay, stream, window  # noqa: E402
from lastline.pitr import span as span_of  # noqa: E402
from lastline.pitr.restore import coordinates  # noqa: E402
from lastline.storage import open_storage  # noqa: E402
from lastline_dev.keys import throwaway_storage_key
from lastline_dev.sandbox import Instance  # noqa: E402

DB = "sbtest"


def sysbench(inst: Instance, *args: str) -> list[str]:
    return ["sysbench", "oltp_write_only", "--db-driver=mysql", f"--mysql-socket={inst.sock}", "--mysql-user=root",
            f"--mysql-db={DB}", f"--tables={ARGS.tables}", f"--table-size={ARGS.rows}", *args]


def conn(inst: Instance, conn_id: str) -> None:
    """The sandbox as an Airflow connection in this process's environment (no metadata database needed)."""
    c = inst.connection(conn_id)
    extra = json.dumps(c["extra"])
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps({**c, "extra": extra})


def checksums(server: Server) -> dict[str, int]:
    out = {}
    with server.session() as cur:
        for i in range(1, ARGS.tables + 1):
            cur.execute(f"CHECKSUM TABLE {DB}.sbtest{i}")
            out[f"sbtest{i}"] = int(cur.fetchone()[1])
    return out


def binlog_bytes_since(server: Server, file: str, position: int) -> int:
    rows = server.query("SHOW BINARY LOGS")
    names = [str(r[0]) for r in rows]
    return sum(int(r[1]) for r in rows[names.index(file):]) - position


def _pos(file: str, pos: int) -> tuple[int, int]:
    return int(file.rsplit(".", 1)[1]), pos


class LagProbe(threading.Thread):
    """The source's binlog position every 0.05 s, the archive's stored end every 0.2 s; see the module doc."""

    def __init__(self, storage, server: Server) -> None:
        super().__init__(daemon=True)
        self.storage, self.server, self.stop = storage, server, threading.Event()
        self.source: list[tuple[float, tuple[int, int]]] = []
        self.lags: list[float] = []
        self.timed: list[tuple[float, float]] = []  # (epoch seconds, lag): the Airflow round's boundaries
        self.covered: list[float] = []
        self.segments = 0
        self.first_segments: int | None = None  # the chain's count at the probe's first sample (this round's start)

    def _sample_source(self) -> None:
        conn = self.server.connect()
        try:
            cur = conn.cursor()
            while not self.stop.wait(0.05):
                cur.execute("SHOW MASTER STATUS")
                row = cur.fetchone()
                self.source.append((time.monotonic(), _pos(str(row[0]), int(row[1]))))
        finally:
            conn.close()

    def run(self) -> None:
        sampler = threading.Thread(target=self._sample_source, daemon=True)
        sampler.start()
        while not self.stop.wait(0.2):
            try:
                bid = archive.branches(self.storage)[-1]["id"]
                branch = archive.read_branch(self.storage, bid)
            except Exception:  # noqa: BLE001 - a chain being rewritten: the next sample reads it
                continue
            now, done = time.monotonic(), [e for e in branch.entries if not e.missing]
            if not done or not self.source:
                continue
            held = _pos(done[-1].name, done[-1].size)
            self.segments = sum(len(e.segments) for e in done)
            self.first_segments = self.segments if self.first_segments is None else self.first_segments
            waiting = [t for t, p in self.source if p > held]  # samples at which the source was ahead of the archive
            before = [t for t, p in self.source if p <= held]
            # the oldest byte not archived was written after the last sample that shows the source not ahead of it
            self.lags.append(0.0 if not waiting or self.source[-1][1] <= held else now - (before[-1] if before else
                                                                                          waiting[0]))
            self.timed.append((time.time(), self.lags[-1]))
            if (branch.covered or {}).get("time"):
                self.covered.append(time.time() - float(branch.covered["time"]))
        sampler.join()


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else float("nan")


def rpo_round(src: Instance, storage, mode: str) -> dict:
    server = src.server()
    archive.ship(server, storage)
    load = sysbench(src, f"--threads={ARGS.threads}", f"--rate={ARGS.rate}", f"--time={ARGS.rpo_seconds}", "run")
    probe = LagProbe(storage, server)
    extra: dict = {}
    if mode == "airflow":  # the held stream as the scheduler runs it, across run boundaries (bench/pitr_airflow.py)
        extra = airflow_round(ARGS.work, storage.url, "bench_pitr_src", load, ARGS.rpo_seconds, probe)
    else:
        writer = subprocess.Popen(load, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        stop = threading.Event()
        conf = {"source_conn_id": "bench_pitr_src", "destination": storage.url, "compact": not ARGS.no_compact}

        def runs() -> None:
            while not stop.is_set():
                if mode == "held":
                    stream.run(conf, stop)  # the default: one run holds the stream; the next starts when it ends
                else:
                    archive.ship(server, storage)  # until_current: one shipment a run, a run a minute
                    if stop.wait(60 - time.time() % 60):
                        return
        shipper = threading.Thread(target=runs)
        probe.start()
        time.sleep(1)
        shipper.start()
        writer.wait()
        stop.set()
        shipper.join()
        probe.stop.set()
        probe.join()
    lags = probe.lags[5:]  # from when the probe has seen the source for a second
    worst, p99 = (max(lags), _p99(lags)) if lags else (float("nan"), float("nan"))
    per_hour = (probe.segments - (probe.first_segments or 0)) * 3600 / ARGS.rpo_seconds  # this round's alone
    print(f"RPO, {mode:13s}: archive lag worst {worst:5.2f} s, p99 {p99:5.2f} s, over {ARGS.rpo_seconds} s of sysbench "
          f"at {ARGS.rate} tx/s ({len(lags)} samples); covered position's age worst {max(probe.covered or [0]):.1f} s, "
          f"p99 {_p99(probe.covered):.1f} s; {per_hour:,.0f} segments an hour", flush=True)
    for n, b in enumerate(extra.get("boundaries", []), 1):
        print(f"RPO, {mode:13s}: boundary {n} ({b['kind']}): the next ship task started {b['gap_s']:.2f} s after the "
              f"last one ended (between: {', '.join(b['between']) or 'nothing'}); worst lag around it "
              f"{b['worst_lag_s']} s", flush=True)
    chain = _chain_size(storage)
    print(f"RPO, {mode:13s}: at its end the branch's chain.json is {chain['chain_bytes']:,} bytes, listing "
          f"{chain['segments']:,} segments, {chain['objects']:,} objects stored (compaction "
          f"{'off' if ARGS.no_compact else 'on'})", flush=True)
    return {"mode": mode, "worst_lag_s": round(worst, 3), "p99_lag_s": round(p99, 3), "samples": len(lags),
            "covered_age_worst_s": round(max(probe.covered or [0]), 2), "covered_age_p99_s": round(_p99(probe.covered), 2),
            "segments_per_hour": round(per_hour), "compact": not ARGS.no_compact, **chain, **extra}


def _chain_size(storage) -> dict:
    """The newest branch's chain.json size, the segments it lists and the objects stored (a local destination)."""
    bid = archive.branches(storage)[-1]["id"]
    folder = Path(storage.url.removeprefix("file://")) / "binlogs" / bid
    return {"chain_bytes": (folder / "chain.json").stat().st_size,
            "segments": sum(len(e.segments) for e in archive.read_branch(storage, bid).entries),
            "objects": sum(1 for p in folder.glob("*/*") if p.is_file())}


def _write(record: dict) -> None:
    out = ROOT / "bench" / "records" / f"pitr-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(record, indent=1))
    print(f"recorded: {out.relative_to(ROOT)}")


def main() -> int:
    throwaway_storage_key()  # its backups are signed and checked as a deployment's are
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", type=int, default=8)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=4, help="sysbench threads (both phases)")
    ap.add_argument("--rate", type=int, default=200, help="sysbench tx/s during the RPO rounds")
    ap.add_argument("--rpo-seconds", type=int, default=150)
    ap.add_argument("--binlog-mb", type=int, default=500, help="binlog written after the base, replayed by each method")
    ap.add_argument("--replay-threads", type=int, default=4, help="slave_parallel_threads for the parallel replay")
    ap.add_argument("--skip-rpo", action="store_true")
    ap.add_argument("--rpo-until-current", action="store_true", help="also measure until_current runs, one a minute")
    ap.add_argument("--skip-rpo-airflow", action="store_true",
                    help="leave out the held stream as `bin/airflow standalone` runs it: the lag across run boundaries "
                         "(bench/pitr_airflow.py; about 5 minutes)")
    ap.add_argument("--skip-replay", action="store_true")
    ap.add_argument("--no-compact", action="store_true", help="the held stream without compaction (for comparison)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "lastline-bench-pitr")
    ARGS = ap.parse_args()
    shutil.rmtree(ARGS.work, ignore_errors=True)
    ARGS.work.mkdir(parents=True)
    src, tgt = Instance(ARGS.work, "src"), Instance(ARGS.work, "tgt")
    record: dict = {"args": {k: str(v) for k, v in vars(ARGS).items()}}
    try:
        for inst in (src, tgt):
            inst.create()
        conn(src, "bench_pitr_src")
        conn(tgt, "bench_pitr_tgt")
        src.server().query(f"CREATE DATABASE {DB}")
        subprocess.run(sysbench(src, "--threads=2", "prepare"), check=True, stdout=subprocess.DEVNULL)
        dest = f"file://{ARGS.work / 'dest'}"
        storage = open_storage(dest)
        modes = (["held"] + (["until_current"] if ARGS.rpo_until_current else [])
                 + ([] if ARGS.skip_rpo_airflow else ["airflow"]))
        record["rpo"] = [] if ARGS.skip_rpo else [rpo_round(src, storage, m) for m in modes]
        for r in record["rpo"]:
            if r["mode"] in ("held", "airflow"):
                how = "one held stream" if r["mode"] == "held" else "on Airflow, across run boundaries"
                print(f"goal ({how}): worst archive lag at most 2 s: {r['worst_lag_s']:.2f} s -> "
                      f"{'met' if r['worst_lag_s'] <= 2 else 'NOT met'}", flush=True)
                print(f"goal ({how}): p99 archive lag at most 1 s: {r['p99_lag_s']:.2f} s -> "
                      f"{'met' if r['p99_lag_s'] <= 1 else 'NOT met'}", flush=True)
        if ARGS.skip_replay:
            _write(record)
            return 0
        archive.ship(src.server(), storage)
        plan = physical_backup.preflight({"source_conn_id": "bench_pitr_src", "destination": dest})
        physical_backup.finish(plan, physical_backup.stream(plan))
        base = read_manifest(storage, plan.backup_id)
        file, position, gtid = coordinates(base)
        print(f"base {plan.backup_id}: {file}:{position}, GTID {gtid}", flush=True)
        # the binlog to replay: full speed until --binlog-mb since the base
        server = src.server()
        started = time.monotonic()
        load = subprocess.Popen(sysbench(src, f"--threads={ARGS.threads}", "--time=0", "run"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        while binlog_bytes_since(server, file, position) < ARGS.binlog_mb * 1_000_000:
            time.sleep(1)
        load.terminate()
        load.wait()
        wrote = time.monotonic() - started
        size = binlog_bytes_since(server, file, position)
        archive.ship(server, storage)
        want = checksums(server)
        print(f"the source wrote {size / 1e6:.0f} MB of binlog in {wrote:.1f} s (sysbench oltp_write_only, "
              f"{ARGS.threads} threads, full speed)", flush=True)
        line = window.choose_line(storage, file, gtid, None, position)
        span = span_of.resolve(storage, line, file, position, gtid, window.Until.parse("latest"))
        rounds = {}
        for method in ("pipe", "parallel"):
            rplan = physical_restore.preflight({"target_conn_id": "bench_pitr_tgt", "backup": f"{dest}/{plan.backup_id}",
                                  "force": True})
            for step in (physical_restore.stop_target, physical_restore.extract, physical_restore.prepare, physical_restore.start_target):
                step(rplan)
            t0 = time.monotonic()
            result = replay.apply(tgt.server(), storage, span, f"bench-{method}-{time.time()}", method,
                                  ARGS.replay_threads)
            seconds = time.monotonic() - t0
            exact = checksums(tgt.server()) == want
            rounds[method] = {"seconds": round(seconds, 2), "apply_seconds": result["seconds"],
                              "transactions": result["transactions"], "exact": exact}
            print(f"replay {method:8s}: {seconds:6.1f} s (applying {result['seconds']:.1f} s; the rest cuts the "
                  f"archived files), {size / 1e6 / seconds:5.1f} MB/s, {result['transactions'] / seconds:7.0f} tx/s, "
                  f"exact: {exact}", flush=True)
            if not exact:
                raise SystemExit(f"the {method} replay is not the source's state")
        ratio = rounds["pipe"]["seconds"] / rounds["parallel"]["seconds"]
        print(f"\ngoal: parallel replay at least 8x mariadb-binlog | mariadb: {ratio:.2f}x -> "
              f"{'met' if ratio >= 8 else 'NOT met'}")
        print(f"goal: replay in at most half the time the source took to write it: parallel "
              f"{rounds['parallel']['seconds']:.1f} s vs {wrote:.1f} s ({rounds['parallel']['seconds'] / wrote:.2f}x) -> "
              f"{'met' if rounds['parallel']['seconds'] <= wrote / 2 else 'NOT met'}")
        record.update(binlog_mb=round(size / 1e6, 1), source_write_seconds=round(wrote, 2), replay=rounds,
                      parallel_vs_pipe=round(ratio, 2))
        _write(record)
    finally:
        for inst in (src, tgt):
            inst.destroy()
        shutil.rmtree(ARGS.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
