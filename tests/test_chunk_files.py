"""Chunk files read back into a FIFO by the decompressor itself: same bytes as read_chunk, and every
fault named (a corrupt file, a reader that went away)."""
from __future__ import annotations

import hashlib
import io
import os
import subprocess
import threading

import pytest

from lastline.core.errors import IntegrityError
from lastline.logical.format.chunk_files import read_chunk, write_chunk
from lastline.storage import open_storage

ROWS = b"".join(b"%d\tvalue \\\\ %d\\n\twith a tab\n" % (i, i * 7) for i in range(200_000))


@pytest.fixture
def chunk(tmp_path):
    packed = subprocess.run(["zstd", "-q", "-1", "-c"], input=ROWS, capture_output=True, check=True).stdout
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "c.tsv.zst").write_bytes(packed)
    return open_storage(f"file://{tmp_path}"), "b/c.tsv.zst", hashlib.sha256(packed).hexdigest(), len(packed)


def _through_fifo(tmp_path, storage, key, sha256, reader_stops_after: int | None = None):
    """write_chunk into a FIFO read on a thread (stopping after `reader_stops_after` bytes if given)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got, seen = io.BytesIO(), []

    def read() -> None:
        with open(fifo, "rb") as fh:
            while data := fh.read(1 << 16):
                got.write(data)
                if reader_stops_after is not None and got.tell() >= reader_stops_after:
                    return

    th = threading.Thread(target=read)
    th.start()
    try:
        with open(fifo, "wb") as out:
            write_chunk(storage, key, "zstd", sha256, out, "db.t", seen.append)
    finally:
        th.join()
    return got.getvalue(), sum(seen)


def test_write_chunk_gives_the_bytes_read_chunk_gives(tmp_path, chunk):
    storage, key, sha256, size = chunk
    data, passed_on = _through_fifo(tmp_path, storage, key, sha256)
    assert data == ROWS == b"".join(read_chunk(storage, key, "zstd", sha256))
    assert passed_on == size  # Python handled the compressed bytes only


def test_a_corrupt_chunk_is_named_and_refused(tmp_path, chunk):
    storage, key, sha256, _ = chunk
    path = tmp_path / key
    packed = bytearray(path.read_bytes())
    packed[len(packed) // 2] ^= 0xFF  # same size, one byte flipped
    path.write_bytes(bytes(packed))
    with pytest.raises(IntegrityError, match=r"chunk .*c\.tsv\.zst \(db\.t\) (cannot be decompressed|is corrupt)"):
        _through_fifo(tmp_path, storage, key, sha256)


def test_a_wrong_sha256_is_refused_even_when_it_decompresses(tmp_path, chunk):
    storage, key, _, _ = chunk
    with pytest.raises(IntegrityError, match="is corrupt: sha256 .* differs from the manifest's 00"):
        _through_fifo(tmp_path, storage, key, "00" * 32)


def test_a_reader_that_goes_away_is_a_broken_pipe_not_corruption(tmp_path, chunk):
    storage, key, sha256, _ = chunk
    with pytest.raises(BrokenPipeError):
        _through_fifo(tmp_path, storage, key, sha256, reader_stops_after=1 << 16)


# --- a backup folder is untrusted input: reads by descriptor, never through a link (storage.file, storage.ssh) ---


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


def test_spool_chunk_proves_size_and_sha256_before_anyone_reads_it(tmp_path, chunk):
    from lastline.logical.format.chunk_files import spool_chunk

    storage, key, sha256, size = chunk
    out = tmp_path / "spool"
    spool_chunk(storage, key, size, sha256, str(out), "db.t")
    assert out.read_bytes() == (tmp_path / key).read_bytes() and out.stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):  # never an existing file (nor one through a link)
        spool_chunk(storage, key, size, sha256, str(out), "db.t")
    for wrong_size, wrong_sha, refusal in ((size - 1, sha256, "is more than"), (size + 1, sha256, f"is {size} bytes"),
                                           (size, "00" * 32, "is corrupt: sha256")):
        out.unlink()
        with pytest.raises(IntegrityError, match=rf"c\.tsv\.zst \(db\.t\) {refusal}.*nothing of it was loaded"):
            spool_chunk(storage, key, wrong_size, wrong_sha, str(out), "db.t")
