"""hooks.mariadb: the mysql provider's hook whose connection also carries lastline's settings: a lastline or mysql
connection becomes a Server (any other kind is refused), the socket is read as lastline reads it, and the connection
form's "Test connection" on the target sandbox: ready with an account that holds what lastline needs, not ready (each
missing privilege named) with one that does not, and the driver's refusal for a wrong password."""
from __future__ import annotations

import json
import os

import pytest

from lastline.core.errors import ConfigError
from lastline.core.servers import Server
from lastline.hooks.mariadb import MariaDbHook


@pytest.fixture
def conn(monkeypatch):
    def put(conn_id: str, **fields) -> str:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))
        return conn_id
    return put


@pytest.mark.parametrize("conn_type", ["lastline", "mysql", "mariadb"])
def test_server_of_a_database_connection(conn, conn_type):
    server = MariaDbHook(conn("unit_hook_db", conn_type=conn_type, host="db1", port=3307, login="admin",
                              password="pw-123456", extra={"datadir": "/d"})).server()
    assert (server.conn_id, server.host, server.port, server.user, server.datadir) == ("unit_hook_db", "db1", 3307,
                                                                                       "admin", "/d")


def test_a_connection_of_another_kind_is_refused(conn):
    with pytest.raises(ConfigError, match="is of type 'postgres': a server lastline backs up or restores into is a lastline"):
        MariaDbHook(conn("unit_hook_pg", conn_type="postgres", host="db1")).server()


def test_a_missing_connection_says_how_to_create_it():
    with pytest.raises(ConfigError, match="'unit_hook_nowhere' could not be read .* set AIRFLOW_CONN_UNIT_HOOK_NOWHERE"):
        MariaDbHook("unit_hook_nowhere").server()


@pytest.mark.parametrize(("extra", "socket"), [
    ({"unix_socket": "/run/a.sock"}, "/run/a.sock"),
    ({"socket": "/run/b.sock"}, "/run/b.sock"),
    ({"socket": "/run/b.sock", "ssh_conn_id": "unit_hook_ssh"}, None),
    ({}, None),
], ids=["unix-socket", "socket", "a-socket-on-the-ssh-host-is-not-here", "none"])
def test_the_client_reads_the_socket_as_lastline_does(conn, extra, socket):
    hook = MariaDbHook(conn("unit_hook_sock", conn_type="lastline", host="db1", login="admin", extra=extra))
    args = Server.from_connection(hook.read_connection()).driver_args()
    assert args.get("unix_socket") == socket
    assert ("host" in args) == (socket is None)


def _database_and_multi(dbapi) -> tuple[str, bool]:
    """The connection's current database, and whether two statements in one call run (the parser refuses the second
    when multi-statements are off)."""
    cur = dbapi.cursor()
    cur.execute("SELECT DATABASE()")
    database = cur.fetchone()[0]
    try:
        cur.execute("SELECT 1; SELECT 2")
        multi = True
    except Exception:  # noqa: BLE001 - MySQLdb's ProgrammingError: a syntax error at the second statement
        multi = False
    return database, multi


@pytest.fixture
def scratch(target):
    """A scratch table on the target for LOCAL INFILE probes (dropped after)."""
    server = target.server()
    with server.session() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS unit_hook_infile")
        cur.execute("CREATE TABLE IF NOT EXISTS unit_hook_infile.t (line TEXT)")
    yield "unit_hook_infile.t"
    with server.session() as cur:
        cur.execute("DROP DATABASE IF EXISTS unit_hook_infile")


@pytest.mark.parametrize("extra", [
    pytest.param({}, id="no-extras"),
    pytest.param({"local_infile": "1", "client_flag": "65536", "read_default_file": "/nonexistent/evil.cnf"},
                 id="extras-asking-for-local-infile-and-multi-statements"),
])
def test_get_conn_and_its_engine_are_made_as_every_stage_makes_one(conn, target, scratch, extra):
    """The hook's DB-API connection and its SQLAlchemy engine's are the stages' (Server.driver_args): one statement per
    call, no LOCAL INFILE, whatever the connection's extras say."""
    import MySQLdb

    t = target.server()
    hook = MariaDbHook(conn("unit_hook_made", conn_type="lastline", host=t.host, port=t.port, login=t.user,
                            password=t.password, extra={"unix_socket": t.socket, **extra}), schema="mysql")
    assert "?" not in hook.get_uri()
    engine = hook.get_sqlalchemy_engine()
    try:
        for dbapi in (hook.get_conn(), engine.raw_connection()):
            try:
                assert _database_and_multi(dbapi) == ("mysql", False)
                with pytest.raises(MySQLdb.OperationalError) as refused:
                    dbapi.cursor().execute(f"LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE {scratch}")
                assert refused.value.args[0] in (1148, 2068, 4166), refused.value  # "LOCAL INFILE is disabled"
            finally:
                dbapi.close()
    finally:
        engine.dispose()


def test_get_conn_with_local_infile_asked_for_by_its_caller(target, scratch):
    """Only a hook made with local_infile=True (code, never a connection's extra) lets the client send a file."""
    dbapi = MariaDbHook("t_target", local_infile=True).get_conn()
    try:
        cur = dbapi.cursor()
        cur.execute(f"LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE {scratch}")
        cur.execute(f"SELECT COUNT(*) FROM {scratch}")
        assert cur.fetchone()[0] >= 1
    finally:
        dbapi.close()


@pytest.mark.parametrize(("conn_type", "extra", "refused"), [
    pytest.param("lastline", {"client": "mysql-connector-python"}, "asks for the 'mysql-connector-python' client: lastline "
                 "connects with mysqlclient", id="another-client"),
    pytest.param("mysql", {"iam": True}, "asks for an IAM login", id="an-iam-login"),
    pytest.param("postgres", {}, "is of type 'postgres'", id="not-a-server"),
])
def test_get_conn_refuses(conn, conn_type, extra, refused):
    hook = MariaDbHook(conn("unit_hook_refused", conn_type=conn_type, host="db1", extra=extra))
    with pytest.raises(ConfigError, match=refused):
        hook.get_conn()


def test_get_conn_of_a_missing_connection_says_how_to_create_it():
    with pytest.raises(ConfigError, match="set AIRFLOW_CONN_UNIT_HOOK_NOWHERE"):
        MariaDbHook("unit_hook_nowhere").get_conn()


def test_test_connection_of_an_account_with_what_lastline_needs(target):
    ok, message = MariaDbHook("t_target").test_connection()
    assert ok, message
    assert message.startswith(f"{target.server().user}@127.0.0.1:{target.server().port} answers: ")
    assert "Ready as a backup source and a restore target." in message
    assert "not tried: SSH, the datadir, the start and stop commands." in message


@pytest.fixture
def reader(target, monkeypatch):
    """An account holding SELECT only, as a lastline connection (dropped afterwards)."""
    admin = target.server()
    with admin.session() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("DROP USER IF EXISTS 'unit_hook_reader'@'%'")
        cur.execute("CREATE USER 'unit_hook_reader'@'%' IDENTIFIED BY 'reader-pw-1'")
        cur.execute("GRANT SELECT ON *.* TO 'unit_hook_reader'@'%'")
    monkeypatch.setenv("AIRFLOW_CONN_UNIT_HOOK_READER", json.dumps({
        "conn_type": "lastline", "host": "127.0.0.1", "port": admin.port, "login": "unit_hook_reader",
        "password": "reader-pw-1"}))
    try:
        yield "unit_hook_reader"
    finally:
        with admin.session() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("DROP USER IF EXISTS 'unit_hook_reader'@'%'")


def test_test_connection_of_an_account_lacking_privileges(reader):
    ok, message = MariaDbHook(reader).test_connection()
    assert not ok
    assert "Not ready: it lacks what lastline needs of it." in message
    assert "Checked: SHOW GRANTS of unit_hook_reader@%" in message


def test_test_connection_with_a_wrong_password(target, monkeypatch):
    conn = json.loads(os.environ["AIRFLOW_CONN_T_TARGET"])
    monkeypatch.setenv("AIRFLOW_CONN_UNIT_HOOK_WRONG", json.dumps({**conn, "password": "not-the-password"}))
    ok, message = MariaDbHook("unit_hook_wrong").test_connection()
    assert not ok
    assert "wrong user or password: fix the connection's login/password" in message
