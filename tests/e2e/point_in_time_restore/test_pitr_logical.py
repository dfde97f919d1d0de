"""Point-in-time restore from a logical base (issue 29): a logical backup of one database (`shop`) taken while the
workload writes (an ORM's nested transaction with savepoints among it), rolled forward to a second, to a GTID and to
latest, each exactly the source's `shop` at that point,
into a target whose other database (`other`, a namesake of the source's) and whose `mysql` schema the replay never
reaches: row changes of other databases are filtered by the server (replicate_do_db), statements and DDL on them are
left out, named; a statement on `shop` runs under the replay's own account (issue 47), DDL on it is refused. A forged archive (statements rewritten into GRANT, BINLOG, writes to
mysql.*, SET GLOBAL) reaches nothing either."""
from __future__ import annotations

import json
import re
import shutil
import struct
import time
import zlib
from pathlib import Path

import pytest

from conftest import set_conn
from lastline import connections
from lastline.core.errors import Refusal
from lastline.logical.backup import stages as logical_backup
from lastline.pitr import archive, events
from lastline.pitr import restore as pitr
from lastline.pitr.split import query_text
from lastline.storage import open_storage
from lastline_dev.sandbox import Instance

from .test_pitr_restore import Writer, _shop, mark, state, temporary_table_across_a_rotation

pytestmark = pytest.mark.e2e


def _untouched(inst: Instance) -> dict:
    """What the replay must never change on the target: its own `other` and the server's accounts."""
    server = inst.server()
    return {"other": server.query("CHECKSUM TABLE other.t"), "tables": server.query(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'other' ORDER BY 1"),
        "priv": server.query("SELECT User, Host, Priv FROM mysql.global_priv WHERE User NOT LIKE 'lastline\\_%' "
                             "ORDER BY User, Host"), "tz": server.query("CHECKSUM TABLE mysql.time_zone_name"),
        "read_only": server.query("SELECT @@GLOBAL.read_only")}


def _statement(server, sql: str, db: str | None = None) -> str:
    """Run `sql` in statement format on the source (optionally with a default database); the GTID it got."""
    with server.session(database=db) as cur:
        cur.execute("SET SESSION binlog_format='STATEMENT'")
        cur.execute(sql)
        cur.connection.commit()
        cur.execute("SELECT @@SESSION.last_gtid")
        return str(cur.fetchone()[0])


@pytest.fixture(scope="module")
def lhistory(sandbox_root, tmp_path_factory):
    """A source writing `shop` and `other` with a logical base of `shop` taken under load, the archive shipped as it
    goes, the points recorded; a target with an `other` of its own."""
    src, tgt = Instance(sandbox_root, "pitr_lsrc"), Instance(sandbox_root, "pitr_ltgt")
    src.create()
    tgt.create()
    try:
        yield _history(src, tgt, tmp_path_factory.mktemp("pitr_logical"))
    finally:
        src.destroy()
        tgt.destroy()


def _history(src: Instance, tgt: Instance, dest) -> dict:
    set_conn("t_pitr_lsrc", src)
    set_conn("t_pitr_ltgt", tgt)
    storage = open_storage(f"file://{dest}")
    server = connections.server("t_pitr_lsrc")
    _shop(server, stock=100000, accounts=20)
    for inst, rows in ((src, ("source one", "source two")), (tgt, ("the target's own", "never replayed into"))):
        with inst.server().session() as cur:
            cur.execute("CREATE DATABASE other")
            cur.execute("CREATE TABLE other.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(40))")
            cur.executemany("INSERT INTO other.t (v) VALUES (%s)", [(r,) for r in rows])
            cur.connection.commit()
    archive.ship(server, storage)
    writer = Writer(src).start()
    try:
        return _workload(src, tgt, dest, storage, server, writer)
    finally:
        writer.stop.set()
        writer.go.set()


def _workload(src: Instance, tgt: Instance, dest, storage, server, writer: Writer) -> dict:
    time.sleep(1)
    plan = logical_backup.preflight({"source_conn_id": "t_pitr_lsrc", "destination": f"file://{dest}", "databases": ["shop"]})
    logical_backup.dump(plan)  # the base, taken while the writers write: shop only
    with server.session() as cur:  # row format: one transaction on both databases, and one on mysql.*
        cur.execute("INSERT INTO other.t (v) VALUES ('row, other')")
        cur.execute("UPDATE shop.stock SET qty = qty + 1000 WHERE id = 7")
        cur.connection.commit()
        cur.execute("INSERT INTO mysql.time_zone_name (Name, Time_zone_id) VALUES ('Lastline/Replayed', 4242)")
        cur.connection.commit()
        for sql in ("SAVEPOINT sa_savepoint_1", "INSERT INTO shop.accounts VALUES (901, 1)",  # an ORM's nested transaction
                    "ROLLBACK TO SAVEPOINT sa_savepoint_1", "INSERT INTO shop.accounts VALUES (902, 2)",
                    "SAVEPOINT sa_savepoint_2", "UPDATE shop.stock SET qty = qty + 5 WHERE id = 8",
                    "RELEASE SAVEPOINT sa_savepoint_2", "INSERT INTO other.t (v) VALUES ('savepoint, other')"):
            cur.execute(sql)
        cur.connection.commit()
    archive.ship(server, storage)
    server.query("FLUSH BINARY LOGS")
    elsewhere = [  # statements on other databases: never run on the target, left out and named
        _statement(server, "INSERT INTO other.t (v) VALUES ('statement, other'), ('another row of it, other')"),
        _statement(server, "CREATE TABLE other.t2 (id INT, note VARCHAR(200))"),
        _statement(server, "INSERT INTO t (v) VALUES ('default database other, a statement')", db="other")]
    time.sleep(1)
    points = {"time": mark(src, writer)}
    archive.ship(server, storage)
    temporary_table_across_a_rotation(server, statement_format=False)
    time.sleep(1)
    points["gtid"] = mark(src, writer)
    time.sleep(1)
    writer.finish()
    # statements on shop: a logical base is not rolled forward through them
    on_shop = [_statement(server, "UPDATE shop.stock SET qty = qty + 1 WHERE id <= 5"),
               _statement(server, "ALTER TABLE shop.accounts ADD COLUMN note VARCHAR(20) NOT NULL DEFAULT 'x'")]
    points["latest"] = ("latest", server.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0], state(src))
    archive.ship(server, storage)
    assert writer.commits > 200
    return {"dest": f"file://{dest}", "storage": storage, "points": points, "src": src, "tgt": tgt,
            "base": plan.backup_id, "elsewhere": elsewhere, "on_shop": on_shop, "untouched": _untouched(tgt)}


def _run(run_dag, h, until: str, dest: str | None = None) -> tuple[str, dict, str]:
    return run_dag("point_in_time_restore", {
        "target_conn_id": "t_pitr_ltgt", "destination": dest or h["dest"], "until": until, "base": "auto",
        "base_kind": "logical", "databases": [], "branch": "", "replay_method": "auto", "parallel": 2, "force": True,
        "restore_into_source": "", "aws_conn_id": None})


def _restore(run_dag, h, until: str, dest: str | None = None) -> str:
    state_, tis, logs = _run(run_dag, h, until, dest)
    assert state_ == "success", (tis, logs[-4000:])
    assert tis["physical_base.preflight"] == "skipped" and tis["logical_base.verify"] == "success", tis
    return logs


def test_a_logical_base_rolls_forward_to_a_second_reaching_only_its_databases(run_dag, lhistory):
    until, _, recorded = lhistory["points"]["time"]
    plan = pitr.preflight({"target_conn_id": "t_pitr_ltgt", "destination": lhistory["dest"], "until": until,
                           "base_kind": "logical"})
    assert plan.kind == "logical" and plan.replay["databases"] == ["shop"]
    logs = _restore(run_dag, lhistory, until)
    assert state(lhistory["tgt"]) == recorded
    assert _untouched(lhistory["tgt"]) == lhistory["untouched"]  # other.t, other.t2, mysql.*: never reached
    assert "3 statements on other databases than the restored ones were left out" in logs
    assert all(gtid in logs for gtid in lhistory["elsewhere"])
    saved = Path(re.findall(r"report: file://(\S+/point_in_time_restore\.md)", logs)[-1])
    assert json.loads((saved.parent / "index.json").read_text())["files"][0] == "point_in_time_restore.md"
    page = saved.read_text()  # the verdict first: the logical base, the point reached, the statements left out
    last = lhistory["tgt"].server().query("SELECT @@GLOBAL.gtid_slave_pos")[0][0]
    assert page.startswith(f"# Point-in-time restore of t_pitr_ltgt to {until}: ") and f"the last GTID {last}, " in page
    assert "\n**Restored logical base " in page and "row hashes, summed per table, equal the ones" in page
    assert "- **Left out:** 3 statements on other databases" in page and lhistory["elsewhere"][0] in page
    assert lhistory["tgt"].server().query("SELECT @@GLOBAL.slave_parallel_threads, @@GLOBAL.replicate_do_db") == [(0, "")]


def test_a_logical_base_to_a_gtid_is_exact_and_past_a_statement_on_it_is_refused(run_dag, lhistory):
    _, gtid, recorded = lhistory["points"]["gtid"]
    _restore(run_dag, lhistory, gtid)  # across the temporary table's rotation
    assert state(lhistory["tgt"]) == recorded
    state_, tis, logs = _run(run_dag, lhistory, "latest")
    assert state_ == "failed" and tis["replay"] == "failed", tis
    ddl = lhistory["on_shop"][1]  # the UPDATE on shop before it would run (issue 47); the ALTER cannot commit with
    assert f'transaction {ddl} ("ALTER TABLE shop.accounts' in logs and "is DDL" in logs  # the replay's ledger
    assert "transactions by parallel" not in logs  # refused in the first pass: the replay applied nothing
    assert state(lhistory["tgt"]) != lhistory["points"]["latest"][2]


def _forge(storage, gtid: str, text: bytes | list[bytes]) -> None:
    """Rewrite the statement (or, given a list, the successive statements) of transaction `gtid` in the archive as
    someone who can write the destination would: the same length (padded with spaces), the event's CRC32, the
    segment's sha256 in chain.json all made to match."""
    import hashlib

    todo = [text] if isinstance(text, bytes) else list(text)
    for b in archive.branches(storage):
        chain = archive.read_branch(storage, b["id"])
        for entry in chain.entries:
            for seg in entry.segments:
                key = f"binlogs/{b['id']}/{entry.name}/{int(seg['offset']):012d}"
                data = bytearray(storage.read_bytes(key))
                at, inside, changed = (4 if seg["offset"] == 0 else 0), False, False
                while at + events.HEADER_LEN <= len(data) and todo:
                    _, kind, _, size, _, _ = events.HEADER.unpack_from(data, at)
                    if kind == events.GTID:
                        seq, domain = struct.unpack_from("<QI", data, at + events.HEADER_LEN)
                        sid = events.HEADER.unpack_from(data, at)[2]
                        inside = f"{domain}-{sid}-{seq}" == gtid
                    elif kind == events.QUERY and inside and query_text(data[at:at + size], entry.checksum) not in (
                            b"BEGIN", b"COMMIT"):
                        old, new = query_text(data[at:at + size], entry.checksum), todo.pop(0)
                        assert len(new) <= len(old), (new, old)
                        start = at + size - 4 - len(old)
                        data[start:start + len(old)] = new.ljust(len(old))
                        struct.pack_into("<I", data, at + size - 4, zlib.crc32(bytes(data[at:at + size - 4])) & 0xFFFFFFFF)
                        changed = True
                    at += size
                if changed:
                    storage.write_bytes(key, bytes(data))
                    seg["sha256"] = hashlib.sha256(data).hexdigest()
                    archive.write_branch(storage, chain)
                if not todo:
                    return
    raise AssertionError(f"transaction {gtid}: {len(todo)} statements not found to forge")


def _forged_copy(lhistory, tmp_path, attacks: dict[str, bytes | list[bytes]]):
    shutil.copytree(lhistory["dest"].removeprefix("file://"), tmp_path / "d")
    forged = open_storage(f"file://{tmp_path / 'd'}")
    for gtid, text in attacks.items():
        _forge(forged, gtid, text)
    return f"file://{tmp_path / 'd'}"


def test_a_forged_archive_runs_no_statement_and_reaches_nothing_beyond_the_restored_databases(run_dag, lhistory, tmp_path):
    elsewhere = lhistory["elsewhere"]
    attacks = {  # statements of the span rewritten (none longer than what it replaces): none of them ever runs
        elsewhere[0]: b"GRANT ALL ON *.* TO 'lastline_evil'@'%' IDENTIFIED BY 'x'",
        elsewhere[1]: b"/*!50700 INSERT */ XA COMMIT 'app1'",
        elsewhere[2]: b"SET GLOBAL read_only = 1",
    }
    until = lhistory["points"]["time"][0]
    logs = _restore(run_dag, lhistory, until, dest=_forged_copy(lhistory, tmp_path, attacks))
    assert state(lhistory["tgt"]) == lhistory["points"]["time"][2]
    assert _untouched(lhistory["tgt"]) == lhistory["untouched"]
    assert lhistory["tgt"].server().query("SELECT COUNT(*) FROM mysql.user WHERE User = 'lastline_evil'") == [(0,)]
    assert "XA COMMIT" in logs and "left out" in logs


def test_a_forged_statement_naming_a_restored_database_runs_as_the_target_reads_it(run_dag, lhistory, tmp_path):
    """A name in a versioned comment makes it a statement that may change `shop`, so it runs under the replay's account,
    and the target's own server reads it (issue 47): here `DO 1`; the privileges, not the reading, keep it in `shop`."""
    gtid = lhistory["elsewhere"][0]
    dest = _forged_copy(lhistory, tmp_path, {gtid: b"/*!99999 DROP TABLE shop.orders */ DO 1"})
    until, _, recorded = lhistory["points"]["time"]
    logs = _restore(run_dag, lhistory, until, dest=dest)
    assert f"statement transaction {gtid} run" in logs
    assert state(lhistory["tgt"]) == recorded  # shop.orders is there, as on the source
    assert _untouched(lhistory["tgt"]) == lhistory["untouched"]


def test_the_splitter_refuses_what_the_server_would_read_otherwise(lhistory):
    """Bytes a forger can write: a statement outside any transaction, a second format description, an XA transaction,
    statements that may change a restored database however they hide it; each refused in the first pass."""
    from lastline.pitr.split import Splitter

    storage = lhistory["storage"]
    bid = archive.branches(storage)[-1]["id"]
    entry = archive.read_branch(storage, bid).entries[0]
    head = storage.read_bytes(f"binlogs/{bid}/{entry.name}/{0:012d}")
    fd_end = 4 + events.HEADER.unpack_from(head, 4)[3]
    fd, ck = head[4:fd_end], entry.checksum

    def query(text: bytes, db: bytes = b"") -> bytes:
        event = events.query_event(1, 1, 0, 7, b"", text, ck)
        if not db:
            return event
        body = bytearray(event[events.HEADER_LEN:len(event) - (4 if ck else 0)])
        body[8] = len(db)
        body[13:13] = db
        return events._event(1, events.QUERY, 1, 0, bytes(body), ck)

    def gtid(seq: int, flags2: int = events.FL_STANDALONE) -> bytes:
        return events.gtid_event(1, 1, 0, seq, 0, flags2, None, ck)

    def splits(*evs: bytes) -> Splitter:
        splitter = Splitter("forged", 0, None, {}, collect=True, databases=frozenset({"shop"}))
        splitter.feed(events.MAGIC + fd + b"".join(evs))
        return splitter

    assert splits(gtid(1), query(b"CREATE TABLE other.x (id INT)")).left_out[0]["gtid"] == "0-1-1"  # elsewhere: out
    with pytest.raises(Refusal, match="outside any transaction"):
        splits(query(b"GRANT ALL ON *.* TO x"), gtid(1), query(b"CREATE TABLE other.x (id INT)"))
    with pytest.raises(Refusal, match="a second format description"):
        splits(gtid(1), query(b"CREATE TABLE other.x (id INT)"), fd)
    with pytest.raises(Refusal, match="XA transaction"):
        splits(gtid(1, 0x40), query(b"XA START 'a'"), query(b"COMMIT"))
    for text in (b"DROP TABLE `shop`.t", b"/*M!999999 DELETE FROM SHOP.t */ DO 1", b"INSERT INTO t VALUES (1)",
                 b"SELECT '\x00'"):  # a name, a default database, what lastline cannot read: it may change shop, and
        with pytest.raises(Refusal, match="may change a restored database and changes a non-transactional table"):
            splits(gtid(1), query(text, b"shop" if b"INTO t " in text else b""))  # standalone: it cannot run once


def test_relay_logs_hold_no_row_of_another_database_and_cross_database_keys_are_refused(lhistory):
    """A row transaction on both databases reaches the applier rebuilt, with the rows of `shop` only (a server that
    restarts its applier by itself after a crash, its filter gone, finds nothing else); a foreign key between a
    restored table and another database's, either way, is refused before anything is applied."""
    from lastline.pitr import scoped
    from lastline.pitr.span import FileSpan
    from lastline.pitr.split import TABLE_MAP, Splitter, cut

    storage = lhistory["storage"]
    bid = archive.branches(storage)[-1]["id"]
    maps: set[bytes] = set()
    for entry in archive.read_branch(storage, bid).entries:
        f = FileSpan(bid, entry.name, entry.size, entry.checksum, entry.segments)
        out = b"".join(cut(storage, f, Splitter(entry.name, 0, None, {}, collect=False, databases=frozenset({"shop"})),
                           True))
        at = 4
        while at + events.HEADER_LEN <= len(out):
            size = events.HEADER.unpack_from(out, at)[3]
            if out[at + 4] == TABLE_MAP:
                n = out[at + events.HEADER_LEN + 8]
                maps.add(out[at + events.HEADER_LEN + 9:at + events.HEADER_LEN + 9 + n])
            at += size
        assert at == len(out)
    assert maps == {b"shop"}  # the archive holds rows of `other` and `mysql` too (see the fixture)
    tgt = lhistory["tgt"].server()
    with tgt.session() as cur:
        for child, parent in (("other.refs", "shop.stock"), ("shop.refs", "other.t")):
            cur.execute(f"CREATE TABLE {child} (id INT PRIMARY KEY, ref INT, FOREIGN KEY (ref) REFERENCES {parent} (id) "
                        "ON DELETE CASCADE)")
            try:
                with pytest.raises(Refusal, match=f"{child} .* references {parent}"):
                    scoped.refuse_foreign_keys(cur, ["shop"])
            finally:
                cur.execute(f"DROP TABLE {child}")


def test_a_logical_base_refuses_what_lastline_does_not_pass_on(lhistory):
    with pytest.raises(Refusal, match="replay_method pipe: a logical base"):
        pitr.preflight({"target_conn_id": "t_pitr_ltgt", "destination": lhistory["dest"], "until": "latest",
                        "base_kind": "logical", "replay_method": "pipe"})
    with pytest.raises(Refusal, match="not in base"):
        pitr.preflight({"target_conn_id": "t_pitr_ltgt", "destination": lhistory["dest"], "until": "latest",
                        "base_kind": "logical", "databases": ["other"]})
    from lastline.pitr.split import classify
    with pytest.raises(Refusal, match="a transaction mixing both"):
        classify([events.GTID, events.QUERY, 19, 23, events.XID], [b"UPDATE x SET y = 1"], 0x0c, "0-1-9")
    with pytest.raises(Refusal, match="a transaction mixing both"):  # a statement before the rows, even "BEGIN"
        classify([events.GTID, 19, 23, events.QUERY, 19, 23, events.XID], [b"BEGIN"], 0x0c, "0-1-9")
    assert classify([events.GTID, 160, 19, 23, events.XID], [], 0x0c, "0-1-9") == "rows"
    assert classify([events.GTID, events.QUERY, 160, 19, 23, events.QUERY], [b"BEGIN", b"COMMIT"], 0, "0-1-9") == "rows"
    assert json.dumps(classify([events.GTID, events.QUERY, 5, events.QUERY], [b"BEGIN", b"INSERT"], 0, "0-1-9")) == '"statements"'
