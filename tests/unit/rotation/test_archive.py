"""rotation.archive on a real, signed binlog archive: a sealed branch's envelope.json (bound to `binlogs/<branch>`) is
re-wrapped under the new key and signed again, its chain untouched, and a re-run finds it current; a branch that is not
sealed is left alone; an envelope changed meanwhile is not overwritten; a forged envelope is reported, never signed
again; the archiver's chain writes never carry an envelope (so they cannot undo a rotation)."""
from __future__ import annotations

import pytest

from lastline.core.errors import ConfigError
from lastline.pitr import catalog
from lastline.pitr.chain import Branch, Entry
from lastline.rotation.archive import rotate_archive, rotate_branch
from lastline.rotation.manifests import Rotation
from lastline.rotation.plans import CHANGED, CURRENT, REWRAPPED, UNAUTHENTICATED, UNENCRYPTED, UNREADABLE
from lastline.storage.envelope import Envelope, new_data_key, open_data_key, rewrap

from .helpers import K1, K2, destination, keys

BID = "1-000001-0a1b2c3d"
NEW = keys("k2", K2, keys={"k1": K1})


def _archive(storage, envelope: dict | None) -> Branch:
    entry = Entry("mariadb-bin.000001", "0-1-1", 10, [{"offset": 0, "size": 10, "sha256": "ab" * 32}], end_gtids="0-1-5")
    branch = Branch(BID, [entry], covered={"file": entry.name, "size": 10, "time": 1.0},
                    seal_public=None if envelope is None else "c2VhbA==")
    if envelope is not None:
        catalog.write_envelope(storage, BID, envelope)
    catalog.write_branch(storage, branch)
    catalog.write_branches(storage, [{"id": BID, "parent": None, "fork_after": None}])
    return branch


def test_a_branch_envelope_is_rewrapped_and_its_chain_untouched(tmp_path):
    _, storage = destination(tmp_path)
    data_key, env = new_data_key(keys(), f"binlogs/{BID}")
    _archive(storage, env.to_json())
    folder = tmp_path / "dest" / "binlogs" / BID
    chain = (folder / "chain.json").read_bytes()
    heads = []
    done = rotate_archive(Rotation(storage, NEW, True), heads.append)
    assert [(o.backup_id, o.status, o.was, o.now) for o in done] == [(f"binlogs/{BID}", REWRAPPED, "k1 (kek)", "k2 (kek)")]
    assert done[0].bytes == (folder / "envelope.json").stat().st_size and heads == []  # the head did not change
    assert (folder / "chain.json").read_bytes() == chain  # the archiver's file is not written
    after = catalog.control.read(storage, catalog.envelope_key(BID))
    assert after.auth.ok and after.data["branch"] == BID  # signed again
    rewrapped = Envelope.from_json(catalog.read_envelope(storage, BID), "envelope")
    assert open_data_key(rewrapped, keys("k2", K2), f"binlogs/{BID}") == data_key
    with pytest.raises(ConfigError, match="needs one of the keys k2"):
        open_data_key(rewrapped, keys(), f"binlogs/{BID}")
    assert catalog.read_branch(storage, BID).envelope == rewrapped.to_json()
    assert [o.status for o in rotate_archive(Rotation(storage, NEW, True))] == [CURRENT]


def test_the_archiver_writing_its_chain_keeps_a_rotation(tmp_path):
    _, storage = destination(tmp_path)
    branch = _archive(storage, new_data_key(keys(), f"binlogs/{BID}")[1].to_json())
    held = catalog.read_branch(storage, BID)  # a held stream's branch, read before the rotation
    assert rotate_branch(Rotation(storage, NEW, True), BID).status == REWRAPPED
    held.entries[0].size = 20
    catalog.write_branch(storage, held)  # its next round, with the old envelope in memory
    assert "envelope" not in catalog.control.read(storage, f"binlogs/{BID}/chain.json").data
    assert [w.key_id for w in Envelope.from_json(catalog.read_envelope(storage, BID), "e").wrappings] == ["k2"]
    assert branch.seal_public == catalog.read_branch(storage, BID).seal_public


def test_a_branch_that_is_not_sealed_is_a_no_op(tmp_path):
    _, storage = destination(tmp_path)
    _archive(storage, None)
    folder = tmp_path / "dest" / "binlogs" / BID
    before = (folder / "chain.json").read_bytes()
    assert [o.status for o in rotate_archive(Rotation(storage, NEW, True))] == [UNENCRYPTED]
    assert (folder / "chain.json").read_bytes() == before and not (folder / "envelope.json").exists()
    assert catalog.read_branch(storage, BID).envelope is None
    assert rotate_archive(Rotation(destination(tmp_path / "none")[1], NEW, True)) == []  # no archive at all


def test_an_envelope_changed_meanwhile_is_left_for_a_re_run(tmp_path, monkeypatch):
    _, storage = destination(tmp_path)
    _archive(storage, new_data_key(keys(), f"binlogs/{BID}")[1].to_json())
    read = catalog.read_envelope

    def rotated_too(s, bid, use=None):  # another rotation writes between this one's reads
        found = read(s, bid, use)
        catalog.write_envelope(s, bid, rewrap(Envelope.from_json(found, "e"), keys(), f"binlogs/{BID}").to_json())
        return found

    monkeypatch.setattr(catalog, "read_envelope", rotated_too)
    out = rotate_branch(Rotation(storage, NEW, True), BID)
    assert out.status == CHANGED and "run the rotation again" in out.why


def test_a_forged_envelope_or_chain_is_reported_and_not_signed_again(tmp_path):
    _, storage = destination(tmp_path)
    _archive(storage, new_data_key(keys(), f"binlogs/{BID}")[1].to_json())
    folder = tmp_path / "dest" / "binlogs" / BID
    envelope = folder / "envelope.json"
    envelope.write_bytes(envelope.read_bytes().replace(b'"k1"', b'"kx"', 1))
    forged = envelope.read_bytes()
    out = rotate_branch(Rotation(storage, NEW, True), BID)
    assert out.status in (UNAUTHENTICATED, UNREADABLE) and "MAC does not match" in out.why
    assert envelope.read_bytes() == forged
    chain = folder / "chain.json"
    chain.write_bytes(chain.read_bytes().replace(b'"size": 10', b'"size": 11', 1))
    out = rotate_branch(Rotation(storage, NEW, True), BID)
    assert out.status == UNREADABLE and "MAC does not match" in out.why and envelope.read_bytes() == forged
