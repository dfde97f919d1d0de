"""A failed run explains itself where the user looks: the task's log opens its error with the whole reason, the run's
report (the Report tab) leads with the failed task, its reason, what to do and a link to its log, and the failure
alert reaches its webhook with that reason (under `dags test`, whose DAG callback gets the serialized DAG)."""
from __future__ import annotations

import importlib.util
import json
import re
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
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

    spec = importlib.util.spec_from_file_location("lastline_reports", Path(__file__).resolve().parents[2] / "plugins" / "lastline_reports.py")
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
    recorded = json.loads((run_dir / "failed-preflight.json").read_text())
    run_id = recorded["run_id"]
    assert recorded["task_id"] == "preflight" and recorded["reason"] == reason
    assert reports.names("physical_restore", run_id) == []  # failure files stay out of the run's index
    failed_md = (run_dir / "failed-preflight.md").read_text()
    assert failed_md.startswith("# Failed: task `preflight`") and f"**Reason:** {reason}" in failed_md
    log_path = f"/dags/physical_restore/runs/{quote(run_id, safe='')}/tasks/preflight"
    assert f"`{log_path}`" in failed_md

    page = plugin.get(f"/reports/physical_restore/{quote(run_id, safe='')}")
    assert page.status_code == 200
    body = page.text.split("<body>", 1)[1]
    assert body.index("Failed: task <code>preflight</code>") < body.index("nothing was touched")
    assert reason.replace("<", "&lt;").replace(">", "&gt;") in body
    # the log's link opens in the UI around the sandboxed frame (no target="_top": the sandbox forbids it)
    assert f'<a class="airflow" href="{log_path}">' in body and 'target="_top"' not in body
    assert "function openInAirflow(url)" in body and "window.parent.history.pushState" in body
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


def _ti_failed(run_dag, target, tmp_path, monkeypatch):
    """A physical_restore run whose preflight failed (a backup that is not there): its run id."""
    monkeypatch.setenv("LASTLINE_REPORT_DIR", str(tmp_path / "reports"))
    state, tis, _ = run_dag("physical_restore", {"target_conn_id": "t_target", "force": True,
                                                 "backup": f"file://{tmp_path}/none/{MISSING}"})
    assert state == "failed" and tis["preflight"] == "failed", tis
    (run_dir,) = (tmp_path / "reports" / "physical_restore").iterdir()
    return json.loads((run_dir / "failed-preflight.json").read_text())["run_id"]


def _set_ti(run_id: str, task_id: str, **values) -> None:
    """What Airflow's metadata database holds for a task instance after a person cleared it and it ran again."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(TaskInstance).filter_by(dag_id="physical_restore", run_id=run_id, task_id=task_id).update(values)


def test_the_report_tab_shows_the_tasks_failed_now_and_the_alert_the_task_that_failed_the_run(
        run_dag, target, plugin, tmp_path, monkeypatch):
    """Airflow's database says which tasks failed: a task cleared and passed since is no longer shown (its old file
    stays), one failed again in a later try without saying why shows "see its log", not the old reason; the alert
    names the reason of its own task instance, not another task's older one."""
    from airflow.utils.state import TaskInstanceState

    from lastline.airflow import failures
    from lastline.airflow.alerts import Alert

    run_id = _ti_failed(run_dag, target, tmp_path, monkeypatch)
    page = f"/reports/physical_restore/{quote(run_id, safe='')}"
    assert "there is no backup" in plugin.get(page).text

    # cleared, failed again in try 2 and killed before it could save why: not try 1's reason
    _set_ti(run_id, "preflight", try_number=2)
    text = plugin.get(page).text
    assert "Failed: task <code>preflight</code>" in text and "there is no backup" not in text
    assert "ended without an error" in text

    # cleared and passed: nothing failed now, though its file is still in the folder
    _set_ti(run_id, "preflight", state=TaskInstanceState.SUCCESS)
    assert (tmp_path / "reports" / "physical_restore" / reports_folder(run_id) / "failed-preflight.json").exists()
    assert plugin.get(page).status_code == 404 and "Failed: task" not in plugin.get(page).text

    # a later failure of another task: the alert says that task's reason, not preflight's
    ti = SimpleNamespace(dag_id="physical_restore", run_id=run_id, task_id="restore", map_index=-1, try_number=1)
    failures.record({"ti": ti, "exception": RuntimeError("the target's disk is full")})
    details = Alert("failed")._details({"ti": ti, "dag_run": {"dag_id": "physical_restore", "run_id": run_id},
                                       "reason": "task_failure"})
    assert details["task_id"] == "restore" and details["reason"] == "RuntimeError: the target's disk is full"
    assert "restore" in Alert("failed")._text(details) and "there is no backup" not in Alert("failed")._text(details)


def reports_folder(run_id: str) -> str:
    from lastline import reports

    return reports.folder("physical_restore", run_id).split("/", 1)[1]


def test_a_malformed_failure_file_does_not_break_the_report_tab(run_dag, target, plugin, tmp_path, monkeypatch):
    """A failure file damaged in storage (a map index that is no number, a missing reason, tries as text): the page
    still opens, naming the task from Airflow's database."""
    run_id = _ti_failed(run_dag, target, tmp_path, monkeypatch)
    broken = tmp_path / "reports" / "physical_restore" / reports_folder(run_id) / "failed-preflight.json"
    for bad in ({"map_index": "x", "tries": "one", "reason": {"a": 1}}, {"map_index": None}, [1, 2], "not json {"):
        broken.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        page = plugin.get(f"/reports/physical_restore/{quote(run_id, safe='')}")
        assert page.status_code == 200 and "Failed: task <code>preflight</code>" in page.text, bad
    spec = importlib.util.spec_from_file_location("lastline_reports_", Path(__file__).resolve().parents[2] / "plugins" / "lastline_reports.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    html = module._failures("d", "r", [{"task_id": "load", "map_index": "seven", "reason": None}, {"map_index": []}])
    assert "Failed: task <code>load</code>" in html and "/tasks/load\"" in html


def test_the_log_link_opens_in_airflow_around_the_sandboxed_frame(run_dag, target, plugin, tmp_path, monkeypatch):
    """In a real browser, the Report tab framed as Airflow 3.3 frames a plugin's page (sandboxed without
    allow-top-navigation): clicking "Open the task's log" routes the UI around the frame to the task's log."""
    from lastline_dev.browser import chromium_missing, launch

    if missing := chromium_missing():
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    run_id = _ti_failed(run_dag, target, tmp_path, monkeypatch)
    report = f"/lastline/reports/physical_restore/{quote(run_id, safe='')}"
    framed = plugin.get(report.removeprefix("/lastline")).text
    ui = ("<!doctype html><html><body><script>window.routed = [];"
          "addEventListener('popstate', () => window.routed.push(location.pathname));</script>"
          f'<iframe id="plugin" sandbox="allow-scripts allow-same-origin allow-forms" src="{report}"></iframe>'
          "</body></html>")
    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            page = browser.new_page()
            page.route("http://airflow.test/**", lambda route: route.fulfill(
                content_type="text/html", body=framed if route.request.url.endswith(report) else ui))
            page.goto(f"http://airflow.test/dags/physical_restore/runs/{quote(run_id, safe='')}")
            page.frame_locator("#plugin").get_by_text("Open the task's log").click()
            log_path = f"/dags/physical_restore/runs/{quote(run_id, safe='')}/tasks/preflight"
            page.wait_for_function(f"window.routed.includes({json.dumps(log_path)})", timeout=10000)
            assert page.evaluate("location.pathname") == log_path
        finally:
            browser.close()
