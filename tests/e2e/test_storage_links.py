"""A backup folder is untrusted input: storage reads (file and SSH destinations) go by descriptor, never through a link,
never into a FIFO or a folder. (The chunk files' own tests are in tests/unit/logical/format/test_chunk_files.py.)"""
from __future__ import annotations

import os

import pytest

from lastline.core.errors import IntegrityError
from lastline.storage import open_storage


def _folder_with_traps(root) -> None:
    """A backup folder holding a regular chunk and every kind of entry a read must refuse."""
    (root / "b" / "data" / "db").mkdir(parents=True)
    (root / "b" / "data" / "db" / "ok").write_bytes(b"fine\n")
    secret = root / "worker-secret"
    secret.write_bytes(b"AIRFLOW_CONN_PROD=mysql://root:hunter2-fake@db\n")
    (root / "b" / "data" / "db" / "link").symlink_to(secret)
    (root / "b" / "data" / "db" / "environ").symlink_to("/proc/self/environ")
    (root / "b" / "data" / "linked").symlink_to(root / "b" / "data" / "db", target_is_directory=True)
    os.mkfifo(root / "b" / "data" / "db" / "fifo")  # would block an open() that waits for a writer


TRAPS = {"b/data/db/link": "it is a symlink", "b/data/db/environ": "it is a symlink",
         "b/data/linked/ok": "symlink", "b/data/db/fifo": "not a regular file|a FIFO", "b/data/db": "folder|not a regular file"}


def _reads_refuse_every_trap(storage) -> None:
    assert storage.read_bytes("b/data/db/ok") == b"fine\n" and storage.size("b/data/db/ok") == 5
    assert storage.exists("b/data/db/ok") and not storage.exists("b/data/db/nope") and storage.size_if_exists("b/x/y") is None
    for key, why in TRAPS.items():
        for read in (storage.read_bytes, storage.size_if_exists, storage.exists, storage.size):
            with pytest.raises(IntegrityError, match=rf"{key}: .*({why}).*nothing was loaded from it"):
                read(key)


def test_file_storage_reads_only_regular_files_reached_without_a_link(tmp_path):
    _folder_with_traps(tmp_path)
    storage = open_storage(f"file://{tmp_path}")
    _reads_refuse_every_trap(storage)
    assert storage.list_backups() == ["b"]
    (tmp_path / "20300101T000000Z").symlink_to(tmp_path / "b")  # a linked folder is no backup of this destination
    assert storage.list_backups() == ["b"]


def test_a_linked_destination_root_is_resolved_once_and_read(tmp_path):
    """The root is the deployment's choice: a link there is followed (once); below it, none is."""
    _folder_with_traps(tmp_path / "real")
    (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
    _reads_refuse_every_trap(open_storage(f"file://{tmp_path}/alias"))


def test_ssh_storage_reads_only_regular_files_reached_without_a_link(sshd, tmp_path):
    _folder_with_traps(tmp_path)
    _reads_refuse_every_trap(open_storage(f"ssh://t_ssh{tmp_path}"))
