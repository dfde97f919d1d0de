"""airflow.alerts: an alert says which run failed and why (the reason its failed task recorded for this very try),
goes as JSON to a webhook connection (a real HTTP server on localhost here), and is only logged where there is no
connection or the sending fails (an alert never fails its task); the backups' deadline follows its setting."""
from __future__ import annotations

import json
import socket
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace

import pytest

from lastline.airflow import failures
from lastline.airflow.alerts import Alert, _recipients, backup_deadline, send
from lastline.core.errors import PreflightError

RUN = SimpleNamespace(dag_id="logical_backup", run_id="manual__unit_alerts", state="failed")


@pytest.mark.parametrize(("value", "recipients"), [
    ("a@x.org", ["a@x.org"]), (" a@x.org, ,b@x.org ", ["a@x.org", "b@x.org"]), (["a@x.org", "b@x.org"], ["a@x.org", "b@x.org"]),
    (None, []), ("", []),
], ids=["one", "comma-separated-with-blanks", "a-list", "none", "empty"])
def test_recipients(value, recipients):
    assert _recipients(value) == recipients


@pytest.fixture
def reports(tmp_path, monkeypatch):
    """The run's reports in a local folder, where a failed task records its failure."""
    monkeypatch.setenv("LASTLINE_REPORT_DIR", str(tmp_path / "reports"))
    monkeypatch.delenv("LASTLINE_REPORTS", raising=False)


def ti(task_id: str = "dump", try_number: int = 1) -> SimpleNamespace:
    return SimpleNamespace(dag_id=RUN.dag_id, run_id=RUN.run_id, task_id=task_id, map_index=-1, try_number=try_number)


def test_a_failed_run_says_what_its_failed_task_recorded(reports):
    failures.record({"ti": ti(), "exception": PreflightError("the target is not empty")})
    alert = Alert("failed")
    details = alert._details({"dag_run": RUN, "ti": ti(), "reason": "task_failure"})
    assert (details["dag_id"], details["run_id"], details["task_id"], details["reason"]) == (
        RUN.dag_id, RUN.run_id, "dump", "the target is not empty")
    assert "nothing was touched" in details["what_to_do"]
    assert alert._text(details).startswith(
        "lastline: logical_backup run manual__unit_alerts failed (task dump): the target is not empty\n")


@pytest.mark.parametrize(("recorded_try", "alert_try"), [(None, 1), (1, 2)], ids=["nothing-recorded", "an-earlier-try"])
def test_without_this_trys_record_the_alert_points_to_the_log(reports, recorded_try, alert_try):
    if recorded_try:
        failures.record({"ti": ti(try_number=recorded_try), "exception": PreflightError("stale")})
    alert = Alert("failed")
    details = alert._details({"dag_run": RUN, "ti": ti(try_number=alert_try), "reason": "task_failure"})
    assert details["reason"] == "task_failure"
    assert alert._text(details) == ("lastline: logical_backup run manual__unit_alerts failed (task dump): open its log "
                                    "in Airflow; each step is safe to re-run")


@pytest.mark.parametrize(("alert", "context", "text", "details"), [
    (Alert("deadline_missed", deadline_minutes=30), {"dag_run": {"dag_id": "d", "dag_run_id": "r", "state": "running"}},
     "lastline: d run r: deadline_missed", {"deadline_minutes": 30, "dag_id": "d", "run_id": "r", "state": "running"}),
    (Alert("deadline_missed", message="a backup is late"), {}, "a backup is late", {}),
    (Alert("failed"), None, "lastline: ? run ? failed: open its log in Airflow; each step is safe to re-run", {}),
], ids=["a-deadlines-api-form-of-the-run", "its-own-message", "no-context"])
def test_other_alerts(alert, context, text, details):
    found = alert._details(context)
    assert found == details
    assert alert._text(found) == text


class Hook(BaseHTTPRequestHandler):
    """A webhook that keeps what it was sent."""

    received: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        Hook.received.append({"path": self.path, "headers": dict(self.headers),
                              "body": json.loads(self.rfile.read(int(self.headers["Content-Length"])))})
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    server = HTTPServer(("127.0.0.1", 0), Hook)
    Hook.received = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def connection(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def test_a_webhook_receives_the_alert_as_json_with_the_connections_headers(monkeypatch, webhook):
    connection(monkeypatch, "unit_alerts_hook", conn_type="http", host="127.0.0.1", port=webhook, schema="http",
               extra={"X-Token": "t0ken"})
    where = send("failed", "lastline: it failed", {"dag_id": "d", "at": timedelta(seconds=1)}, "unit_alerts_hook")
    assert where == "webhook unit_alerts_hook"
    [got] = Hook.received
    assert got["body"] == {"text": "lastline: it failed", "event": "failed", "dag_id": "d", "at": "0:00:01"}
    assert got["headers"]["X-Token"] == "t0ken"


def test_a_notifier_sends_its_alert(monkeypatch, webhook):
    connection(monkeypatch, "unit_alerts_hook", conn_type="http", host="127.0.0.1", port=webhook, schema="http")
    Alert("deadline_missed", conn_id="unit_alerts_hook").notify({"dag_run": RUN})
    assert [r["body"]["text"] for r in Hook.received] == ["lastline: logical_backup run manual__unit_alerts: deadline_missed"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("fields", [
    None,
    {"conn_type": "http", "host": "127.0.0.1", "schema": "http", "extra": {"timeout": 2}},
    {"conn_type": "smtp", "host": "127.0.0.1", "extra": {}},
], ids=["no-connection", "nothing-listening", "mail-without-recipients"])
def test_an_alert_that_cannot_go_is_logged_not_raised(monkeypatch, caplog, fields):
    monkeypatch.delenv("AIRFLOW_CONN_UNIT_ALERTS_NONE", raising=False)
    if fields:
        connection(monkeypatch, "unit_alerts_none", **{**fields, "port": free_port()})
    assert send("failed", "lastline: it failed", {}, "unit_alerts_none") == ""
    assert "ALERT (failed" in caplog.text and "lastline: it failed" in caplog.text


@pytest.mark.parametrize(("setting", "minutes"), [(None, 240.0), ("30", 30.0), ("0.5", 0.5), ("0", None), ("-1", None)],
                         ids=["default-4-hours", "set", "a-fraction", "zero-turns-it-off", "negative-turns-it-off"])
def test_backup_deadline(monkeypatch, setting, minutes):
    if setting is None:
        monkeypatch.delenv("LASTLINE_BACKUP_DEADLINE_MINUTES", raising=False)
    else:
        monkeypatch.setenv("LASTLINE_BACKUP_DEADLINE_MINUTES", setting)
    deadline = backup_deadline()
    if minutes is None:
        assert deadline is None
    else:
        assert deadline is not None and deadline.interval == timedelta(minutes=minutes)
        assert deadline.callback.kwargs["deadline_minutes"] == minutes
