"""A restore onto a non-empty target with the form's defaults (force off) waits for a person's approval where the
deployment asks for one, and replaces the data once approved; a rejection touches nothing; where no person is asked,
only force replaces. Real servers and real DAG runs (dag.test), the approval answered in Airflow's own table as the
UI's Required actions page would answer it."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from lastline.core.errors import PreflightError
from lastline.logical.backup import stages as logical_backup
from lastline.logical.restore import stages as logical_restore
from lastline_dev.compare import table_checksums

pytestmark = pytest.mark.e2e


class Approver:
    """A person at the Required actions page: answers the first approval request that appears with `choice`,
    once `check()` (what must hold while the run waits: nothing touched) has run; keeps what was asked."""

    def __init__(self, choice: str, check=None) -> None:
        self.choice, self.check = choice, check or (lambda: None)
        self.asked: dict = {}
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState

        try:
            while not self._stop.is_set() and not self._answer():
                time.sleep(0.5)
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread; the run must not wait for ever
            self.error = exc
            with create_session() as session:
                for ti in session.query(TaskInstance).filter(TaskInstance.state == TaskInstanceState.AWAITING_INPUT):
                    ti.state = TaskInstanceState.FAILED

    def _answer(self) -> bool:
        """Answer the approval waiting, if one is; whether one was."""
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
        from airflow.api_fastapi.core_api.datamodels.hitl import UpdateHITLDetailPayload
        from airflow.api_fastapi.core_api.routes.public.hitl import update_hitl_detail
        from airflow.models.hitl import HITLDetail
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState

        with create_session() as session:
            found = (session.query(TaskInstance, HITLDetail).join(HITLDetail, HITLDetail.ti_id == TaskInstance.id)
                     .filter(TaskInstance.state == TaskInstanceState.AWAITING_INPUT).first())
            if found is None:
                return False
            ti, ask = found
            self.asked = {"subject": ask.subject, "body": ask.body, "options": list(ask.options)}
            where = {"dag_id": ti.dag_id, "dag_run_id": ti.run_id, "task_id": ti.task_id, "map_index": ti.map_index}
        choice = self.choice
        try:
            self.check()
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread; the run ends rejected
            self.error, choice = exc, "Reject"
        with create_session() as session:  # the REST API's own answer (PATCH .../hitlDetails), as Required actions sends it
            update_hitl_detail(**where, update_hitl_detail_payload=UpdateHITLDetailPayload(chosen_options=[choice]),
                               user=SimpleAuthManagerUser(username="dba", role="admin"), session=session)
        return True

    def __enter__(self) -> Approver:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(timeout=30)
        if self.error:
            raise self.error


@pytest.fixture
def asks(monkeypatch):
    """The deployment asks a person before a restore replaces data (the suite's default is not to)."""
    monkeypatch.setenv("LASTLINE_APPROVAL", "true")


@pytest.fixture(scope="module")
def store_backup(logical_source, tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("approval")
    logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["store"]}))
    return dest


def _conf(dest: Path, **kw) -> dict:
    """The form's defaults (force off), every Param spelled out (dag.test in one process can carry a run's values
    into the next)."""
    return {"target_conn_id": "t_ltarget", "backup": f"file://{dest}/latest", "databases": [], "parallel": 2,
            "tune": True, "restart_allowed": False, "defer_indexes": True, "force": False, "redo_log_bytes": 128 << 20,
            "aws_conn_id": None, **kw}


def _occupied(target) -> list:
    """The target's store is not empty: a table of its own the backup does not hold; returns its tables' checksums."""
    with target.server().session() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS store")
        cur.execute("CREATE TABLE IF NOT EXISTS store.precious (id INT PRIMARY KEY)")
        cur.execute("REPLACE INTO store.precious VALUES (1)")
        cur.connection.commit()
    return _store(target)


def _store(inst) -> dict:
    return {k: v for k, v in table_checksums(inst.server()).items() if k.startswith("store.")}


def test_a_logical_restore_with_the_form_s_defaults_waits_for_approval_then_replaces(
        run_dag, store_backup, logical_source, logical_target, asks):
    before = _occupied(logical_target)
    plan = logical_restore.preflight(_conf(store_backup))
    assert plan.at_risk and plan.at_risk["databases"] == ["store"] and plan.at_risk["force"] is False
    assert plan.force  # once approved, the stages after the approval replace as force would

    def untouched() -> None:  # while the run waits, the target is as it was
        assert _store(logical_target) == before

    with Approver("Reject", untouched) as person:
        state, tis, _logs = run_dag("logical_restore", _conf(store_backup))
    assert state == "failed" and tis["approve"] == "failed" and tis["snapshot_config"] == "upstream_failed", tis
    assert _store(logical_target) == before  # a rejection touches nothing
    assert not logical_target.server().query("SHOW DATABASES LIKE 'lastline\\_aside%'")
    assert person.asked["options"] == ["Approve", "Reject"]
    assert "`store.precious`" in person.asked["body"] and "**without force**" in person.asked["body"]

    with Approver("Approve", untouched):
        state, tis, logs = run_dag("logical_restore", _conf(store_backup))
    assert state == "success", tis
    assert "verify ok" in logs
    assert _store(logical_target) == _store(logical_source)  # verified by the run, and checked here again
    assert not logical_target.server().query("SHOW TABLES IN store LIKE 'precious'")  # replaced, as force would


def test_without_approval_asked_only_force_replaces(store_backup, logical_target, monkeypatch):
    from conftest import set_conn

    monkeypatch.setenv("LASTLINE_APPROVAL", "false")
    _occupied(logical_target)
    with pytest.raises(PreflightError, match=r"store already exist .*LASTLINE_APPROVAL is false\): set force to replace "
                                             r"it without asking \(an unattended run\), or set LASTLINE_APPROVAL=true"):
        logical_restore.preflight(_conf(store_backup))
    set_conn("t_la_no", logical_target, approval=False)  # the connection's own no, whatever the deployment says
    monkeypatch.setenv("LASTLINE_APPROVAL", "true")
    with pytest.raises(PreflightError, match=r"extra \"approval\" is false\): set force .* or set \"approval\": true"):
        logical_restore.preflight(_conf(store_backup, target_conn_id="t_la_no"))
    forced = logical_restore.preflight(_conf(store_backup, target_conn_id="t_la_no", force=True))
    assert forced.force and forced.at_risk is None  # force, where no one is asked: replaced without a question
    asked = logical_restore.preflight(_conf(store_backup, force=True))
    assert asked.force and asked.at_risk and asked.at_risk["force"] is True  # force on, approval on: asked as before


@pytest.fixture(scope="module")
def physical_backup(source, tmp_path_factory) -> Path:
    from lastline.physical import backup as physical_backup_stages

    dest = tmp_path_factory.mktemp("approval-physical")
    plan = physical_backup_stages.preflight({"source_conn_id": "t_source", "destination": f"file://{dest}", "compression": "zstd"})
    physical_backup_stages.finish(plan, physical_backup_stages.stream(plan))
    return dest


def test_a_physical_restore_with_the_form_s_defaults_waits_for_approval_then_replaces(
        run_dag, physical_backup, source, target, asks, monkeypatch):
    from lastline.physical import restore as physical_restore

    conf = {"target_conn_id": "t_target", "backup": f"file://{physical_backup}/latest", "force": False}
    with target.server().session() as cur:  # what the target holds: its own table, which the backup does not
        cur.execute("CREATE DATABASE IF NOT EXISTS own")
        cur.execute("CREATE TABLE IF NOT EXISTS own.precious (id INT PRIMARY KEY)")
        cur.execute("REPLACE INTO own.precious VALUES (1)")
        cur.connection.commit()
    before = table_checksums(target.server())
    asides = set(Path(target.datadir).parent.glob("data.lastline-aside-*"))  # what earlier restores of the suite left
    plan = physical_restore.preflight(conf)
    assert plan.datadir_state == "data" and plan.at_risk and plan.at_risk["force"] is False and plan.force

    def untouched() -> None:
        assert table_checksums(target.server()) == before

    with Approver("Reject", untouched) as person:
        state, tis, _logs = run_dag("physical_restore", conf)
    assert state == "failed" and tis["approve"] == "failed" and tis["stop_target"] == "upstream_failed", tis
    assert table_checksums(target.server()) == before  # a rejection touches nothing: the server still runs on it
    assert set(Path(target.datadir).parent.glob("data.lastline-aside-*")) == asides
    assert "`own.precious`" in person.asked["body"] and "**without force**" in person.asked["body"]
    assert "the whole datadir" in person.asked["body"]

    with Approver("Approve", untouched):
        state, tis, logs = run_dag("physical_restore", conf)
    assert state == "success", tis
    assert table_checksums(target.server()) == table_checksums(source.server())  # own.precious went with the datadir
    assert set(Path(target.datadir).parent.glob("data.lastline-aside-*")) == asides  # its own deleted once verified

    monkeypatch.setenv("LASTLINE_APPROVAL", "false")  # an unattended deployment: only force replaces
    with pytest.raises(PreflightError, match=r"is not empty, and no person is asked .*LASTLINE_APPROVAL is false\): "
                                             r"set force to replace it without asking"):
        physical_restore.preflight(conf)
    assert physical_restore.preflight({**conf, "force": True}).at_risk is None


def test_a_replica_rebuild_onto_data_waits_for_approval_too(source, target, asks, monkeypatch):
    """The rebuild replaces the replica's whole datadir as a physical restore does: the same rule, and the approval
    names what replaces it (a fresh copy of the source, not a backup)."""
    from lastline.airflow.approval import body, subject
    from lastline.replication import rebuild as replica_rebuild

    conf = {"source_conn_id": "t_source", "target_conn_id": "t_target", "replication_conn_id": "t_source", "force": False}
    plan = replica_rebuild.preflight(conf)
    assert plan.datadir_state == "data" and plan.at_risk and plan.at_risk["force"] is False and plan.force
    asked = plan.to_dict()
    assert subject(asked).endswith(f"with a fresh copy of {plan.at_risk['source']}?")
    assert "**A fresh copy of** t_source" in body(asked) and "**without force**" in body(asked)
    monkeypatch.setenv("LASTLINE_APPROVAL", "false")
    with pytest.raises(PreflightError, match=r"is not empty, and no person is asked .*: set force to replace it"):
        replica_rebuild.preflight(conf)
    assert replica_rebuild.preflight({**conf, "force": True}).at_risk is None


def test_a_database_written_while_the_approval_waited_is_not_replaced(store_backup, logical_target, asks):
    """The approval lists the databases non-empty at preflight; a database of the restore that was empty then and holds
    tables when the schema step starts (an application wrote there during the wait) was never shown to anyone: the
    schema step refuses before anything is set aside. The same without an approval: only force replaces."""
    from lastline.core.errors import Refusal
    from lastline.logical.restore.target_state import refuse_unapproved

    with logical_target.server().session() as cur:
        cur.execute("DROP DATABASE IF EXISTS store")
        cur.connection.commit()
    plan = logical_restore.preflight(_conf(store_backup))
    assert plan.at_risk is None and not plan.force  # nothing to replace: nobody is asked
    _occupied(logical_target)  # ... and then something writes there before the schema step
    with logical_target.server().session() as cur:
        with pytest.raises(Refusal, match=r"store hold tables now but were empty when the restore was planned: nothing"):
            refuse_unapproved(cur, plan.databases, plan.force, plan.at_risk)
        approved = {"force": False, "replaces": ["store"]}
        refuse_unapproved(cur, ["store"], True, approved)  # what the approval listed: replaced
        with pytest.raises(Refusal, match=r"empty when the restore was planned and approved"):
            refuse_unapproved(cur, ["store"], True, {"force": False, "replaces": []})
        refuse_unapproved(cur, ["store"], True, {"force": True, "replaces": []})  # force as asked: every database
    assert "store.precious" in _store(logical_target)  # nothing was touched
    src = Path(logical_restore.__file__).with_name("create.py").read_text()
    assert "refuse_unapproved(cur, plan.databases, plan.force, plan.at_risk)" in src.split("set_aside(cur, db)")[0]
