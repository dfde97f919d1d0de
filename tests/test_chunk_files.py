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
from lastline.logical.chunk_files import read_chunk, write_chunk
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
