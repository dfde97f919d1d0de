"""The binlog archive on a real server (issue 29's first step): what it ships is the source's binlogs byte for
byte, each byte once and in order across rotations; files purged before they were shipped are named holes; a
server that writes its binlogs anew under the same names forks the archive instead of overwriting it."""
from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from conftest import set_conn
from lastline import connections
from lastline.core.errors import IntegrityError
from lastline.pitr import archive, check, window
from lastline.pitr.catalog import segment_key
from lastline.storage import open_storage
from lastline_dev.sandbox import Instance

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def source(sandbox_root):
    inst = Instance(sandbox_root, "barchive")
    inst.create()
    set_conn("t_barchive", inst)
    inst.server().query("CREATE DATABASE shop")
    inst.server().query("CREATE TABLE shop.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(100))")
    yield inst
    inst.destroy()


def _write(inst: Instance, n: int) -> None:
    with inst.server().session() as cur:
        for i in range(n):
            cur.execute("INSERT INTO shop.t (v) VALUES (%s)", (f"row {i} " + "x" * 60,))
            cur.connection.commit()


def _archived(storage, branch_id: str) -> dict[str, bytes]:
    """Each archived file, its segments joined in order (checked to be contiguous)."""
    out = {}
    for entry in archive.read_branch(storage, branch_id).entries:
        if entry.missing:
            continue
        data = b""
        for seg in entry.segments:
            assert seg["offset"] == len(data), f"{entry.name}: a gap or an overlap at byte {seg['offset']}"
            data += storage.read_bytes(segment_key(branch_id, entry.name, seg))
        assert len(data) == entry.size
        out[entry.name] = data
    return out


def _on_disk(inst: Instance, name: str, size: int) -> bytes:
    return (inst.datadir / name).read_bytes()[:size]


def _same(archived: bytes, source: bytes) -> bool:
    """Byte for byte, but for the in-use flag (byte 21), which the server clears when it closes a file that was
    archived while open."""
    return archived[:21] + archived[22:] == source[:21] + source[22:] and len(archived) == len(source)


def test_each_byte_is_shipped_once_and_in_order_across_rotations(source, tmp_path):
    storage = open_storage(f"file://{tmp_path}")
    server = connections.server("t_barchive")
    _write(source, 50)
    first = archive.ship(server, storage)
    assert first["bytes"] > 0 and not first["holes"] and not first["forks"]
    _write(source, 30)  # the open file grows: only its new bytes go
    second = archive.ship(server, storage)
    server.query("FLUSH BINARY LOGS")
    _write(source, 20)
    third = archive.ship(server, storage)
    assert archive.ship(server, storage)["bytes"] == 0  # nothing new: nothing shipped
    assert second["bytes"] > 0 and third["bytes"] > 0
    branch = archive.branches(storage)[-1]["id"]
    files = _archived(storage, branch)
    _, now = archive.source_files(server)
    assert [f.name for f in now] == list(files)  # in order, none missing
    for f in now:
        assert _same(files[f.name], _on_disk(source, f.name, f.size)), f"{f.name} differs from the source's"
    chain = archive.read_branch(storage, branch)
    assert [e.closed for e in chain.entries] == [True] * (len(chain.entries) - 1) + [False]
    assert len(chain.entries[-2].segments) >= 2  # the file archived while it grew came in pieces


def test_a_server_restart_is_a_rotation_not_a_fork_or_a_hole(source, tmp_path):
    storage = open_storage(f"file://{tmp_path}")
    server = connections.server("t_barchive")
    _write(source, 10)
    before = archive.ship(server, storage)
    source.stop()
    source.start()
    _write(source, 10)
    after = archive.ship(server, storage)
    assert after["branch"] == before["branch"] and not after["holes"] and not after["forks"] and after["bytes"] > 0
    _, now = archive.source_files(server)
    files = _archived(storage, after["branch"])
    assert all(_same(files[f.name], _on_disk(source, f.name, f.size)) for f in now)


def test_files_purged_before_they_were_shipped_are_named_holes(source, tmp_path):
    storage = open_storage(f"file://{tmp_path}")
    server = connections.server("t_barchive")
    archive.ship(server, storage)
    _write(source, 10)
    for _ in range(3):
        server.query("FLUSH BINARY LOGS")
        _write(source, 5)
    _, now = archive.source_files(server)
    server.query(f"PURGE BINARY LOGS TO '{now[-1].name}'")
    result = archive.ship(server, storage)
    missing = [f.name for f in now[-4:-1]]
    assert result["holes"] == missing, result  # the open file archived in part, then the two never seen
    chain = archive.read_branch(storage, result["branch"])
    assert [e.name for e in chain.entries if e.missing or e.tail_missing] == missing
    assert chain.entries[-4].tail_missing and chain.entries[-4].segments  # archived in part: that part is kept
    assert chain.entries[-1].name == now[-1].name and not chain.entries[-1].missing


def test_a_file_purged_with_only_its_rotate_unshipped_is_proven_empty_and_one_with_transactions_is_a_named_hole(
        source, tmp_path):
    storage = open_storage(f"file://{tmp_path}")
    server = connections.server("t_barchive")
    _write(source, 5)
    archive.ship(server, storage)  # the open file, archived up to its last transaction
    server.query("FLUSH BINARY LOGS")  # closed: all the archive lacks of it is its Rotate event
    server.query("FLUSH BINARY LOGS")  # and a file of no transaction at all
    _write(source, 5)
    _, now = archive.source_files(server)
    server.query(f"PURGE BINARY LOGS TO '{now[-1].name}'")
    result = archive.ship(server, storage)
    assert result["holes"] == [] and result["proven_empty"] == [f.name for f in now[-3:-1]], result
    chain = archive.read_branch(storage, result["branch"])
    tail, whole, after = chain.entries[-3:]
    assert tail.tail_missing and tail.segments and whole.missing and after.name == now[-1].name
    assert tail.proven_empty == whole.proven_empty == now[-1].name and tail.end_gtids == now[-1].start_gtids
    assert not tail.hole and not whole.unusable
    win = window.windows(storage)[-1]
    assert win["holes"] == [] and win["proven_empty"] == [tail.name, whole.name] and win["from_file"] == chain.entries[0].name
    assert check.check(storage, 3600)["problems"] == []
    # transactions the archive never shipped, in a file closed and purged: a hole, naming the GTIDs it lost
    domain, server_id, seq = server.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0].split("-")
    _write(source, 3)
    server.query("FLUSH BINARY LOGS")
    _write(source, 2)
    _, now = archive.source_files(server)
    server.query(f"PURGE BINARY LOGS TO '{now[-1].name}'")
    result = archive.ship(server, storage)
    assert result["holes"] == [now[-2].name] and result["proven_empty"] == [], result
    hole = next(e for e in archive.read_branch(storage, result["branch"]).entries if e.name == now[-2].name)
    assert hole.tail_hole and hole.lost_gtids == f"{domain}-{server_id}-{int(seq) + 1}..{domain}-{server_id}-{int(seq) + 3}"
    assert window.windows(storage)[-1]["holes"] == [now[-2].name]


def test_binlogs_written_anew_under_the_same_names_fork_the_archive(source, tmp_path):
    storage = open_storage(f"file://{tmp_path}")
    server = connections.server("t_barchive")
    server.query("RESET MASTER")
    _write(source, 5)
    before = archive.ship(server, storage)
    old = _archived(storage, before["branch"])
    server.query("RESET MASTER")  # as a restored server would: mariadb-bin.000001 again, other bytes
    _write(source, 40)  # longer than what was archived: only the bytes tell the files apart
    after = archive.ship(server, storage)
    assert after["forks"] and "differ from the archived ones" in after["forks"][0]
    assert after["branch"] != before["branch"]
    assert _archived(storage, before["branch"]) == old  # the old branch is never overwritten
    branches = archive.branches(storage)
    assert [b["id"] for b in branches] == [before["branch"], after["branch"]] and branches[1]["parent"] == before["branch"]
    _, now = archive.source_files(server)
    assert _same(_archived(storage, after["branch"])[now[0].name], _on_disk(source, now[0].name, now[0].size))
    # the archive's own files come from the destination: a branch id that would leave the archive is refused
    (tmp_path / "binlogs" / "branches.json").write_text('[{"id": "../../etc"}]')
    with pytest.raises(IntegrityError, match="names branches lastline never makes"):
        archive.ship(server, storage)


def test_the_dag_ships_up_to_the_current_position_and_ends(run_dag, source, tmp_path):
    _write(source, 10)
    conf = {"source_conn_id": "t_barchive", "destination": f"file://{tmp_path}", "aws_conn_id": None, "until_current": True}
    state, tis, logs = run_dag("binlog_archive", conf)
    assert state == "success", tis
    assert "binlog archive" in logs and "bytes shipped" in logs
    assert "recoverable up to" in logs and tis["check_chain"] == "success"
    page = Path(re.search(r"report: file://(\S+/binlog_archive\.md)", logs)[1]).read_text().splitlines()
    gtid = connections.server("t_barchive").query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]
    assert re.match(rf"# Binlog archive, checked \S+Z: recoverable to \S+Z \(GTID {gtid}\) on branch ", page[0]), page[:3]
    assert page[2] == "**No problem: the chain is whole and current.**"  # the verdict, on the first lines
    storage = open_storage(f"file://{tmp_path}")
    server = connections.server("t_barchive")
    _, now = archive.source_files(server)
    files = _archived(storage, archive.branches(storage)[-1]["id"])
    assert _same(files[now[-1].name], _on_disk(source, now[-1].name, now[-1].size))
    # a streaming run: it ships what the source writes while it runs, then ends
    writer = threading.Timer(1.5, _write, (source, 20))
    writer.start()
    state, tis, logs = run_dag("binlog_archive", {**conf, "until_current": False, "ship_every_seconds": 0.5,
                                                  "stream_minutes": 0.1})
    writer.join()
    assert state == "success", tis
    _, now = archive.source_files(server)
    files = _archived(storage, archive.branches(storage)[-1]["id"])
    assert _same(files[now[-1].name], _on_disk(source, now[-1].name, now[-1].size))  # the writes during the run too
    assert "streamed for" in logs


def test_a_run_queued_behind_the_dag_s_stream_ends_it(run_dag, source, tmp_path, monkeypatch):
    """The DAG's ship task asks Airflow (the task's supervisor: get_dr_count) whether another run of binlog_archive is
    queued, and hands over to it at the next check, its run ending well (the chain checked)."""
    import pendulum
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType

    from lastline.pitr import stream

    monkeypatch.setattr(stream, "WAITING_EVERY", 1.0)
    _write(source, 3)
    with create_session() as session:  # a run triggered by hand, waiting behind the one below (one at a time)
        session.add(DagRun(dag_id="binlog_archive", run_id="manual__queued_behind", run_type=DagRunType.MANUAL,
                           state=DagRunState.QUEUED, conf={}, logical_date=None, run_after=pendulum.now("UTC")))
    try:
        state, tis, logs = run_dag("binlog_archive", {"source_conn_id": "t_barchive", "destination": f"file://{tmp_path}",
                                                      "aws_conn_id": None, "until_current": False,
                                                      "ship_every_seconds": 0.5, "stream_minutes": 1})
    finally:
        with create_session() as session:
            session.query(DagRun).filter_by(dag_id="binlog_archive", run_id="manual__queued_behind").delete()
    assert state == "success" and tis["check_chain"] == "success", tis
    assert re.search(r"ended: another run of binlog_archive is queued: handing over after \d+ s", logs), logs[-3000:]
    assert "could not ask" not in logs


def test_transactions_end_where_the_server_ends_them(source, tmp_path):
    """ROLLBACK TO a savepoint inside a transaction, an XA transaction prepared then committed, a compressed DDL:
    each group runs from its GTID event to the event the server ends it with, and the index counts every one."""
    from lastline.pitr import events

    server = connections.server("t_barchive")
    server.query("FLUSH BINARY LOGS")
    before = server.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]
    with server.session(autocommit=True) as cur:
        cur.execute("CREATE TABLE shop.m (a INT) ENGINE=MyISAM")
        cur.execute("SET SESSION binlog_format='STATEMENT'")
        cur.execute("BEGIN")
        cur.execute("INSERT INTO shop.t (v) VALUES ('sp 1')")
        cur.execute("SAVEPOINT sp")
        cur.execute("INSERT INTO shop.m VALUES (2)")
        cur.execute("ROLLBACK TO sp")
        cur.execute("INSERT INTO shop.t (v) VALUES ('sp 3')")
        cur.execute("COMMIT")
        cur.execute("SET SESSION binlog_format='ROW'")
        cur.execute("XA START 'x1'")
        cur.execute("INSERT INTO shop.t (v) VALUES ('xa')")
        cur.execute("XA END 'x1'")
        cur.execute("XA PREPARE 'x1'")
        cur.execute("XA COMMIT 'x1'")
        cur.execute("SET GLOBAL log_bin_compress=ON")
        try:
            cur.execute("CREATE TABLE shop.wide (" + ", ".join(f"a_rather_long_column_{i} INT" for i in range(30)) + ")")
        finally:
            cur.execute("SET GLOBAL log_bin_compress=OFF")
        cur.execute("INSERT INTO shop.t (v) VALUES ('after')")
    _, now = archive.source_files(server)
    data = _on_disk(source, now[-1].name, now[-1].size)
    found = events.scan(data, now[-1].name)
    # each ends where the next begins (none cut short), but for events between groups: the server writes its
    # Binlog_checkpoint when the previous file's commits are durable, which on a loaded machine is after a group
    for t, nxt in zip(found.transactions, found.transactions[1:]):
        at = t.end
        while at < nxt.start:
            kind, size = data[at + 4], int.from_bytes(data[at + 9:at + 13], "little")
            assert kind in (events.BINLOG_CHECKPOINT, events.GTID_LIST), f"event {kind} at {at} outside any group"
            at += size
        assert at == nxt.start
    assert found.end == len(data)
    # a checkpoint written late (as CI's loaded machine did): moved after the second group, the groups stay whole
    head, last = found.transactions[0].start, found.format_end
    while last + int.from_bytes(data[last + 9:last + 13], "little") < head:  # to the event just before the first group
        last += int.from_bytes(data[last + 9:last + 13], "little")
    assert data[last + 4] == events.BINLOG_CHECKPOINT
    late = data[:last] + data[head:found.transactions[1].end] + data[last:head] + data[found.transactions[1].end:]
    moved = events.scan(late, "late")
    assert [t.gtid for t in moved.transactions] == [t.gtid for t in found.transactions]
    # the checkpoint moved in, besides what the server itself wrote there (a late checkpoint of its own, on a loaded machine)
    gap = found.transactions[2].start - found.transactions[1].end
    assert moved.transactions[2].start - moved.transactions[1].end == head - last + gap and moved.end == len(data)
    # a base's coordinate just after the late checkpoint follows the second group (what the restore rolls on from)
    at = moved.transactions[2].start
    assert events.scan(late[:at], "late").ending_at(at) == moved.transactions[1]
    assert events.scan(late[:at - 1], "late").ending_at(at - 1) is None  # inside an event: no transaction ends there
    first = int(before.split("-")[2])
    assert [t.seq for t in found.transactions] == list(range(first + 1, first + 7))
    assert [t.transactional for t in found.transactions] == [False, False, True, True, False, True]
    # a GTID event inside an open group (a group with no end) is refused, not guessed
    second = found.transactions[1]
    gtid_event = int.from_bytes(data[second.start + 9:second.start + 13], "little")
    damaged = data[:second.start + gtid_event] + data[found.transactions[2].start:]  # the savepoint group cut short
    with pytest.raises(IntegrityError, match="has no end before the next one begins"):
        events.scan(damaged, "damaged")


def test_a_chain_that_is_not_lastline_s_is_refused_at_once(tmp_path):
    storage = open_storage(f"file://{tmp_path}")
    bid = "1-000001-0123abcd"
    storage.write_bytes("binlogs/branches.json", b'[{"id": "1-000001-0123abcd"}]')
    storage.write_bytes(f"binlogs/{bid}/chain.json", b'{"entries": [{"name": "mariadb-bin.000001", "bogus": 1}]}')
    with pytest.raises(IntegrityError, match="not a chain lastline wrote"):
        archive.read_branch(storage, bid)
    with pytest.raises(IntegrityError):
        archive.read_branch(storage, "1-000001-0123abcd\n")
