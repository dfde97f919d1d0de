"""Where a logical restore's CPU goes on one machine: the target server, a lane's own process and its
decompressors, and Airflow's processes around the run.

    .venv/bin/python bench/restore_cpu_bench.py [--airflow-env KEY=VALUE ...] [--nice-control-plane N]

Run it after `make bench-restore`: it restores that bench's newest lastline backup into that bench's target
sandbox (its buffer pool and redo log as the last bench run left them), twice:

1. one lane alone, in this process (lastline.logical.restore.stages: preflight, snapshot_config, prepare, then
   `load_lane` for lane 1, which takes every unit when it is alone): CPU seconds of this process, of its
   children (`zstd` processes, only where lastline's LOAD DATA handler is not built: with it, the chunks
   are decompressed in this process) and of the server;
2. the whole `logical_restore` DAG under `airflow standalone` (one warm-up run first, then the timed run),
   every process's CPU sampled twice a second and summed by command: the server, the scheduler, the
   dag-processor, the workers, the api-server, ... `--airflow-env` adds settings to the standalone (e.g.
   `AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL=600`), to see what they change in time and CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from logical_restore_bench import cpu_seconds, process_seconds  # noqa: E402

from lastline.logical.restore import stages as logical_restore  # noqa: E402
from lastline_dev.sandbox import Instance  # noqa: E402
from lastline_dev.standalone import Standalone  # noqa: E402

WORK = ROOT / "bench" / "results" / "restore"


def process_cpu() -> dict[str, tuple[str, float]]:
    """Every process's command line and CPU seconds so far, by pid."""
    out = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                out[p.name] = (cmd, process_seconds(p.name))
            except OSError:
                continue
    return out


# Airflow's control plane (as `airflow standalone` names its processes), against its task processes
CONTROL_PLANE = ("airflow standalone", "airflow scheduler", "airflow dag-processor", "airflow api_server",
                 "airflow triggerer", "airflow serve-logs")


def renice(procs: dict[str, tuple[str, float]], nice: int) -> None:
    """Airflow's control plane at `nice`, its task processes ("airflow worker") at 0 (lowering a value back
    needs root; where it is refused the process keeps what it had)."""
    for pid, (cmd, _cpu) in procs.items():
        value = nice if any(name in cmd for name in CONTROL_PLANE) else 0 if cmd.startswith("airflow worker") else None
        if value is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, int(pid), value)
            except OSError:
                pass


class Sampler:
    """Samples every process twice a second while running: a process that ends loses at most half a second.
    With `nice`, renices Airflow's processes as it samples them (see renice)."""

    def __init__(self, nice: int | None = None) -> None:
        self.nice = nice
        self.first = process_cpu()
        self.last: dict[str, tuple[str, float]] = dict(self.first)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        if self.nice is not None:
            renice(self.first, self.nice)
        while not self._stop.wait(0.5):
            now = process_cpu()
            self.last.update(now)
            if self.nice is not None:
                renice(now, self.nice)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.last.update(process_cpu())

    def by_command(self) -> list[tuple[float, str]]:
        """CPU seconds used during the sampling, summed by command (its first 70 characters)."""
        sums: dict[str, float] = {}
        for pid, (cmd, cpu) in self.last.items():
            used = cpu - (self.first[pid][1] if pid in self.first and self.first[pid][0] == cmd else 0.0)
            key = cmd.split(" -- ")[0][:70] or "(kernel threads and unnamed)"
            sums[key] = sums.get(key, 0.0) + used
        return sorted(((v, k) for k, v in sums.items() if v >= 0.1), reverse=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--airflow-env", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--nice-control-plane", type=int, metavar="N",
                   help="during the timed DAG run, Airflow's scheduler, dag-processor, api-server and triggerer at nice N, "
                        "its task processes at 0 (tried on 2026-11-24 with 10: no faster, see the README)")
    args = p.parse_args()
    backups = sorted((WORK / "dumps" / "lastline").glob("2*"))
    tgt = Instance(WORK / "sandbox", "rtgt")
    if not backups or not tgt.exists():
        raise SystemExit(f"no bench-restore backup or target under {WORK}: run `make bench-restore` first")
    tgt.start()
    try:
        os.environ["AIRFLOW_CONN_BENCH_RTGT"] = json.dumps(tgt.connection("bench_rtgt"))
        redo = int(tgt.server().query("SELECT @@innodb_log_file_size")[0][0])  # as the bench set it: not grown
        conf = {"target_conn_id": "bench_rtgt", "backup": f"file://{backups[-1]}", "parallel": 2, "force": True,
                "redo_log_bytes": redo, "databases": [], "tune": True, "restart_allowed": False,
                "defer_indexes": True, "index_build": "after_all", "aws_conn_id": None}

        tgt.server().query("DROP DATABASE IF EXISTS sbtest")
        plan = logical_restore.preflight(conf)
        logical_restore.snapshot_config(plan)
        logical_restore.prepare(plan)
        before, t0, wall = cpu_seconds(tgt.pid()), os.times(), time.monotonic()
        logical_restore.load_lane(plan, "lane 1 of 2")
        after, t1 = cpu_seconds(tgt.pid()), os.times()
        logical_restore.revert(plan)
        print(f"one lane alone loads every unit: {time.monotonic() - wall:.1f} s; CPU s: the lane's process "
              f"{t1.user - t0.user + t1.system - t0.system:.1f}, its decompressors "
              f"{t1.children_user - t0.children_user + t1.children_system - t0.children_system:.1f}, "
              f"the server {after[1] - before[1]:.1f}", flush=True)

        extra = dict(a.split("=", 1) for a in args.airflow_env)
        env = dict(os.environ, AIRFLOW__API__HOST="127.0.0.1", AIRFLOW__CORE__LOAD_EXAMPLES="False", LASTLINE_RETRIES="0",
                   AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME="0.2", LASTLINE_REPORT_DIR=str(WORK / "reports"), **extra)
        (ROOT / ".airflow").mkdir(exist_ok=True)
        with Standalone(env, WORK / "cpu-standalone.log") as af:
            tgt.server().query("DROP DATABASE IF EXISTS sbtest")
            af.wait("logical_restore", af.trigger("logical_restore", conf))  # warm-up: the workers' first imports
            tgt.server().query("DROP DATABASE IF EXISTS sbtest")
            run_id = af.trigger("logical_restore", conf)  # the trigger (REST calls) stays out of the count
            with Sampler(args.nice_control_plane) as sampler:
                run = af.wait("logical_restore", run_id)
        if run["state"] != "success":
            raise SystemExit(f"logical_restore {run['run_id']} failed: see {WORK / 'cpu-standalone.log'}")
        settings = [*args.airflow_env, *([f"its control plane at nice {args.nice_control_plane}"]
                                         if args.nice_control_plane is not None else [])]
        print(f"the DAG under airflow standalone{' with ' + ', '.join(settings) if settings else ''}: "
              f"{run['seconds']:.1f} s; CPU s by process during the run:")
        for cpu, cmd in sampler.by_command()[: args.top]:
            print(f"  {cpu:7.1f}  {cmd}")
    finally:
        tgt.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
