"""pitr.archive: the archiver's own bookkeeping: the in-use flag left out of the bytes it compares, a file's entry
found or added, a segment's scan added to its entry's index, a new branch listed (its id made unique) before anything
is shipped into it, and the source's binlog files as a real server lists them."""
from __future__ import annotations

import re

import pytest

from lastline.pitr import events
from lastline.pitr.archive import IN_USE_FLAG, _entry, _index, _masked, _start, source_files
from lastline.pitr.catalog import PREFIX, branches, read_branch
from lastline.pitr.chain import Branch, Entry, split_name
from lastline.storage.file import FileStorage

from .binlog import binlog, transaction

T0 = 1_795_882_472


@pytest.mark.parametrize(("start", "size", "zeroed"), [
    (0, 100, IN_USE_FLAG),
    (IN_USE_FLAG, 10, 0),
    (IN_USE_FLAG - 9, 10, 9),
    (IN_USE_FLAG - 10, 10, None),
    (IN_USE_FLAG + 1, 10, None),
    (4000, 4096, None),
], ids=["from-the-start", "starting-at-the-flag", "ending-at-the-flag", "ending-just-before", "starting-just-after",
        "far-after"])
def test_masked_zeroes_the_in_use_flag_only(start, size, zeroed):
    data = bytes(n % 255 + 1 for n in range(size))
    got = _masked(data, start)
    assert len(got) == len(data)
    assert got == (data if zeroed is None else data[:zeroed] + b"\x00" + data[zeroed + 1:])


def test_an_in_use_binlog_and_its_closed_copy_compare_equal_masked():
    # without checksums: a server computes the format description's CRC as if the flag were clear, this builder not
    open_file = binlog(transaction(1, False), in_use=True)
    closed = binlog(transaction(1, False))
    assert open_file != closed
    assert _masked(open_file[:4096], 0) == _masked(closed[:4096], 0)


def test_entry_finds_a_file_or_adds_it_at_the_end():
    branch = Branch("1-000001-0a1b2c3d", [Entry("bin.000001", "0-1-0")])
    assert _entry(branch, "bin.000001", "ignored") is branch.entries[0]
    added = _entry(branch, "bin.000002", "0-1-3")
    assert branch.entries == [Entry("bin.000001", "0-1-0"), added] and added.start_gtids == "0-1-3"


def test_index_adds_each_segments_scan_to_its_entry():
    data = binlog(*(transaction(n, True, ts=T0 + n) for n in (1, 2, 3)), checksum=True)
    cut = events.scan(data).transactions[1].start  # the first segment holds the header and 0-1-1
    entry = Entry("bin.000001", "0-1-0")
    for offset, piece in ((0, data[:cut]), (cut, data[cut:])):
        scanner = events.Scanner(entry.name, offset, entry.checksum)
        scanner.feed(piece)
        entry.segments.append({"offset": offset, "size": len(piece), "sha256": ""})
        _index(entry, scanner.out, offset)
    assert entry.checksum is True
    assert (entry.transactions, entry.first_time, entry.last_time, entry.end_gtids) == (3, T0 + 1, T0 + 3, "0-1-3")
    assert [(s["transactions"], s["first_time"], s["last_time"], s["end_gtids"]) for s in entry.segments] == [
        (1, T0 + 1, T0 + 1, "0-1-1"), (2, T0 + 2, T0 + 3, "0-1-3")]


def test_index_of_a_segment_without_a_whole_transaction():
    data = binlog(checksum=False)
    scanner = events.Scanner("bin.000001", 0, False)
    scanner.feed(data)
    entry = Entry("bin.000001", "0-1-7", segments=[{"offset": 0, "size": len(data), "sha256": ""}])
    _index(entry, scanner.out, 0)
    assert (entry.transactions, entry.first_time, entry.last_time, entry.end_gtids) == (0, 0, 0, "0-1-7")
    assert entry.segments[0]["end_gtids"] == "0-1-7"


def test_a_new_branch_is_listed_with_its_chain_and_a_unique_id(tmp_path):
    store = FileStorage(str(tmp_path))
    known: list[dict] = []
    first = _start(store, known, "1-000001-0a1b2c3d", None, None, "the first binlog archived")
    again = _start(store, known, "1-000001-0a1b2c3d", first.id, "bin.000004", "the source was written anew")
    third = _start(store, known, "1-000001-0a1b2c3d", again.id, "bin.000001", "once more")
    assert [first.id, again.id, third.id] == ["1-000001-0a1b2c3d", "1-000001-0a1b2c3d-2", "1-000001-0a1b2c3d-3"]
    listed = branches(store, "a test")
    assert [(b["id"], b["parent"], b["fork_after"], b["reason"]) for b in listed] == [
        ("1-000001-0a1b2c3d", None, None, "the first binlog archived"),
        ("1-000001-0a1b2c3d-2", "1-000001-0a1b2c3d", "bin.000004", "the source was written anew"),
        ("1-000001-0a1b2c3d-3", "1-000001-0a1b2c3d-2", "bin.000001", "once more")]
    assert read_branch(store, again.id, "a test") == Branch(again.id, [], first.id, "bin.000004")
    assert store.exists(f"{PREFIX}/{third.id}/chain.json")


def test_source_files_as_the_server_lists_them(source):
    server = source.server()
    binlog_dir, found = source_files(server)
    listed = server.query("SHOW BINARY LOGS")
    assert [(f.name, f.size) for f in found] == [(str(r[0]), int(r[1])) for r in listed]
    assert binlog_dir.startswith("/") and all(split_name(f.name) for f in found)
    (server_id,) = server.query("SELECT @@GLOBAL.server_id")[0]
    assert {f.server_id for f in found} == {int(server_id)}
    assert all(re.fullmatch(r"(\d+-\d+-\d+(,\d+-\d+-\d+)*)?", f.start_gtids) for f in found)  # spaces taken out
