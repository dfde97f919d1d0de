"""Where a run's heavy tasks run: on the queue, and in the pool, of the server they work on.

A task that works on a server (stream, extract, prepare, load, ...) is declared with `on_server(param)`,
the Param that names that server's connection. When the scheduler creates the task's instance, the
cluster policy below (Airflow's `task_instance_mutation_hook`, installed by `plugins/airflow_local_settings.py`)
reads the run's value of that Param (its conf, else the DAG's default) and that connection's extras:

- `"queue"`: the Celery queue of a worker next to that server (a physical backup's `mariabackup` and a
  restore's `mbstream`/`--prepare` need the server's datadir on the machine they run on);
- `"pool"`: the Airflow pool whose slots cap heavy work on that server across every DAG (two DAGs never
  overload one server); without it, `lastline_<conn_id>` when a pool of that name exists.

Without the policy, or without those extras, tasks keep the default queue and pool. The policy runs where
task instances are created (the scheduler, and the API server when a run is triggered) and reads the
connection as Airflow does there: the configured secrets backend, then `AIRFLOW_CONN_*`, then the metadata
database. It reads the database through the caller's session, never one of its own: Airflow's own lookup
would take the thread's scoped session, which is the scheduler's, and commit and close it mid-transaction.
"""
from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from lastline.airflow.defaults import env

MARK = "lastline_server_param"
log = logging.getLogger(__name__)
_CACHE: dict[tuple[str, bool], tuple[float, dict]] = {}
_TTL = 30.0


def on_server(param: str, long: bool = True) -> dict[str, Any]:
    """Task arguments for a task that works on the server the Param `param` names: the policy routes it to
    that server's queue and pool; a long task also gets an execution timeout (LASTLINE_TASK_TIMEOUT_HOURS,
    default 24: a task stuck on a dead server fails, and alerts, instead of holding its slot forever)."""
    out: dict[str, Any] = {"executor_config": {MARK: param}}
    if long:
        out["execution_timeout"] = timedelta(hours=float(env("TASK_TIMEOUT_HOURS", "24")))
    return out


def _param_value(task_instance: Any, dag_run: Any, name: str) -> str | None:
    """The run's value of the Param `name`: its conf (a manual or API run), else the DAG's default (the
    scheduler's serialized task gives the plain value)."""
    conf = getattr(dag_run, "conf", None) or {}
    if conf.get(name):
        return str(conf[name])
    params = getattr(task_instance.task, "params", None) or {}
    value = params[name] if name in params else None
    return str(value) if value else None


def connection_extras(conn_id: str, session: Any) -> dict:
    """The connection's extras from the first of Airflow's secrets backends that has it; the metadata database is
    asked through `session` only, and not at all without one. A backend that fails is logged and the next one
    asked, as Airflow does. An answer is kept 30 s (the policy runs for every task instance the scheduler makes);
    a lookup in which a backend failed is not kept, so an outage of a backend routes wrongly no longer than it lasts."""
    key = (conn_id, session is not None)  # without a session the database was not asked: never its answer for one with
    hit = _CACHE.get(key)
    if hit and time.monotonic() - hit[0] < _TTL:
        return hit[1]
    from airflow.configuration import ensure_secrets_loaded
    from airflow.secrets.metastore import MetastoreBackend

    extras: dict = {}
    failed = False
    for backend in ensure_secrets_loaded():
        if isinstance(backend, MetastoreBackend) and session is None:
            continue
        try:
            if isinstance(backend, MetastoreBackend):
                conn = backend.get_connection(conn_id, session=session)
            else:
                conn = backend.get_connection(conn_id)
            if conn is not None:
                extras = conn.extra_dejson
                break
        except PermissionError as exc:  # a backend's authoritative refusal: Airflow does not ask the next one
            log.warning("lastline routing: connection %s refused by %s (%s)", conn_id, type(backend).__name__, exc)
            break
        except Exception as exc:  # noqa: BLE001 - a policy that raised would stop the scheduler's loop
            log.warning("lastline routing: connection %s unreadable from %s (%s)", conn_id, type(backend).__name__, exc)
            failed = True
    if not failed:
        _CACHE[key] = (time.monotonic(), extras)
    return extras


def _pool_exists(name: str, session: Any) -> bool:
    if session is None:
        return False
    from airflow.models.pool import Pool
    from sqlalchemy import select

    return session.scalar(select(Pool.pool).where(Pool.pool == name)) is not None


def route(task_instance: Any, dag_run: Any) -> None:
    """The cluster policy: the queue and pool of the server an `on_server` task works on."""
    config = task_instance.executor_config or {}
    param = config.get(MARK) if isinstance(config, dict) else None
    if not param or dag_run is None:
        return
    conn_id = _param_value(task_instance, dag_run, param)
    if not conn_id:
        return
    from sqlalchemy.orm import object_session

    session = object_session(dag_run)
    extras = connection_extras(conn_id, session)
    if extras.get("queue"):
        task_instance.queue = str(extras["queue"])
    pool = str(extras.get("pool") or f"lastline_{conn_id}")
    if _pool_exists(pool, session):
        task_instance.pool = pool
    elif extras.get("pool"):
        log.warning("lastline routing: pool %s (connection %s) does not exist; default pool", pool, conn_id)
