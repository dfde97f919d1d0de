"""pitr.scoped: a logical base's replay reaching the restored databases only: names a filter cannot hold refused, a
first pass over a real local archive that keeps row changes, leaves out statements on other databases and refuses
one that may change a restored database, the span cut as relay logs, and foreign keys that cross out of the restored
databases refused on a real server."""
from __future__ import annotations

import hashlib
import struct

import pytest

from lastline.core.errors import ConfigError, Refusal
from lastline.core.hosts import LOCAL
from lastline.pitr import events
from lastline.pitr.chain import Entry
from lastline.pitr.scoped import check_names, collect, cut_files, refuse_foreign_keys
from lastline.pitr.span import Span, resolve
from lastline.pitr.split import TABLE_MAP
from lastline.pitr.window import PREFIX, Line, Until
from lastline.storage.file import FileStorage

from .binlog import binlog, gtid, query, xid

WRITE_ROWS = 30  # v2
T0 = 1_795_882_472


@pytest.mark.parametrize("databases", [["shop"], ["shop", "my_db", "ünï"], []], ids=["one", "several", "none"])
def test_check_names_passes_names_a_filter_holds(databases):
    check_names(databases)


@pytest.mark.parametrize("databases", [["a,b"], ["shop", ""], [","]], ids=["comma", "empty", "only-a-comma"])
def test_check_names_refuses_names_a_filter_cannot_hold(databases):
    with pytest.raises(ConfigError, match="cannot be filtered on. Restore a physical base instead"):
        check_names(databases)


def rows_trx(seq: int, db: bytes) -> bytes:
    body = 7 .to_bytes(6, "little") + b"\0\0" + bytes([len(db)]) + db + b"\0\1t\0\1\3\0"
    rows = 7 .to_bytes(6, "little") + struct.pack("<H", 1) + b"\2\0" + b"\1\xff\0\1\0\0\0"
    return (gtid(seq, True, ts=T0 + seq) + query(b"BEGIN", True, ts=T0 + seq)
            + events._event(T0 + seq, TABLE_MAP, 1, 0, body, True) + events._event(T0 + seq, WRITE_ROWS, 1, 0, rows, True)
            + xid(True, ts=T0 + seq))


def statement_trx(seq: int, text: bytes) -> bytes:
    return gtid(seq, True, ts=T0 + seq) + query(b"BEGIN", True, ts=T0 + seq) + query(text, True, ts=T0 + seq) + xid(True, ts=T0 + seq)


def archived(tmp_path, *groups: bytes) -> tuple[FileStorage, Span]:
    """A local archive of one binlog file holding `groups`, and the span from before the first of them to its end."""
    data = binlog(*groups, checksum=True)
    store = FileStorage(str(tmp_path / "archive"))
    store.write_bytes(f"{PREFIX}/b1/bin.000001/{0:012d}", data)
    trx = events.scan(data).transactions
    seg = {"offset": 0, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "last_time": trx[-1].time,
           "end_gtids": trx[-1].gtid}
    entry = Entry("bin.000001", "", size=len(data), segments=[seg], closed=True, checksum=True, transactions=len(trx),
                  end_gtids=trx[-1].gtid, first_time=trx[0].time, last_time=trx[-1].time)
    line = Line("b1", [("b1", entry)], {"file": "bin.000001", "size": len(data), "time": trx[-1].time + 10})
    return store, resolve(store, line, "bin.000001", trx[0].start, "0-1-0", Until.parse("latest"))


def test_collect_keeps_every_transaction_and_names_the_statements_left_out(tmp_path):
    store, span = archived(tmp_path, rows_trx(1, b"shop"), statement_trx(2, b"INSERT INTO other.t VALUES (1)"),
                           rows_trx(3, b"other"))
    left_out, kept = collect(store, span, {0: 0}, ["shop"])
    assert [t.gtid for t in kept] == ["0-1-1", "0-1-2", "0-1-3"]
    assert left_out == [{"gtid": "0-1-2", "statement": "INSERT INTO other.t VALUES (1)"}]


@pytest.mark.parametrize("text", [b"INSERT INTO shop.t VALUES (1)", b"UPDATE SHOP.t SET a = 1"], ids=["insert", "other-case"])
def test_collect_passes_a_transactional_statement_on_a_restored_database_to_run(tmp_path, text):
    store, span = archived(tmp_path, rows_trx(1, b"shop"), statement_trx(2, text))
    left_out, kept = collect(store, span, {0: 0}, ["shop"])
    assert left_out == [] and [t.gtid for t in kept] == ["0-1-1", "0-1-2"]


def test_collect_refuses_ddl_on_a_restored_database(tmp_path):
    ddl = gtid(2, True, ts=T0 + 2, flags2=events.FL_DDL | events.FL_STANDALONE) + query(b"DROP DATABASE shop", True)
    store, span = archived(tmp_path, rows_trx(1, b"shop"), ddl)
    with pytest.raises(Refusal, match="transaction 0-1-2 .* may change a restored database and is DDL"):
        collect(store, span, {0: 0}, ["shop"])


def test_cut_files_writes_one_relay_log_per_file(tmp_path):
    store, span = archived(tmp_path, rows_trx(1, b"shop"), rows_trx(2, b"other"), rows_trx(3, b"shop"))
    relay = tmp_path / "relay"
    relay.mkdir()
    paths, kept, written, statements = cut_files(store, span, {0: 1}, ["shop"], LOCAL, str(relay), "unit-relay")
    assert statements == []
    assert paths == [str(relay / "unit-relay.000001")]
    assert [t.gtid for t in kept] == ["0-1-2", "0-1-3"]  # 0-1-1 is applied already
    data = (relay / "unit-relay.000001").read_bytes()
    assert len(data) == written and data.startswith(events.MAGIC)
    assert [t.gtid for t in events.scan(data).transactions] == ["0-1-2", "0-1-3"]


def test_cut_files_names_the_relay_log_and_offset_of_each_statement_to_run(tmp_path):
    store, span = archived(tmp_path, rows_trx(1, b"shop"), statement_trx(2, b"UPDATE shop.t SET a = 2"), rows_trx(3, b"shop"))
    relay = tmp_path / "relay"
    relay.mkdir()
    _, kept, _, statements = cut_files(store, span, {0: 0}, ["shop"], LOCAL, str(relay), "unit-relay")
    (st,) = statements
    data = (relay / "unit-relay.000001").read_bytes()
    assert st.relay == "unit-relay.000001" and st.gtid == "0-1-2" and data[st.offset + 4] == events.GTID
    assert [t.gtid for t in events.scan(data[:st.offset]).transactions] == ["0-1-1"]


@pytest.fixture
def crossing(target):
    """Two databases, unit_scoped_child's table referencing unit_scoped_parent's (dropped afterwards)."""
    server = target.server()
    with server.session() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for db in ("unit_scoped_parent", "unit_scoped_child"):
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
            cur.execute(f"CREATE DATABASE {db}")
        cur.execute("CREATE TABLE unit_scoped_parent.p (id INT PRIMARY KEY) ENGINE=InnoDB")
        cur.execute("CREATE TABLE unit_scoped_child.c (id INT PRIMARY KEY, p INT, CONSTRAINT unit_fk FOREIGN KEY (p) "
                    "REFERENCES unit_scoped_parent.p (id)) ENGINE=InnoDB")
    try:
        yield server
    finally:
        with server.session() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("DROP DATABASE IF EXISTS unit_scoped_child")
            cur.execute("DROP DATABASE IF EXISTS unit_scoped_parent")


@pytest.mark.parametrize(("databases", "refused"), [
    (["unit_scoped_parent"], True),
    (["unit_scoped_child"], True),
    (["unit_scoped_parent", "unit_scoped_child"], False),
    (["unit_scoped_none"], False),
], ids=["parent-alone", "child-alone", "both", "neither"])
def test_refuse_foreign_keys_that_cross_out_of_the_restored_databases(crossing, databases, refused):
    with crossing.session() as cur:
        if refused:
            with pytest.raises(Refusal, match=r"unit_scoped_child.c \(unit_fk\) references unit_scoped_parent.p"):
                refuse_foreign_keys(cur, databases)
        else:
            refuse_foreign_keys(cur, databases)
