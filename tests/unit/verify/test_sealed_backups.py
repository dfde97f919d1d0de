"""verify.backups on real encrypted backups (issue 46): a physical and a logical backup of the suite's source written
under key `verify-k1`, the logical one's chunk file over several 4 MiB sealed chunks. With the key both verify ok,
every sealed chunk authenticated; a byte flipped inside a sealed chunk whose sha256 in the manifest is rewritten to
match (a storage writer without the storage key: the manifest is then unsigned) is a `sealed` finding naming the file
and the chunk, beside the manifest's `mac` finding where the deployment signs; under a key the deployment does not
hold (another id, or another secret under the id) a `key` finding naming verify-k1, the files still checked by size
and sha256; without a key connection ok, with a note naming the key; on S3 the same, streamed."""
from __future__ import annotations

import dataclasses
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from lastline.core.servers import Server
from lastline.core.sql import qualified, quote_ident
from lastline.logical.backup import stages as logical_backup
from lastline.manifest import MANIFEST_CLASSES, complete_backups, read_manifest
from lastline.physical import backup as physical_backup
from lastline.storage import auth, encryption_keys, open_storage
from lastline.storage.sealing import CHUNK_SIZE, HEADER_SIZE, TAG
from lastline.verify import backups
from lastline_dev.keys import encryption_connection

DB, TABLE = "ll_verify_sealed`x y", "t.1 `s`"
KEY1, KEY2 = "7a" * 32, "8b" * 32
CONN = "lastline_verify_encryption"
OPENED = "opened: every sealed chunk authenticated"


@dataclass(frozen=True)
class Sealed:
    """The destination's folder and its encrypted physical and logical backups."""

    folder: Path
    physical: str
    logical: str

    def copy(self, to: Path) -> Path:
        shutil.copytree(self.folder, to)
        return to


def _key(setenv, login: str = "verify-k1", password: str = KEY1) -> None:
    encryption_connection(setenv, CONN, login, password)  # the deployment's encryption key connection


@pytest.fixture(scope="module")
def sealed(source, tmp_path_factory) -> Sealed:
    root = Server(conn_id="root", socket=str(source.sock), user="root")
    with root.session() as cur:  # 120k rows of hex: a chunk file of several sealed chunks after zstd
        cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(DB)}")
        cur.execute(f"CREATE DATABASE {quote_ident(DB)}")
        cur.execute(f"CREATE TABLE {qualified(DB, TABLE)} (id INT PRIMARY KEY, v VARCHAR(200))")
        cur.execute(f"INSERT INTO {qualified(DB, TABLE)} SELECT seq, SHA2(seq, 512) FROM {quote_ident(DB)}.seq_1_to_120000")
        cur.connection.commit()
    dest = tmp_path_factory.mktemp("verify-sealed") / "dest"
    try:
        with pytest.MonkeyPatch.context() as mp:
            _key(mp.setenv)
            plan = physical_backup.preflight({"source_conn_id": "t_source", "destination": f"file://{dest}",
                                              "compression": "zstd"})
            physical_backup.finish(plan, physical_backup.stream(plan))
            logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_source", "destination": f"file://{dest}",
                                                          "databases": [DB]}))
    finally:
        with root.session() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(DB)}")
    storage = open_storage(f"file://{dest}")
    ids = {kind: complete_backups(storage, kind)[0] for kind in MANIFEST_CLASSES}
    for kind, backup_id in ids.items():
        assert read_manifest(storage, backup_id, kind).encryption is not None
    return Sealed(dest, ids["physical"], ids["logical"])


def _plan(folder: Path):
    return backups.preflight({"destination": f"file://{folder}"})


def _files(folder: Path, backup_id: str, kind: str):
    return backups.expected_files(read_manifest(open_storage(f"file://{folder}"), backup_id, kind))


def _stored(folder: Path, backup_id: str) -> int:
    return sum(p.stat().st_size for p in (folder / backup_id).rglob("*") if p.is_file()
               and p.name not in ("manifest.json", "tables.json"))


def test_encrypted_backups_verify_ok_with_the_key_every_sealed_chunk_authenticated(sealed, tmp_path, monkeypatch):
    encryption_connection(monkeypatch.setenv, CONN, "verify-k2", KEY2, keys={"verify-k1": KEY1})  # a later key
    folder = sealed.copy(tmp_path / "d")
    plan = _plan(folder)
    for backup_id, kind in ((sealed.physical, "physical"), (sealed.logical, "logical")):
        verdict = backups.verify_backup(plan, backup_id)
        assert (verdict.status, verdict.findings, verdict.sealed) == ("ok", [], OPENED), verdict
        assert verdict.files == len(_files(folder, backup_id, kind)) and verdict.bytes == _stored(folder, backup_id)
    names = {f.name for f in _files(folder, sealed.logical, "logical")}
    assert {"schema.json", "schema.sql"} < names and any(n.startswith("data/") for n in names)


def _rewritten(folder: Path, backup_id: str, kind: str, name: str) -> None:
    """Manifest `name`'s size and sha256 set to its changed bytes', the manifest written again without a MAC (no
    storage key): what a storage writer without the storage key can do, so that only the seal can tell."""
    storage = open_storage(f"file://{folder}")
    manifest = read_manifest(storage, backup_id, kind)
    data = (folder / backup_id / name).read_bytes()
    sha, size = hashlib.sha256(data).hexdigest(), len(data)
    if kind == "physical":
        manifest = dataclasses.replace(manifest, sha256=sha, bytes=size)
    else:
        manifest.files = [dataclasses.replace(f, sha256=sha, bytes=size) if f.name == name else f for f in manifest.files]
        for chunk in (c for t in manifest.tables for c in t.chunks if c.file == name):
            chunk.sha256, chunk.bytes = sha, size
    (folder / backup_id / "manifest.json").write_text(manifest.to_json())


@pytest.mark.parametrize("kind", ["logical", "physical"])
def test_a_flipped_byte_in_a_sealed_chunk_under_a_rewritten_sha256_is_named_by_its_chunk(sealed, tmp_path, monkeypatch, kind):
    folder = sealed.copy(tmp_path / "d")
    backup_id = getattr(sealed, kind)
    info = max(_files(folder, backup_id, kind), key=lambda f: f.bytes)  # the stream, or the largest chunk file
    assert info.bytes > HEADER_SIZE + CHUNK_SIZE + TAG  # more than one sealed chunk
    chunk = (info.bytes - HEADER_SIZE) // (CHUNK_SIZE + TAG) // 2 or 1
    path = folder / backup_id / info.name
    data = bytearray(path.read_bytes())
    data[HEADER_SIZE + chunk * (CHUNK_SIZE + TAG) + 1000] ^= 0x10
    path.write_bytes(bytes(data))
    _rewritten(folder, backup_id, kind, info.name)
    _key(monkeypatch.setenv)
    verdict = backups.verify_backup(_plan(folder), backup_id)  # the deployment signs: the manifest's MAC is gone
    assert verdict.status == "damaged" and [(f.file, f.problem) for f in verdict.findings] == [
        ("manifest.json", "mac"), (info.name, "sealed")]
    assert verdict.findings[1].found.startswith(f"chunk {chunk}: changed (it does not authenticate")
    monkeypatch.delenv(auth.KEY_CONN_ENV)  # a deployment without a storage key: the MAC cannot tell, the seal does
    verdict = backups.verify_backup(_plan(folder), backup_id)
    assert [(f.file, f.problem) for f in verdict.findings] == [(info.name, "sealed")]
    assert verdict.sealed == "opened: see its findings" and verdict.bytes == _stored(folder, backup_id)


@pytest.mark.parametrize(("login", "password", "said"), [
    ("verify-k2", KEY2, "holds verify-k2: add one of them"),
    ("verify-k1", KEY2, "another secret under that id"),
], ids=["another-key", "another-secret-under-its-id"])
def test_a_backup_under_a_key_the_deployment_does_not_hold_is_a_key_finding(sealed, tmp_path, monkeypatch, login, password,
                                                                            said):
    folder = sealed.copy(tmp_path / "d")
    _key(monkeypatch.setenv, login, password)
    for backup_id in (sealed.physical, sealed.logical):
        verdict = backups.verify_backup(_plan(folder), backup_id)
        (found,) = verdict.findings
        assert (verdict.status, found.file, found.problem) == ("damaged", "manifest.json", "key")
        assert found.expected == "one of the keys verify-k1 (kek)" and said in found.found and KEY1 not in found.found
        assert verdict.bytes == _stored(folder, backup_id)  # still read back by size and sha256
        assert verdict.sealed == "sealed, not opened (see its findings)"


def test_without_a_key_connection_it_is_ok_with_a_note_naming_the_key(sealed, tmp_path, monkeypatch):
    folder = sealed.copy(tmp_path / "d")
    monkeypatch.delenv(encryption_keys.KEY_CONN_ENV, raising=False)
    for backup_id in (sealed.physical, sealed.logical):
        verdict = backups.verify_backup(_plan(folder), backup_id)
        assert (verdict.status, verdict.findings) == ("ok", []) and verdict.bytes == _stored(folder, backup_id)
        assert verdict.sealed.startswith("sealed, not opened: this deployment has no encryption key connection")
        assert "verify-k1 (kek)" in verdict.sealed
    name = next(f.name for f in _files(folder, sealed.logical, "logical") if f.name.startswith("data/"))
    data = bytearray((folder / sealed.logical / name).read_bytes())
    data[-5] ^= 0x01
    (folder / sealed.logical / name).write_bytes(bytes(data))  # without a key, the digest still tells
    assert [(f.file, f.problem) for f in backups.verify_backup(_plan(folder), sealed.logical).findings] == [(name, "digest")]


def test_on_s3_the_sealed_files_stream_back_opened(sealed, s3_server, monkeypatch):
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing-secret")
    prefix = "verify-sealed"
    for path in (p for p in (sealed.folder / sealed.logical).rglob("*") if p.is_file()):
        client.put_object(Bucket="backups", Key=f"{prefix}/{path.relative_to(sealed.folder)}", Body=path.read_bytes())
    _key(monkeypatch.setenv)
    plan = backups.preflight({"destination": f"s3://backups/{prefix}", "aws_conn_id": "t_s3"})
    verdict = backups.verify_backup(plan, sealed.logical)
    assert (verdict.status, verdict.findings, verdict.sealed) == ("ok", [], OPENED)
    assert verdict.bytes == _stored(sealed.folder, sealed.logical)


def _flipped_in_manifest(folder: Path, backup_id: str, field: str) -> None:
    """One character of the manifest's text changed in place, the JSON still valid: inside the envelope's wrapped data
    key (`wrapped`, base64) or inside the first recorded sha256 (`sha256`, hex), to another character of both
    alphabets; the MAC line kept as it was."""
    path = folder / backup_id / "manifest.json"
    text = path.read_text()
    at = text.index(f'"{field}": "') + len(f'"{field}": "') + 5
    path.write_text(text[:at] + ("0" if text[at] != "0" else "1") + text[at + 1:])
    assert path.read_text() != text


@pytest.mark.parametrize("field", ["wrapped", "sha256"])
@pytest.mark.parametrize("kind", ["logical", "physical"])
def test_a_flipped_byte_in_an_encrypted_manifest_is_named_by_verify(sealed, target, tmp_path, monkeypatch, kind, field):
    """Issue 46: a byte changed in an encrypted backup's manifest (inside its wrapped data key, or a file's sha256) is
    named by verify: manifest.json, its MAC. Where the deployment signs nothing, the envelope's own authentication still
    names a changed wrapped key (`key`), and the file whose recorded sha256 changed no longer matches it (`digest`).
    A physical restore refuses it in preflight with nothing touched (it requires the MAC); the logical restore's
    refusals are in tests/e2e/logical_restore/test_encrypted.py."""
    from lastline.core.errors import IntegrityError
    from lastline.physical import restore as physical_restore

    folder = sealed.copy(tmp_path / "d")
    backup_id = getattr(sealed, kind)
    _flipped_in_manifest(folder, backup_id, field)
    _key(monkeypatch.setenv)
    verdict = backups.verify_backup(_plan(folder), backup_id)
    found = [(f.file, f.problem) for f in verdict.findings]
    assert verdict.status == "damaged" and found[0] == ("manifest.json", "mac"), found  # (and what the change broke)
    if kind == "physical":
        with pytest.raises(IntegrityError, match=r"manifest.json is not authenticated: its MAC does not match.*nothing was used"):
            physical_restore.preflight({"target_conn_id": "t_target", "backup": f"file://{folder}/{backup_id}", "force": True})
        assert target.server().query("SELECT 1") == [(1,)]  # running, never stopped
    monkeypatch.delenv(auth.KEY_CONN_ENV)  # no storage key: the envelope and the digests still tell
    verdict = backups.verify_backup(_plan(folder), backup_id)
    problems = {f.problem for f in verdict.findings}
    assert verdict.status == "damaged" and ("key" if field == "wrapped" else "digest") in problems and "mac" not in problems
