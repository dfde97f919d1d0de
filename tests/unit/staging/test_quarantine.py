"""staging.quarantine on a real server (the suite's logical target): lock shuts every other account out and turns the
event scheduler off, close drops what an unverified run restored and unlocks exactly what lock locked, and a verified
run keeps its data. Every account, database and setting is put back as it was."""
from __future__ import annotations

import dataclasses

import MySQLdb
import pytest

from lastline.core.sql import META_DB
from lastline.staging import quarantine

CONN = "t_ltarget"  # the logical target's connection (tests/conftest.py)
READER = "unit_quarantine_reader"
LOCKED = "unit_quarantine_locked"
DB = "unit_quarantine_db"
PASSWORD = "unit-quarantine-pw"


@pytest.fixture
def staging(logical_target):
    """A reader account, one locked already, a database the refresh restored, the event scheduler ON; afterwards
    everything as it was (this test's lock rows removed, the table and `_lastline` dropped if they were new)."""
    server = logical_target.server()
    with server.session() as cur:
        cur.execute("SELECT @@global.event_scheduler")
        scheduler = cur.fetchone()[0]
        cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (META_DB,))
        had_db = bool(cur.fetchone()[0])
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'staging_locks'",
                    (META_DB,))
        had_locks = bool(cur.fetchone()[0])
        cur.execute(f"CREATE OR REPLACE USER '{READER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'")
        cur.execute(f"CREATE OR REPLACE USER '{LOCKED}'@'%' IDENTIFIED BY '{PASSWORD}' ACCOUNT LOCK")
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
        cur.execute("SET GLOBAL event_scheduler = ON")
    try:
        yield server
    finally:
        with server.session() as cur:
            cur.execute(f"DROP USER IF EXISTS '{READER}'@'127.0.0.1', '{LOCKED}'@'%'")
            cur.execute(f"DROP DATABASE IF EXISTS {DB}")
            cur.execute(f"SET GLOBAL event_scheduler = {scheduler}")
            if not had_db:
                cur.execute(f"DROP DATABASE IF EXISTS {META_DB}")
            elif not had_locks:
                cur.execute(f"DROP TABLE IF EXISTS {quarantine.LOCKS}")
            else:
                cur.execute(f"DELETE FROM {quarantine.LOCKS} WHERE run_key LIKE 'unit_quarantine_%'")
            cur.connection.commit()


def _login_error(server, user: str) -> int | None:
    """The error a login as `user` gets (None: it logged in)."""
    try:
        MySQLdb.connect(host=server.host, port=server.port, user=user, passwd=PASSWORD).close()
    except MySQLdb.OperationalError as exc:
        return int(exc.args[0])
    return None


def _scheduler(server) -> str:
    return str(server.query("SELECT @@global.event_scheduler")[0][0])


def _databases(server) -> set[str]:
    return {r[0] for r in server.query("SHOW DATABASES")}


@pytest.mark.parametrize("verified", [False, True], ids=["unverified-drops-the-restored-data", "verified-keeps-it"])
def test_lock_shuts_everyone_else_out_until_close(staging, verified):
    run = f"unit_quarantine_{'verified' if verified else 'unverified'}"
    assert _login_error(staging, READER) is None
    locked = quarantine.lock(CONN, run)
    try:
        assert f"{READER}@127.0.0.1" in locked.locked
        assert f"{LOCKED}@%" not in locked.locked  # locked already: not lastline's to unlock
        me = staging.query("SELECT CURRENT_USER()")[0][0]
        assert me not in locked.locked
        assert _login_error(staging, READER) == 4151  # "this account is locked"
        assert _scheduler(staging) == "OFF"
        assert quarantine.lock(CONN, run).locked == locked.locked  # a retry locks the recorded list again
        if verified:
            quarantine.mark_verified(dataclasses.replace(staging, conn_id=CONN), run)
    finally:
        closed = quarantine.close(CONN, run, [DB, "unit_quarantine_absent"])
    assert closed.dropped == ([] if verified else [DB])
    assert (DB in _databases(staging)) is verified
    assert f"{READER}@127.0.0.1" in closed.unlocked and f"{LOCKED}@%" not in closed.unlocked
    assert _login_error(staging, READER) is None
    assert _login_error(staging, LOCKED) == 4151
    assert _scheduler(staging) == "ON"
    assert quarantine.close(CONN, run, [DB]) == type(closed)([], [])  # closed already: nothing more to do


def test_close_without_a_lock_touches_nothing(staging):
    closed = quarantine.close(CONN, "unit_quarantine_never_locked", [DB])
    assert (closed.dropped, closed.unlocked) == ([], [])
    assert DB in _databases(staging)


def test_readers_leave_out_lastline_s_own_and_locked_accounts(staging):
    with staging.session() as cur:
        found = quarantine.readers(cur)
        own = quarantine.own_accounts(cur)
    assert (READER, "127.0.0.1") in found and (LOCKED, "%") not in found
    assert not own & set(found) and not {u for u, _ in found} & quarantine.SYSTEM_ACCOUNTS
