"""What the rotation's unit tests write: a destination under the tests' roots holding physical manifests (real ones,
written by manifest.write_manifest and signed with the tests' storage key) over a sealed artifact, under key k1."""
from __future__ import annotations

from pathlib import Path

from lastline.manifest import PhysicalManifest, new_backup_id, write_manifest
from lastline.storage import Storage, open_storage
from lastline.storage.encryption_keys import EncryptionKeys, keys_from_connection
from lastline.storage.envelope import new_seal
from lastline_dev.keys import encryption_connection

K1, K2 = "1a" * 32, "2b" * 32
ROWS = b"the rows of a backup\n" * 1000
CONN = "t_rotation_keys"


def keys(login: str = "k1", password: str = K1, **extra: object) -> EncryptionKeys:
    return keys_from_connection("the connection", "generic", login, password, dict(extra))


def use_keys(monkeypatch, login: str = "k1", password: str = K1, **extra: object) -> None:
    """Make these the deployment's encryption key connection."""
    encryption_connection(monkeypatch.setenv, CONN, login, password, **extra)


def backup(storage: Storage, with_keys: EncryptionKeys | None = None) -> str:
    """A physical backup's folder: its artifact sealed under `with_keys` (default k1; None: not sealed) and its
    manifest recording the envelope."""
    backup_id = new_backup_id(taken=storage.list_backups())
    artifact, envelope, data = "backup.xbstream.zst", None, ROWS
    if with_keys is not None:
        seal, env = new_seal(with_keys, backup_id)
        data, envelope = seal.sealed(ROWS, f"{backup_id}/{artifact}"), env.to_json()
    storage.write_bytes(f"{backup_id}/{artifact}", data)
    write_manifest(storage, PhysicalManifest(
        backup_id, "t_source", "10.11.6-MariaDB", "mariabackup 10.11", artifact, "zstd", len(data), "0" * 64,
        "2026-11-28T16:14:32Z", "2026-11-28T16:14:40Z", 8.0, 1.0, 2, 1 << 20, "mariadb-bin.000002", 342, "0-1-7",
        encryption=envelope))
    return backup_id


def destination(tmp_path: Path) -> tuple[str, Storage]:
    url = f"file://{tmp_path / 'dest'}"
    return url, open_storage(url)
