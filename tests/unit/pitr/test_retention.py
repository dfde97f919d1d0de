"""pitr.retention on a real local destination holding signed manifests of complete physical bases and a signed binlog
chain: the bases the point-in-time window needs, the archived files a roll-forward of them reads, and the prune that
deletes only older files no kept base needs (never the file the archiver resumes from)."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lastline import manifest
from lastline.pitr import retention
from lastline.pitr.catalog import PREFIX, read_branch, write_branch, write_branches
from lastline.pitr.chain import Branch, Entry
from lastline.storage.file import FileStorage

NOW = datetime(2026, 11, 28, 16, 14, 32, tzinfo=UTC)
BID = "1-000001-0a1b2c3d"


def _id(at: datetime) -> str:
    return at.strftime("%Y%m%dT%H%M%SZ") + "-7c93b6"


def _base(store: FileStorage, at: datetime, binlog: str, gtid: str) -> str:
    """A complete physical base taken at `at`, joining the chain at `binlog` in state `gtid` (no position: the file's
    start state tells where it joins, and no archived byte is read)."""
    backup_id = _id(at)
    manifest.write_manifest(store, manifest.PhysicalManifest(
        backup_id=backup_id, source_conn_id="src", server_version="11.4.2", tool_version="11.4.2",
        artifact="backup.mbstream.zst", compression="zstd", bytes=10, sha256="0" * 64, started_at="a", finished_at="b",
        seconds=1.0, mb_per_s=1.0, parallel=2, datadir_bytes=100, tables=[], gtid=gtid, binlog_file=binlog, binlog_position=None))
    return backup_id


def _entry(n: int, start: str, end: str, at: datetime, closed: bool = True) -> Entry:
    t = at.timestamp()
    return Entry(f"bin.00000{n}", start, size=100, segments=[{"offset": 0, "size": 100, "sha256": f"{n}" * 64}],
                 closed=closed, transactions=1, end_gtids=end, first_time=t, last_time=t)


def _archived(store: FileStorage, n: int) -> bool:
    """Whether the bytes of bin.00000<n> are still in the archive."""
    return store.exists(f"{PREFIX}/{BID}/bin.00000{n}/{0:012d}")


@pytest.fixture
def store(tmp_path) -> FileStorage:
    return FileStorage(str(tmp_path))


@pytest.fixture
def archive(store) -> FileStorage:
    """Four archived files of one branch, written 4, 3, 2 and 1 days ago (each one transaction); the last one still
    growing."""
    write_branch(store, Branch(BID, [_entry(1, "0-1-0", "0-1-1", NOW - timedelta(days=4)),
                                     _entry(2, "0-1-1", "0-1-2", NOW - timedelta(days=3)),
                                     _entry(3, "0-1-2", "0-1-3", NOW - timedelta(days=2)),
                                     _entry(4, "0-1-3", "0-1-4", NOW - timedelta(days=1), closed=False)]))
    write_branches(store, [{"id": BID}])
    for n in range(1, 5):
        writer = store.writer(f"{PREFIX}/{BID}/bin.00000{n}/{0:012d}")  # the file's one segment, as the archiver keeps it
        writer.write(b"x" * 100)
        writer.commit()
    return store


@pytest.mark.parametrize(("days", "ages", "protected"), [
    (2.5, [4, 3, 1], {3: "the base the 2.5-day point-in-time window's start rolls forward from", 1: "inside the 2.5-day point-in-time window"}),
    (5, [4, 1], {4: "inside the 5-day point-in-time window", 1: "inside the 5-day point-in-time window"}),
    (0.5, [4, 3], {3: "the base the 0.5-day point-in-time window's start rolls forward from"}),
    (0, [4, 1], {}),
], ids=["inside-and-the-one-before", "all-inside", "none-inside-only-the-newest-before", "no-window"])
def test_protected_bases(archive, days, ages, protected):
    ids = {age: _base(archive, NOW - timedelta(days=age), "bin.000002", "0-1-1") for age in ages}
    assert retention.protected_bases(archive, days, now=NOW) == {ids[age]: why for age, why in protected.items()}


def test_no_archive_protects_nothing(store):
    _base(store, NOW - timedelta(days=1), "bin.000002", "0-1-1")
    assert retention.protected_bases(store, 7, now=NOW) == {}


def test_needed_files_are_those_a_roll_forward_reads(archive):
    base = _base(archive, NOW - timedelta(days=2, hours=12), "bin.000003", "0-1-2")
    assert retention.needed_files(archive, [base]) == {(BID, "bin.000003"), (BID, "bin.000004")}
    lost = _base(archive, NOW - timedelta(days=5), "bin.000009", "0-9-9")  # the archive does not reach it
    assert retention.needed_files(archive, [lost]) == set()


def test_prune_deletes_only_older_files_no_kept_base_needs(archive):
    assert retention.prune_binlogs(archive, []) == []  # nothing to measure against: all kept
    base = _base(archive, NOW - timedelta(days=2, hours=12), "bin.000003", "0-1-2")
    assert retention.prune_binlogs(archive, [base]) == [f"{BID}/bin.000001", f"{BID}/bin.000002"]
    branch = read_branch(archive, BID)
    assert [(e.name, e.pruned) for e in branch.entries] == [("bin.000001", True), ("bin.000002", True),
                                                            ("bin.000003", False), ("bin.000004", False)]
    assert not _archived(archive, 1) and _archived(archive, 3)
    assert retention.prune_binlogs(archive, [base]) == []  # pruned already


def test_the_file_the_archiver_resumes_from_is_never_pruned(archive):
    base = _base(archive, NOW, "bin.000009", "0-9-9")  # newer than every file and reaching none
    assert retention.prune_binlogs(archive, [base]) == [f"{BID}/bin.00000{n}" for n in (1, 2, 3)]
    assert _archived(archive, 4)


def test_a_conf_s_window_protects_its_bases_and_prunes_what_they_do_not_need(archive):
    older = _base(archive, NOW - timedelta(days=2, hours=12), "bin.000003", "0-1-2")
    newer = _base(archive, NOW - timedelta(hours=12), "bin.000004", "0-1-3")
    conf = {"destination": f"file://{archive.root}", "pitr_window_days": 36500}  # today, whenever it runs
    protect = retention.window_bases(conf)
    assert set(protect) == {older, newer}
    assert retention.prune_archive(conf, {}) == []  # no window: nothing pruned
    assert retention.prune_archive(conf, protect) == [f"{BID}/bin.000001", f"{BID}/bin.000002"]


def test_a_chain_the_archiver_wrote_over_keeps_its_files_bytes(archive, monkeypatch):
    """A held stream writes its chain right after retention wrote its own (the files marked pruned are named again):
    retention sees its chain is no longer the stored one and deletes nothing; a later run does."""
    base = _base(archive, NOW - timedelta(days=2, hours=12), "bin.000003", "0-1-2")
    stream_chain = read_branch(archive, BID)
    stream_chain.covered = {"file": "bin.000004", "size": 100, "time": NOW.timestamp()}

    def the_stream_writes(seconds: float) -> None:
        write_branch(archive, stream_chain)

    monkeypatch.setattr(retention.time, "sleep", the_stream_writes)
    assert retention.prune_binlogs(archive, [base]) == []
    assert all(_archived(archive, n) for n in (1, 2)) and not read_branch(archive, BID).entries[0].pruned
    monkeypatch.setattr(retention.time, "sleep", lambda seconds: None)
    assert retention.prune_binlogs(archive, [base]) == [f"{BID}/bin.000001", f"{BID}/bin.000002"]
