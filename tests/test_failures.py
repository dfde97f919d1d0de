"""A failed run explains itself where the user looks: the task's log opens its error with the whole reason, the run's
report (the Report tab) leads with the failed task, its reason, what to do and a link to its log, and the failure
alert reaches its webhook with that reason (under `dags test`, whose DAG callback gets the serialized DAG)."""
from __future__ import annotations

import importlib.util
import json
import re
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

import pytest

from lastline.manifest import PhysicalManifest, TableInfo, write_manifest
from lastline.storage import open_storage

MISSING = "20261128T161432Z-7c93b6"


@pytest.fixture
def plugin():
    """The report plugin's FastAPI app, called with a TestClient; Airflow's access check (a logged-in user who may
    read the DAG: proven against the real api-server in test_distributed) answered yes."""
    from fastapi.testclient import TestClient

    spec = importlib.util.spec_from_file_location("lastline_reports", Path(__file__).parents[1] / "plugins" / "lastline_reports.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.app.dependency_overrides[module.READ[0].dependency] = lambda: None
    return TestClient(module.app)


def test_a_failed_run_saves_what_failed_and_its_report_tab_leads_with_it(run_dag, target, webhook, plugin, tmp_path,
                                                                       monkeypatch, caplog):
    from lastline import reports

    monkeypatch.setenv("LASTLINE_REPORT_DIR", str(tmp_path / "reports"))
    dest = tmp_path / "dest"
    near = "20261128T151432Z-0a1b2c"  # a complete backup an hour before the one asked for
    write_manifest(open_storage(f"file://{dest}"), PhysicalManifest(
        backup_id=near, source_conn_id="src", server_version="10.11.19", tool_version="10.11.19",
        artifact="backup.xbstream.zst", compression="zstd", bytes=10, sha256="ab", started_at="s", finished_at="f",
        seconds=1.0, mb_per_s=1.0, parallel=2, datadir_bytes=100, tables=[TableInfo("a", "b", "InnoDB", 1, 2)]))
    state, tis, logs = run_dag("physical_restore", {"target_conn_id": "t_target", "backup": f"file://{dest}/{MISSING}",
                                                    "force": True})
    assert state == "failed" and tis["preflight"] == "failed", tis
    reason = (f"there is no backup {MISSING} in file://{dest}. The complete physical backups nearest to it: {near} "
              f"(60 min earlier). Name one of them (<destination>/<backup_id>) or use file://{dest}/latest.")
    # the log: one ERROR line with the whole reason, before Airflow's "Task failed" and its traceback
    # (lastline's log record is caught by caplog, Airflow's task log is on stdout: their times say which came first)
    (said,) = [r for r in caplog.records if r.name == "lastline.airflow.failures" and r.levelname == "ERROR"]
    failed = next(line for line in logs.splitlines() if "Task failed with exception" in line)
    failed_at = datetime.fromisoformat(re.search(r"\d{4}-\d\d-\d\dT[\d:.]+Z", failed).group().replace("Z", "+00:00"))
    assert said.getMessage() == reason and said.created < failed_at.timestamp()
    # the alert: sent (not crashed on the serialized DAG), naming the task and its reason
    assert "get_template_env" not in logs and "Callback failed" not in logs
    alert = webhook.wait_for("failed", timeout=30)
    assert alert["task_id"] == "preflight" and alert["reason"] == reason and "nothing was touched" in alert["text"]

    (run_dir,) = (tmp_path / "reports" / "physical_restore").iterdir()
    recorded = json.loads((run_dir / "failed.json").read_text())["failures"]
    run_id = recorded[0]["run_id"]
    failed_md = reports.read("physical_restore", run_id, "failed.md").decode()
    assert failed_md.startswith("# Failed: task `preflight`") and f"**Reason:** {reason}" in failed_md
    log_path = f"/dags/physical_restore/runs/{quote(run_id, safe='')}/tasks/preflight"
    assert f"`{log_path}`" in failed_md

    page = plugin.get(f"/reports/physical_restore/{quote(run_id, safe='')}")
    assert page.status_code == 200
    body = page.text.split("<body>", 1)[1]
    assert body.index("Failed: task <code>preflight</code>") < body.index("nothing was touched")
    assert reason.replace("<", "&lt;").replace(">", "&gt;") in body and f'href="{log_path}"' in body
    assert "saved no report" in body  # and says that no other report follows

    # a half-done run: the failure first, then what its steps saved
    reports.save("physical_restore", run_id, {"physical_restore.md": "# Restored 3 tables\n"})
    body = plugin.get(f"/reports/physical_restore/{quote(run_id, safe='')}").text
    assert body.index("Failed: task <code>preflight</code>") < body.index("Restored 3 tables") and "saved no report" not in body

    # a run whose failed task saved nothing (a process killed): the page still names it, from Airflow's database
    monkeypatch.setenv("LASTLINE_REPORT_DIR", str(tmp_path / "elsewhere"))
    page = plugin.get(f"/reports/physical_restore/{quote(run_id, safe='')}")
    assert page.status_code == 200 and "Failed: task <code>preflight</code>" in page.text and f'href="{log_path}"' in page.text
    assert "ended without an error" in page.text
    assert plugin.get("/reports/physical_restore/no_such_run").status_code == 404


def test_a_failure_is_said_once_whole_and_airflow_control_flow_is_not(caplog):
    """A step inside a task (typed_call in a sensor) says its reason once; a multi-line message is one line; an
    error that is not lastline's carries its kind; a skip is no error."""
    from airflow.sdk.exceptions import AirflowSkipException

    from lastline.airflow.failures import explained
    from lastline.core.errors import IntegrityError

    def fail(exc: BaseException):
        def run():
            raise exc
        return run

    for exc, said in ((IntegrityError("the manifest\n  is damaged"), ["the manifest is damaged"]),
                      (KeyError("plan"), ["KeyError: 'plan'"]), (AirflowSkipException("nothing to do"), [])):
        caplog.clear()
        with pytest.raises(type(exc)):
            explained(explained(fail(exc)))()
        assert [r.getMessage() for r in caplog.records if r.name == "lastline.airflow.failures"] == said
