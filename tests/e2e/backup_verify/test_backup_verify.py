"""backup_verify as Airflow runs it (dag.test) on a destination holding a real physical and logical backup and the
binlog archive of the suite's source: a whole destination passes, one instance of verify_backup per backup; a flipped
byte in a chunk and a flipped byte in an archived segment fail the run at once, named in its Report and its alert,
the task that found it red (a refusal, never retried) and its verdict still in the report; such a run, cleared once
the storage is put right, reads again only the backup whose task failed."""
from __future__ import annotations

import pytest
from tests.unit.verify.destination import Made, take

from lastline import reports
from lastline.manifest import read_manifest
from lastline.storage import open_storage
from lastline.verify import report

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def made(source, tmp_path_factory) -> Made:
    return take(source, tmp_path_factory.mktemp("verify-dag") / "dest")


def _page(destination: str) -> str:
    entry = next(e for e in reversed(reports.history(report.HISTORY)) if e["destination"] == destination)
    return reports.read("backup_verify", entry["run_id"], "backup_verify.md").decode()


def _names(page: str) -> list[str]:
    """The rendered names of the verify_backup instances of the run whose report is `page`."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    run_id = next(e["run_id"] for e in reversed(reports.history(report.HISTORY)) if e["destination"] in page)
    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id="backup_verify", run_id=run_id, task_id="verify_backup").all()
        return sorted(str(ti.rendered_map_index) for ti in tis)


def test_a_whole_destination_passes(made, run_dag, tmp_path):
    folder = made.copy(tmp_path / "d")
    state, states, _ = run_dag("backup_verify", {"destination": f"file://{folder}", "aws_conn_id": None})
    assert state == "success", states
    assert states["verify_backup[0]"] == states["verify_backup[1]"] == states["verify_archive"] == "success"
    page = _page(f"file://{folder}")
    assert page.startswith(f"# Backup verify of file://{folder}: every backup ok")
    assert _names(page) == sorted([made.physical, made.logical])  # each instance named in the Grid by its backup
    assert f"| {made.physical} | physical | ok |" in page and f"| {made.logical} | logical | ok |" in page


def test_a_destination_without_backups_passes_with_nothing_to_read(run_dag, tmp_path):
    (tmp_path / "empty").mkdir()
    state, states, _ = run_dag("backup_verify", {"destination": f"file://{tmp_path / 'empty'}", "aws_conn_id": None})
    assert state == "success" and states["verify_backup"] == "skipped" and states["report"] == "success", states
    assert "every backup ok (0 backups, 0 bytes read back)" in _page(f"file://{tmp_path / 'empty'}")


def test_damage_fails_the_run_names_the_files_and_alerts(made, run_dag, webhook, tmp_path):
    folder = made.copy(tmp_path / "d")
    chunk = next(f.name for f in read_manifest(open_storage(f"file://{folder}"), made.logical, "logical").files
                 if f.name.startswith("data/"))
    segment = next(p for p in (folder / "binlogs").rglob("0*") if p.is_file())
    for path in (folder / made.logical / chunk, segment):
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x04
        path.write_bytes(bytes(data))
    state, states, log = run_dag("backup_verify", {"destination": f"file://{folder}", "aws_conn_id": None})
    assert state == "failed" and states["report"] == "failed"
    order = sorted([made.physical, made.logical])  # the map indexes: the plan's backups, oldest first
    expected = {f"verify_backup[{i}]": "failed" if b == made.logical else "success" for i, b in enumerate(order)}
    assert {k: states[k] for k in expected} == expected and states["verify_archive"] == "failed", states  # red where found
    page = _page(f"file://{folder}")
    assert f"backup {made.logical} is damaged: {chunk}: digest" in page
    assert f"the binlog archive is damaged: {segment.relative_to(folder)}: digest" in page
    assert f"| {made.physical} | physical | ok |" in page  # the other backup is not blamed
    alert = webhook.wait_for("verify_failed", timeout=10)
    assert chunk in alert["text"] and alert["dag_id"] == "backup_verify" and alert["problems"]


def _resume(dag, run_id: str) -> str:
    """What an operator's Clear of a run's failed tasks does, with the scheduler's loop as dag.test runs it: the failed
    and upstream-failed task instances cleared (the others keep their state and their XComs), the run set running, and
    every instance that becomes ready run until the run ends. Returns the run's state."""
    import time

    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import clear_task_instances
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState

    with create_session() as session:
        dr = session.query(DagRun).filter_by(dag_id=dag.dag_id, run_id=run_id).one()
        dr.dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
        failed = [ti for ti in dr.get_task_instances(session=session)
                  if ti.state in (TaskInstanceState.FAILED, TaskInstanceState.UPSTREAM_FAILED)]
        assert failed
        clear_task_instances(failed, session, dag_run_state=DagRunState.RUNNING)
        session.commit()
        deadline = time.monotonic() + 300
        while dr.state == DagRunState.RUNNING:
            assert time.monotonic() < deadline, "the cleared run did not end in 300 s"
            session.expire_all()
            ready, _ = dr.update_state(session=session)
            for ti in ready:
                ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            for ti in [t for t in dr.get_task_instances(session=session) if t.state == TaskInstanceState.SCHEDULED]:
                _run_task(ti=ti, task=dag.task_dict[ti.task_id])
        return str(dr.state)


def _instances(run_id: str) -> dict[int, tuple]:
    """verify_backup's instances of `run_id`: map index -> (state, try number, end)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        return {ti.map_index: (str(ti.state), ti.try_number, ti.end_date) for ti in session.query(TaskInstance).filter_by(
            dag_id="backup_verify", run_id=run_id, task_id="verify_backup")}


def test_a_run_cleared_after_a_failure_reads_again_only_the_backups_whose_task_did_not_finish(made, run_dag, dagbag,
                                                                                              tmp_path):
    """Issue 46: a run whose reading of one backup failed (as a killed task ends: failed), cleared once the storage is
    put right, reads that backup again and not the other, whose verdict its report takes from the first try."""
    folder = made.copy(tmp_path / "d")
    chunk = next(f.name for f in read_manifest(open_storage(f"file://{folder}"), made.logical, "logical").files
                 if f.name.startswith("data/"))
    path = folder / made.logical / chunk
    original = path.read_bytes()
    path.write_bytes(original[:-1] + bytes([original[-1] ^ 0x01]))
    state, _, _ = run_dag("backup_verify", {"destination": f"file://{folder}", "aws_conn_id": None})
    assert state == "failed"
    run_id = next(e["run_id"] for e in reversed(reports.history(report.HISTORY)) if e["destination"] == f"file://{folder}")
    order = sorted([made.physical, made.logical])
    bad, good = order.index(made.logical), order.index(made.physical)
    first = _instances(run_id)
    assert first[bad][0] == "failed" and first[good][0] == "success", first
    path.write_bytes(original)  # the storage put right
    assert _resume(dagbag.get_dag("backup_verify"), run_id) == "success"
    second = _instances(run_id)
    assert second[good] == first[good], (first, second)  # not run again: same try, same end
    assert second[bad][0] == "success" and second[bad][1] == first[bad][1] + 1, (first, second)
    page = _page(f"file://{folder}")
    assert f"| {made.physical} | physical | ok |" in page and f"| {made.logical} | logical | ok |" in page
