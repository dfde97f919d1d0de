"""pitr.event_check: every archived event a physical base's replay applies is checked before anything is applied:
data changes pass; a statement, table map, row event, event type or format description that reaches beyond data
refuses the replay, named by file, byte and transaction. A compressed statement is read uncompressed as the server
reads it, and a table map's names as the server reads them. On bytes built with lastline's own encoders."""
from __future__ import annotations

import hashlib
import struct
import zlib

import pytest

from lastline.core.errors import Refusal
from lastline.pitr import events
from lastline.pitr.chain import Entry
from lastline.pitr.event_check import CheckedCutter, _map_name, check_span, uncompressed
from lastline.pitr.events import QUERY_COMPRESSED
from lastline.pitr.span import resolve
from lastline.pitr.split import TABLE_MAP
from lastline.pitr.statements import USER_VAR
from lastline.pitr.window import PREFIX, Line, Until
from lastline.storage.file import FileStorage

from .binlog import binlog, format_description, gtid, query, transaction, xid

WRITE_ROWS = 30  # v2
T0 = 1_795_882_472


def compress(text: bytes, size: int = 4) -> bytes:
    """A statement as log_bin_compress writes it: 0x80 | the length's size, the length big-endian, a zlib stream."""
    return bytes([0x80 | size]) + len(text).to_bytes(size, "big") + zlib.compress(text)


@pytest.mark.parametrize(("text", "expected"), [
    (compress(b"INSERT INTO t VALUES (1)"), b"INSERT INTO t VALUES (1)"),
    (compress(b"UPDATE t SET a = 2", size=1), b"UPDATE t SET a = 2"),
    (compress(b""), b""),
    (b"", None),
    (b"\x00" + compress(b"x")[1:], None),
    (bytes([0x80]) + compress(b"x")[1:], None),
    (bytes([0x85]) + compress(b"x")[1:], None),
    (compress(b"x")[:3], None),
    (compress(b"x")[:-2], None),
    (compress(b"x")[:1] + (0).to_bytes(4, "big") + compress(b"x")[5:], None),
    (compress(b"x")[:5] + b"garbage", None),
], ids=["statement", "one-byte-length", "empty-statement", "nothing", "no-compression-mark", "zero-length-size",
        "length-size-five", "length-cut", "zlib-stream-cut", "longer-than-its-length", "not-zlib"])
def test_uncompressed_reads_as_the_server_does(text, expected):
    assert uncompressed(text) == expected


@pytest.mark.parametrize(("raw", "name"), [
    (b"shop\0", "shop"),
    ("café\0".encode(), "café"),
    (b"mysql\0x\0", None),
    (b"shop", None),
    (b"\0", None),
    (b"\xff\xfe\0", None),
], ids=["plain", "utf8", "nul-inside", "no-terminator", "empty", "not-utf8"])
def test_map_name(raw, name):
    assert _map_name(raw) == name


def table_map(table_id: int, db: bytes, checksum: bool, table: bytes = b"t") -> bytes:
    body = (table_id.to_bytes(6, "little") + b"\0\0" + bytes([len(db)]) + db + b"\0" + bytes([len(table)]) + table + b"\0"
            + b"\1\3\0")
    return events._event(1000, TABLE_MAP, 1, 0, body, checksum)


def rows(table_id: int, checksum: bool) -> bytes:
    body = table_id.to_bytes(6, "little") + struct.pack("<H", 1) + b"\2\0" + b"\1\xff\0\1\0\0\0"
    return events._event(1000, WRITE_ROWS, 1, 0, body, checksum)


def compressed_query(text: bytes, checksum: bool) -> bytes:
    return events._event(1000, QUERY_COMPRESSED, 1, 0, struct.pack("<IIBHH", 7, 0, 0, 0, 0) + b"\0" + text, checksum)


def user_var(name: bytes, checksum: bool) -> bytes:
    return events._event(1000, USER_VAR, 1, 0, struct.pack("<I", len(name)) + name + b"\1", checksum)


def group(seq: int, *inside: bytes, checksum: bool) -> bytes:
    """A transaction: GTID, BEGIN, `inside`, XID."""
    return gtid(seq, checksum) + query(b"BEGIN", checksum) + b"".join(inside) + xid(checksum)


def cut_all(data: bytes, applied: dict[int, int] | None = None) -> CheckedCutter:
    cutter = CheckedCutter("bin.000001", 0, None, applied or {})
    cutter.feed(data)
    cutter.take()
    return cutter


@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "crc32"])
@pytest.mark.parametrize("inside", [
    lambda c: [query(b"INSERT INTO shop.t VALUES (1)", c)],
    lambda c: [query(b"CREATE TABLE shop.t2 (id INT)", c)],
    lambda c: [table_map(7, b"shop", c), rows(7, c)],
    lambda c: [compressed_query(compress(b"DELETE FROM shop.t WHERE id = 1"), c)],
    lambda c: [user_var(b"my_var$1", c), query(b"INSERT INTO shop.t VALUES (@my_var$1)", c)],
], ids=["insert", "create-table", "rows-after-their-map", "compressed-delete", "user-variable"])
def test_data_changes_pass(checksum, inside):
    cutter = cut_all(binlog(group(1, *inside(checksum), checksum=checksum), transaction(2, checksum), checksum=checksum))
    assert [t.gtid for t in cutter.kept] == ["0-1-1", "0-1-2"]


@pytest.mark.parametrize(("inside", "refused"), [
    ([query(b"GRANT ALL ON *.* TO 'x'@'%'", False)], "reaches beyond data: it is 'GRANT', not a data change"),
    ([query(b"INSERT INTO mysql.user VALUES (1)", False)], "reaches beyond data"),
    ([table_map(7, b"mysql", False, b"user"), rows(7, False)], "row events on mysql.user reach a system schema"),
    ([table_map(7, b"_lastline", False), rows(7, False)], "row events on _lastline.t reach a system schema"),
    ([table_map(7, b"mysql\0x", False), rows(7, False)], "names a database or table the server would read otherwise"),
    ([rows(7, False)], "a row event names a table no table map of its transaction checked"),
    ([table_map(7, b"shop", False), rows(8, False)], "a row event names a table no table map"),
    ([compressed_query(b"\x84garbage", False)], "a compressed statement cannot be uncompressed as the server would"),
    ([compressed_query(compress(b"SHUTDOWN"), False)], "'SHUTDOWN' reaches beyond data"),
    ([user_var(b"a`b", False)], "a user variable has a name that is not plain"),
    ([events._event(1000, 17, 1, 0, b"\0" * 8, False)], r"an event Begin_load_query \(event type 17\) is not a data change lastline replays"),
], ids=["grant", "system-table-statement", "rows-on-mysql", "rows-on-lastlines-schema", "nul-in-a-mapped-name",
        "rows-without-a-map", "rows-of-another-map", "compressed-unreadable", "compressed-shutdown", "user-var-name",
        "load-data-event"])
def test_what_reaches_beyond_data_refuses_the_replay(inside, refused):
    with pytest.raises(Refusal, match=refused) as err:
        cut_all(binlog(transaction(1, False), group(2, *inside, checksum=False)))
    assert "bin.000001 at byte" in str(err.value) and "transaction 0-1-2" in str(err.value)
    assert "Nothing was applied" in str(err.value)


def test_a_transaction_already_applied_is_still_read_but_its_statements_not_checked():
    data = binlog(group(1, query(b"GRANT ALL ON *.* TO 'x'@'%'", False), checksum=False), transaction(2, False))
    cutter = cut_all(data, applied={0: 1})  # the base holds 0-1-1: the replay skips it
    assert [t.gtid for t in cutter.kept] == ["0-1-2"]


@pytest.mark.parametrize(("data", "refused"), [
    (events.MAGIC + format_description(False) + format_description(False) + transaction(1, False),
     "a second format description would change how the server reads"),
    (events.MAGIC + format_description(False, version=3) + transaction(1, False),
     "the format description is not one lastline reads"),
    (binlog(query(b"INSERT INTO shop.t VALUES (1)", False)), r"an event Query \(event type 2\) lies outside any transaction"),
], ids=["second-format-description", "another-format-version", "a-statement-outside-any-transaction"])
def test_the_files_frame_is_checked(data, refused):
    with pytest.raises(Refusal, match=refused):
        cut_all(data)


def test_check_span_reads_the_archive_and_counts_what_it_checked(tmp_path):
    data = binlog(*(transaction(n, True, ts=T0 + n) for n in (1, 2, 3)), checksum=True)
    store = FileStorage(str(tmp_path))
    store.write_bytes(f"{PREFIX}/b1/bin.000001/{0:012d}", data)
    seg = {"offset": 0, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "last_time": T0 + 3,
           "end_gtids": "0-1-3"}
    entry = Entry("bin.000001", "", size=len(data), segments=[seg], closed=True, checksum=True, transactions=3,
                  end_gtids="0-1-3", first_time=T0 + 1, last_time=T0 + 3)
    line = Line("b1", [("b1", entry)], {"file": "bin.000001", "size": len(data), "time": T0 + 10})
    first = events.scan(data).transactions[0]
    span = resolve(store, line, "bin.000001", first.end, "0-1-1", Until.parse("latest"))
    assert check_span(store, span) == 2
    bad = binlog(*(transaction(n, True, ts=T0 + n) for n in (1, 2)), group(3, query(b"DROP USER x", True), checksum=True),
                 checksum=True)
    store.write_bytes(f"{PREFIX}/b1/bin.000001/{0:012d}", bad)
    seg.update(size=len(bad), sha256=hashlib.sha256(bad).hexdigest())
    entry.size = len(bad)
    with pytest.raises(Refusal, match="'DROP USER x' reaches beyond data"):
        check_span(store, resolve(store, line, "bin.000001", first.end, "0-1-1", Until.parse("latest")))
