"""Encrypted physical backups on real servers (issue 46): with an encryption key connection the stream is sealed in the
task process between the compressor and the storage (`mariabackup | compressor | seal -> storage`), so the artifact
holds no row in the clear (a known value is in the opened stream and nowhere in the stored bytes) and the manifest's
size and sha256 are the sealed artifact's; it restores exactly with a later key that still holds the old one; a restore
without the key is refused in preflight with the target untouched; a flipped byte is refused in extract, naming the
sealed chunk, and the target is not started."""
from __future__ import annotations

import hashlib
import shutil

import pytest

from lastline.backups import backup_seal
from lastline.manifest import PhysicalManifest
from lastline.storage import encryption_keys, open_storage
from lastline_dev.compare import compare
from lastline_dev.keys import encryption_connection

pytestmark = pytest.mark.e2e

MARKER = "qx-secret-physical-row-31c7"
KEY1, KEY2 = "4a" * 32, "5b" * 32
CONN = "lastline_encryption_physical"


def _conn(mp, login: str = "phys-k1", password: str = KEY1, **extra) -> None:
    encryption_connection(mp.setenv, CONN, login, password, **extra)


@pytest.fixture(scope="module")
def sealed_backup(source, tmp_path_factory):
    """A physical backup of the source (with a table of MARKER rows), uncompressed so that a plain one would show
    them, written under key phys-k1."""
    from lastline.physical import backup as pb

    server = source.server()
    server.query("CREATE DATABASE IF NOT EXISTS enc_phys")
    server.query("CREATE OR REPLACE TABLE enc_phys.t (id INT PRIMARY KEY, v VARCHAR(100)) ENGINE=InnoDB")
    with server.session() as cur:
        cur.execute(f"INSERT INTO enc_phys.t SELECT seq, CONCAT('{MARKER} ', seq) FROM mysql.seq_1_to_5000")
        cur.connection.commit()
    dest = tmp_path_factory.mktemp("phys-sealed")
    with pytest.MonkeyPatch.context() as mp:
        _conn(mp)
        plan = pb.preflight({"source_conn_id": "t_source", "destination": f"file://{dest}", "compression": "none"})
        pb.finish(plan, pb.stream(plan))
    yield dest / plan.backup_id
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


def test_a_restore_without_the_key_is_refused_in_preflight_with_the_target_untouched(
        run_dag, sealed_backup, target, monkeypatch):
    monkeypatch.delenv(encryption_keys.KEY_CONN_ENV, raising=False)
    pid = target.pid()
    state, tis, logs = run_dag("physical_restore", {"target_conn_id": "t_target", "backup": sealed_backup.as_uri(),
                                                    "force": True})
    assert state == "failed" and tis["preflight"] == "failed", tis
    assert "is encrypted (its data key is wrapped under phys-k1 (kek))" in logs
    assert target.pid() == pid, "the target was stopped although preflight failed"


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
