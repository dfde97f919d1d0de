"""airflow.failures: a failed task explains itself. Its failure file's name, the reason as one whole line, what to
do by kind of error (a preflight's refusal, a refusal, a transient error retried), the path of its log in Airflow's UI
and the Markdown a person reads; the reason said once in the log, masked as Airflow masks its logs, and the failures
of mapped lanes failing at once each kept. No server: a report folder."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from lastline.airflow import failures
from lastline.core.errors import IntegrityError, LastlineError, PreflightError


@pytest.mark.parametrize(("task_id", "map_index", "ext", "name"), [
    ("dump", -1, ".json", "failed-dump.json"), ("load", 0, ".json", "failed-load@0.json"),
    ("group.load", 12, ".md", "failed-group.load@12.md"), ("x", -1, "", "failed-x")],
    ids=["a-task", "a-mapped-task", "in-a-group-as-markdown", "no-extension"])
def test_file_name(task_id, map_index, ext, name):
    assert failures.file_name(task_id, map_index, ext) == name


@pytest.mark.parametrize(("exc", "said"), [
    (None, "the task's process ended without an error"),
    (IntegrityError("the manifest\n  is damaged\n"), "the manifest is damaged"),
    (LastlineError(""), "LastlineError"),
    (KeyError("plan"), "KeyError: 'plan'"),
    (RuntimeError(), "RuntimeError"),
    (ValueError("a\n\n\nb " + "c" * 5000), "ValueError: a b " + "c" * 5000),
], ids=["no-exception-a-killed-process", "lastline-s-own-on-one-line", "lastline-s-without-a-message",
        "another-error-with-its-kind", "another-without-a-message", "long-and-many-lines-kept-whole"])
def test_reason(exc, said):
    assert failures.reason(exc).startswith(said)


@pytest.mark.parametrize(("exc", "tries", "task_id", "words"), [
    (PreflightError("x"), 1, "load", "nothing was touched"),
    (IntegrityError("x"), 1, "group.preflight", "nothing was touched"),
    (IntegrityError("x"), 3, "load", "A refusal, not retried"),
    (LastlineError("x"), 3, "load", "a transient error (a connection, a stream, the storage): it was tried 3 times"),
    (RuntimeError("x"), 1, "load", "This was an error: and it failed"),
    (None, 1, "load", "This was an error"),
], ids=["a-preflight-error", "a-refusal-in-a-preflight", "a-refusal-elsewhere", "transient-retried", "another-error",
        "no-exception"])
def test_advice(exc, tries, task_id, words):
    assert words in failures.advice(exc, tries, task_id)


@pytest.mark.parametrize(("dag_id", "run_id", "task_id", "map_index", "path"), [
    ("physical_backup", "manual__2026-11-28T16:14:32+00:00", "dump", -1,
     "/dags/physical_backup/runs/manual__2026-11-28T16%3A14%3A32%2B00%3A00/tasks/dump"),
    ("logical_restore", "r", "lanes.load", 3, "/dags/logical_restore/runs/r/tasks/lanes.load/mapped/3"),
    ("d", "a/b c", "t", 0, "/dags/d/runs/a%2Fb%20c/tasks/t/mapped/0"),
], ids=["a-run-id-with-colons-and-plus", "a-mapped-task", "slash-and-space-quoted"])
def test_log_path(dag_id, run_id, task_id, map_index, path):
    assert failures.log_path(dag_id, run_id, task_id, map_index) == path


def test_markdown_names_each_failed_task():
    entries = [{"task_id": "dump", "reason": "r1", "what_to_do": "w1", "log": "/l1"},
               {"task_id": "load", "map_index": 2, "reason": "r2", "what_to_do": "w2", "log": "/l2"}]
    text = failures.markdown(entries)
    assert [line for line in text.splitlines() if line.startswith("# ")] == ["# Failed: task `dump`", "# Failed: task `load[2]`"]
    assert "**Reason:** r2" in text and "**What to do:** w1" in text and "`/l2` in Airflow's UI" in text
    assert failures.markdown([]) == ""


def test_a_process_that_died_is_recorded_without_an_exception(tmp_path, monkeypatch):
    monkeypatch.setenv("LASTLINE_REPORT_DIR", str(tmp_path / "reports"))
    monkeypatch.delenv("LASTLINE_REPORTS", raising=False)
    ti = SimpleNamespace(dag_id="physical_backup", run_id="scheduled__x", task_id="copy", map_index=None, try_number=2)
    failures.record({"ti": ti})
    said = failures.recorded("physical_backup", "scheduled__x", "copy")
    assert said is not None and said["kind"] == "" and said["tries"] == 2 and said["log"].endswith("/tasks/copy")
    assert said["reason"].startswith("the task's process ended without an error")
    assert json.loads((tmp_path / "reports" / "physical_backup" / "scheduled__x" / "failed-copy.json").read_text()) == said
    assert failures.recorded("physical_backup", "scheduled__x", "other") is None


def test_a_record_that_cannot_be_saved_never_raises(tmp_path, monkeypatch):
    monkeypatch.delenv("LASTLINE_REPORTS", raising=False)
    monkeypatch.setenv("LASTLINE_REPORT_DIR", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("not a folder")
    failures.record({"ti": SimpleNamespace(dag_id="d", run_id="r", task_id="t"), "exception": RuntimeError("x")})
    failures.record({})  # no task instance at all


def test_a_failure_is_said_once_whole_and_airflow_control_flow_is_not(caplog):
    """A step inside a task (typed_call in a sensor) says its reason once; a multi-line message is one line; an
    error that is not lastline's carries its kind; a skip is no error."""
    from airflow.sdk.exceptions import AirflowSkipException


    def fail(exc: BaseException):
        def run():
            raise exc
        return run

    for exc, said in ((IntegrityError("the manifest\n  is damaged"), ["the manifest is damaged"]),
                      (KeyError("plan"), ["KeyError: 'plan'"]), (AirflowSkipException("nothing to do"), [])):
        caplog.clear()
        with pytest.raises(type(exc)):
            failures.explained(failures.explained(fail(exc)))()
        assert [r.getMessage() for r in caplog.records if r.name == "lastline.airflow.failures"] == said


def test_a_failure_reason_is_masked_as_airflow_masks_its_logs(tmp_path, monkeypatch):
    """A reason holding a connection's password (fetched in the task's process: Airflow registers it with its
    secrets masker) is saved and alerted with the password masked."""
    from airflow.sdk import Connection

    from lastline.airflow.alerts import Alert

    monkeypatch.setenv("LASTLINE_REPORT_DIR", str(tmp_path / "reports"))
    password = "pw-Zq8v1x-4711-leaky"
    monkeypatch.setenv("AIRFLOW_CONN_T_LEAKY", json.dumps({"conn_type": "mysql", "host": "db", "login": "backup",
                                                           "password": password}))
    assert Connection.get("t_leaky").password == password

    ti = SimpleNamespace(dag_id="logical_backup", run_id="manual__leak", task_id="dump", map_index=-1, try_number=1)
    failures.record({"ti": ti, "exception": RuntimeError(f"access denied for backup:{password}@db")})
    folder = tmp_path / "reports" / "logical_backup" / "manual__leak"
    saved = (folder / "failed-dump.json").read_text() + (folder / "failed-dump.md").read_text()
    assert password not in saved and "access denied for backup:***@db" in saved
    details = Alert("failed")._details({"ti": ti, "dag_run": {"dag_id": "logical_backup", "run_id": "manual__leak"}})
    assert details["reason"] == "RuntimeError: access denied for backup:***@db"


def test_lanes_failing_at_once_lose_no_failure_and_no_report(tmp_path, monkeypatch):
    """Mapped lanes that fail together each keep their own failure file, and none drops another task's report from
    the run's index (failure files are not in it)."""
    from concurrent.futures import ThreadPoolExecutor

    from lastline import reports

    monkeypatch.setenv("LASTLINE_REPORT_DIR", str(tmp_path / "reports"))

    def lane(i: int) -> None:
        ti = SimpleNamespace(dag_id="logical_restore", run_id="manual__lanes", task_id="load", map_index=i, try_number=1)
        failures.record({"ti": ti, "exception": RuntimeError(f"lane {i} lost its connection")})

    def reporting() -> None:  # the run's report steps, one after another, while the lanes fail
        for i in range(8):
            reports.save("logical_restore", "manual__lanes", {f"part{i}.md": f"# part {i}\n"})

    with ThreadPoolExecutor(8) as pool:
        saved = pool.submit(reporting)
        list(pool.map(lane, range(16)))
        saved.result()
    assert reports.names("logical_restore", "manual__lanes") == [f"part{i}.md" for i in range(8)]
    for i in range(16):
        said = failures.recorded("logical_restore", "manual__lanes", "load", i)
        assert said is not None and said["reason"] == f"RuntimeError: lane {i} lost its connection", i
        assert said["log"].endswith(f"/tasks/load/mapped/{i}")
    assert failures.recorded("logical_restore", "manual__lanes", "load") is None  # the unmapped task: its own name
    assert not [n for n in reports.names("logical_restore", "manual__lanes") if n.startswith("failed")]
