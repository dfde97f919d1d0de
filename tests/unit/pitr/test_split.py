"""pitr.split: a logical base's replay reaching the restored databases only: each transaction classified (rows,
statements, or refused), the format description checked and rebuilt, row transactions rebuilt with the other
databases' table maps and rows left out, statements never passed on. Built on bytes from lastline's own encoders;
the relay logs a real server applies are tested end to end in tests/e2e/point_in_time_restore/test_pitr_logical.py."""
from __future__ import annotations

import struct

import pytest

from lastline.core.errors import Refusal
from lastline.pitr import events
from lastline.pitr.events import GTID, QUERY, XID, scan
from lastline.pitr.split import (
    ANNOTATE_ROWS,
    SERVER_VERSION,
    STMT_END,
    TABLE_MAP,
    Splitter,
    check_format,
    classify,
    empty_transaction,
    query_text,
    rebuild_format,
    rebuild_rows,
)

from .binlog import binlog, format_description, gtid, query, split_events, xid

WRITE_ROWS = 30  # v2


def table_map(table_id: int, db: bytes, checksum: bool) -> bytes:
    body = table_id.to_bytes(6, "little") + b"\0\0" + bytes([len(db)]) + db + b"\0" + b"\1t\0" + b"\1\3\0"
    return events._event(1000, TABLE_MAP, 1, 0, body, checksum)


def rows(table_id: int, checksum: bool, ends: bool = False) -> bytes:
    body = table_id.to_bytes(6, "little") + struct.pack("<H", STMT_END if ends else 0) + b"\2\0" + b"\1\xff\0\1\0\0\0"
    return events._event(1000, WRITE_ROWS, 1, 0, body, checksum)


def maps_and_rows(data: bytes) -> list[tuple[int, bytes]]:
    """(kind, table id or database) of each table map and row event in a run of whole events."""
    out, at = [], 0
    while at < len(data):
        size, kind = events.HEADER.unpack_from(data, at)[3], data[at + 4]
        if kind == TABLE_MAP:
            n = data[at + events.HEADER_LEN + 8]
            out.append((kind, bytes(data[at + events.HEADER_LEN + 9:at + events.HEADER_LEN + 9 + n])))
        elif kind == WRITE_ROWS:
            flags = struct.unpack_from("<H", data, at + events.HEADER_LEN + 6)[0]
            out.append((kind, bytes([data[at + events.HEADER_LEN], flags & STMT_END])))
        at += size
    return out


@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "crc32"])
@pytest.mark.parametrize("text", [b"", b"BEGIN", b"INSERT INTO `a b`.`c.d` VALUES ('`')"], ids=["empty", "begin", "quoted-names"])
def test_query_text(checksum, text):
    assert query_text(query(text, checksum), checksum) == text


@pytest.mark.parametrize(("kinds", "texts", "flags2", "expected"), [
    ([GTID, TABLE_MAP, WRITE_ROWS, XID], [], 0x0C, "rows"),
    ([GTID, QUERY, ANNOTATE_ROWS, TABLE_MAP, WRITE_ROWS, QUERY], [b"BEGIN", b"COMMIT"], 0, "rows"),
    ([GTID, QUERY, QUERY, XID], [b"BEGIN", b"INSERT INTO t VALUES (1)"], 0, "statements"),
    ([GTID, QUERY], [b"CREATE TABLE t (id INT)"], events.FL_STANDALONE, "statements"),
    ([GTID, 5, 13, 14, QUERY, XID], [b"INSERT INTO t VALUES (RAND())"], 0, "statements"),
    ([GTID, QUERY, ANNOTATE_ROWS, TABLE_MAP, WRITE_ROWS, QUERY, ANNOTATE_ROWS, TABLE_MAP, WRITE_ROWS, XID],
     [b"SAVEPOINT `sa_savepoint_1`", b"ROLLBACK TO `sa_savepoint_1`"], 0x0C, "rows"),
    ([GTID, QUERY, QUERY, TABLE_MAP, WRITE_ROWS, QUERY, QUERY], [b"BEGIN", b"SAVEPOINT sp", b"RELEASE SAVEPOINT sp",
                                                                 b"COMMIT"], 0, "rows"),
    ([GTID, QUERY, XID], [b"SAVEPOINT `a`"], 0x0C, "rows"),
    ([GTID, QUERY, QUERY, QUERY, XID], [b"BEGIN", b"SAVEPOINT a", b"UPDATE t SET v = 1"], 0, "statements"),
], ids=["rows-with-xid", "rows-begin-commit-annotated", "statements", "standalone-ddl", "statement-with-context-events",
        "orm-savepoint-in-rows", "savepoint-after-begin-and-release", "only-a-savepoint", "savepoint-among-statements"])
def test_classify(kinds, texts, flags2, expected):
    assert classify(kinds, texts, flags2, "0-1-9") == expected


@pytest.mark.parametrize(("kinds", "texts", "flags2", "message"), [
    ([GTID, QUERY, QUERY], [b"XA START 'a'", b"XA END 'a'"], 0x40, "is an XA transaction"),
    ([GTID, QUERY, TABLE_MAP, WRITE_ROWS, XID], [b"UPDATE t SET a = 1"], 0, "transaction mixing both"),
    ([GTID, 17, 18, XID], [], 0, "LOAD DATA"),
    ([GTID, 200, XID], [], 0, r"an unknown event \(type 200\)"),
    ([GTID, TABLE_MAP, WRITE_ROWS, XID], [], events.FL_STANDALONE, "row events"),
    ([GTID, QUERY, ANNOTATE_ROWS, TABLE_MAP, WRITE_ROWS, XID], [b"SAVEPOINT `a` /* and more */"], 0,
     r'holds a statement "SAVEPOINT `a` /\* and more \*/" and row events:'),
    ([GTID, ANNOTATE_ROWS, TABLE_MAP, WRITE_ROWS, QUERY, XID], [b"UPDATE shop.t SET v = 'x' " + b"y" * 100], 0,
     r'holds a statement "UPDATE shop.t SET v = \'\.\.\.\' y+\.\.\." and row events:'),  # its strings left out
    ([GTID, 6, XID], [], 0, r"holds Load \(event type 6\)"),
], ids=["xa", "statement-before-rows", "load-data", "unknown-event", "standalone-rows", "savepoint-with-more-text",
        "statement-named-by-its-first-characters", "a-known-event-by-its-name"])
def test_classify_refuses(kinds, texts, flags2, message):
    with pytest.raises(Refusal, match=message) as refused:
        classify(kinds, texts, flags2, "0-1-9")
    assert "event type 160" not in str(refused.value)  # Annotate_rows is part of the row events


@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "crc32"])
def test_check_format_accepts_the_layout_lastline_reads(checksum):
    check_format(format_description(checksum), "bin.000001", checksum)


@pytest.mark.parametrize(("event", "checksum"), [
    (format_description(False, version=3), False),
    (format_description(False, lengths={QUERY: 14}), False),
    (format_description(False, lengths={TABLE_MAP: 10}), False),
    (format_description(True), False),
    (format_description(False), True),
], ids=["binlog-version-3", "other-query-post-header", "other-table-map-post-header", "checksum-not-as-read",
        "no-checksum-not-as-read"])
def test_check_format_refuses_another_layout(event, checksum):
    with pytest.raises(Refusal, match="declares a layout lastline does not read"):
        check_format(event, "bin.000001", checksum)


@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "crc32"])
def test_rebuild_format_names_lastline_and_clears_in_use(checksum):
    rebuilt = rebuild_format(format_description(checksum, in_use=True), checksum)
    assert rebuilt[events.HEADER_LEN + 2:events.HEADER_LEN + 52].rstrip(b"\0") == SERVER_VERSION
    check_format(rebuilt, "relay", checksum)  # the layout is untouched
    found = scan(events.MAGIC + rebuilt)
    assert not found.in_use and found.checksum is checksum


@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "crc32"])
def test_empty_transaction_keeps_the_gtid(checksum):
    group = [gtid(42, checksum, ts=1234, domain=3), query(b"BEGIN", checksum), query(b"DROP TABLE other.t", checksum),
             xid(checksum)]
    out = empty_transaction(group, checksum)
    found = scan(binlog(out, checksum=checksum))
    assert [(t.gtid, t.time) for t in found.transactions] == [("3-1-42", 1234)]
    parts = split_events(out)
    assert [e[4] for e in parts] == [GTID, QUERY, QUERY]
    assert [query_text(e, checksum) for e in parts[1:]] == [b"BEGIN", b"COMMIT"]


@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "crc32"])
@pytest.mark.parametrize(("body", "kept"), [
    ([table_map(1, b"shop", False), rows(1, False, ends=True)], [(TABLE_MAP, b"shop"), (WRITE_ROWS, b"\1\1")]),
    ([table_map(2, b"other", False), rows(2, False, ends=True)], []),
    ([table_map(1, b"shop", False), table_map(2, b"other", False), rows(1, False), rows(2, False, ends=True)],
     [(TABLE_MAP, b"shop"), (WRITE_ROWS, b"\1\1")]),
    ([table_map(1, b"shop.x", False), rows(1, False, ends=True)], []),
], ids=["restored-database-kept", "other-database-left-out", "statement-end-moved-onto-the-last-kept",
        "a-dotted-name-is-not-the-database"])
def test_rebuild_rows_keeps_the_restored_databases_only(checksum, body, kept):
    if checksum:  # the same events, with their CRC32
        body = [events._event(*events.HEADER.unpack_from(e, 0)[:3], 0, e[events.HEADER_LEN:], True) for e in body]
    group = [gtid(5, checksum), *body, xid(checksum)]
    out = rebuild_rows(group, checksum, frozenset({b"shop"}))
    found = scan(binlog(out, checksum=checksum))
    assert [t.gtid for t in found.transactions] == ["0-1-5"]
    assert maps_and_rows(out[len(gtid(5, checksum)):]) == kept


@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "crc32"])
def test_rebuild_rows_passes_savepoints_rebuilt_and_keeps_rows_around_them(checksum):
    """An ORM's nested transaction (a savepoint, rows, a ROLLBACK TO it, rows): the statements rebuilt from their
    parts, in place, the rows of the restored database around them."""
    shop, other = table_map(1, b"shop", checksum), table_map(2, b"other", checksum)
    group = [gtid(5, checksum), shop, rows(1, checksum, ends=True), query(b'SAVEPOINT "sp 1"', checksum), other,
             rows(2, checksum, ends=True), shop, rows(1, checksum, ends=True), query(b"ROLLBACK TO `sp 1`", checksum),
             shop, rows(1, checksum, ends=True), xid(checksum)]
    out = rebuild_rows(group, checksum, frozenset({b"shop"}))
    parts = split_events(out)
    assert [e[4] for e in parts] == [GTID, TABLE_MAP, WRITE_ROWS, QUERY, TABLE_MAP, WRITE_ROWS, QUERY, TABLE_MAP,
                                     WRITE_ROWS, XID]
    assert [query_text(e, checksum) for e in parts if e[4] == QUERY] == [b"SAVEPOINT `sp 1`", b"ROLLBACK TO `sp 1`"]
    assert [t.gtid for t in scan(binlog(out, checksum=checksum)).transactions] == ["0-1-5"]


def splitter(collect: bool, *groups: bytes, checksum: bool = True) -> Splitter:
    cut = Splitter("bin.000001", 0, None, {}, collect=collect, databases=frozenset({"shop"}))
    cut.feed(binlog(*groups, checksum=checksum))
    return cut


def test_splitter_leaves_out_statements_elsewhere_and_keeps_those_that_may_reach_a_restored_database_to_run():
    elsewhere = gtid(1, True) + query(b"BEGIN", True) + query(b"DELETE FROM other.t", True) + xid(True)
    found = splitter(True, elsewhere)
    assert found.left_out == [{"gtid": "0-1-1", "statement": "DELETE FROM other.t"}]
    assert found.take() == b""  # the first pass passes nothing on
    for text in (b"DELETE FROM shop.t", b"DELETE FROM `SHOP`.t", b"/*!50000 DELETE FROM shop.t */"):
        found = splitter(True, gtid(2, True) + query(b"BEGIN", True) + query(text, True) + xid(True))
        assert [st.gtid for st in found.statements] == ["0-1-2"] and found.left_out == []


@pytest.mark.parametrize(("flags2", "why"), [
    (events.FL_TRANSACTIONAL | events.FL_DDL, "is DDL"),
    (0, "changes a non-transactional table"),
    (events.FL_STANDALONE, "changes a non-transactional table"),
], ids=["ddl", "myisam", "standalone"])
def test_splitter_refuses_a_statement_on_a_restored_database_that_cannot_commit_with_the_ledger(flags2, why):
    group = gtid(2, True, flags2=flags2) + (b"" if flags2 & events.FL_STANDALONE else query(b"BEGIN", True)) + \
        query(b"DELETE FROM shop.t", True) + (b"" if flags2 & events.FL_STANDALONE else xid(True))
    with pytest.raises(Refusal, match=f'transaction 0-1-2 \\("DELETE FROM shop.t", stamped .*\\) may change a restored '
                                      f"database and {why}"):
        splitter(True, group)


def test_splitter_second_pass_places_each_statement_to_run_at_its_empty_transaction():
    rows_group = gtid(1, True) + table_map(1, b"shop", True) + rows(1, True, ends=True) + xid(True)
    statement = gtid(2, True) + query(b"BEGIN", True) + query(b"UPDATE shop.t SET a = 1", True) + xid(True)
    found = splitter(False, rows_group, statement)
    relay = found.take()
    (st,) = found.statements
    assert st.gtid == "0-1-2" and b"UPDATE" not in relay
    assert [t.gtid for t in scan(relay[:st.offset]).transactions] == ["0-1-1"]  # the rows before it, whole
    assert relay[st.offset + 4] == GTID and struct.unpack_from("<Q", relay, st.offset + events.HEADER_LEN)[0] == 2


def test_splitter_second_pass_writes_a_relay_log_of_rebuilt_transactions():
    rows_group = gtid(1, True) + table_map(1, b"shop", True) + rows(1, True, ends=True) + xid(True)
    statement = gtid(2, True) + query(b"BEGIN", True) + query(b"DELETE FROM other.t", True) + xid(True)
    found = splitter(False, rows_group, statement)
    relay = found.take()
    again = scan(relay)
    assert [t.gtid for t in again.transactions] == ["0-1-1", "0-1-2"]
    assert b"DELETE" not in relay and SERVER_VERSION in relay
    assert [t.gtid for t in found.kept] == ["0-1-1", "0-1-2"]


@pytest.mark.parametrize(("groups", "message"), [
    ((query(b"GRANT ALL ON *.* TO x", True),), "lies outside any transaction"),
    ((format_description(True),), "a second format description"),
], ids=["statement-between-transactions", "second-format-description"])
def test_splitter_refuses(groups, message):
    with pytest.raises(Refusal, match=message):
        splitter(True, *groups)
