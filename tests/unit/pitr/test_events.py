"""pitr.events: GTID states compared and carried forward, and the binlog reader (Scanner, Cutter) over bytes built
with the module's own encoders: whole transactions found, a cut one left out, the checksum setting and in-use flag
read, what a replay keeps. Bytes of a real server's binlogs are read end to end in tests/e2e/binlog_archive/test_binlog_archive.py."""
from __future__ import annotations

import pytest

from lastline.core.errors import IntegrityError
from lastline.pitr import events
from lastline.pitr.events import Cutter, Scanner, Transaction, cleared_in_use, gtid_map, gtid_state, includes, scan

from .binlog import binlog, format_description, gtid, query, transaction, xid


@pytest.mark.parametrize(("text", "expected"), [
    ("", {}), (None, {}), ("0-1-5", {0: 5}), ("0-1-5,1-2-9", {0: 5, 1: 9}), ("0-1-5,,3-3-1,", {0: 5, 3: 1}),
], ids=["empty", "none", "one-domain", "two-domains", "blanks-skipped"])
def test_gtid_map(text, expected):
    assert gtid_map(text) == expected


@pytest.mark.parametrize(("state", "other", "expected"), [
    ("0-1-5", "0-1-5", True), ("0-1-5", "0-1-4", True), ("0-1-5", "0-1-6", False),
    ("0-1-5", "", True), ("", "0-1-1", False), ("0-1-5,1-1-3", "1-2-3", True), ("0-1-5", "1-1-1", False),
    ("0-2-9", "0-1-9", True),
], ids=["equal", "ahead", "behind", "empty-other", "empty-state", "one-of-two-domains", "missing-domain",
        "server-id-ignored"])
def test_includes(state, other, expected):
    assert includes(state, other) is expected


@pytest.mark.parametrize(("start", "seqs", "expected"), [
    ("0-1-5", [], "0-1-5"),
    ("0-1-5", [(0, 6)], "0-1-6"),
    ("0-1-5,2-1-1", [(1, 1), (0, 7)], "0-1-7,1-1-1,2-1-1"),
    ("", [(0, 1), (0, 2)], "0-1-2"),
], ids=["none", "one", "new-domain-sorted", "from-empty"])
def test_gtid_state(start, seqs, expected):
    trx = [Transaction(f"{d}-1-{n}", 0, 0, 0, 1) for d, n in seqs]
    assert gtid_state(start, trx) == expected


@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "crc32"])
@pytest.mark.parametrize("count", [0, 1, 3], ids=["empty", "one", "many"])
def test_scan_finds_every_whole_transaction(checksum, count):
    data = binlog(*(transaction(n, checksum, ts=1000 + n) for n in range(1, count + 1)), checksum=checksum)
    found = scan(data)
    assert found.checksum is checksum
    assert [t.gtid for t in found.transactions] == [f"0-1-{n}" for n in range(1, count + 1)]
    assert [t.time for t in found.transactions] == [1000 + n for n in range(1, count + 1)]
    assert found.end == len(data)
    assert found.format_end == 4 + len(format_description(checksum))
    assert found.server_ids == ({1} if count else set())
    ends = [t.end for t in found.transactions]
    assert [t.start for t in found.transactions[1:]] == ends[:-1]  # back to back


@pytest.mark.parametrize("cut", [1, 19, 30], ids=["one-byte-short", "header-only", "mid-event"])
def test_scan_stops_at_the_last_whole_transaction(cut):
    whole = binlog(transaction(1, False), transaction(2, False))
    found = scan(whole[:-cut])
    assert [t.gtid for t in found.transactions] == ["0-1-1"]
    assert found.end == found.transactions[0].end
    assert found.ending_at(found.end) == found.transactions[0]
    assert found.ending_at(found.end + 1) is None


def test_scan_fed_in_one_byte_chunks_finds_what_one_pass_does():
    data = binlog(transaction(1, True), transaction(2, True), checksum=True)
    scanner = Scanner("bin.000001")
    for i in range(len(data)):
        scanner.feed(data[i:i + 1])
    assert scanner.out.transactions == scan(data).transactions


@pytest.mark.parametrize(("flags2", "transactional"), [
    (events.FL_TRANSACTIONAL, True), (0, False), (events.FL_TRANSACTIONAL | events.FL_DDL, False),
], ids=["innodb", "non-transactional", "ddl"])
def test_a_transaction_is_transactional_unless_ddl_or_another_engine(flags2, transactional):
    data = binlog(gtid(1, False, flags2=flags2) + query(b"BEGIN", False) + xid(False))
    assert scan(data).transactions[0].transactional is transactional


@pytest.mark.parametrize(("text", "ends"), [(b"COMMIT", True), (b"ROLLBACK", True), (b"ROLLBACK TO sp1", False)],
                         ids=["commit", "rollback", "rollback-to-savepoint-stays-inside"])
def test_a_query_ends_a_group_only_as_commit_or_rollback(text, ends):
    data = binlog(gtid(1, False) + query(b"BEGIN", False) + query(text, False))
    assert len(scan(data).transactions) == (1 if ends else 0)


def test_a_standalone_statement_is_a_group_of_its_own():
    data = binlog(gtid(1, False, flags2=events.FL_STANDALONE | events.FL_DDL) + query(b"CREATE TABLE t (id INT)", False))
    assert [t.gtid for t in scan(data).transactions] == ["0-1-1"]


@pytest.mark.parametrize(("data", "message"), [
    (b"\xfeXYZ" + b"\0" * 40, "does not start as a binlog file does"),
    (binlog(gtid(1, False) + query(b"BEGIN", False), gtid(2, False)), "has no end before the next one begins"),
    (binlog(events._event(0, events.START_ENCRYPTION, 1, 0, b"\0" * 17, False)), "encrypted binlog"),
], ids=["bad-magic", "transaction-without-end", "encrypted"])
def test_scan_refuses(data, message):
    with pytest.raises(IntegrityError, match=message):
        scan(data)


def test_an_impossible_event_size_stops_the_reader():
    data = binlog(transaction(1, False)) + b"\0" * 9 + (5).to_bytes(4, "little") + b"\0" * 6
    scanner = Scanner()
    scanner.feed(data)
    assert scanner.stopped and len(scanner.out.transactions) == 1


@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "crc32"])
def test_cleared_in_use(checksum):
    data = bytearray(binlog(transaction(1, checksum), checksum=checksum, in_use=True))
    assert scan(bytes(data)).in_use
    assert cleared_in_use(data) is True
    assert not scan(bytes(data)).in_use
    assert cleared_in_use(data) is False
    assert cleared_in_use(bytearray(b"\xfebin")) is False  # too short: nothing to clear


@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "crc32"])
def test_rotate_event_reads_back_as_an_event_between_transactions(checksum):
    rotate = events.rotate_event("bin.000042", 7, checksum, 1234)
    ts, kind, server_id, size, _, flags = events.HEADER.unpack_from(rotate, 0)
    assert (kind, server_id, size, flags) == (events.ROTATE, 7, len(rotate), events.ARTIFICIAL)
    body = rotate[events.HEADER_LEN:len(rotate) - (4 if checksum else 0)]
    assert int.from_bytes(body[:8], "little") == 1234 and body[8:] == b"bin.000042"
    data = binlog(rotate, checksum=checksum)
    assert scan(data).end == len(data)


@pytest.mark.parametrize(("start", "stop", "applied", "kept"), [
    (0, None, {}, ["0-1-1", "0-1-2", "0-1-3"]),
    (0, None, {0: 2}, ["0-1-3"]),
    ("second", None, {}, ["0-1-2", "0-1-3"]),
    (0, "third", {}, ["0-1-1", "0-1-2"]),
    (0, None, {0: 3}, []),
    (0, None, {1: 9}, ["0-1-1", "0-1-2", "0-1-3"]),
], ids=["everything", "applied-skipped", "from-a-position", "up-to-a-stop", "all-applied", "other-domain-applied"])
def test_cutter_keeps_the_transactions_a_replay_applies(start, stop, applied, kept):
    groups = [transaction(n, True) for n in (1, 2, 3)]
    data = binlog(*groups, checksum=True, in_use=True)
    bounds = [t.start for t in scan(data).transactions]
    start = bounds[1] if start == "second" else start
    stop = bounds[2] if stop == "third" else stop
    cutter = Cutter("bin.000001", start, stop, applied)
    cutter.feed(data)
    out = cutter.take()
    assert [t.gtid for t in cutter.kept] == kept
    again = scan(out)  # what the cutter passes on is itself a binlog: header, a Rotate, the kept groups whole
    assert [t.gtid for t in again.transactions] == kept
    assert not again.in_use and again.checksum
    assert out.startswith(events.MAGIC) and cutter.take() == b""


def test_cutter_jump_refuses_segments_that_do_not_meet():
    cutter = Cutter("bin.000001", 0, None, {})
    cutter.feed(binlog(transaction(1, False)))
    with pytest.raises(IntegrityError, match="do not meet at event boundaries"):
        cutter.jump(cutter.pos - 1)
    cutter.jump(cutter.pos + 100)
    assert cutter.pos == len(binlog(transaction(1, False))) + 100
