"""airflow.form_freshness on a real metadata DB (the suite's `airflow_db`): request_parse asks once for each form's
file that has no request pending, and the listener asks only after a backup DAG's run."""
from __future__ import annotations

import pytest

from lastline.airflow import form_freshness

BUNDLE = "unit_form_freshness"
FORMS = ("unit_ff_restore", "unit_ff_drill", "unit_ff_unparsed")


@pytest.fixture
def forms(airflow_db):
    """Three DAGs of a bundle of their own (one never parsed: no file); removed again afterwards."""
    from airflow.models.dag import DagModel
    from airflow.models.dagbag import DagPriorityParsingRequest
    from airflow.models.dagbundle import DagBundleModel
    from airflow.utils.session import create_session

    with create_session() as session:
        session.add(DagBundleModel(name=BUNDLE))
        session.flush()
        for dag_id in FORMS:
            loc = None if dag_id == "unit_ff_unparsed" else f"{dag_id}.py"
            session.add(DagModel(dag_id=dag_id, bundle_name=BUNDLE, relative_fileloc=loc, max_active_tasks=1,
                                 max_consecutive_failed_dag_runs=0, has_task_concurrency_limits=False))
    yield create_session
    with create_session() as session:
        session.query(DagPriorityParsingRequest).filter(DagPriorityParsingRequest.bundle_name == BUNDLE).delete()
        session.query(DagModel).filter(DagModel.dag_id.in_(FORMS)).delete()
        session.query(DagBundleModel).filter(DagBundleModel.name == BUNDLE).delete()


def _pending(create_session) -> list[str]:
    from airflow.models.dagbag import DagPriorityParsingRequest

    with create_session() as session:
        return sorted(r.relative_fileloc for r in session.query(DagPriorityParsingRequest)
                      .filter(DagPriorityParsingRequest.bundle_name == BUNDLE))


def test_request_parse_asks_once_per_file(forms):
    with forms() as session:
        assert form_freshness.request_parse(session, FORMS) == [f"{BUNDLE}:unit_ff_drill.py", f"{BUNDLE}:unit_ff_restore.py"]
    assert _pending(forms) == ["unit_ff_drill.py", "unit_ff_restore.py"]
    with forms() as session:
        assert form_freshness.request_parse(session, FORMS) == []  # pending already: not asked twice
    assert _pending(forms) == ["unit_ff_drill.py", "unit_ff_restore.py"]


def test_request_parse_of_unknown_dags_asks_nothing(forms):
    with forms() as session:
        assert form_freshness.request_parse(session, ("unit_ff_no_such_dag",)) == []
    assert _pending(forms) == []


@pytest.mark.parametrize(("dag_id", "asks"), [("logical_backup", True), ("physical_backup", True), ("logical_restore", False)],
                         ids=["logical-backup", "physical-backup", "not-a-backup"])
def test_the_listener_asks_after_a_backup_run_only(forms, monkeypatch, dag_id, asks):
    from airflow.models.dagrun import DagRun

    monkeypatch.setattr(form_freshness.request_parse, "__defaults__", (FORMS,))  # these DAGs stand for the forms
    # a run not attached to a session: the listener opens its own
    form_freshness.LISTENER.on_dag_run_success(DagRun(dag_id=dag_id, run_id="unit_ff_run"), "success")
    assert _pending(forms) == (["unit_ff_drill.py", "unit_ff_restore.py"] if asks else [])
