"""pitr.statement_run: a logical base's statement transaction read (user variables, the refusals of what cannot commit
with the ledger) and run on a real server in one session, its context set from the events as the server's applier
sets it, committed with its ledger row or rolled back whole."""
from __future__ import annotations

import struct

import pytest

from lastline.core.errors import Refusal
from lastline.pitr import events
from lastline.pitr.events import FL_DDL, FL_STANDALONE, FL_TRANSACTIONAL, HEADER_LEN, QUERY
from lastline.pitr.statement_run import Session, Statement, queries, refusal, user_var
from lastline.pitr.statements import INTVAR, RAND, USER_VAR

from .binlog import gtid, xid

DB = "unit_stmt_run"
TS = 1_795_882_472


def query(text: bytes, db: bytes = b"", status: bytes = b"", error: int = 0, ts: int = TS) -> bytes:
    """A Query event with a default database, status variables and an error code."""
    body = struct.pack("<IIBHH", 7, 0, len(db), error, len(status)) + status + db + b"\0" + text
    return events._event(ts, QUERY, 1, 0, body, True)


def var(name: bytes, kind: int | None, value: bytes = b"", collation: int = 45, flags: bytes = b"") -> bytes:
    body = struct.pack("<I", len(name)) + name
    body += b"\1" if kind is None else b"\0" + struct.pack("<BII", kind, collation, len(value)) + value + flags
    return events._event(TS, USER_VAR, 1, 0, body, True)


def statement(*evs: bytes, flags2: int = FL_TRANSACTIONAL, seq: int = 5) -> Statement:
    return Statement(f"0-1-{seq}", TS, flags2, True, [gtid(seq, True, flags2=flags2), query(b"BEGIN"), *evs, xid(True)])


@pytest.mark.parametrize(("event", "expected"), [
    (var(b"s", 0, "grüß".encode()), (b"s", "grüß".encode(), 45)),
    (var(b"i", 2, struct.pack("<q", -3)), (b"i", -3, 45)),
    (var(b"u", 2, struct.pack("<Q", 2**64 - 1), flags=b"\1"), (b"u", 2**64 - 1, 45)),
    (var(b"r", 1, struct.pack("<d", 1.5)), (b"r", 1.5, 45)),
    (var(b"n", None), (b"n", None, 63)),
], ids=["string", "int", "unsigned", "real", "null"])
def test_user_var_reads_each_value_type(event, expected):
    assert user_var(event, True, "0-1-5") == expected


def test_user_var_refuses_a_decimal_and_a_cut_event():
    with pytest.raises(Refusal, match="user variable @d holds a value of type 4"):
        user_var(var(b"d", 4, b"\x05\x02\x80\x00"), True, "0-1-5")
    with pytest.raises(Refusal, match="cut short"):
        user_var(var(b"s", 0, b"abc")[:-8] + b"\0\0\0\0", True, "0-1-5")


@pytest.mark.parametrize(("flags2", "evs", "why"), [
    (FL_TRANSACTIONAL | FL_DDL, (), "is DDL"),
    (0, (), "changes a non-transactional table"),
    (FL_STANDALONE | FL_TRANSACTIONAL, (), "changes a non-transactional table"),
    (FL_TRANSACTIONAL, (query(b"UPDATE t SET a = 1", error=1062),), "failed part way on the source"),
    (FL_TRANSACTIONAL, (var(b"d", 4, b"\x05\x02\x80\x00"),), "a decimal"),
], ids=["ddl", "myisam", "standalone", "source-error", "decimal-variable"])
def test_refusal_names_what_cannot_run_exactly_once(flags2, evs, why):
    st = statement(*evs, query(b"UPDATE shop.t SET a = 2", b"shop"), flags2=flags2)
    with pytest.raises(Refusal, match=why):
        refusal(st, "2026-11-28T00:00:00Z")


def test_refusal_passes_a_transactional_statement():
    refusal(statement(query(b"UPDATE shop.t SET a = 2", b"shop")), "2026-11-28T00:00:00Z")


@pytest.fixture
def scratch(target):
    server = target.server()
    with server.session() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"CREATE TABLE {DB}.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(60), r DOUBLE, at VARCHAR(80))")
        cur.execute(f"CREATE TABLE {DB}.ledger (gtid VARCHAR(64) PRIMARY KEY)")
    try:
        yield server
    finally:
        with server.session() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"DROP DATABASE IF EXISTS {DB}")


def test_a_session_sets_the_context_from_the_events_and_commits_with_its_ledger_row(scratch):
    tz = b"\x05\x06+02:00"  # Q_TIME_ZONE_CODE, length, name
    micro = b"\x80" + (123456).to_bytes(3, "little")  # Q_HRNOW
    st = statement(
        var(b"label", 0, "grüß".encode(), collation=46),
        events._event(TS, INTVAR, 1, 0, struct.pack("<BQ", 2, 41), True),  # INSERT_ID
        events._event(TS, RAND, 1, 0, struct.pack("<QQ", 11, 22), True),
        query(b"INSERT INTO t (v, r, at) VALUES (@label, RAND(), CONCAT(NOW(6), ' ', FROM_UNIXTIME(0)))", DB.encode(),
              tz + micro))
    conn = scratch.connect()
    try:
        Session(conn, f"{DB}.ledger").run(st)
    finally:
        conn.close()
    (row,) = scratch.query(f"SELECT id, v, at FROM {DB}.t")
    assert row[0] == 41 and row[1] == "grüß"
    assert row[2] == "2026-11-28 18:14:32.123456 1970-01-01 02:00:00"  # the source's time, in its time zone
    assert scratch.query(f"SELECT gtid FROM {DB}.ledger") == [("0-1-5",)]
    assert [q.text[:6] for q in queries(st)] == [b"BEGIN", b"INSERT"]


def test_a_session_rolls_back_the_whole_transaction_when_the_server_refuses_a_statement(scratch):
    st = statement(query(b"INSERT INTO t (v) VALUES ('kept?')", DB.encode()),
                   query(b"INSERT INTO t (no_such_column) VALUES (1)", DB.encode()))
    conn = scratch.connect()
    try:
        with pytest.raises(Refusal, match=r'transaction 0-1-5 .*the target refused its statement "INSERT INTO t '
                                          r'\(no_such_column\)'):
            Session(conn, f"{DB}.ledger").run(st)
    finally:
        conn.close()
    assert scratch.query(f"SELECT COUNT(*) FROM {DB}.t") == [(0,)]
    assert scratch.query(f"SELECT COUNT(*) FROM {DB}.ledger") == [(0,)]
    assert HEADER_LEN == 19
