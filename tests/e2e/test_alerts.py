"""Alerts go through the providers' notifiers: a webhook (the HTTP provider's HttpNotifier) and mail (the SMTP
provider's SmtpNotifier), each to a real server on loopback; no connection: a warning, nothing sent."""
from __future__ import annotations

import json
import os

from lastline.airflow.alerts import Alert, send
from lastline_dev.smtp_sink import SmtpSink
from lastline_dev.webhook import Webhook


def test_a_failed_run_alert_reaches_a_webhook_and_a_mailbox(airflow_db):
    hook, sink = Webhook(), SmtpSink()
    try:
        os.environ["AIRFLOW_CONN_T_HOOK"] = json.dumps({"conn_type": "http", "host": f"http://127.0.0.1:{hook.server_port}/x"})
        os.environ["AIRFLOW_CONN_T_MAIL"] = json.dumps({
            "conn_type": "smtp", "host": "127.0.0.1", "port": sink.port,
            "extra": {"from_email": "lastline@example.com", "to": "dba@example.com, oncall@example.com",
                      "disable_ssl": True, "disable_tls": True}})
        import datetime

        Alert("failed", conn_id="t_hook", deadline=datetime.datetime(2026, 1, 1, 3, 0)).notify({"reason": "a test"})
        got = hook.wait_for("failed", timeout=10)
        assert got["text"].startswith("lastline:") and got["reason"] == "a test"
        assert got["deadline"] == "2026-01-01 03:00:00"  # a time in the details (a deadline's) is sent as text
        assert send("rto_exceeded", "the drill took 12 min (budget 10 min)", {"dag_id": "d"}, "t_mail") == \
            "mail to dba@example.com, oncall@example.com"
        (sender, rcpts, message), = sink.received
        assert sender == "lastline@example.com" and sorted(rcpts) == ["dba@example.com", "oncall@example.com"]
        assert message["Subject"] == "[lastline] the drill took 12 min (budget 10 min)"
        assert "the drill took 12 min" in message.get_payload(0).get_payload(decode=True).decode()
        assert send("failed", "nowhere to go", {}, "t_no_such_connection") == ""
    finally:
        hook.shutdown()
        sink.close()
        os.environ.pop("AIRFLOW_CONN_T_HOOK", None)
        os.environ.pop("AIRFLOW_CONN_T_MAIL", None)


def test_the_hook_reads_a_lastline_or_a_plain_mysql_connection_and_refuses_others(airflow_db, monkeypatch):
    from lastline.core.errors import ConfigError
    from lastline.hooks.mariadb import MariaDbHook

    fields = {"host": "db1", "port": 3307, "login": "u", "password": "p", "extra": {"datadir": "/d", "role": "drill",
                                                                                  "protected": False, "approval": ""}}
    for conn_type in ("lastline", "mysql"):
        monkeypatch.setenv("AIRFLOW_CONN_T_HOOKED", json.dumps({"conn_type": conn_type, **fields}))
        server = MariaDbHook("t_hooked").server()
        assert (server.host, server.port, server.datadir, server.role, server.approval) == ("db1", 3307, "/d", "drill", None)
    monkeypatch.setenv("AIRFLOW_CONN_T_HOOKED", json.dumps({"conn_type": "postgres", **fields}))
    import pytest

    with pytest.raises(ConfigError, match="is of type 'postgres'"):
        MariaDbHook("t_hooked").server()


def test_an_alert_that_cannot_be_sent_never_fails_its_task_and_a_deadline_names_its_run(airflow_db, monkeypatch, caplog):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AIRFLOW_CONN_T_DEAD", json.dumps({"conn_type": "http", "host": f"http://127.0.0.1:{port}/hooks/T0KEN"}))
    assert send("failed", "a run failed", {}, "t_dead") == ""  # logged, not raised
    assert "could not be sent through connection 't_dead' (ConnectionError" in caplog.text and "T0KEN" not in caplog.text
    alert = Alert("deadline_missed", context={"dag_run": {"dag_id": "physical_backup", "dag_run_id": "scheduled__x"}})
    details = alert._details(alert.context)
    assert (details["dag_id"], details["run_id"]) == ("physical_backup", "scheduled__x") and "context" not in details


def test_safety_flags_are_read_strictly_and_sizes_refuse_nonsense():
    import pytest

    from lastline.core.errors import ConfigError
    from lastline.core.plans import Conf, parse_size
    from lastline.core.servers import Server

    class Conn:
        conn_id, host, port, login, password = "c", "h", 3306, "u", "p"

        def __init__(self, extra):
            self.extra_dejson = extra

    assert Server.from_connection(Conn({"protected": "yes", "approval": ""})).protected is True
    assert Server.from_connection(Conn({"protected": False, "approval": "false"})).approval is False
    for bad in ({"protected": "y"}, {"approval": "required"}):
        with pytest.raises(ConfigError, match="write true or false"):
            Server.from_connection(Conn(bad))
    for bad in (-5, "-1G", "inf", "1e400", "lots", True):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert Conf({"use_memory": "0G"}).size("use_memory", 7) == 7


def test_the_report_page_renders_odd_markdown_escaped():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("lastline_reports", Path(__file__).resolve().parents[2] / "plugins" / "lastline_reports.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    html = plugin.markdown("# <b>x</b>\n|---|---|\n\n- **a** `<script>`\n| t<i> | 1 |\n|---|---|\n| r | 2 |")
    assert "<script>" not in html and "&lt;script&gt;" in html and "<h2>&lt;b&gt;x&lt;/b&gt;</h2>" in html
    assert "<th>t&lt;i&gt;</th>" in html and "<td>r</td>" in html
