"""pitr.sealed: a branch's segments sealed under keys the archiver derives from the branch's public key alone (it may
hold recipients only), opened by whoever opens the branch's envelope (a KEK, an identity, a key re-wrapped by a
rotation), refused naming the key ids without one; a segment's stored bytes checked against its chain, a flipped byte
named by its chunk; a forged public key found where the archiver holds the KEK; a chain without a storage key refused
where it cannot be checked; and the archive's readers (window.segment_chunks, catalog) taking sealed segments."""
from __future__ import annotations

import hashlib
import json

import pytest

from lastline.core.errors import ConfigError, IntegrityError
from lastline.pitr import catalog, sealed, window
from lastline.pitr.chain import Branch, Entry
from lastline.storage import envelope
from lastline.storage.encryption_keys import EncryptionKeys, keys_from_connection, new_identity
from lastline.storage.file import FileStorage
from lastline.storage.sealing import SealError

BID = "1-000001-0a1b2c3d"
K1, K2 = "1" * 32, "2" * 40
PRIVATE, PUBLIC = new_identity()
DATA = b"\xfebin" + bytes(range(256)) * 40 + b"a row value: qx-row-7"


def keys(login: str = "k1", password: str = K1, **extra) -> EncryptionKeys:
    return keys_from_connection("the connection", "generic", login, password, extra)


def ship(store: FileStorage, branch: Branch, deployment: EncryptionKeys | None, data: bytes = DATA,
         offset: int = 0, chunk_size: int | None = None) -> dict:
    """One segment of `data` written as the archiver writes it; its chain entry's fields."""
    seal = sealed.sealer(store, branch, deployment)
    name = f"binlogs/{branch.id}/bin.000001/{offset:012d}"
    if seal is None:
        store.write_bytes(name, data)
        return {"offset": offset, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if chunk_size:
        seal.chunk_size = chunk_size
    with store.writer(name) as out:
        writer, counted, fields = seal.writer(out, name)
        writer.write(data)
        writer.close()
    return {"offset": offset, "size": len(data), "sha256": counted.sha.hexdigest(), "stored": counted.n, **fields}


def read(store: FileStorage, branch: Branch, seg: dict, deployment: EncryptionKeys | None) -> bytes:
    seals = sealed.Seals({branch.id: branch.envelope}, deployment)
    return window.segment_bytes(store, branch.id, "bin.000001", seg, seals)


def test_a_segment_is_sealed_under_the_branch_and_opens_with_its_key(tmp_path):
    store, branch = FileStorage(str(tmp_path)), Branch(BID)
    seg = ship(store, branch, keys())
    stored = (tmp_path / f"binlogs/{BID}/bin.000001/{0:012d}").read_bytes()
    assert stored.startswith(b"LLSEAL") and b"qx-row-7" not in stored and K1 not in json.dumps(branch.envelope)
    assert seg["sealed"] is True and seg["stored"] == len(stored) and seg["size"] == len(DATA)
    assert seg["sha256"] == hashlib.sha256(stored).hexdigest()  # over what is stored: verify checks it without a key
    assert [w["key_id"] for w in branch.envelope["wrappings"]] == ["k1"] and branch.seal_public
    assert read(store, branch, seg, keys()) == DATA
    assert read(store, branch, seg, keys("k2", K2, keys={"k1": K1})) == DATA  # a later key holding the older one
    second = ship(store, branch, keys(), b"more", offset=len(DATA))  # the same envelope, a key of its own
    assert second["ephemeral"] != seg["ephemeral"] and read(store, branch, second, keys()) == b"more"


def test_no_key_or_a_wrong_key_is_refused_naming_the_key_it_needs(tmp_path):
    store, branch = FileStorage(str(tmp_path)), Branch(BID)
    seg = ship(store, branch, keys())
    for deployment, said in ((None, "no encryption key connection"), (keys("k9", K2), "holds k9"),
                             (keys("k1", K2), "does not open its data key")):
        with pytest.raises(ConfigError, match=f"the binlog archive is sealed: backup 'binlogs/{BID}'.*") as exc:
            read(store, branch, seg, deployment)
        assert "k1" in str(exc.value) and said in str(exc.value)
        assert not sealed.Seals({BID: branch.envelope}, deployment).opens(BID)


def test_a_recipient_only_archiver_seals_what_only_the_identity_opens(tmp_path, monkeypatch):
    store, branch = FileStorage(str(tmp_path)), Branch(BID)
    archiver = keys("", "", recipients={"ops": PUBLIC})
    seg = ship(store, branch, archiver)
    later = ship(store, branch, archiver, b"next run", offset=len(DATA))  # a later run: the envelope is not opened
    assert not sealed.Seals({BID: branch.envelope}, archiver).opens(BID)
    restorer = keys("", "", identities={"ops": PRIVATE})
    assert read(store, branch, seg, restorer) + read(store, branch, later, restorer) == DATA + b"next run"
    # without a storage key nothing authenticates the chain's public key: the archiver will not seal to it
    monkeypatch.delenv("LASTLINE_STORAGE_KEY_CONN_ID", raising=False)
    monkeypatch.delenv("LASTLINE_STORAGE_TRUSTED", raising=False)
    with pytest.raises(ConfigError, match="cannot be checked"):
        sealed.sealer(store, branch, archiver)


def test_a_rotation_rewraps_the_branch_envelope_and_its_segments_follow(tmp_path):
    store, branch = FileStorage(str(tmp_path)), Branch(BID)
    seg = ship(store, branch, keys())
    new = keys("k2", K2, keys={"k1": K1})
    branch.envelope = envelope.rewrap(envelope.Envelope.from_json(branch.envelope, "chain"), new,
                                      backup_id=f"binlogs/{branch.id}").to_json()
    assert read(store, branch, seg, keys("k2", K2)) == DATA  # the old key dropped
    assert ship(store, branch, keys("k2", K2), b"after", offset=len(DATA))["sealed"]  # the archiver goes on
    with pytest.raises(ConfigError, match="holds k1"):
        read(store, branch, seg, keys())


def test_a_forged_public_key_is_found_by_an_archiver_holding_the_kek(tmp_path):
    store, branch = FileStorage(str(tmp_path)), Branch(BID)
    ship(store, branch, keys())
    other = Branch(BID)
    sealed.sealer(FileStorage(str(tmp_path / "other")), other, keys())
    branch.seal_public = other.seal_public
    with pytest.raises(IntegrityError, match="not the one its data key derives"):
        sealed.sealer(store, branch, keys())


def test_a_flipped_byte_is_named_by_its_chunk_and_a_swapped_object_by_its_digest(tmp_path):
    store, branch = FileStorage(str(tmp_path)), Branch(BID)
    seg = ship(store, branch, keys(), chunk_size=1024)
    path = tmp_path / f"binlogs/{BID}/bin.000001/{0:012d}"
    good = path.read_bytes()
    path.write_bytes(good[:3000] + bytes([good[3000] ^ 1]) + good[3001:])
    with pytest.raises(SealError) as exc:
        read(store, branch, seg, keys())
    assert exc.value.chunk == 2 and exc.value.name == f"binlogs/{BID}/bin.000001/{0:012d}"
    path.write_bytes(good)
    with pytest.raises(IntegrityError, match="another sha256 than its chain records"):
        read(store, branch, {**seg, "sha256": "0" * 64}, keys())
    with pytest.raises(IntegrityError, match="holds sealed segments and its chain records no envelope"):
        window.segment_bytes(store, BID, "bin.000001", seg, sealed.Seals({}, keys()))


def test_without_a_key_plain_segments_are_written_and_read_as_before(tmp_path):
    store, branch = FileStorage(str(tmp_path)), Branch(BID)
    seg = ship(store, branch, None)
    assert branch.envelope is None and "sealed" not in seg and read(store, branch, seg, None) == DATA


def test_the_chain_records_and_checks_the_sealed_fields(tmp_path):
    store, branch = FileStorage(str(tmp_path)), Branch(BID)
    seg = ship(store, branch, keys())
    branch.entries.append(Entry("bin.000001", "0-1-0", len(DATA), [seg]))
    catalog.write_branch(store, branch)
    again = catalog.read_branch(store, BID)
    assert again.envelope == branch.envelope and again.seal_public == branch.seal_public
    assert again.entries[0].segments[0]["sealed"] is True
    line = window.lineage(store, BID)
    assert line.seals.envelopes == {BID: branch.envelope}
    assert window.segment_bytes(store, BID, "bin.000001", seg, sealed.Seals(line.seals.envelopes, keys())) == DATA
    for bad in ({**seg, "sealed": "yes"}, {**seg, "stored": "x"}, {k: v for k, v in seg.items() if k != "ephemeral"}):
        branch.entries[0].segments = [bad]
        catalog.write_branch(store, branch)
        with pytest.raises(IntegrityError, match="is not a chain lastline wrote"):
            catalog.read_branch(store, BID)
