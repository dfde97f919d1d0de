"""backups: a backup named once (BackupRef parsed from a Param, its XCom form inside a plan) and opened once a task
(OpenedBackup: `latest` resolved, the manifest pinned by its sha256, schema.json checked against the manifest, and
opened with the deployment's key when the backup is encrypted, or refused naming the key it needs). On a local
folder, without a storage key."""
from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from lastline import manifest as mf
from lastline.backups import BackupRef, backup_seal, checked_schema, open_backup
from lastline.core.errors import ConfigError, IntegrityError
from lastline.core.plans import Conf
from lastline.logical.restore.plans import RestorePlan
from lastline.storage import auth, encryption_keys, sealing
from lastline.storage.envelope import new_seal
from lastline.storage.file import FileStorage

OLD, NEW = "20261128T101432Z-aaaaaa", "20261128T161432Z-7c93b6"
SCHEMA = json.dumps({"databases": [], "tables": []}).encode()


def physical(backup_id: str) -> mf.PhysicalManifest:
    return mf.PhysicalManifest(backup_id=backup_id, source_conn_id="src", server_version="11.4.2", tool_version="11.4.2",
                               artifact="backup.mbstream.zst", compression="zstd", bytes=10, sha256="0" * 64,
                               started_at="a", finished_at="b", seconds=1.0, mb_per_s=1.0, parallel=2, datadir_bytes=100)


def logical(backup_id: str) -> mf.LogicalManifest:
    return mf.LogicalManifest(backup_id=backup_id, source_conn_id="src", server_version="11.4", sql_mode="",
                              time_zone="+00:00", dialect="d", compression="zstd", chunk_rows=1000, parallel=2,
                              databases=[], schema_file="schema.json", schema_sha256=hashlib.sha256(SCHEMA).hexdigest(),
                              started_at="a", finished_at="b", seconds=1.0, lock_seconds=0.0, rows=0, bytes=0,
                              raw_bytes=0, mb_per_s=1.0)


@pytest.mark.parametrize(("url", "kind", "expected"), [
    ("file:///b/latest", "logical", BackupRef("file:///b", "latest", "logical")),
    ("file:///b/20261128T161432Z-7c93b6/", "physical", BackupRef("file:///b", NEW, "physical")),
    ("s3://bucket/p/latest", "physical", BackupRef("s3://bucket/p", "latest", "physical")),
], ids=["latest", "an-id-with-a-trailing-slash", "s3"])
def test_parse(url, kind, expected):
    assert BackupRef.parse(url, kind) == expected


@pytest.mark.parametrize(("url", "kind", "refusal"), [
    ("file:///b/latest", "binlog", "kind 'binlog' is not one of"),
    ("s3://bucket", "logical", "expected <destination>/<backup_id>"),
], ids=["unknown-kind", "no-backup-id"])
def test_parse_refuses(url, kind, refusal):
    with pytest.raises(ConfigError, match=refusal):
        BackupRef.parse(url, kind)


def test_the_param_with_its_connection_and_pin_and_back():
    ref = BackupRef.param(Conf({"backup": f"file:///b/{NEW}", "aws_conn_id": "", "manifest_sha256": "ab"}), "logical")
    assert ref == BackupRef("file:///b", NEW, "logical", None, "ab")
    assert BackupRef.param(Conf(ref.params()), "logical") == ref  # what a drill hands the restore it runs


def test_a_plan_carries_its_ref_through_xcom():
    plan = RestorePlan(target_conn_id="t", backup=BackupRef("file:///b", NEW, "logical", manifest_sha256="ab"))
    form = json.loads(json.dumps(plan.to_dict()))
    assert form["backup"] == {"destination": "file:///b", "backup_id": NEW, "kind": "logical", "aws_conn_id": None,
                              "manifest_sha256": "ab"}
    assert RestorePlan.of(form) == plan and isinstance(RestorePlan.of(form).backup, BackupRef)


@pytest.fixture
def folder(tmp_path, monkeypatch) -> FileStorage:
    """A destination under the deployment's roots holding a physical backup (OLD) and a logical one (NEW)."""
    monkeypatch.setattr(auth, "deployment_keys", lambda: None)
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", f"file://{tmp_path}")
    monkeypatch.setattr(mf, "_recorded_newest", [])
    store = FileStorage(str(tmp_path))
    mf.write_manifest(store, physical(OLD))
    (tmp_path / NEW).mkdir()
    (tmp_path / NEW / "schema.json").write_bytes(SCHEMA)
    mf.write_manifest(store, logical(NEW))
    return store


def test_open_resolves_latest_and_pins_the_manifest(folder, tmp_path):
    opened = open_backup(BackupRef.parse(f"file://{tmp_path}/latest", "logical"))
    assert opened.ref.backup_id == NEW and opened.ref.destination == folder.url
    assert opened.ref.manifest_sha256 == hashlib.sha256((tmp_path / NEW / mf.MANIFEST).read_bytes()).hexdigest()
    assert opened.schema == json.loads(SCHEMA) and opened.logical is opened.manifest
    assert open_backup(opened.ref).manifest == opened.manifest  # a later task: the very manifest pinned
    assert open_backup(BackupRef.parse(f"file://{tmp_path}/latest", "physical"), require=False).ref.backup_id == OLD


@pytest.mark.parametrize(("case", "refusal"), [
    ("another-manifest-pinned", "changed after this run's preflight"),
    ("schema-json-changed", "the file was changed after the backup"),
    ("physical-asked-of-a-logical-backup", "not a physical one"),
    ("not-a-backup-id", "is not a backup id"),
    ("outside-the-roots", "outside the storage this deployment allows"),
], ids=lambda x: x if " " not in x else "")
def test_open_refuses(folder, tmp_path, case, refusal):
    ref = BackupRef.parse(f"file://{tmp_path}/{NEW}", "logical")
    with pytest.raises((IntegrityError, ConfigError), match=refusal):
        if case == "another-manifest-pinned":
            open_backup(BackupRef.parse(ref.url, "logical", manifest_sha256="0" * 64))
        elif case == "schema-json-changed":
            (tmp_path / NEW / "schema.json").write_bytes(SCHEMA + b" ")
            open_backup(ref).schema  # noqa: B018 - read (and checked) when first asked for
        elif case == "physical-asked-of-a-logical-backup":
            open_backup(ref).physical  # noqa: B018
        elif case == "not-a-backup-id":
            open_backup(BackupRef.parse(f"file://{tmp_path}/notes", "logical"))
        else:
            open_backup(BackupRef.parse(f"file:///etc/{NEW}", "logical"))


def _key_connection(monkeypatch, login: str = "k1", password: str = "s" * 32) -> None:
    monkeypatch.setenv(encryption_keys.KEY_CONN_ENV, "unit_enc")
    monkeypatch.setenv("AIRFLOW_CONN_UNIT_ENC", json.dumps({"conn_type": "generic", "login": login, "password": password}))


def test_backup_seal_is_none_for_a_plain_backup_and_opens_or_refuses_an_encrypted_one(folder, monkeypatch):
    manifest = logical(NEW)
    assert backup_seal(folder, manifest) is None
    seal, envelope = new_seal(encryption_keys.keys_from_connection("c", "generic", "k1", "s" * 32, {}), NEW)
    encrypted = dataclasses.replace(manifest, encryption=envelope.to_json())
    _key_connection(monkeypatch)
    assert backup_seal(folder, encrypted) == seal
    monkeypatch.delenv(encryption_keys.KEY_CONN_ENV)
    with pytest.raises(ConfigError, match=rf"backup '{NEW}' is encrypted .* k1 \(kek\)"):
        backup_seal(folder, encrypted)
    broken = dataclasses.replace(manifest, encryption={"format": "lastline-seal/1"})
    with pytest.raises(IntegrityError, match=r"manifest\.json: the encryption envelope is not one lastline writes"):
        backup_seal(folder, broken)


@pytest.fixture
def sealed_schema(folder, tmp_path, monkeypatch):
    """NEW's schema.json sealed with its data key, the manifest's sha256 over the sealed bytes as stored."""
    seal, envelope = new_seal(encryption_keys.keys_from_connection("c", "generic", "k1", "s" * 32, {}), NEW)
    stored = seal.sealed(SCHEMA, f"{NEW}/schema.json")
    (tmp_path / NEW / "schema.json").write_bytes(stored)
    manifest = dataclasses.replace(logical(NEW), schema_sha256=hashlib.sha256(stored).hexdigest(),
                                   encryption=envelope.to_json())
    _key_connection(monkeypatch)
    return manifest, seal, stored


def test_a_sealed_schema_is_checked_as_stored_then_opened(folder, sealed_schema, monkeypatch):
    manifest, seal, stored = sealed_schema
    assert checked_schema(folder, manifest) == json.loads(SCHEMA) == checked_schema(folder, manifest, seal)
    mf.write_manifest(folder, manifest)
    assert open_backup(BackupRef.parse(f"{folder.url}/{NEW}", "logical")).schema == json.loads(SCHEMA)
    _key_connection(monkeypatch, "k2", "t" * 32)  # another key: refused before a byte of it is used
    with pytest.raises(ConfigError, match=r"needs one of the keys k1 \(kek\)"):
        open_backup(BackupRef.parse(f"{folder.url}/{NEW}", "logical")).schema  # noqa: B018


@pytest.mark.parametrize(("case", "refusal"), [
    ("plain-where-the-manifest-says-sealed", "its header"),
    ("sealed-for-another-name", "its header"),
    ("cut", "chunk 0"),
    ("flipped-with-its-sha256-rewritten", "chunk 0"),
])
def test_a_sealed_schema_that_does_not_open_is_refused(folder, sealed_schema, tmp_path, case, refusal):
    manifest, seal, stored = sealed_schema
    data = {"plain-where-the-manifest-says-sealed": SCHEMA, "sealed-for-another-name": seal.sealed(SCHEMA, f"{NEW}/schema.sql"),
            "cut": stored[:-3], "flipped-with-its-sha256-rewritten": stored[:100] + bytes([stored[100] ^ 1]) + stored[101:]}[case]
    (tmp_path / NEW / "schema.json").write_bytes(data)
    rewritten = dataclasses.replace(manifest, schema_sha256=hashlib.sha256(data).hexdigest())  # a storage writer's
    with pytest.raises(sealing.SealError, match=refusal):
        checked_schema(folder, rewritten)


def test_where_the_deployment_encrypts_a_plain_backup_is_opened_only_authenticated_or_on_trusted_storage(
        folder, tmp_path, monkeypatch):
    """The attack: whoever can write storage puts plain files and a manifest of their own where an encrypted backup
    was. A deployment with an encryption key refuses a backup without an envelope unless its manifest's MAC
    authenticates it or the storage is declared trusted; one without a key, and an encrypted backup, are as before."""
    ref = BackupRef.parse(f"file://{tmp_path}/{NEW}", "logical")
    assert open_backup(ref).manifest.encryption is None  # no encryption key: a plain, unsigned backup restores
    _key_connection(monkeypatch)
    with pytest.raises(IntegrityError) as caught:
        open_backup(ref)
    message = str(caught.value)
    assert f"backup {NEW} is not encrypted, and this deployment encrypts its backups ({encryption_keys.KEY_CONN_ENV})" \
        in message and "it carries no MAC" in message and "Nothing was touched" in message
    assert auth.KEY_CONN_ENV in message and f"{auth.TRUSTED_ENV}=true" in message
    with pytest.raises(IntegrityError, match="is not encrypted"):  # every restore kind: a physical one too
        open_backup(BackupRef.parse(f"file://{tmp_path}/{OLD}", "physical"), require=False)
    monkeypatch.setenv(auth.TRUSTED_ENV, "true")  # only lastline writes the storage: an unsigned one is used
    assert open_backup(ref).ref.backup_id == NEW
    keys = auth.Keys("s1", {"s1": b"m" * 32})
    monkeypatch.setattr(auth, "deployment_keys", lambda: keys)
    mf.write_manifest(folder, logical(NEW))  # signed with the storage key
    monkeypatch.delenv(auth.TRUSTED_ENV)
    assert open_backup(ref).authenticity.key_id == "s1"  # authenticated: a plain backup restores
    path = tmp_path / NEW / mf.MANIFEST
    path.write_text(path.read_text().replace('"rows": 0', '"rows": 7'))  # rewritten by a storage writer
    monkeypatch.setenv(auth.TRUSTED_ENV, "true")  # trusted storage never takes a manifest changed after signing
    with pytest.raises(IntegrityError, match="is not encrypted.*its MAC does not match"):
        open_backup(ref)


def test_an_encrypted_backup_opens_through_its_kek_wrapping_without_a_storage_key(folder, sealed_schema):
    manifest, _, _ = sealed_schema  # the encryption key connection is set, the storage key is not
    mf.write_manifest(folder, manifest)
    opened = open_backup(BackupRef.parse(f"{folder.url}/{NEW}", "logical"))
    assert not opened.authenticity.ok and opened.schema == json.loads(SCHEMA)
