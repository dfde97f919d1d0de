"""pitr.catalog: the binlog archive's control files on a real local destination: branches.json and each branch's
chain.json written signed and read back checked (their shape, the ids that become storage keys, their signature),
the archive's head, and the anti-rollback check that refuses an archive ending before, or differing from, the head
recorded after the last run."""
from __future__ import annotations

import dataclasses
import json
import re

import pytest

from lastline.core.errors import IntegrityError
from lastline.pitr.catalog import PREFIX, branches, check_head, head, read_branch, write_branch, write_branches
from lastline.pitr.chain import Branch, Entry
from lastline.storage import control
from lastline.storage.file import FileStorage

BID = "1-000001-0a1b2c3d"
SEG = {"offset": 0, "size": 400, "sha256": "ab" * 32}
USE = "a point-in-time restore"


def branch(bid: str = BID, covered: float = 1000.0) -> Branch:
    first = Entry("bin.000001", "0-1-0", size=400, segments=[SEG], closed=True, end_gtids="0-1-3")
    second = Entry("bin.000002", "0-1-3", size=250, segments=[{"offset": 0, "size": 100, "sha256": "cd" * 32},
                                                              {"offset": 100, "size": 150, "sha256": "ef" * 32}],
                   end_gtids="0-1-5")
    return Branch(bid, [first, second], covered={"file": "bin.000002", "size": 250, "time": covered})


@pytest.fixture
def store(tmp_path) -> FileStorage:
    storage = FileStorage(str(tmp_path))
    b = branch()
    write_branch(storage, b)
    write_branches(storage, [{"id": BID, "parent": None}])
    return storage


def test_an_empty_destination_has_no_branch_and_no_head(tmp_path):
    storage = FileStorage(str(tmp_path))
    assert branches(storage) == [] and head(storage) is None


def test_a_branch_written_reads_back_whole(store):
    assert branches(store, USE) == [{"id": BID, "parent": None}]
    assert read_branch(store, BID, USE) == branch()


def test_the_head_is_the_newest_branchs_last_segment(store):
    assert head(store) == {"branch": BID, "branches": 1, "file": "bin.000002", "size": 250,
                           "segment": {"offset": 100, "size": 150, "sha256": "ef" * 32}, "end_gtids": "0-1-5",
                           "covered": {"file": "bin.000002", "size": 250, "time": 1000.0}}


@pytest.mark.parametrize(("text", "refused"), [
    ('{"branches": {"id": "x"}}', "is not a list of branches lastline wrote"),
    ('{"branches": [{"id": "../etc"}]}', "names branches lastline never makes"),
    ('{"branches": ["1-000001-0a1b2c3d"]}', "names branches lastline never makes"),
], ids=["not-a-list", "an-id-leaving-the-archive", "a-bare-id"])
def test_branches_json_of_another_shape_is_refused(tmp_path, text, refused):
    storage = FileStorage(str(tmp_path))
    storage.write_bytes(f"{PREFIX}/branches.json", text.encode())
    with pytest.raises(IntegrityError, match=refused):
        branches(storage)


@pytest.mark.parametrize(("chain", "refused"), [
    ({"entries": [{"name": "bin.000001", "start_gtids": "", "bogus": 1}]}, "is not a chain lastline wrote"),
    ({"entries": [{"name": "../bin", "start_gtids": ""}]}, r"'../bin' is not a binlog file name"),
    ({"entries": [{"name": "bin.000001", "start_gtids": "", "segments": [{"offset": "x", "size": 1, "sha256": ""}]}]},
     "is not a chain lastline wrote"),
    ({"nothing": []}, "is not a chain lastline wrote"),
], ids=["unknown-field", "not-a-binlog-name", "offset-not-a-number", "no-entries"])
def test_a_chain_of_another_shape_is_refused(tmp_path, chain, refused):
    storage = FileStorage(str(tmp_path))
    control.write(storage, f"{PREFIX}/{BID}/chain.json", json.dumps(chain))
    with pytest.raises(IntegrityError, match=refused):
        read_branch(storage, BID)


@pytest.mark.parametrize("bid", ["../x", "1-1-0a1b2c3d", "", "1-000001-0A1B2C3D"], ids=["dot-dot", "short-seq", "empty", "upper-hex"])
def test_a_branch_id_of_another_shape_is_refused_before_any_read(store, bid):
    with pytest.raises(IntegrityError, match="is not a branch id of the binlog archive"):
        read_branch(store, bid)


def test_an_unsigned_chain_is_refused(store, tmp_path):
    path = tmp_path / PREFIX / BID / "chain.json"
    data = json.loads(path.read_text())
    del data["lastline_mac"]
    path.write_text(json.dumps(data, indent=1))
    with pytest.raises(IntegrityError, match="is not authenticated: it carries no MAC"):
        read_branch(store, BID, USE)


def test_a_forged_chain_is_refused(store, tmp_path):
    path = tmp_path / PREFIX / BID / "chain.json"
    path.write_text(path.read_text().replace('"0-1-5"', '"0-1-9"'))
    with pytest.raises(IntegrityError, match="is not authenticated: its MAC does not match"):
        read_branch(store, BID, USE)


def test_check_head_passes_the_head_it_recorded(store):
    assert check_head(store, head(store), USE) == ("anti-rollback: the archive holds the head recorded in Airflow "
                                                   f"({BID}, bin.000002 up to byte 250)")


def test_check_head_without_a_record_says_so(store):
    assert "no recorded head to compare with" in check_head(store, None, USE)


def test_check_head_is_skipped_where_the_storage_is_trusted(store, monkeypatch):
    monkeypatch.setenv("LASTLINE_STORAGE_TRUSTED", "true")
    assert check_head(store, {"branch": "gone"}, USE) == ("anti-rollback: not checked (the deployment declares its "
                                                          "storage trusted)")


def grown(rec: dict) -> dict:
    """The record after a later run than the archive holds: one more segment of bin.000002."""
    return {**rec, "size": 300, "segment": {"offset": 250, "size": 50, "sha256": "01" * 32}}


@pytest.mark.parametrize(("change", "refused"), [
    (lambda r: {**r, "branch": "1-000009-0a1b2c3d"}, "branch 1-000009-0a1b2c3d is missing"),
    (lambda r: {**r, "branches": 2}, "it lists 1 branches, 2 were recorded"),
    (lambda r: {**r, "file": "bin.000003"}, "bin.000003 is missing from its chain, which ends at bin.000002"),
    (lambda r: {**r, "file": "bin.000000"}, r"bin.000000 is missing from its chain \(it holds \['bin.000001', 'bin.000002'\]\)"),
    (grown, "bin.000002 is archived up to byte 250 only: bytes 250-300 are missing"),
    (lambda r: {**r, "segment": {**r["segment"], "sha256": "00" * 32}}, "its segment of bin.000002 at byte 100 is not the one"),
    (lambda r: {**r, "covered": {"time": 2000.0}}, "it says the source was covered up to 1000.0, the record says 2000.0"),
], ids=["branch-gone", "fewer-branches", "file-dropped-from-the-end", "an-earlier-file-recorded-gone", "bytes-cut",
        "segment-replaced", "covered-earlier"])
def test_check_head_refuses_an_archive_rolled_back(store, change, refused):
    with pytest.raises(IntegrityError, match="ends before, or differs from, the head recorded in Airflow") as err:
        check_head(store, change(head(store)), USE)
    assert re.search(refused, str(err.value))


def test_the_head_skips_a_trailing_entry_with_no_segment(tmp_path):
    storage = FileStorage(str(tmp_path))
    b = branch()
    b.entries.append(Entry("bin.000003", "0-1-5", missing=True, closed=True))
    write_branch(storage, b)
    write_branches(storage, [{"id": BID}])
    assert head(storage)["file"] == "bin.000002"
    write_branch(storage, dataclasses.replace(b, entries=[Entry("bin.000001", "", missing=True)]))
    assert head(storage) is None


def _with_hole(proven: str, start: str, tail: bool) -> Branch:
    """The branch with a third file purged (its tail only, or whole) and a fourth starting from `start`."""
    b = branch()
    if tail:
        b.entries[1].tail_missing, b.entries[1].closed, b.entries[1].proven_empty = True, True, proven
    else:
        b.entries.append(Entry("bin.000003", "", missing=True, closed=True, proven_empty=proven))
    b.entries.append(Entry("bin.000004", start, size=10, segments=[{"offset": 0, "size": 10, "sha256": "01" * 32}],
                           end_gtids=start))
    return b


@pytest.mark.parametrize("tail", [True, False], ids=["a-tail", "a-whole-file"])
def test_a_hole_proven_empty_reads_back_and_one_the_chain_contradicts_is_refused(tmp_path, tail):
    """A hole is crossed on the chain's own proof (the next file starts from the state the archived bytes end at),
    never on a mark alone, even one signed."""
    storage = FileStorage(str(tmp_path))
    write_branch(storage, _with_hole("bin.000004", "0-1-5", tail))
    assert read_branch(storage, BID, USE).entries[-2 if not tail else 1].proven_empty == "bin.000004"
    for proven, start in (("bin.000004", "0-1-9"), ("bin.000009", "0-1-5")):  # transactions lost; another file named
        write_branch(storage, _with_hole(proven, start, tail))
        with pytest.raises(IntegrityError, match=f"is marked proven empty by {proven}, which the chain does not bear out"):
            read_branch(storage, BID, USE)


@pytest.mark.parametrize("tail", [True, False], ids=["a-tail", "a-whole-file"])
def test_a_mark_whose_file_is_not_archived_yet_reads_back_and_is_checked_once_that_file_is(tmp_path, tail):
    """The archiver writes the chain after each step: a run that ended between the hole and the file proving it left a
    chain the next run (and every restore meanwhile) must read; that file, once written, must bear the mark out."""
    storage = FileStorage(str(tmp_path))
    b = _with_hole("bin.000004", "0-1-5", tail)
    pending = dataclasses.replace(b, entries=b.entries[:-1])  # the hole written, bin.000004 not yet
    write_branch(storage, pending)
    read = read_branch(storage, BID, USE)
    assert read.entries[-1].proven_empty == "bin.000004" and read.entries[-1].name == ("bin.000002" if tail else "bin.000003")
    write_branch(storage, b)
    assert read_branch(storage, BID, USE).entries[-1].name == "bin.000004"
    write_branch(storage, _with_hole("bin.000004", "0-1-9", tail))  # then written starting past the archived bytes
    with pytest.raises(IntegrityError, match="is marked proven empty by bin.000004, which the chain does not bear out"):
        read_branch(storage, BID, USE)


def test_a_sealed_branch_keeps_its_envelope_in_a_file_of_its_own(tmp_path):
    from lastline.pitr.catalog import envelope_key, read_envelope, write_envelope

    storage, env = FileStorage(str(tmp_path)), {"format": "lastline-seal/1", "wrappings": []}
    sealed = dataclasses.replace(branch(), envelope=env, seal_public="c2VhbA==")
    write_branch(storage, sealed)
    assert "envelope" not in json.loads((tmp_path / PREFIX / BID / "chain.json").read_text())  # a round never writes it
    with pytest.raises(IntegrityError, match="envelope.json is missing, but the branch's chain says"):
        read_branch(storage, BID)  # its segments would not open: refused, not read as plain
    write_envelope(storage, BID, env)
    assert read_branch(storage, BID).envelope == env and read_envelope(storage, BID) == env
    write_envelope(storage, "1-000002-0a1b2c3d", env)
    (tmp_path / PREFIX / "1-000002-0a1b2c3d" / "envelope.json").replace(tmp_path / envelope_key(BID))
    with pytest.raises(IntegrityError, match="not the envelope lastline wrote for branch"):
        read_branch(storage, BID)  # another branch's, moved: refused
    plain = tmp_path / PREFIX / BID / "chain.json"
    plain.write_text(plain.read_text().replace('"seal_public"', '"envelope": {}, "seal_public"'))
    with pytest.raises(IntegrityError, match="is not a chain lastline wrote"):
        read_branch(storage, BID)  # an envelope inside the chain is not where lastline keeps it


@pytest.mark.parametrize("merged, ok", [
    ({"offset": 0, "size": 250, "sha256": "99" * 32, "key": "000000000000-000000000250"}, True),
    ({"offset": 0, "size": 300, "sha256": "99" * 32, "key": "000000000000-000000000300"}, True),
    ({"offset": 0, "size": 200, "sha256": "99" * 32, "key": "000000000000-000000000200"}, False),
    ({"offset": 0, "size": 250, "sha256": "99" * 32}, False),
], ids=["merged-same-end", "merged-beyond", "short", "not-merged"])
def test_check_head_accepts_a_merged_segment_covering_the_recorded_one(store, merged, ok):
    recorded = head(store)
    b = branch()
    b.entries[1].segments = [merged]
    b.entries[1].size = merged["offset"] + merged["size"]
    write_branch(store, b)
    if ok:
        assert "holds the head" in check_head(store, recorded, USE)
    else:
        with pytest.raises(IntegrityError, match="ends before, or differs from"):
            check_head(store, recorded, USE)


@pytest.mark.parametrize("change", [
    lambda d: d["entries"][1]["segments"][1].update(key="../../x"),
    lambda d: d.update(retired=[{"file": "bin.000002", "keys": ["../x"], "at": 1}]),
    lambda d: d.update(retired=[{"file": "../x", "keys": ["000000000000"], "at": 1}]),
], ids=["segment-key", "retired-key", "retired-file"])
def test_a_key_that_is_no_segment_name_is_refused(store, change):
    data = dataclasses.asdict(branch())
    del data["envelope"]
    change(data)
    control.write(store, f"{PREFIX}/{BID}/chain.json", json.dumps(data))
    with pytest.raises(IntegrityError, match="not a chain lastline wrote|not a binlog file name"):
        read_branch(store, BID)
