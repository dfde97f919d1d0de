"""rotation.manifests on real manifests (written and signed as a backup writes them) over a sealed artifact: a rotation
re-wraps the envelope under the new key, so the artifact opens with it and no longer with the old key alone (refused
naming the key id), the manifest's bytes unchanged but for the envelope's line and the MAC, the artifact untouched; a
re-run finds it current and writes nothing; a forged, unencrypted, unopenable or compact manifest is named and left
as it was; a dry run writes nothing; Airflow's pin follows the manifest's new sha256, a killed run's too."""
from __future__ import annotations

import hashlib
import json

import pytest

from lastline.core.errors import ConfigError
from lastline.manifest import read_manifest
from lastline.rotation import manifests
from lastline.rotation.manifests import Rotation, spliced
from lastline.rotation.plans import CURRENT, GONE, NOKEY, REWRAPPED, UNAUTHENTICATED, UNENCRYPTED, UNREADABLE, WOULD
from lastline.storage import auth
from lastline.storage.envelope import opened_seal

from .helpers import K1, K2, ROWS, backup, destination, keys

NEW = keys("k2", K2, keys={"k1": K1})  # the connection after the rotation's first step: k2 current, k1 kept to read


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _opened(storage, backup_id, with_keys) -> bytes:
    manifest = read_manifest(storage, backup_id, "physical", require=False)
    seal = opened_seal(manifest.encryption, with_keys, backup_id, "m", manifest.authenticity.ok)
    return seal.opened(storage.read_bytes(f"{backup_id}/{manifest.artifact}"), f"{backup_id}/{manifest.artifact}")


def test_a_rotation_rewraps_the_envelope_only_and_the_old_key_no_longer_opens_it(tmp_path):
    _, storage = destination(tmp_path)
    b = backup(storage, keys())
    before = _files(tmp_path / "dest")
    pins = []
    out = Rotation(storage, NEW, True, pin=lambda *a: pins.append(a) or True).rotate(b)
    assert (out.status, out.was, out.now, out.pinned) == (REWRAPPED, "k1 (kek)", "k2 (kek)", True)
    after = _files(tmp_path / "dest")
    raw = after[f"{b}/manifest.json"]
    assert out.bytes == len(raw) and pins == [("physical", b, hashlib.sha256(raw).hexdigest())]
    assert {k: v for k, v in after.items() if k.endswith("manifest.json") is False} == \
        {k: v for k, v in before.items() if k.endswith("manifest.json") is False}  # no data object rewritten
    old_lines, new_lines = before[f"{b}/manifest.json"].splitlines(), raw.splitlines()
    changed = [i for i, (x, y) in enumerate(zip(old_lines, new_lines, strict=True)) if x != y]
    assert [old_lines[i].split(b":")[0] for i in changed] == [b' "encryption"', b' "lastline_mac"']
    assert read_manifest(storage, b, "physical").authenticity.ok  # signed again with the storage key
    assert _opened(storage, b, keys("k2", K2)) == ROWS  # the new key alone opens it
    with pytest.raises(ConfigError, match=r"backup '.*' needs one of the keys k2 \(kek\) to be read; .* holds k1"):
        _opened(storage, b, keys())
    again = Rotation(storage, NEW, True).rotate(b)  # a re-run: current, nothing written
    assert (again.status, again.bytes) == (CURRENT, 0) and _files(tmp_path / "dest") == after


def test_a_killed_run_finds_the_manifest_current_and_still_updates_the_pin(tmp_path):
    _, storage = destination(tmp_path)
    b = backup(storage, keys())
    Rotation(storage, NEW, True).rotate(b)  # killed before it told Airflow
    sha = hashlib.sha256((tmp_path / "dest" / b / "manifest.json").read_bytes()).hexdigest()
    pins = []
    out = Rotation(storage, NEW, True, pin=lambda *a: pins.append(a) or True).rotate(b)
    assert out.status == CURRENT and out.pinned and pins == [("physical", b, sha)]


def test_a_dry_run_says_what_it_would_do_and_writes_nothing(tmp_path):
    _, storage = destination(tmp_path)
    b = backup(storage, keys())
    before = _files(tmp_path / "dest")
    out = Rotation(storage, NEW, True, dry_run=True, pin=lambda *a: pytest.fail("no pin in a dry run")).rotate(b)
    assert (out.status, out.was, out.now, out.bytes) == (WOULD, "k1 (kek)", "k2 (kek)", 0)
    assert _files(tmp_path / "dest") == before


def test_a_forged_manifest_is_reported_and_never_signed_again(tmp_path):
    _, storage = destination(tmp_path)
    b = backup(storage, keys())
    path = tmp_path / "dest" / b / "manifest.json"
    path.write_bytes(path.read_bytes().replace(b'"parallel": 2', b'"parallel": 3'))  # a writer without the key
    forged = path.read_bytes()
    out = Rotation(storage, NEW, True).rotate(b)
    assert out.status == UNAUTHENTICATED and "its MAC does not match" in out.why and "launder" in out.why
    assert path.read_bytes() == forged


def test_without_a_storage_key_a_signed_manifest_is_left_and_an_unsigned_one_stays_unsigned(tmp_path, monkeypatch):
    _, storage = destination(tmp_path)
    signed = backup(storage, keys())
    monkeypatch.delenv(auth.KEY_CONN_ENV)
    unsigned = backup(storage, keys())
    rot = Rotation(storage, NEW, False)
    out = rot.rotate(signed)
    assert out.status == UNAUTHENTICATED and "lose its MAC" in out.why
    assert rot.rotate(unsigned).status == REWRAPPED
    assert b"lastline_mac" not in (tmp_path / "dest" / unsigned / "manifest.json").read_bytes()
    assert _opened(storage, unsigned, keys("k2", K2)) == ROWS


def test_unencrypted_unopenable_and_recipient_only_backups_are_named(tmp_path):
    _, storage = destination(tmp_path)
    plain, other = backup(storage, None), backup(storage, keys("k9", "9c" * 32))
    rot = Rotation(storage, NEW, True)
    assert rot.rotate(plain).status == UNENCRYPTED
    out = rot.rotate(other)
    assert out.status == NOKEY and "needs one of the keys k9 (kek)" in out.why and out.was == "k9 (kek)"
    assert Rotation(storage, None, True).rotate(other).status == NOKEY  # no encryption key connection at all


def test_a_recipient_is_rewrapped_to_from_its_identity_on_an_authenticated_manifest(tmp_path):
    from lastline.storage.encryption_keys import new_identity

    private, public = new_identity()
    _, storage = destination(tmp_path)
    b = backup(storage, keys(recipients={"ops": public}))
    out = Rotation(storage, keys("k2", K2, keys={"k1": K1}, recipients={"ops": public}), True).rotate(b)
    assert (out.status, out.was, out.now) == (REWRAPPED, "k1 (kek), ops (x25519)", "k2 (kek), ops (x25519)")
    restore_host = keys_only_identity = keys("", "", identities={"ops": private})
    assert _opened(storage, b, keys_only_identity) == ROWS and restore_host.current is None


def test_spliced_refuses_an_envelope_not_on_a_line_of_its_own():
    env = {"format": "x", "cipher": "aes-256-gcm"}
    compact = json.dumps({"backup_id": "b", "encryption": env, "kind": "physical"}).encode()
    with pytest.raises(Exception, match="not on a line of its own"):
        spliced(compact, env, {"a": 1}, "m")
    lined = b'{\n "backup_id": "b",\n "encryption": ' + json.dumps(env, sort_keys=True).encode() + b',\n "kind": "p"\n}\n'
    assert json.loads(spliced(lined, env, {"a": 1}, "m")) == {"backup_id": "b", "encryption": {"a": 1}, "kind": "p"}
    twice = lined.replace(b'"kind": "p"', b'"x": {"y": 1},\n "encryption": ' + json.dumps(env, sort_keys=True).encode())
    with pytest.raises(Exception, match="not on a line of its own"):
        spliced(twice, env, {"a": 1}, "m")


def test_wraps_to_and_is_current_name_the_current_key_and_recipients():
    from lastline.storage.envelope import new_data_key

    _, env = new_data_key(keys(), "b1")
    assert manifests.is_current(env, keys()) and not manifests.is_current(env, NEW)
    assert not manifests.is_current(env, None) and manifests.wraps_to(None) == ""
    assert manifests.wraps_to(NEW) == "k2 (kek)"


def test_a_damaged_manifest_is_unreadable_and_a_removed_backup_is_gone(tmp_path):
    _, storage = destination(tmp_path)
    damaged, removed = backup(storage, keys()), backup(storage, keys())
    (tmp_path / "dest" / damaged / "manifest.json").write_bytes(b"{not json")
    storage.delete_backup(removed)
    rot = Rotation(storage, NEW, True)
    out = rot.rotate(damaged)
    assert out.status == UNREADABLE and "JSONDecodeError" in out.why
    assert rot.rotate(removed).status == GONE
