"""reports: where run reports go (LASTLINE_REPORTS, else a folder), one safe folder per run, the index that lists
what a run saved (in order, `lead` files first), the file names a report may hold, and a capped history."""
from __future__ import annotations

import pytest

from lastline import reports
from lastline.core.errors import StorageError


@pytest.fixture
def home(monkeypatch, tmp_path):
    """Reports in a folder of their own under tmp_path."""
    monkeypatch.delenv("LASTLINE_REPORTS", raising=False)
    monkeypatch.setenv("LASTLINE_REPORT_DIR", str(tmp_path / "reports"))
    return tmp_path / "reports"


@pytest.mark.parametrize(("env", "expected"), [
    ({"LASTLINE_REPORTS": "s3://b/reports", "LASTLINE_REPORT_DIR": "/r"}, "s3://b/reports"),
    ({"LASTLINE_REPORT_DIR": "/r"}, "file:///r"),
    ({"AIRFLOW_HOME": "/af"}, "file:///af/lastline-reports"),
], ids=["explicit-url", "report-dir", "under-airflow-home"])
def test_url(monkeypatch, env, expected):
    for name in ("LASTLINE_REPORTS", "LASTLINE_REPORT_DIR", "AIRFLOW_HOME"):
        monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert reports.url() == expected


@pytest.mark.parametrize(("dag_id", "run_id", "key"), [
    ("logical_backup", "manual__2026-11-23T19:00:00+00:00", "logical_backup/manual__2026-11-23T19_00_00+00_00"),
    ("d", "../../etc", "d/_.._etc"),
    ("d", "..", "d/run"),
    ("d/x", "a b", "d_x/a_b"),
], ids=["airflow-run-id", "no-climbing-out", "dots-only", "slash-and-space"])
def test_folder_is_one_safe_segment_per_part(dag_id, run_id, key):
    assert reports.folder(dag_id, run_id) == key


def test_save_lists_files_in_order_and_lead_files_go_first(home):
    location = reports.save("d", "r1", {"a.md": "# A", "b.json": b"{}"})
    assert location.endswith("/d/r1")
    reports.save("d", "r1", {"a.md": "# A again", "c.svg": "<svg/>"})
    assert reports.names("d", "r1") == ["a.md", "b.json", "c.svg"]
    reports.save("d", "r1", {"v.md": "verdict"}, lead=True)
    assert reports.names("d", "r1") == ["v.md", "a.md", "b.json", "c.svg"]
    assert reports.read("d", "r1", "a.md") == b"# A again"
    assert reports.names("d", "other") == []


@pytest.mark.parametrize("name", ["x.html", "../x.md", "index.json", "noext"], ids=["html", "path", "the-index", "no-suffix"])
def test_save_refuses_what_a_report_may_not_hold(home, name):
    with pytest.raises(StorageError, match="a plain name ending in"):
        reports.save("d", "r1", {name: "x"})
    with pytest.raises(StorageError, match="a plain name ending in"):
        reports.save_aside("d", "r1", name, "x")


def test_read_serves_only_what_the_index_lists(home):
    reports.save_aside("d", "r1", "task.json", '{"failed": true}')
    assert reports.read_aside("d", "r1", "task.json") == b'{"failed": true}'
    assert reports.read_aside("d", "r1", "missing.json") is None
    assert reports.read_aside("d", "r1", "../task.json") is None
    with pytest.raises(FileNotFoundError, match="task.json is not in the report of d run r1"):
        reports.read("d", "r1", "task.json")


def test_history_appends_and_keeps_the_newest(home):
    assert reports.history("restore_drill") == []
    for n in range(5):
        entries = reports.append_history("restore_drill", {"n": n}, keep=3)
    assert entries == [{"n": 2}, {"n": 3}, {"n": 4}]
    assert reports.history("restore_drill") == entries
