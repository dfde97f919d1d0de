"""Defaults shared by lastline's DAG files: retries, start date, env-overridable schedules and params."""
from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum

from lastline.airflow import failures
from lastline.airflow.alerts import Alert

START_DATE = pendulum.datetime(2026, 1, 1, tz="UTC")


def env(name: str, default: str) -> str:
    """A setting from the environment (LASTLINE_<NAME>), else the default."""
    return os.environ.get(f"LASTLINE_{name}", default)


def schedule(name: str, default: str) -> str | None:
    """A DAG's cron schedule from LASTLINE_<NAME> (default `default`); "none" turns the schedule off (manual
    runs only: no run is created for the last interval when the DAG is unpaused)."""
    value = env(name, default).strip()
    return None if value.lower() in ("", "none", "off") else value


def default_args() -> dict:
    """Retries for every task: each step is safe to re-run (LASTLINE_RETRIES, default 2); return values kept out
    of the task logs; a task whose last try failed saves what failed into the run's report (failures.record)."""
    return {
        "owner": "lastline",
        "retries": int(env("RETRIES", "2")),
        "retry_delay": timedelta(seconds=int(env("RETRY_DELAY_SECONDS", "120"))),
        # each task logs what it did in a line or a few; its return value (XCom, for the next task) is not
        # printed again as one long line at the end of its log
        "show_return_value_in_logs": False,
        "on_failure_callback": failures.record,  # the Report tab opens with the failed task, its reason, its log
    }


def dag_args(**kw) -> dict:
    """What every lastline DAG shares (start date, no catchup, one run at a time, retries, an alert when a run
    fails: see lastline.airflow.alerts) plus `kw`."""
    return {"start_date": START_DATE, "catchup": False, "max_active_runs": 1, "default_args": default_args(),
            "on_failure_callback": Alert("failed"), **kw}


def queued(ti: Any, dag_id: str) -> bool:
    """Whether a run of `dag_id` is queued: with one run at a time, it waits for the running one to end (a long task,
    binlog_archive's held stream, ends early for it). Asked through the task's supervisor (`ti`: the task's
    RuntimeTaskInstance, context["ti"])."""
    return ti.get_dr_count(dag_id=dag_id, states=["queued"]) > 0


DESTINATION = env("DESTINATION", "file:///var/backups/lastline")
SOURCE_CONN_ID = env("SOURCE_CONN_ID", "lastline_source")
TARGET_CONN_ID = env("TARGET_CONN_ID", "lastline_target")
REPLICA_CONN_ID = env("REPLICA_CONN_ID", "lastline_replica")  # what replica_rebuild and replica_detach act on
