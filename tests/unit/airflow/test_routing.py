"""The routing policy reads a server's connection through Airflow's secrets backends, as the scheduler has them.

Each case names where the connection is kept (the environment, a secrets backend only, the metadata database
through the scheduler's session) and the queue its task gets; a connection found nowhere, or unreadable,
leaves the default queue.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lastline.airflow import routing


@dataclass(frozen=True)
class Case:
    name: str
    env: dict[str, str] = field(default_factory=dict)  # AIRFLOW_CONN_* variables
    secrets_file: dict[str, Any] | None = None  # connections kept by the local filesystem secrets backend only
    in_db: dict[str, Any] | None = None  # the connection the scheduler's session finds
    queue: str = "default"


CASES = [
    Case("environment, JSON", env={"AIRFLOW_CONN_R_SRV": json.dumps({"conn_type": "mysql", "extra": {"queue": "q_env"}})},
         queue="q_env"),
    Case("environment, URI", env={"AIRFLOW_CONN_R_SRV": "mysql://db:3306/?queue=q_uri"}, queue="q_uri"),
    Case("secrets backend only", secrets_file={"r_srv": {"conn_type": "mysql", "host": "db", "extra": {"queue": "q_vault"}}},
         queue="q_vault"),
    Case("metadata database, through the scheduler's session", in_db={"queue": "q_db"}, queue="q_db"),
    Case("the environment before the database", env={"AIRFLOW_CONN_R_SRV": "mysql://db/?queue=q_env"},
         in_db={"queue": "q_db"}, queue="q_env"),
    Case("the secrets backend before the environment", env={"AIRFLOW_CONN_R_SRV": "mysql://db/?queue=q_env"},
         secrets_file={"r_srv": {"conn_type": "mysql", "extra": {"queue": "q_vault"}}}, queue="q_vault"),
    Case("nowhere", queue="default"),
    Case("connection without a queue", env={"AIRFLOW_CONN_R_SRV": "mysql://db/"}, queue="default"),
    Case("unreadable environment value", env={"AIRFLOW_CONN_R_SRV": "{not json"}, queue="default"),
]


IN_DB = [c for c in CASES if c.in_db is not None]
NOT_IN_DB = [c for c in CASES if c.in_db is None]


@pytest.mark.parametrize("case", NOT_IN_DB, ids=[c.name for c in NOT_IN_DB])
def test_a_servers_task_gets_the_queue_of_its_connection_wherever_airflow_keeps_it(case: Case, tmp_path: Path, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_R_SRV", raising=False)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    if case.secrets_file is not None:
        path = tmp_path / "connections.json"
        path.write_text(json.dumps(case.secrets_file))
        monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND", "airflow.secrets.local_filesystem.LocalFilesystemBackend")
        monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND_KWARGS", json.dumps({"connections_file_path": str(path)}))
    routing._CACHE.clear()
    assert routing.connection_extras("r_srv", None).get("queue", "default") == case.queue


@pytest.mark.parametrize("case", IN_DB, ids=[c.name for c in IN_DB])
def test_a_connection_in_the_metadata_db_is_read_through_the_schedulers_session(case: Case, airflow_db, monkeypatch):
    """On the suite's migrated metadata DB, a real session in the middle of its transaction, as the scheduler's is."""
    monkeypatch.delenv("AIRFLOW_CONN_R_SRV", raising=False)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    routing._CACHE.clear()
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    with create_session() as setup:
        setup.query(Connection).filter(Connection.conn_id == "r_srv").delete()
        setup.add(Connection(conn_id="r_srv", conn_type="mysql", host="db", extra=json.dumps(case.in_db)))
    try:
        with create_session() as scheduler:  # the scheduler's session, mid-transaction
            scheduler.execute(__import__("sqlalchemy").text("SELECT 1"))
            extras = routing.connection_extras("r_srv", scheduler)
            assert scheduler.in_transaction() and scheduler.is_active  # neither committed nor closed under it
        assert extras.get("queue", "default") == case.queue
    finally:
        with create_session() as cleanup:
            cleanup.query(Connection).filter(Connection.conn_id == "r_srv").delete()


def test_a_lookup_in_which_a_backend_failed_is_not_kept(monkeypatch):
    """A secrets backend down for a moment routes to the default queue for that moment only: the next task
    instance asks again and gets the server's queue."""
    from airflow.secrets.environment_variables import EnvironmentVariablesBackend

    real = EnvironmentVariablesBackend.get_connection
    calls = {"n": 0}

    def flaky(self, conn_id):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("the backend is down")
        return real(self, conn_id)

    monkeypatch.setenv("AIRFLOW_CONN_R_SRV", "mysql://db/?queue=q_env")
    monkeypatch.setattr(EnvironmentVariablesBackend, "get_connection", flaky)
    routing._CACHE.clear()
    assert routing.connection_extras("r_srv", None) == {}
    assert routing.connection_extras("r_srv", None).get("queue") == "q_env"


def test_without_the_schedulers_session_the_database_is_not_asked(monkeypatch):
    """The policy opens no session of its own: Airflow's would be the scheduler's scoped one, committed and
    closed under it."""
    from airflow.secrets.metastore import MetastoreBackend

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the metadata database was asked without the scheduler's session")

    monkeypatch.delenv("AIRFLOW_CONN_R_SRV", raising=False)
    monkeypatch.setattr(MetastoreBackend, "get_connection", refuse)
    routing._CACHE.clear()
    assert routing.connection_extras("r_srv", None) == {}


def test_route_sets_the_queue_of_a_connection_kept_only_in_a_secrets_backend(tmp_path: Path, monkeypatch):
    """The policy end to end on a task marked `on_server`: the run names the server, the backend has it."""
    from airflow.models.dagrun import DagRun

    path = tmp_path / "connections.json"
    path.write_text(json.dumps({"r_vault": {"conn_type": "mysql", "host": "db", "extra": {"queue": "near_vault"}}}))
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND", "airflow.secrets.local_filesystem.LocalFilesystemBackend")
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND_KWARGS", json.dumps({"connections_file_path": str(path)}))
    routing._CACHE.clear()
    task = SimpleNamespace(params={"target_conn_id": "lastline_target"})
    ti = SimpleNamespace(task=task, executor_config=routing.on_server("target_conn_id")["executor_config"],
                         queue="default", pool="default_pool")
    routing.route(ti, DagRun(dag_id="d", run_id="r", conf={"target_conn_id": "r_vault"}))
    assert ti.queue == "near_vault" and ti.pool == "default_pool"  # a transient run: no session, no pool
