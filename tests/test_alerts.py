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
