"""backups: a backup named once (BackupRef parsed from a Param, its XCom form inside a plan) and opened once a task
(OpenedBackup: `latest` resolved, the manifest pinned by its sha256, schema.json checked against the manifest). On a
local folder, without a storage key."""
from __future__ import annotations

import hashlib
import json

import pytest

from lastline import manifest as mf
from lastline.backups import BackupRef, open_backup
from lastline.core.errors import ConfigError, IntegrityError
from lastline.core.plans import Conf
from lastline.logical.restore.plans import RestorePlan
from lastline.storage import auth
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
