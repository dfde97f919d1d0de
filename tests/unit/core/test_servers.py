"""core.servers: a connection read as a Server (its extras, the defaults, a safety flag never read as false by
mistake), the guards every writing path calls (protected, role, approval, the backup's own source), a version read
from its text, and the error a refused connection gives."""
from __future__ import annotations

import json

import pytest

from lastline.core.errors import AccessDenied, ConfigError, PreflightError, ProtectedTargetError, ServerError
from lastline.core.hosts import LOCAL
from lastline.core.servers import DEFAULT_SERVICE_START, Server, base_version, refuse_restore_into_source


def connection(**extra) -> Server:
    from airflow.sdk import Connection

    conn = Connection(conn_id="unit_db", conn_type="lastline", host="db1", port=3307, login="admin",
                      password="s3cret-pass", extra=json.dumps(extra))
    return Server.from_connection(conn)


def test_from_connection_reads_the_client_settings_and_defaults():
    server = connection()
    assert (server.conn_id, server.host, server.port, server.user, server.password) == ("unit_db", "db1", 3307, "admin",
                                                                                          "s3cret-pass")
    assert server.service_start == DEFAULT_SERVICE_START and server.charset == "utf8mb4"
    assert (server.protected, server.role, server.approval, server.replica, server.ssl) == (False, None, None, False, None)
    assert "s3cret" not in repr(server) and server.describe() == "unit_db (admin@db1:3307)"


@pytest.mark.parametrize(("extra", "field", "value"), [
    ({"unix_socket": "/run/m.sock"}, "socket", "/run/m.sock"),
    ({"socket": "/run/m.sock"}, "socket", "/run/m.sock"),
    ({"role": " Staging "}, "role", "staging"),
    ({"protected": "yes"}, "protected", True),
    ({"protected": ""}, "protected", False),
    ({"approval": "false"}, "approval", False),
    ({"ssl": '{"ca": "/ca.pem"}'}, "ssl", {"ca": "/ca.pem"}),
    ({"ssl_mode": "verify_identity"}, "ssl_mode", "VERIFY_IDENTITY"),
    ({"definer": "  "}, "definer", None),
    ({"replica": "true"}, "replica", True),
    ({"datadir": "/var/lib/mysql", "max_parallel": 4, "max_priority": ""}, "limits", {"max_parallel": 4}),
], ids=["unix-socket", "socket", "role-folded", "protected-word", "protected-empty-is-default", "approval-off",
        "ssl-json-text", "ssl-mode-upper", "blank-definer", "replica", "only-limit-extras-set"])
def test_from_connection_reads_each_extra(extra, field, value):
    assert getattr(connection(**extra), field) == value


@pytest.mark.parametrize("value", ["maybe", "1x", "prod"], ids=["maybe", "typo", "a-word"])
def test_a_safety_flag_that_is_not_true_or_false_is_refused(value):
    with pytest.raises(ConfigError, match="write true or false"):
        connection(protected=value)


def test_socket_is_named_in_describe_and_runner_is_local_without_ssh():
    server = connection(socket="/run/m.sock")
    assert server.describe() == "unit_db (admin@/run/m.sock)"
    assert server.runner() is LOCAL


def test_a_server_with_ssh_built_without_its_host_refuses_to_run_commands():
    with pytest.raises(ConfigError, match="build it with lastline.connections.server"):
        connection(ssh_conn_id="unit_ssh").runner()


def test_require_datadir():
    assert connection(datadir="/var/lib/mysql").require_datadir() == "/var/lib/mysql"
    with pytest.raises(ConfigError, match="no 'datadir' extra"):
        connection().require_datadir()


@pytest.mark.parametrize(("extra", "role", "refused"), [
    ({}, None, None),
    ({"protected": True}, None, "marked protected"),
    ({"role": "staging"}, None, "only staging_refresh writes into it"),
    ({"role": "drill"}, None, "only restore_drill writes into it"),
    ({"role": "staging"}, "staging", None),
    ({}, "staging", "this path writes only into a staging server"),
    ({"role": "staging", "protected": True}, "staging", "marked protected"),
], ids=["plain-into-plain", "protected", "staging-server-plain-path", "drill-server-plain-path", "staging-into-staging",
        "plain-server-staging-path", "protected-staging"])
def test_require_target(extra, role, refused):
    server = connection(**extra)
    if refused is None:
        server.require_target(role)
    else:
        with pytest.raises(ProtectedTargetError, match=refused):
            server.require_target(role)


@pytest.mark.parametrize(("extra", "refused"), [
    ({"role": "drill"}, None),
    ({"role": "staging"}, "is not marked as a drill server"),
    ({}, "is not marked as a drill server"),
    ({"role": "drill", "protected": True}, "marked protected"),
], ids=["drill", "staging", "no-role", "protected-drill"])
def test_require_role(extra, refused):
    server = connection(**extra)
    if refused is None:
        server.require_role("drill", "drills into it", "a drill replaces the server")
    else:
        with pytest.raises(ProtectedTargetError, match=refused):
            server.require_role("drill", "drills into it", "a drill replaces the server")


@pytest.mark.parametrize(("extra", "deployment", "asks", "unforced"), [
    ({"role": "staging"}, "true", False, "a staging server is replaced by design"),
    ({"role": "drill", "approval": True}, "true", False, "a drill server is replaced by design"),
    ({"approval": False}, "true", False, "its connection's extra \"approval\" is false"),
    ({"approval": True}, "false", True, None),
    ({}, "false", False, "the deployment's LASTLINE_APPROVAL is false"),
    ({}, "true", True, None),
], ids=["staging", "drill-over-the-extra", "extra-off", "extra-on-over-the-deployment", "deployment-off", "deployment-on"])
def test_asks_approval_and_why_not(monkeypatch, extra, deployment, asks, unforced):
    monkeypatch.setenv("LASTLINE_APPROVAL", deployment)
    server = connection(**extra)
    assert server.asks_approval() is asks
    if unforced:
        assert unforced in server.unforced() and "set force" in server.unforced()


@pytest.mark.parametrize(("code", "error", "hint"), [
    (1045, AccessDenied, "wrong user or password"),
    (1698, AccessDenied, "check the connection"),
    (2002, ServerError, "is the server running?"),
    (2003, ServerError, "the port right?"),
    (None, ServerError, "check the connection and that the server runs"),
], ids=["bad-password", "auth-socket", "no-socket", "no-port", "unknown"])
def test_connect_error(code, error, hint):
    err = connection().connect_error(code, "refused", via=" through a dump worker")
    assert type(err) is error
    assert str(err).startswith("cannot connect to unit_db (admin@db1:3307) through a dump worker: refused (")
    assert hint in str(err)


def test_a_server_nothing_listens_on_does_not_answer():
    server = Server("unit_nothing", host="127.0.0.1", port=1)
    assert server.answers() is False
    with pytest.raises(ServerError, match="nothing listens there"):
        server.connect(connect_timeout=2)


@pytest.mark.parametrize(("text", "version"), [
    ("10.11.19-MariaDB-0+deb12u1-log", (10, 11, 19)),
    ("11.4.2-MariaDB", (11, 4, 2)),
    ("8.0.36", (8, 0, 36)),
], ids=["debian-mariadb", "mariadb", "mysql"])
def test_base_version(text, version):
    assert base_version(text) == version


@pytest.mark.parametrize("text", ["", "MariaDB", "10.11"], ids=["empty", "no-number", "two-parts"])
def test_base_version_refuses(text):
    with pytest.raises(PreflightError, match="cannot read a version number"):
        base_version(text)


@pytest.mark.parametrize(("identity", "source", "allowed", "refused"), [
    ("srv-a", "srv-a", None, True),
    ("srv-a", "srv-a", "other_conn", True),
    ("srv-a", "srv-a", "unit_db", False),
    ("srv-a", "srv-b", None, False),
    ("srv-a", None, None, False),
], ids=["same-server", "another-connection-named", "target-named", "another-server", "source-unknown"])
def test_refuse_restore_into_source(identity, source, allowed, refused):
    target = connection()
    if refused:
        with pytest.raises(ProtectedTargetError, match="set the Param restore_into_source to 'unit_db'"):
            refuse_restore_into_source(target, identity, source, "prod", allowed)
    else:
        refuse_restore_into_source(target, identity, source, "prod", allowed)
