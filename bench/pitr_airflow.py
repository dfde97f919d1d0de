"""The held stream as Airflow runs it, for bench/pitr_bench.py (by default; `--skip-rpo-airflow` leaves it out): the
archive's lag across the run boundaries, where one run's stream ends and the next one's begins, through a real
scheduler (`bin/airflow standalone`, the deployment's settings). The `binlog_archive` DAG is unpaused (the
`@continuous` schedule's run holds the stream), then, under the same steady load as the other rounds:

- a run triggered by hand is queued: the held stream hands over to it (boundary "handover");
- that run streams its minute and ends; the schedule's next run takes over (boundary "continuation");
- a second run triggered by hand (a second handover).

Each boundary: the time from one `ship` task's end to the next one's start (the metadata DB's times), what lay
between (the old run's `check_chain`, the scheduler's hops) and the worst lag the probe saw around it.
"""
from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from logical_bench import SCHEDULES_OFF
from logical_restore_bench import epoch

from lastline_dev.deployment import free_port
from lastline_dev.standalone import Standalone

DAG = "binlog_archive"


def _ships(db: Path) -> list[dict[str, Any]]:
    """Every try of the DAG's tasks so far, in the order they started (epoch seconds)."""
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT task_id, run_id, state, start_date, end_date FROM task_instance WHERE dag_id = ? "
                         "AND start_date IS NOT NULL ORDER BY start_date", (DAG,)).fetchall()
    return [{"task": t, "run_id": r, "state": s, "start": epoch(b), "end": epoch(e)} for t, r, s, b, e in rows]


def _wait(db: Path, what: Callable[[list[dict[str, Any]]], bool], why: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if what(_ships(db)):
            return
        time.sleep(0.2)
    raise SystemExit(f"bench: {why} did not happen in {timeout:.0f} s")


def _running_ships(tis: list[dict[str, Any]]) -> int:
    return sum(1 for t in tis if t["task"] == "ship" and t["state"] == "running")


def boundaries(tis: list[dict[str, Any]], lags: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """Each pair of consecutive `ship` tries: the gap between them, what ran in it, and the worst lag seen from
    2 s before the first one's end to 10 s after the second one's start."""
    ships = [t for t in tis if t["task"] == "ship" and t["start"]]
    out = []
    for old, new in zip(ships, ships[1:], strict=False):
        if old["end"] is None:
            continue
        between = [f"{t['task']} {t['end'] - t['start']:.2f} s" for t in tis if t["task"] != "ship" and t["start"]
                   and t["end"] and old["end"] - 0.01 <= t["start"] <= new["start"]]
        near = [lag for at, lag in lags if old["end"] - 2 <= at <= new["start"] + 10]
        kind = "handover" if new["run_id"].startswith("manual__") else "continuation"
        out.append({"kind": kind, "gap_s": round(new["start"] - old["end"], 2), "between": between,
                    "worst_lag_s": round(max(near), 2) if near else None})
    return out


def airflow_round(work: Path, dest: str, source_conn_id: str, load: list[str], seconds: int,
                  probe: Any) -> dict[str, Any]:
    """Run the DAG on a standalone while `load` (a sysbench command of `seconds`) writes; `probe` (a started LagProbe
    that keeps (time, lag) pairs in `timed`) is stopped by the caller. Returns the boundaries and the standalone's
    times."""
    port = str(free_port())
    env = {**os.environ, "LASTLINE_AIRFLOW_HOME": str(work / "airflow"), "LASTLINE_RETRIES": "0",
           **SCHEDULES_OFF, "LASTLINE_REPORT_DIR": str(work / "reports"), "LASTLINE_DESTINATION": dest,
           "LASTLINE_SOURCE_CONN_ID": source_conn_id, "AIRFLOW__API__PORT": port,
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
           "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
           "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port())}
    log = work / "standalone-pitr.log"
    print(f"RPO, airflow: starting `bin/airflow standalone` (log {log})", flush=True)
    with Standalone(env, log, wait_for_dag=DAG) as af:
        af.api.call("PATCH", f"/api/v2/dags/{DAG}", json={"is_paused": False})
        _wait(af.db, lambda tis: _running_ships(tis) == 1, "the schedule's first ship task")
        time.sleep(5)  # the stream's first rounds: it has caught up
        begun = time.monotonic()
        writer = subprocess.Popen(load, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        probe.start()
        time.sleep(15)
        print("RPO, airflow: a run triggered by hand (a handover)", flush=True)
        af.api.trigger(DAG, {})
        _wait(af.db, lambda tis: any(t["task"] == "ship" and t["run_id"].startswith("manual__")
                                     and t["state"] == "running" for t in tis), "the handover to the run by hand", 60)
        _wait(af.db, lambda tis: sum(1 for t in tis if t["task"] == "ship") >= 3 and _running_ships(tis) == 1,
              "the schedule's next run after the hand's (a continuation)", 150)
        time.sleep(10)
        print("RPO, airflow: a second run triggered by hand (a handover)", flush=True)
        af.api.trigger(DAG, {})
        _wait(af.db, lambda tis: sum(1 for t in tis if t["task"] == "ship") >= 4 and _running_ships(tis) == 1,
              "the second handover", 60)
        time.sleep(10)
        left = seconds - (time.monotonic() - begun)
        if left > 0:
            time.sleep(left)
        writer.terminate()
        writer.wait()
        probe.stop.set()
        probe.join()
        tis = _ships(af.db)
        return {"boundaries": boundaries(tis, probe.timed), "seconds": round(time.monotonic() - begun, 1),
                "tasks": [{k: t[k] for k in ("task", "run_id", "state")}
                          | {"seconds": round((t["end"] or time.time()) - t["start"], 2)} for t in tis]}
