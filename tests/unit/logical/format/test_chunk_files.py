"""logical.format.chunk_files: a chunk read back (read_chunk) or decompressed into a FIFO by the decompressor itself
(write_chunk) gives the same bytes, with every fault named (a corrupt file, a wrong sha256, a reader that went away);
a chunk spooled (spool_chunk) or proven by the LOAD DATA handler's reader (prove_chunk) is checked before anyone reads
it, in an anonymous private file (private_file: 0600, linked nowhere, so a kill -9 leaves no plaintext); a sealed chunk (an encrypted backup) is opened on each of these ways, a damaged one named by its
sealed chunk. On a folder destination, no server."""
from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import os
import stat
import subprocess
import tempfile
import threading

import pytest

from lastline.core.errors import IntegrityError, StorageError
from lastline.logical.format import chunk_files
from lastline.logical.format.chunk_files import opened_chunk, private_file, prove_chunk, read_chunk, spool_chunk, write_chunk
from lastline.manifest import ChunkInfo
from lastline.storage import open_storage, sealing
from lastline.storage.envelope import BackupSeal
from lastline.storage.sealing import DataKey

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


def test_spool_chunk_proves_size_and_sha256_before_anyone_reads_it(tmp_path, chunk):
    storage, key, sha256, size = chunk
    out = io.BytesIO()
    spool_chunk(storage, key, size, sha256, out, "db.t")
    assert out.getvalue() == (tmp_path / key).read_bytes()
    for wrong_size, wrong_sha, refusal in ((size - 1, sha256, "is more than"), (size + 1, sha256, f"is {size} bytes"),
                                           (size, "00" * 32, "is corrupt: sha256")):
        with pytest.raises(IntegrityError, match=rf"c\.tsv\.zst \(db\.t\) {refusal}.*nothing of it was loaded"):
            spool_chunk(storage, key, wrong_size, wrong_sha, io.BytesIO(), "db.t")


def _anonymous(fd: int, folder: str) -> bytes:
    """What the file open on `fd` holds, once shown to be 0600, linked nowhere, and read from offset 0."""
    st = os.fstat(fd)
    assert st.st_nlink == 0 and stat.S_ISREG(st.st_mode) and st.st_mode & 0o777 == 0o600
    assert os.listdir(folder) == []  # nothing named in the temporary folder
    data, offset = b"", 0
    while piece := os.pread(fd, 1 << 20, offset):
        data, offset = data + piece, offset + len(piece)
    assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # where the handler's duplicate starts reading
    return data


@pytest.mark.parametrize("tmpfile", [True, False], ids=["o-tmpfile", "created-and-unlinked-where-there-is-none"])
def test_a_private_file_is_anonymous_and_0600(tmp_path, monkeypatch, tmpfile):
    if not tmpfile:
        monkeypatch.delattr(os, "O_TMPFILE")
    fd = private_file(str(tmp_path))
    try:
        os.write(fd, b"plain")
        os.lseek(fd, 0, os.SEEK_SET)
        assert _anonymous(fd, str(tmp_path)) == b"plain"
    finally:
        os.close(fd)


PACK = {
    "none": lambda data: data,
    "zstd": lambda data: subprocess.run(["zstd", "-q", "-1", "-c"], input=data, capture_output=True, check=True).stdout,
    "pigz": lambda data: subprocess.run(["pigz", "--fast", "-c"], input=data, capture_output=True, check=True).stdout,
}


def _stored(tmp_path, compression: str, raw: bytes) -> tuple:
    """A chunk file `b/c` holding `raw` packed with `compression`: (storage, key, packed bytes, sha256)."""
    packed = PACK[compression](raw)
    (tmp_path / "b").mkdir(exist_ok=True)
    (tmp_path / "b" / "c").write_bytes(packed)
    return open_storage(f"file://{tmp_path}"), "b/c", packed, hashlib.sha256(packed).hexdigest()


@pytest.mark.parametrize("compression", ["none", "zstd", "pigz"])
@pytest.mark.parametrize("raw", [b"", b"1\tone\n", b"x\\\\y\t\\N\n" * 50_000],
                         ids=["empty", "one-row", "many-rows-with-escapes"])
def test_read_chunk_gives_the_raw_bytes_of_every_codec(tmp_path, compression, raw):
    storage, key, _, sha256 = _stored(tmp_path, compression, raw)
    assert b"".join(read_chunk(storage, key, compression, sha256, "db.t")) == raw


@pytest.mark.parametrize("compression", ["none", "zstd", "pigz"])
def test_read_chunk_refuses_a_sha256_other_than_the_manifest_s(tmp_path, compression):
    storage, key, _, _ = _stored(tmp_path, compression, b"1\tone\n")
    with pytest.raises(IntegrityError, match=r"b/c \(db\.t\) is corrupt: sha256 \w+ differs from the manifest's ff"):
        b"".join(read_chunk(storage, key, compression, "ff" * 32, "db.t"))


@pytest.mark.parametrize("compression", ["zstd", "pigz"])
def test_read_chunk_names_a_truncated_chunk_that_cannot_be_decompressed(tmp_path, compression):
    storage, key, packed, _ = _stored(tmp_path, compression, b"x\ty\n" * 10_000)
    (tmp_path / key).write_bytes(packed[:-9])
    with pytest.raises(IntegrityError, match=r"chunk .*b/c \(db\.t\) (cannot be decompressed|is corrupt)"):
        b"".join(read_chunk(storage, key, compression, hashlib.sha256(packed[:-9]).hexdigest(), "db.t"))


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The temporary folder private copies are made in: checked empty while and after they are used."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return str(folder)


@pytest.mark.parametrize("compression", ["none", "zstd", "pigz"])
def test_prove_chunk_copies_then_measures_with_the_handler_s_reader(tmp_path, private_tmp, compression):
    raw = b"1\tone\n" * 1000
    storage, key, packed, sha256 = _stored(tmp_path, compression, raw)
    info = ChunkInfo("c", 1000, len(packed), len(raw), sha256)
    with prove_chunk(storage, key, info, compression, "db.t") as (fd, proven_sha256):
        assert _anonymous(fd, private_tmp) == packed and proven_sha256 == sha256
    with pytest.raises(OSError):
        os.fstat(fd)  # closed after the block
    short = ChunkInfo("c", 1000, len(packed), len(raw) - 1, sha256)  # a chunk that decompresses to more than declared
    with pytest.raises(IntegrityError, match=rf"chunk .*b/c \(db\.t\) decompresses to more than its declared {len(raw) - 1}"):
        with prove_chunk(storage, key, short, compression, "db.t"):
            pytest.fail("a chunk that is refused is never handed on")
    assert os.listdir(private_tmp) == []


SEAL = BackupSeal(DataKey.generate(), "b", "chacha20-poly1305", sealing.MIN_CHUNK)


def _sealed(tmp_path, compression: str, raw: bytes) -> tuple:
    """`_stored`, with the packed file sealed as an encrypted backup's chunk `b/c`: (storage, key, sealed, sha256,
    packed)."""
    storage, key, packed, _ = _stored(tmp_path, compression, raw)
    out = io.BytesIO()
    with SEAL.writer(out, key) as writer:
        writer.write(packed)
    (tmp_path / key).write_bytes(out.getvalue())
    return storage, key, out.getvalue(), hashlib.sha256(out.getvalue()).hexdigest(), packed


def _written(tmp_path, *args, **kw) -> bytes:
    """What write_chunk writes into a file (a decompressor process needs a descriptor)."""
    with tempfile.TemporaryFile(dir=tmp_path) as out:
        write_chunk(*args, out, "db.t", **kw)
        out.seek(0)
        return out.read()


@pytest.mark.parametrize("compression", ["none", "zstd", "pigz"])
@pytest.mark.parametrize("raw", [b"", b"1\tone\n", b"x\\\\y\t\\N\n" * 50_000], ids=["empty", "one-row", "many-chunks"])
def test_a_sealed_chunk_reads_and_writes_the_raw_bytes_with_every_codec(tmp_path, compression, raw):
    storage, key, sealed, sha256, packed = _sealed(tmp_path, compression, raw)
    assert sealed.startswith(sealing.MAGIC) and (packed[:20] not in sealed or not raw)
    assert b"".join(read_chunk(storage, key, compression, sha256, "db.t", SEAL)) == raw
    assert _written(tmp_path, storage, key, compression, sha256, seal=SEAL) == raw
    assert _written(tmp_path, storage, key, compression, sha256, decompress=False, seal=SEAL) == packed  # for the handler


NOISE = b"".join(b"%d\t%s\n" % (i, os.urandom(40).hex().encode()) for i in range(2000))  # does not compress


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_a_flipped_byte_in_a_sealed_chunk_is_named_before_its_sha256_is_reached(tmp_path, compression):
    storage, key, sealed, _, _ = _sealed(tmp_path, compression, NOISE)
    damaged = bytearray(sealed)
    damaged[sealing.HEADER_SIZE + 2 * (sealing.MIN_CHUNK + sealing.TAG) + 7] ^= 1  # inside chunk 2
    (tmp_path / key).write_bytes(bytes(damaged))
    sha256 = hashlib.sha256(damaged).hexdigest()  # as someone who rewrote the manifest too would have it
    with pytest.raises(sealing.SealError, match=r"sealed object 'b/c' of backup 'b', chunk 2: it does not authenticate"):
        b"".join(read_chunk(storage, key, compression, sha256, "db.t", SEAL))
    with pytest.raises(sealing.SealError, match="chunk 2:"):
        _written(tmp_path, storage, key, compression, sha256, seal=SEAL)


@pytest.mark.parametrize("compression", ["none", "zstd", "pigz"])
def test_prove_chunk_opens_a_sealed_chunk_into_an_anonymous_private_copy(tmp_path, private_tmp, compression):
    """An encrypted backup's chunk: its plaintext is in a file linked nowhere (a kill -9 leaves none of it), and the
    sealed bytes it was opened from likewise."""
    raw = b"1\tone\n" * 1000
    storage, key, sealed, sha256, packed = _sealed(tmp_path, compression, raw)
    info = ChunkInfo("c", 1000, len(sealed), len(raw), sha256)
    with prove_chunk(storage, key, info, compression, "db.t", seal=SEAL) as (fd, proven_sha256):
        assert _anonymous(fd, private_tmp) == packed and proven_sha256 == hashlib.sha256(packed).hexdigest()
    with pytest.raises(sealing.SealError, match="its header"):
        other = BackupSeal(DataKey.generate(), "b", "aes-256-gcm", sealing.MIN_CHUNK)
        with prove_chunk(storage, key, info, compression, "db.t", seal=other):
            pytest.fail("a chunk that does not open is never handed on")
    assert os.listdir(private_tmp) == []


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_opened_chunk_is_all_checked_before_its_anonymous_copy_is_handed_on(tmp_path, private_tmp, compression):
    """What a logical restore's loader reads a local sealed chunk from: the plaintext (still compressed, for the
    handler) in a file linked nowhere, with its own sha256; a wrong key, a flipped byte, a manifest whose sha256 is not
    the stored bytes' and a plaintext larger than the manifest's size are each refused before anything is handed on,
    and nothing is left on disk."""
    storage, key, sealed, sha256, packed = _sealed(tmp_path, compression, NOISE)
    info = ChunkInfo("c", 2000, len(sealed), len(NOISE), sha256)
    with opened_chunk(storage, key, info, SEAL, "db.t") as (fd, plain_sha256):
        assert _anonymous(fd, private_tmp) == packed and plain_sha256 == hashlib.sha256(packed).hexdigest()
    other = BackupSeal(DataKey.generate(), "b", "aes-256-gcm", sealing.MIN_CHUNK)
    damaged = bytearray(sealed)
    damaged[sealing.HEADER_SIZE + 2 * (sealing.MIN_CHUNK + sealing.TAG) + 7] ^= 1  # inside chunk 2
    cases = [(other, info, sealing.SealError, "its header"),
             (SEAL, ChunkInfo("c", 2000, len(sealed), len(NOISE), "0" * 64), IntegrityError, "is corrupt: sha256"),
             (SEAL, ChunkInfo("c", 2000, 100, len(NOISE), sha256), IntegrityError, "opens to more than the manifest's 100 bytes")]
    for seal, chunk, error, says in cases:
        with pytest.raises(error, match=says), opened_chunk(storage, key, chunk, seal, "db.t"):
            pytest.fail("a chunk that fails a check is never handed on")
    (tmp_path / key).write_bytes(bytes(damaged))
    with pytest.raises(sealing.SealError, match="chunk 2: it does not authenticate"), \
            opened_chunk(storage, key, dataclasses.replace(info, sha256=hashlib.sha256(damaged).hexdigest()), SEAL):
        pytest.fail("a damaged chunk is never handed on")
    assert os.listdir(private_tmp) == []


def test_a_full_temporary_folder_is_named_with_what_to_do(tmp_path, private_tmp, monkeypatch):
    """No room to open a chunk into: a StorageError (retried) naming the folder, the chunk and TMPDIR, not a bare
    OSError; nothing left behind."""
    storage, key, sealed, sha256, _ = _sealed(tmp_path, "zstd", NOISE)

    def full(*args, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(chunk_files, "write_chunk", full)
    with pytest.raises(StorageError, match=rf"no room in the temporary folder {private_tmp} to open chunk .*b/c \(db.t\).*TMPDIR"), \
            opened_chunk(storage, key, ChunkInfo("c", 2000, len(sealed), len(NOISE), sha256), SEAL, "db.t"):
        pytest.fail("never handed on")
    assert os.listdir(private_tmp) == []
