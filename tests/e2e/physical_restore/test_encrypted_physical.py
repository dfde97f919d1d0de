"""Encrypted physical backups on real servers (issue 46): with an encryption key connection the stream is sealed in the
task process between the compressor and the storage (`mariabackup | compressor | seal -> storage`), so the artifact
holds no row in the clear (a known value is in the opened stream and nowhere in the stored bytes) and the manifest's
size and sha256 are the sealed artifact's; it restores exactly with a later key that still holds the old one; a restore
without the key is refused in preflight with the target untouched; a flipped byte is refused in extract, naming the
sealed chunk, and the target is not started. The same backup written to an ssh:// and an S3 destination holds no row
in the stored bytes there either and restores exactly; a restore with another key, or another secret under the key's
id, is refused in preflight with the target's process and databases as they were; a stream cut at a sealed chunk's
boundary, its manifest's size and sha256 rewritten to match (so only the seal can tell), is named by backup_verify and
refused by the restore, the target not started. After key_rotation (as Airflow runs it) only its manifest changes, the
new key alone restores it exactly and the old key alone is refused in preflight, the target untouched; a backup written
for a recipient (its public key alone) cannot be read where it was written and restores exactly with the private key."""
from __future__ import annotations

import hashlib
import os
import shutil

import pytest
from tests.unit.verify.test_sealed_backups import _rewritten

from lastline.backups import backup_seal
from lastline.core.errors import ConfigError
from lastline.manifest import PhysicalManifest
from lastline.storage import auth, encryption_keys, open_storage
from lastline.storage.sealing import CHUNK_SIZE, HEADER_SIZE, TAG
from lastline.verify import backups as verify_backups
from lastline_dev.compare import compare
from lastline_dev.keys import encryption_connection

pytestmark = pytest.mark.e2e

MARKER = "qx-secret-physical-row-31c7"
KEY1, KEY2 = "4a" * 32, "5b" * 32
CONN = "lastline_encryption_physical"


def _conn(mp, login: str = "phys-k1", password: str = KEY1, **extra) -> None:
    encryption_connection(mp.setenv, CONN, login, password, **extra)


def _backup(destination: str, aws: str | None = None) -> str:
    """A physical backup of the source written under key phys-k1, uncompressed so that a plain one would show the
    MARKER rows; its id."""
    from lastline.physical import backup as pb

    with pytest.MonkeyPatch.context() as mp:
        _conn(mp)
        plan = pb.preflight({"source_conn_id": "t_source", "destination": destination, "compression": "none",
                             "aws_conn_id": aws})
        pb.finish(plan, pb.stream(plan))
    return plan.backup_id


def _restore(run_dag, backup: str, aws: str | None = None):
    return run_dag("physical_restore", {"target_conn_id": "t_target", "backup": backup, "force": True,
                                        "aws_conn_id": aws})


def _no_row_in_the_clear(stored: dict[str, bytes], artifact: str) -> None:
    """`stored`: every object of a backup by name. The artifact is sealed; none holds a MARKER row in the clear."""
    assert set(stored) == {artifact, "manifest.json", "tables.json"}, set(stored)
    assert stored[artifact].startswith(b"LLSEAL")
    assert [name for name, data in stored.items() if MARKER.encode() in data] == []


@pytest.fixture(scope="module")
def sealed_backup(source, tmp_path_factory):
    """A physical backup of the source (with a table of MARKER rows) in a folder destination; the table is there
    until the module's last test."""
    server = source.server()
    server.query("CREATE DATABASE IF NOT EXISTS enc_phys")
    server.query("CREATE OR REPLACE TABLE enc_phys.t (id INT PRIMARY KEY, v VARCHAR(100)) ENGINE=InnoDB")
    with server.session() as cur:
        cur.execute(f"INSERT INTO enc_phys.t SELECT seq, CONCAT('{MARKER} ', seq) FROM mysql.seq_1_to_5000")
        cur.connection.commit()
    dest = tmp_path_factory.mktemp("phys-sealed")
    backup_id = _backup(f"file://{dest}")
    yield dest / backup_id
    server.query("DROP DATABASE IF EXISTS enc_phys")


def test_the_artifact_is_sealed_holds_no_row_in_the_clear_and_restores_exactly(
        run_dag, sealed_backup, source, target, monkeypatch):
    manifest = PhysicalManifest.from_json((sealed_backup / "manifest.json").read_text())
    assert manifest.encryption is not None and [w["key_id"] for w in manifest.encryption["wrappings"]] == ["phys-k1"]
    stored = (sealed_backup / manifest.artifact).read_bytes()
    assert stored.startswith(b"LLSEAL") and MARKER.encode() not in stored
    assert (manifest.bytes, manifest.sha256) == (len(stored), hashlib.sha256(stored).hexdigest())
    assert KEY1 not in (sealed_backup / "manifest.json").read_text()
    _conn(monkeypatch)
    seal = backup_seal(open_storage(sealed_backup.parent.as_uri()), manifest)
    assert seal is not None
    key = f"{manifest.backup_id}/{manifest.artifact}"
    opened = b"".join(seal.opened_stream(iter([stored[i:i + (1 << 20)] for i in range(0, len(stored), 1 << 20)]), key))
    assert MARKER.encode() in opened  # the grep above would have found it: the rows are in the stream, sealed
    del stored, opened

    _conn(monkeypatch, "phys-k2", KEY2, keys={"phys-k1": KEY1})  # a later key: the older one still reads it
    state, tis, logs = run_dag("physical_restore", {"target_conn_id": "t_target", "backup": sealed_backup.as_uri(),
                                                    "force": True})
    assert state == "success", tis
    assert compare(source.server(), target.server()) == []
    assert target.server().query("SELECT COUNT(*) FROM enc_phys.t WHERE v LIKE %s", (f"{MARKER} %",))[0][0] == 5000
    assert KEY1 not in logs and KEY2 not in logs


def _databases(target) -> list[str]:
    return [r[0] for r in target.server().query("SHOW DATABASES")]


@pytest.mark.parametrize(("conn", "refusal"), [
    (None, "is encrypted (its data key is wrapped under phys-k1 (kek)) and this deployment has no encryption key"),
    ({"login": "phys-k2", "password": KEY2}, "needs one of the keys phys-k1 (kek) to be read; the encryption key "
                                             "connection (LASTLINE_ENCRYPTION_KEY_CONN_ID) holds phys-k2"),
    ({"login": "phys-k1", "password": KEY2}, "key 'phys-k1' of the encryption key connection "
                                             "(LASTLINE_ENCRYPTION_KEY_CONN_ID) does not open its data key"),
], ids=["no-key-connection", "another-key", "another-secret-under-the-id"])
def test_a_restore_without_the_key_is_refused_in_preflight_with_the_target_untouched(
        run_dag, sealed_backup, target, monkeypatch, conn, refusal):
    if conn is None:
        monkeypatch.delenv(encryption_keys.KEY_CONN_ENV, raising=False)
    else:
        _conn(monkeypatch, **conn)
    pid, databases = target.pid(), _databases(target)
    assert pid is not None and "enc_phys" in databases  # the first test's restore: a running target to keep
    state, tis, logs = _restore(run_dag, sealed_backup.as_uri())
    assert state == "failed" and tis["preflight"] == "failed" and tis["stop_target"] == "upstream_failed", tis
    assert refusal in logs and "Nothing was touched" in logs and KEY1 not in logs and KEY2 not in logs
    assert target.pid() == pid, "the target was stopped although preflight failed"
    assert _databases(target) == databases


def test_a_flipped_byte_is_refused_in_extract_naming_the_chunk_and_the_target_is_not_started(
        run_dag, sealed_backup, target, monkeypatch, tmp_path):
    copy = tmp_path / "dest" / sealed_backup.name
    shutil.copytree(sealed_backup, copy)
    manifest = PhysicalManifest.from_json((copy / "manifest.json").read_text())
    with open(copy / manifest.artifact, "r+b") as fh:  # same size: the preflight's size check passes
        fh.seek((copy / manifest.artifact).stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0x10]))
    _conn(monkeypatch)
    state, tis, logs = run_dag("physical_restore", {"target_conn_id": "t_target", "backup": copy.as_uri(), "force": True})
    assert state == "failed" and tis["extract"] == "failed" and tis["start_target"] == "upstream_failed", tis
    assert f"sealed object '{manifest.backup_id}/{manifest.artifact}'" in logs and "does not authenticate" in logs
    assert target.pid() is None, "the target was started on half-restored data"
    state, tis, _ = run_dag("physical_restore", {"target_conn_id": "t_target", "backup": sealed_backup.as_uri(),
                                                 "force": True})  # the good one recovers it
    assert state == "success", tis
    assert target.pid() is not None


def test_a_stream_cut_at_a_chunk_boundary_is_named_by_verify_and_refused_by_the_restore(
        run_dag, sealed_backup, target, monkeypatch, tmp_path):
    """Whole sealed chunks dropped from the end and the manifest's size and sha256 rewritten to match (unsigned, as a
    storage writer without the storage key can; the restore on storage declared trusted, the one place a physical
    restore takes an unsigned manifest): the size and digest checks pass, only the seal (no final chunk) tells."""
    copy = tmp_path / "dest" / sealed_backup.name
    shutil.copytree(sealed_backup, copy)
    manifest = PhysicalManifest.from_json((copy / "manifest.json").read_text())
    path = copy / manifest.artifact
    whole = (path.stat().st_size - HEADER_SIZE) // (CHUNK_SIZE + TAG)
    assert whole >= 2, "the stream should span several sealed chunks"
    kept = whole // 2
    os.truncate(path, HEADER_SIZE + kept * (CHUNK_SIZE + TAG))
    _rewritten(copy.parent, manifest.backup_id, "physical", manifest.artifact)
    monkeypatch.delenv(auth.KEY_CONN_ENV)  # the rewritten manifest is unsigned: without a storage key, the seal alone
    _conn(monkeypatch)
    verdict = verify_backups.verify_backup(verify_backups.preflight({"destination": copy.parent.as_uri()}),
                                           manifest.backup_id)
    assert verdict.status == "damaged" and [(f.file, f.problem) for f in verdict.findings] == [
        (manifest.artifact, "sealed")], verdict
    last = f"chunk {kept - 1}: truncated (the object ends after it, but it is not the final chunk (cut at a chunk boundary)"
    assert verdict.findings[0].found.startswith(last), verdict.findings
    monkeypatch.setenv("LASTLINE_STORAGE_TRUSTED", "true")
    state, tis, logs = _restore(run_dag, copy.as_uri())
    assert state == "failed" and tis["extract"] == "failed" and tis["start_target"] == "upstream_failed", tis
    assert f"sealed object '{manifest.backup_id}/{manifest.artifact}'" in logs and f"chunk {kept - 1}:" in logs
    assert "it is not the final chunk (cut at a chunk boundary)" in logs
    assert target.pid() is None, "the target was started on half-restored data"
    monkeypatch.undo()  # the storage key and the key connection as the other tests have them
    _conn(monkeypatch)
    state, tis, _ = _restore(run_dag, sealed_backup.as_uri())  # the good one recovers it
    assert state == "success" and target.pid() is not None, tis


def test_to_ssh_the_stored_files_hold_no_row_in_the_clear_and_it_restores_exactly(
        run_dag, sealed_backup, source, target, sshd, tmp_path, monkeypatch):
    folder = tmp_path / "backups"  # the sshd is on this machine's loopback: its side of the destination is here
    dest = f"ssh://t_ssh{folder}"
    backup_id = _backup(dest)
    manifest = PhysicalManifest.from_json((folder / backup_id / "manifest.json").read_text())
    assert manifest.encryption is not None and (folder / backup_id / manifest.artifact).stat().st_size == manifest.bytes
    _no_row_in_the_clear({str(p.relative_to(folder / backup_id)): p.read_bytes()
                          for p in (folder / backup_id).rglob("*") if p.is_file()}, manifest.artifact)
    _conn(monkeypatch)
    state, tis, logs = _restore(run_dag, f"{dest}/{backup_id}")
    assert state == "success", tis
    assert compare(source.server(), target.server()) == []
    assert target.server().query("SELECT COUNT(*) FROM enc_phys.t WHERE v LIKE %s", (f"{MARKER} %",))[0][0] == 5000
    assert KEY1 not in logs


def test_to_s3_the_stored_objects_hold_no_row_in_the_clear_and_it_restores_exactly(
        run_dag, sealed_backup, source, target, s3_server, monkeypatch):
    import boto3

    backup_id = _backup("s3://backups/phys-encrypted", "t_s3")
    s3 = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1", aws_access_key_id="testing",
                      aws_secret_access_key="testing-secret")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="backups", Prefix=f"phys-encrypted/{backup_id}/")["Contents"]]
    manifest = PhysicalManifest.from_json(
        s3.get_object(Bucket="backups", Key=f"phys-encrypted/{backup_id}/manifest.json")["Body"].read().decode())
    assert manifest.encryption is not None
    _no_row_in_the_clear({k.rsplit("/", 1)[1]: s3.get_object(Bucket="backups", Key=k)["Body"].read() for k in keys},
                         manifest.artifact)
    _conn(monkeypatch)
    state, tis, logs = _restore(run_dag, f"s3://backups/phys-encrypted/{backup_id}", "t_s3")
    assert state == "success", tis
    assert compare(source.server(), target.server()) == []
    assert target.server().query("SELECT COUNT(*) FROM enc_phys.t WHERE v LIKE %s", (f"{MARKER} %",))[0][0] == 5000


def _objects(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_after_a_rotation_it_restores_with_the_new_key_alone_and_the_old_key_is_refused_in_preflight(
        run_dag, sealed_backup, source, target, monkeypatch, tmp_path):
    """key_rotation as Airflow runs it over a copy of the backup: only its manifest is written, wrapped under the new
    key; the new key alone restores it exactly, the old key alone is refused before the target is touched."""
    copy = tmp_path / "dest" / sealed_backup.name
    shutil.copytree(sealed_backup, copy)
    before = _objects(copy)
    _conn(monkeypatch, "phys-k2", KEY2, keys={"phys-k1": KEY1})  # the rotation's first step
    state, tis, logs = run_dag("key_rotation", {"destination": copy.parent.as_uri(), "aws_conn_id": None,
                                                "dry_run": False})
    assert state == "success" and tis["rotate_backups[0]"] == tis["report"] == "success", tis
    after = _objects(copy)
    assert [name for name in after if after[name] != before[name]] == ["manifest.json"]  # no data object rewritten
    manifest = PhysicalManifest.from_json(after["manifest.json"].decode())
    assert [(w["type"], w["key_id"]) for w in manifest.encryption["wrappings"]] == [("kek", "phys-k2")]
    assert KEY1 not in logs and KEY2 not in logs

    _conn(monkeypatch, "phys-k2", KEY2)  # the old key dropped
    state, tis, logs = _restore(run_dag, copy.as_uri())
    assert state == "success", tis
    assert compare(source.server(), target.server()) == []
    assert target.server().query("SELECT COUNT(*) FROM enc_phys.t WHERE v LIKE %s", (f"{MARKER} %",))[0][0] == 5000

    _conn(monkeypatch)  # the old key alone
    pid, databases = target.pid(), _databases(target)
    state, tis, logs = _restore(run_dag, copy.as_uri())
    assert state == "failed" and tis["preflight"] == "failed" and tis["stop_target"] == "upstream_failed", tis
    assert (f"backup '{manifest.backup_id}' needs one of the keys phys-k2 (kek) to be read; the encryption key "
            "connection (LASTLINE_ENCRYPTION_KEY_CONN_ID) holds phys-k1") in logs and "Nothing was touched" in logs
    assert target.pid() == pid and _databases(target) == databases, "the target was touched although preflight failed"


def test_a_backup_for_a_recipient_is_written_without_the_private_key_and_restored_with_it(
        run_dag, sealed_backup, source, target, monkeypatch, tmp_path):
    from lastline.physical import backup as pb

    private, public = encryption_keys.new_identity()
    _conn(monkeypatch, "", "", recipients={"ops": public})  # the backup host: the public key alone
    plan = pb.preflight({"source_conn_id": "t_source", "destination": tmp_path.as_uri(), "aws_conn_id": None})
    pb.finish(plan, pb.stream(plan))
    manifest = PhysicalManifest.from_json((tmp_path / plan.backup_id / "manifest.json").read_text())
    assert [w["type"] for w in manifest.encryption["wrappings"]] == ["x25519"]
    assert (tmp_path / plan.backup_id / manifest.artifact).read_bytes()[:6] == b"LLSEAL"
    with pytest.raises(ConfigError, match=r"needs one of the keys ops \(x25519\) to be read; .* holds none"):
        backup_seal(open_storage(tmp_path.as_uri()), manifest)  # the host that wrote it cannot read it

    _conn(monkeypatch, "", "", identities={"ops": private})  # the restore host
    state, tis, logs = _restore(run_dag, (tmp_path / plan.backup_id).as_uri())
    assert state == "success", tis
    assert compare(source.server(), target.server()) == []
    assert target.server().query("SELECT COUNT(*) FROM enc_phys.t WHERE v LIKE %s", (f"{MARKER} %",))[0][0] == 5000
    assert private not in logs
