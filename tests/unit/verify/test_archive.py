"""verify.archive on the real binlog archive conftest ships from the suite's source after its two backups: it reads
back ok and rolls both bases forward; a flipped byte in a segment is named by its digest (and stops the bases that
need that file), a deleted segment is missing, a chain whose MAC fails is damaged, a hole the archiver recorded is
named in each base's coverage; and, table-driven, the gaps in bytes or GTIDs no hole accounts for."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from lastline.pitr import catalog
from lastline.pitr.chain import Entry
from lastline.storage import open_storage
from lastline.verify import archive, backups


def _read(folder: Path):
    return archive.verify_archive(backups.preflight({"destination": f"file://{folder}"}))


def _segment(folder: Path) -> tuple[str, Path]:
    """The archive's first segment: its name as a finding gives it, and its path."""
    storage = open_storage(f"file://{folder}")
    bid = catalog.branches(storage)[-1]["id"]
    entry = catalog.read_branch(storage, bid).entries[0]
    name = f"binlogs/{bid}/{entry.name}/{int(entry.segments[0]['offset']):012d}"
    return name, folder / name


def test_the_archive_reads_back_ok_and_rolls_both_bases_forward(made, tmp_path):
    found = _read(made.copy(tmp_path / "d"))
    assert (found.status, found.findings, found.branches) == ("ok", [], 1)
    assert found.segments >= 1 and found.bytes > 0
    assert [c.backup_id for c in found.coverage] == sorted([made.physical, made.logical])
    for c in found.coverage:
        assert c.branch and c.start == "mariadb-bin.000001" and c.holes == [] and c.note.startswith("rolls forward")


def test_a_flipped_byte_in_a_segment_is_named_and_stops_the_bases(made, tmp_path):
    folder = made.copy(tmp_path / "d")
    name, path = _segment(folder)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0x01
    path.write_bytes(bytes(data))
    found = _read(folder)
    assert found.status == "damaged" and [(f.file, f.problem) for f in found.findings] == [(name, "digest")]
    assert all(c.holes == [name.split("/")[2]] and c.note.startswith("stops at") for c in found.coverage)


def test_a_deleted_segment_is_missing(made, tmp_path):
    folder = made.copy(tmp_path / "d")
    name, path = _segment(folder)
    path.unlink()
    found = _read(folder)
    assert found.status == "missing" and [(f.file, f.problem) for f in found.findings] == [(name, "missing")]


def test_a_chain_whose_mac_fails_is_damaged(made, tmp_path):
    folder = made.copy(tmp_path / "d")
    storage = open_storage(f"file://{folder}")
    bid = catalog.branches(storage)[-1]["id"]
    chain = folder / "binlogs" / bid / "chain.json"
    chain.write_bytes(chain.read_bytes().replace(b'"closed": false', b'"closed": true', 1))
    found = _read(folder)
    assert found.status == "damaged"
    assert [(f.file, f.problem) for f in found.findings] == [(f"binlogs/{bid}/chain.json", "mac")]


def test_a_hole_the_archiver_recorded_is_named_and_the_newest_base_cannot_reach_the_end(made, tmp_path):
    folder = made.copy(tmp_path / "d")
    storage = open_storage(f"file://{folder}")
    branch = catalog.read_branch(storage, catalog.branches(storage)[-1]["id"])
    last = branch.entries[-1]
    base, seq = last.name.rsplit(".", 1)
    hole = f"{base}.{int(seq) + 1:06d}"
    branch.entries.append(Entry(hole, "", missing=True, closed=True))  # as the archiver records a purged file
    catalog.write_branch(storage, branch)  # signed with the deployment's key, as the archiver writes it
    found = _read(folder)
    assert found.findings == [] and found.status == "missing"
    assert all(c.holes == [hole] and c.note == f"stops at {hole}" for c in found.coverage)


def test_a_destination_without_an_archive_is_ok_with_nothing_read(made, tmp_path):
    folder = made.copy(tmp_path / "d")
    shutil.rmtree(folder / "binlogs")
    assert _read(folder) == archive.ArchiveVerdict("ok")


SEG = {"sha256": "0" * 64}


@pytest.mark.parametrize(("segments", "size", "problems"), [
    ([{"offset": 0, "size": 10}, {"offset": 10, "size": 5}], 15, []),
    ([{"offset": 0, "size": 10}, {"offset": 12, "size": 5}], 17, ["a segment at byte 10"]),
    ([{"offset": 4, "size": 10}], 14, ["a segment at byte 0"]),
    ([{"offset": 0, "size": 10}], 15, ["15 bytes archived"]),
    ([], 0, []),
], ids=["contiguous", "a-gap-between", "not-from-byte-0", "short-of-its-size", "a-hole-holds-none"])
def test_gaps_in_a_files_segments(segments, size, problems):
    entry = Entry("mariadb-bin.000003", "0-1-5", size=size, segments=[{**s, **SEG} for s in segments])
    assert [f.expected for f in archive.gaps("b1", entry)] == problems


def _e(seq: int, start: str, end: str, **kw) -> Entry:
    return Entry(f"mariadb-bin.{seq:06d}", start, end_gtids=end, **kw)


@pytest.mark.parametrize(("entries", "gaps"), [
    ([_e(1, "0-1-1", "0-1-5"), _e(2, "0-1-5", "0-1-9")], []),
    ([_e(1, "0-1-1", "0-1-5"), _e(3, "0-1-5", "0-1-9")], ["mariadb-bin.000003"]),
    ([_e(1, "0-1-1", "0-1-5"), _e(2, "0-1-4", "0-1-9")], ["mariadb-bin.000002"]),
    ([_e(1, "0-1-1", "0-1-5"), _e(2, "", "", missing=True), _e(3, "0-1-7", "0-1-9")], []),
    ([_e(1, "0-1-1", "0-1-5", tail_missing=True), _e(2, "0-1-7", "0-1-9")], []),
    # a tail proven empty is crossed, so the file after it must start where the archived bytes end
    ([_e(1, "0-1-1", "0-1-5", tail_missing=True, proven_empty="mariadb-bin.000002"), _e(2, "0-1-5", "0-1-9")], []),
    ([_e(1, "0-1-1", "0-1-5", tail_missing=True, proven_empty="mariadb-bin.000002"), _e(2, "0-1-4", "0-1-9")],
     ["mariadb-bin.000002"]),
    # a whole file purged and proven empty holds no start of its own (the chain's reader checked the proof)
    ([_e(1, "0-1-1", "0-1-5"), _e(2, "", "", missing=True, proven_empty="mariadb-bin.000003"), _e(3, "0-1-5", "0-1-9")],
     []),
], ids=["in-order", "a-number-skipped", "a-start-behind-the-end-before", "a-recorded-hole", "a-recorded-tail-hole",
        "a-tail-proven-empty", "a-tail-proven-empty-then-a-start-behind-it", "a-file-proven-empty"])
def test_sequence_gaps(entries, gaps):
    assert [f.file.rsplit("/", 1)[1] for f in archive.sequence_gaps("b1", entries)] == gaps


@pytest.mark.parametrize(("entry", "crossed"), [
    (_e(2, "", "", missing=True), False),
    (_e(2, "", "", missing=True, proven_empty="mariadb-bin.000003"), True),
    (_e(2, "0-1-5", "0-1-9", pruned=True), False),
    (_e(2, "0-1-5", "0-1-9"), True),
], ids=["a-hole", "a-hole-proven-empty", "pruned", "archived"])
def test_a_roll_forward_crosses_an_archived_file_and_a_hole_proven_empty(entry, crossed):
    assert (not entry.unusable) is crossed  # what backup_verify's coverage and gap checks take, as a restore does


def test_coverage_of_a_base_the_archive_does_not_reach(made, tmp_path):
    from lastline.manifest import read_manifest
    from lastline.pitr import window

    storage = open_storage(f"file://{made.copy(tmp_path / 'd')}")
    manifest = read_manifest(storage, made.logical, "logical")
    far = dataclasses.replace(manifest, binlog_file="mariadb-bin.000099", gtid="0-9-1", primary=None)
    lines = [window.lineage(storage, b["id"]) for b in catalog.branches(storage)]
    assert archive.coverage(made.logical, far, lines, set()).note == "the archive does not reach back to this backup"
    assert archive.coverage(made.logical, dataclasses.replace(manifest, gtid=None, primary=None), lines, set()).branch is None


def test_an_archive_rolled_back_behind_the_head_airflow_recorded_is_named(made, tmp_path):
    folder = made.copy(tmp_path / "d")
    storage = open_storage(f"file://{folder}")
    plan = backups.preflight({"destination": f"file://{folder}"})
    recorded = catalog.head(storage)
    assert archive.verify_archive(plan, recorded).status == "ok"
    branch = catalog.read_branch(storage, catalog.branches(storage)[-1]["id"])
    # an older state put back, validly signed (what a storage writer holding an old copy can do): its last file gone
    catalog.write_branch(storage, dataclasses.replace(branch, entries=branch.entries[:-1]))
    found = archive.verify_archive(plan, recorded)
    assert found.status == "damaged" and [(f.file, f.problem) for f in found.findings] == [("binlogs/branches.json", "rollback")]
    assert "missing from its chain" in found.findings[0].found and "Someone who can write the storage" in found.findings[0].found
    shutil.rmtree(folder / "binlogs")  # the whole archive removed: Airflow knows there was one
    gone = archive.verify_archive(plan, recorded)
    assert gone.status == "missing" and [(f.file, f.problem) for f in gone.findings] == [("binlogs/branches.json", "missing")]
    assert archive.verify_archive(plan, None).status == "ok"  # no record (a first run, or outside Airflow): nothing to hold it to
