"""rotation.archive on a real, signed binlog archive: a branch whose chain records an envelope (Branch.envelope, bound
to `binlogs/<branch>`; given here by a Branch of the test's own, as an encrypted archive's chain holds it) is re-wrapped
under the new key, its chain otherwise as it was and signed again, and a re-run finds it current; a chain without an
envelope is left untouched (no attribute: a no-op); a chain the archiver wrote meanwhile is not overwritten; a forged
chain is reported; the head Airflow records is recorded again only if it changed."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from lastline.core.errors import ConfigError
from lastline.pitr import catalog
from lastline.pitr.chain import Branch, Entry
from lastline.rotation.archive import rotate_archive, rotate_branch
from lastline.rotation.manifests import Rotation
from lastline.rotation.plans import CHANGED, CURRENT, REWRAPPED, UNAUTHENTICATED, UNENCRYPTED
from lastline.storage.envelope import Envelope, new_data_key, open_data_key

from .helpers import K1, K2, destination, keys

BID = "1-000001-0a1b2c3d"
NEW = keys("k2", K2, keys={"k1": K1})


@dataclass
class SealedBranch(Branch):
    """A branch whose chain records its envelope."""

    envelope: dict | None = None


@pytest.fixture
def sealed_chains(monkeypatch):
    """read_branch gives each chain's envelope as the attribute an encrypted archive's Branch has."""
    real = catalog.read_branch

    def read(storage, bid, use=None):
        b = real(storage, bid, use)
        recorded = catalog.control.read(storage, f"binlogs/{bid}/chain.json").data.get("envelope")
        return SealedBranch(b.id, b.entries, b.parent, b.fork_after, b.covered, recorded)

    monkeypatch.setattr(catalog, "read_branch", read)


def _archive(storage, envelope: dict | None) -> None:
    entry = Entry("mariadb-bin.000001", "0-1-1", 10, [{"offset": 0, "size": 10, "sha256": "ab" * 32}], end_gtids="0-1-5")
    branch = SealedBranch(BID, [entry], covered={"file": entry.name, "size": 10, "time": 1.0}, envelope=envelope)
    catalog.write_branch(storage, branch)
    catalog.write_branches(storage, [{"id": BID, "parent": None, "fork_after": None}])


def test_a_branch_envelope_is_rewrapped_and_its_chain_otherwise_kept(tmp_path, sealed_chains):
    _, storage = destination(tmp_path)
    data_key, env = new_data_key(keys(), f"binlogs/{BID}")
    _archive(storage, env.to_json())
    chain = tmp_path / "dest" / "binlogs" / BID / "chain.json"
    before = json.loads(chain.read_bytes())
    heads = []
    done = rotate_archive(Rotation(storage, NEW, True), heads.append)
    assert [(o.backup_id, o.status, o.was, o.now) for o in done] == [(f"binlogs/{BID}", REWRAPPED, "k1 (kek)", "k2 (kek)")]
    assert done[0].bytes == chain.stat().st_size and heads == []  # the head did not change: not recorded again
    after = catalog.control.read(storage, f"binlogs/{BID}/chain.json")
    assert after.auth.ok  # signed again
    assert {k: v for k, v in after.data.items() if k != "envelope"} == {k: v for k, v in before.items()
                                                                        if k not in ("envelope", "lastline_mac")}
    rewrapped = Envelope.from_json(after.data["envelope"], "chain")
    assert open_data_key(rewrapped, keys("k2", K2), f"binlogs/{BID}") == data_key
    with pytest.raises(ConfigError, match="needs one of the keys k2"):
        open_data_key(rewrapped, keys(), f"binlogs/{BID}")
    assert [o.status for o in rotate_archive(Rotation(storage, NEW, True))] == [CURRENT]


def test_a_chain_without_an_envelope_is_a_no_op(tmp_path):
    _, storage = destination(tmp_path)
    _archive(storage, None)
    chain = tmp_path / "dest" / "binlogs" / BID / "chain.json"
    before = chain.read_bytes()
    assert [o.status for o in rotate_archive(Rotation(storage, NEW, True))] == [UNENCRYPTED]
    assert chain.read_bytes() == before and not hasattr(catalog.read_branch(storage, BID), "envelope")
    assert rotate_archive(Rotation(destination(tmp_path / "none")[1], NEW, True)) == []  # no archive at all


def test_a_chain_the_archiver_wrote_meanwhile_is_left_for_a_re_run(tmp_path, sealed_chains, monkeypatch):
    _, storage = destination(tmp_path)
    _archive(storage, new_data_key(keys(), f"binlogs/{BID}")[1].to_json())
    read = catalog.read_branch

    def archiver_too(s, bid, use=None):  # the archiver appends a segment between the rotation's reads
        b = read(s, bid, use)
        b.entries[0].size = 20
        catalog.write_branch(s, b)
        return read(s, bid, use)

    monkeypatch.setattr(catalog, "read_branch", archiver_too)
    out = rotate_branch(Rotation(storage, NEW, True), BID)
    assert out.status == CHANGED and "run the rotation again" in out.why


def test_a_forged_chain_is_reported_and_not_signed_again(tmp_path, sealed_chains):
    _, storage = destination(tmp_path)
    _archive(storage, new_data_key(keys(), f"binlogs/{BID}")[1].to_json())
    chain = tmp_path / "dest" / "binlogs" / BID / "chain.json"
    chain.write_bytes(chain.read_bytes().replace(b'"size": 10', b'"size": 11', 1))
    forged = chain.read_bytes()
    out = rotate_branch(Rotation(storage, NEW, True), BID)
    assert out.status == UNAUTHENTICATED and "MAC does not match" in out.why and chain.read_bytes() == forged
