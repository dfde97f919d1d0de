"""pitr.statements: a logical base's statements read, never run: status variables parsed (an unknown one or a cut
block refused), a Query event's parts, and whether a statement may change a restored database (its default database,
or a restored name among its words and identifiers, executable comments read as code)."""
from __future__ import annotations

import struct

import pytest

from lastline.core.errors import Refusal
from lastline.pitr import events
from lastline.pitr.statements import (
    FLAGS2_KNOWN,
    Query,
    StatementGroup,
    Status,
    parse_query,
    parse_status,
    read,
    savepoint,
    statement_head,
    touches,
    without_literals,
)

from .binlog import gtid, query, xid


@pytest.mark.parametrize(("block", "status"), [
    (b"", Status()),
    (b"\x00" + struct.pack("<I", 0x4000), Status(flags2=0x4000)),
    (b"\x01" + struct.pack("<Q", 1 << 21), Status(sql_mode=1 << 21)),
    (b"\x04" + struct.pack("<HHH", 33, 33, 8), Status(charset=(33, 33, 8))),
    (b"\x05\x06+00:00", Status(time_zone=b"+00:00")),
    (b"\x03\x01\x00\x02\x00" + b"\x07\x05\x00" + b"\x08\x21\x00", Status(auto_increment=(1, 2), lc_time_names=5, charset_database=33)),
    (b"\x06\x03std" + b"\x80\x01\x02\x03" + b"\x81" + bytes(8), Status(micro=0x030201)),
    (b"\x0b\x03app\x09localhost", Status()),
], ids=["empty", "flags2", "sql-mode", "charset", "time-zone", "auto-increment-lc-time-charset-db", "catalog-micro-xid",
        "invoker"])
def test_parse_status(block, status):
    assert parse_status(block, "0-1-1") == status


@pytest.mark.parametrize(("block", "message"), [
    (b"\x63", "carries status variable 99"),
    (b"\x01\x00\x00", "cut short"),
    (b"\x05\x09+00", "run past their block"),
], ids=["unknown-variable", "cut-short", "runs-past"])
def test_parse_status_refuses(block, message):
    with pytest.raises(Refusal, match=message):
        parse_status(block, "0-1-1")


def test_status_encode_keeps_what_a_rebuilt_begin_carries_and_reads_back():
    st = Status(flags2=0xFFFFFFFF, sql_mode=7, charset=(33, 33, 8), time_zone=b"+01:00")
    encoded = st.encode()
    again = parse_status(encoded, "0-1-1")
    assert again == Status(flags2=FLAGS2_KNOWN, sql_mode=7, charset=(33, 33, 8))  # unknown flags and the zone dropped


def event_with_db(text: bytes, db: bytes, status: bytes, checksum: bool) -> bytes:
    body = struct.pack("<IIBHH", 7, 0, len(db), 0, len(status)) + status + db + b"\0" + text
    return events._event(1234, events.QUERY, 1, 0, body, checksum)


@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "crc32"])
@pytest.mark.parametrize(("db", "text"), [(b"", b"BEGIN"), (b"shop", b"INSERT INTO t VALUES (1)"), (b"a b", b"")],
                         ids=["no-database", "with-database", "spaces-empty-text"])
def test_parse_query(checksum, db, text):
    q = parse_query(event_with_db(text, db, b"\x01" + struct.pack("<Q", 5), checksum), checksum, "0-1-1")
    assert (q.ts, q.thread_id, q.db, q.error_code, q.status.sql_mode, q.text) == (1234, 7, db.decode(), 0, 5, text)


def test_parse_query_refuses_a_database_name_not_terminated():
    event = bytearray(event_with_db(b"x", b"shop", b"", False))
    event[events.HEADER_LEN + 8] = 3  # the length says 3: the byte after is `p`, not NUL
    with pytest.raises(Refusal, match="default database is not terminated"):
        parse_query(bytes(event), False, "0-1-1")


RESTORED = frozenset({"shop", "a b"})


@pytest.mark.parametrize(("text", "db", "why"), [
    (b"BEGIN", "shop", None),
    (b"INSERT INTO t VALUES (1)", "other", None),
    (b"INSERT INTO t VALUES (1)", "SHOP", "its default database is SHOP"),
    (b"DELETE FROM shop.t", "", "it names shop"),
    (b"DELETE FROM `a b`.t", "", "it names a b"),
    (b"/*!50000 DROP TABLE Shop.t */", "", "it names Shop"),
    (b"INSERT INTO other.t VALUES ('shop')", "", None),
    (b"INSERT INTO other.shopping VALUES (1)", "", None),
    (b"INSERT INTO other.t VALUES ('\x00", "", "cannot read it exactly"),
], ids=["begin", "other-database", "default-database-any-case", "qualified-name", "backquoted-name-with-space",
        "executable-comment", "in-a-string-only", "a-longer-name", "unterminated-string"])
def test_touches(text, db, why):
    found = touches(Query(0, 1, db, 0, Status(), text), RESTORED)
    assert (found is None) if why is None else (found is not None and why in found)


def test_read_parses_only_the_query_events_of_a_group():
    group = StatementGroup("0-1-1", 0, True, [gtid(1, True), query(b"BEGIN", True), query(b"DELETE FROM t", True), xid(True)])
    assert [q.text for q in read(group)] == [b"BEGIN", b"DELETE FROM t"]


@pytest.mark.parametrize(("text", "rebuilt"), [
    (b"SAVEPOINT `sa_savepoint_1`", b"SAVEPOINT `sa_savepoint_1`"),
    (b"ROLLBACK TO `sp 1`", b"ROLLBACK TO `sp 1`"),
    (b"RELEASE SAVEPOINT `x`", b"RELEASE SAVEPOINT `x`"),
    (b"SAVEPOINT `a``b`", b"SAVEPOINT `a``b`"),
    (b'SAVEPOINT "a""b`c"', b"SAVEPOINT `a\"b``c`"),
    (b"savepoint sp_1", b"SAVEPOINT `sp_1`"),
    (b"SAVEPOINT `a` ; DROP TABLE t", None),
    (b"SAVEPOINT `a`b`", None),
    (b"SAVEPOINT a b", None),
    (b"SAVEPOINT 123", None),
    (b"SAVEPOINT ``", None),
    (b"SAVEPOINT `a\0`", None),
    (b"ROLLBACK", None),
    (b"ROLLBACK TO SAVEPOINT `a`", None),
    (b"SAVEPOINT /* x */ a", None),
    (b"UPDATE t SET a = 1", None),
], ids=["savepoint", "rollback-to-with-a-space", "release", "doubled-backtick", "ansi-quotes-requoted", "bare-lowercase",
        "second-statement", "unbalanced-quote", "two-words", "all-digits", "empty-name", "nul-in-name", "plain-rollback",
        "a-form-the-server-never-logs", "comment", "a-data-change"])
def test_savepoint_passes_only_a_savepoint_statement_rebuilt(text, rebuilt):
    assert savepoint(text) == rebuilt


@pytest.mark.parametrize(("text", "shown"), [
    (b"UPDATE t SET a = 1", '"UPDATE t SET a = 1"'),
    (b"INSERT INTO t\nVALUES (1)", '"INSERT INTO t VALUES (1)"'),
    (b"x" * 81, '"' + "x" * 80 + '..."'),
    (b"SELECT `\xff`", '"SELECT `\ufffd`"'),
    (b"UPDATE t SET a = 'x' WHERE b = \"y\"", '"UPDATE t SET a = \'...\' WHERE b = \'...\'"'),
], ids=["short", "newline-shown-as-a-space", "cut-at-80-characters", "not-utf8", "strings-left-out"])
def test_statement_head_shows_the_first_characters(text, shown):
    assert statement_head(text) == shown


@pytest.mark.parametrize(("text", "shown"), [
    (b"GRANT ALL ON *.* TO 'u'@'%' IDENTIFIED BY 'hunter2'", b"GRANT ALL ON *.* TO '...'@'...' IDENTIFIED BY '...'"),
    (b"SET PASSWORD FOR u = PASSWORD('hunter2')", b"SET PASSWORD FOR u = PASSWORD('...')"),
    (b"ALTER USER u IDENTIFIED VIA ed25519 USING PASSWORD(\"hunter2\")", b"ALTER USER u IDENTIFIED VIA ed25519 USING PASSWORD('...')"),
    (b"SELECT 'it''s hunter2', 'a\\'hunter2'", b"SELECT '...', '...'"),
    (b"SELECT X'68756e74657232', `a``'hunter2`", b"SELECT X'...', `a``'hunter2`"),
    (b"INSERT INTO t VALUES ('hunter2", b"INSERT INTO t VALUES ('...'"),
    (b"INSERT INTO `t'hunter2", b"INSERT INTO `..."),
], ids=["identified-by", "password-function", "double-quoted", "escaped-quotes", "hex-and-identifier", "cut-string",
        "cut-identifier"])
def test_without_literals_never_shows_a_quoted_string(text, shown):
    assert without_literals(text) == shown
    assert b"hunter2" not in without_literals(text) or b"`a``'hunter2`" in shown  # an identifier is shown as written
