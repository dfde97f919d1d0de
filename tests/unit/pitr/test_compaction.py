"""pitr.compaction: which segments are merged, the merged record's arithmetic, the merge itself (the source's bytes
read again with dd, compared part by part with what was archived, written under a key no record uses, the replaced
objects retired), its refusals (bytes written anew, a range the source no longer holds), the deferred deletion, and a
reader of an older chain that finds its segment merged away (pitr.window.segment_chunks)."""
from __future__ import annotations

import hashlib
import time

import pytest

from lastline.core.errors import StorageError
from lastline.core.hosts import LOCAL
from lastline.pitr.catalog import PREFIX, read_branch, segment_key, write_branch
from lastline.pitr.chain import Branch, Entry, SourceFile
from lastline.pitr.compaction import IN_USE_FLAG, Compaction, compact, free_key, masked, merge, merged_record, planned, sweep
from lastline.pitr.window import segment_bytes
from lastline.storage.file import FileStorage

BID = "1-000001-0a1b2c3d"
NAME = "bin.000001"


def seg(offset: int, size: int, key: str | None = None, **more) -> dict:
    return {"offset": offset, "size": size, "sha256": "00" * 32, **({"key": key} if key else {}), **more}


def entry(*segs: dict, closed: bool = False) -> Entry:
    return Entry(NAME, "0-1-0", size=segs[-1]["offset"] + segs[-1]["size"], segments=list(segs), closed=closed)


def src(size: int) -> SourceFile:
    return SourceFile(NAME, size, "0-1-0")


def loose(n: int, first: int = 0, size: int = 10) -> list[dict]:
    return [seg(first + i * size, size) for i in range(n)]


@pytest.mark.parametrize("segs, closed, source, expected", [
    (loose(3), True, 30, (0, 3)),  # a closed file: all of it
    (loose(1), True, 10, None),  # one segment: nothing to merge
    (loose(3), True, None, None),  # purged on the source
    (loose(3), True, 20, None),  # the source holds less (written anew, shorter)
    (loose(5), False, 50, None),  # open, 5 loose segments: not more than 5
    (loose(6), False, 60, (0, 6)),  # open, more than 5
    ([seg(0, 100, "000000000000-000000000100")] + loose(5, 100), False, 150, None),
    ([seg(0, 100, "000000000000-000000000100")] + loose(6, 100), False, 160, (1, 7)),  # after the last merged one
    ([seg(0, 50, "000000000000-000000000050")] + loose(2, 50), True, 70, (0, 3)),  # closed: merged and loose alike
    ([seg(0, 10), seg(20, 10)], True, 30, None),  # segments that do not follow each other
    ([seg(0, 10), seg(20, 10), seg(30, 10)], True, 40, (1, 3)),  # the first run that follows each other
    (loose(12), True, 120, (0, 10)),  # closed: at most `most` (100) bytes a merge
    ([seg(0, 100, "000000000000-000000000100")] + loose(3, 100), True, 130, (1, 4)),  # a merged one full: after it
    ([seg(0, 95)] + loose(3, 95), True, 125, (1, 4)),  # a large first piece (a catch-up) left as it is
    ([seg(0, 300)] + loose(6, 300), False, 360, (1, 7)),  # open: after a piece of `most` bytes or more
    ([seg(0, 300)] + loose(5, 300), False, 350, None),  # ... once more than `loose` follow it
], ids=["closed", "closed-one", "purged", "shorter", "open-few", "open-many", "open-after-merged-few",
        "open-after-merged", "closed-with-merged", "gap", "gap-then-run", "closed-bounded", "closed-after-full",
        "closed-after-large", "open-after-large", "open-after-large-few"])
def test_planned(segs, closed, source, expected):
    assert planned(entry(*segs, closed=closed), None if source is None else src(source), 5, most=100) == expected


def test_a_merge_never_reads_more_than_most_bytes_however_large_the_file():
    """A closed file of 10,000 segments (a day of rounds): each planned merge is at most `most` bytes, and merging
    them in turn ends with every object but the last at least half full (the stream's rounds stay short at every
    rotation; the file's objects stay few)."""
    e = entry(*loose(10_000, size=7), closed=True)
    merges = 0
    while (span := planned(e, src(70_000), 5, most=1000)) is not None:
        parts = e.segments[span[0]:span[1]]
        size = sum(p["size"] for p in parts)
        assert size <= 1000
        e.segments[span[0]:span[1]] = [seg(parts[0]["offset"], size, f"k{merges}")]
        merges += 1
    assert len(e.segments) == merges == 71  # 142 segments (994 bytes) a merge
    assert all(s["size"] >= 500 for s in e.segments[:-1])


def test_the_merged_record_sums_its_parts_and_ends_as_the_last():
    parts = [seg(0, 100, transactions=0, first_time=0, last_time=0, end_gtids="0-1-0", tail_sha256="a"),
             seg(100, 50, transactions=2, first_time=1000, last_time=1005, end_gtids="0-1-2", tail_sha256="b"),
             seg(150, 25, transactions=1, first_time=1004, last_time=1004, end_gtids="0-1-3", tail_sha256="c")]
    got = merged_record(parts, "000000000000-000000000175", {"sha256": "ff" * 32, "plain_sha256": "ee" * 32})
    assert got == {"offset": 0, "size": 175, "key": "000000000000-000000000175", "sha256": "ff" * 32,
                   "plain_sha256": "ee" * 32, "tail_sha256": "c", "transactions": 3, "first_time": 1000,
                   "last_time": 1005, "end_gtids": "0-1-3"}


def test_a_merged_key_never_names_an_object_in_use():
    e = entry(seg(0, 10), seg(10, 10))
    b = Branch(BID, [e], retired=[{"file": NAME, "keys": ["000000000000-000000000020"], "at": 0}])
    assert free_key(b, e, 0, 20) == "000000000000-000000000020-2"
    e.segments.append(seg(20, 5, "000000000000-000000000020-2"))
    assert free_key(b, e, 0, 20) == "000000000000-000000000020-3"
    assert free_key(b, e, 0, 25) == "000000000000-000000000025"


def _archived(tmp_path, data: bytes, cuts: list[int], flag_set: bool = True) -> tuple[FileStorage, Branch, str]:
    """A branch archiving `data` (a binlog file on the local host) in segments cut at `cuts`, written as the archiver
    writes them (the first with the in-use flag set: shipped while the file was open)."""
    store, path = FileStorage(str(tmp_path / "dest")), tmp_path / NAME
    path.write_bytes(data)
    shipped = bytearray(data)
    if flag_set:
        shipped[IN_USE_FLAG] |= 1
    segs = []
    for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
        piece = bytes(shipped[a:b])
        s = {"offset": a, "size": b - a, "sha256": hashlib.sha256(piece).hexdigest(),
             "plain_sha256": hashlib.sha256(masked(piece, a)).hexdigest(), "tail_sha256": f"t{b}",
             "transactions": 1, "first_time": 100 + a, "last_time": 100 + b, "end_gtids": f"0-1-{b}"}
        store.write_bytes(segment_key(BID, NAME, s), piece)
        segs.append(s)
    branch = Branch(BID, [Entry(NAME, "0-1-0", size=len(data), segments=segs, closed=True)])
    write_branch(store, branch)
    return store, branch, str(path)


def test_a_closed_file_merges_into_one_object_read_again_from_the_source(tmp_path):
    data = bytes(range(256)) * 40
    store, branch, path = _archived(tmp_path, data, [100, 4000, 9000])
    old = [dict(s) for s in branch.entries[0].segments]
    assert merge(store, branch, branch.entries[0], (0, 4), path, LOCAL, None)
    (only,) = branch.entries[0].segments
    assert only["key"] == f"{0:012d}-{len(data):012d}" and only["size"] == len(data) and only["transactions"] == 4
    assert only["sha256"] == hashlib.sha256(data).hexdigest() and only["end_gtids"] == f"0-1-{len(data)}"
    assert segment_bytes(store, BID, NAME, only) == data
    assert only["tail_sha256"] == hashlib.sha256(data[-4096:]).hexdigest()  # its own tail, as _with_tail compares it
    assert branch.retired[0]["keys"] == [f"{s['offset']:012d}" for s in old]
    write_branch(store, branch)
    # a reader of the older chain: its small segments are still there, then (deleted) read from the merged one
    assert segment_bytes(store, BID, NAME, old[2]) == data[4000:9000]
    assert sweep(store, branch, 3600, lambda b: write_branch(store, b)) == 0
    assert sweep(store, branch, 0, lambda b: write_branch(store, b)) == 4
    assert not store.exists(segment_key(BID, NAME, old[2])) and read_branch(store, BID).retired == []
    assert segment_bytes(store, BID, NAME, old[2]) == data[4000:9000]
    assert segment_bytes(store, BID, NAME, old[0])[:IN_USE_FLAG] == data[:IN_USE_FLAG]


def test_a_file_written_anew_under_the_same_name_is_never_merged_over_the_archived_bytes(tmp_path):
    data = bytes(range(256)) * 40
    store, branch, path = _archived(tmp_path, data, [100, 4000])
    (tmp_path / NAME).write_bytes(data[:5000] + b"X" + data[5001:])
    before = [dict(s) for s in branch.entries[0].segments]
    assert not merge(store, branch, branch.entries[0], (0, 3), path, LOCAL, None)
    assert branch.entries[0].segments == before and branch.retired == []
    assert sorted(p.name for p in (tmp_path / "dest" / PREFIX / BID / NAME).iterdir()) == [f"{s['offset']:012d}" for s in before]


def test_a_range_the_source_no_longer_holds_keeps_the_small_segments(tmp_path):
    data = bytes(range(256)) * 40
    store, branch, path = _archived(tmp_path, data, [100, 4000])
    (tmp_path / NAME).write_bytes(data[:6000])
    assert not merge(store, branch, branch.entries[0], (0, 3), path, LOCAL, None)
    assert len(branch.entries[0].segments) == 3


def test_an_unsealed_segment_archived_before_plain_sha256_is_compared_by_its_sha256(tmp_path):
    data = bytes(range(256)) * 40
    store, branch, path = _archived(tmp_path, data, [100, 4000])
    for s in branch.entries[0].segments:
        del s["plain_sha256"]
    assert merge(store, branch, branch.entries[0], (0, 3), path, LOCAL, None)


def test_compact_merges_once_a_round_and_deletes_after_the_grace(tmp_path):
    data = bytes(range(256)) * 40
    store, branch, path = _archived(tmp_path, data, [100, 4000])
    saved, retired_first = [], []

    def save(b) -> None:
        retired_first.append([k for r in b.retired for k in r["keys"]])
        saved.append(write_branch(store, b))

    compact(store, branch, [src(len(data))], str(tmp_path), LOCAL, lambda: None, Compaction(loose=5, grace=3600), save,
            set())
    merged = f"{0:012d}-{len(data):012d}"
    assert len(branch.entries[0].segments) == 1 and len(branch.retired) == 1 and len(saved) == 2
    # the merged key is retired in the chain before its object is written (a kill in between leaves it to the sweep),
    # then named by the chain that retires the parts
    assert retired_first[0] == [merged] and merged not in retired_first[1]
    branch.retired[0]["at"] = int(time.time()) - 3601
    compact(store, branch, [src(len(data))], str(tmp_path), LOCAL, lambda: None, Compaction(loose=5, grace=3600), save,
            set())
    assert branch.retired == [] and len(saved) == 3
    assert sorted(p.name for p in (tmp_path / "dest" / PREFIX / BID / NAME).iterdir()) == [f"{0:012d}-{len(data):012d}"]


def test_a_segment_gone_with_nothing_in_its_place_fails_retriably_named(tmp_path):
    data = bytes(range(256)) * 40
    store, branch, path = _archived(tmp_path, data, [100])
    old = dict(branch.entries[0].segments[1])
    store.delete_objects([segment_key(BID, NAME, old)])
    with pytest.raises(StorageError, match="run the restore again"):
        segment_bytes(store, BID, NAME, old)
