"""The task code, imported once by the processes that start tasks instead of by every task.

Airflow 3 runs each task in a process forked from its executor's worker (the scheduler's LocalExecutor
workers, a Celery worker's pool), which then parses the task's DAG file. Without this, each task imported
lastline, the MySQL driver and the HITL operator anew: about 0.25 CPU s before its first line of work, on
every short step of a restore's critical path. Imported here, from the deployment's local settings, they are
in memory before the fork. The price: a new lastline version reaches tasks and DAG parsing once Airflow's
processes (scheduler, dag-processor, workers) restart.
"""
from __future__ import annotations

import importlib
import logging

log = logging.getLogger(__name__)

# what the DAG files import (the stages come with them), and the driver their tasks import when they connect
MODULES = (
    "MySQLdb",
    "airflow.providers.standard.operators.hitl",
    "lastline.airflow.task_groups",
    "lastline.airflow.params",
    "lastline.airflow.defaults",
    "lastline.airflow.assets",
    "lastline.airflow.alerts",
    "lastline.physical.backup",
    "lastline.replication.rebuild",
    "lastline.staging.refresh",
    "lastline.staging.verify",
    "lastline.drill",
)


def preload() -> None:
    """Import MODULES; one that fails is left to the task that needs it (its error shows there)."""
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - never stop Airflow's own processes from starting
            log.warning("lastline: could not preload %s (%s); tasks import it themselves", name, exc)
