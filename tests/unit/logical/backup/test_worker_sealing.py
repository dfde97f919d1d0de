"""logical.backup.worker, an encrypted backup's parts: the dump worker seals each part itself (lastline-seal/1, in C
over OpenSSL's EVP AEAD) under the AEAD key and header Python derived for that part's name and handed over on the
control socket. What it writes opens with storage.sealing's reader, unchanged, for both ciphers, at each size around
a chunk (the smallest chunk size, so the edges are cheap), in a local folder's own file (DirectPart) and through a
pipe (PartWriter: Python only hashes and stores); the header is the one Python built; the size and sha256 reported
are the stored bytes'. A part the worker abandons has no final chunk (it reads as truncated) and leaves no sealing
behind for the next part; a flipped byte is named with its chunk; a seal message the worker cannot take, and an older
worker that does not know it, are refused (the latter with `make setup`) without a byte of plaintext written.

The worker opens a part only for a row, so the smallest part it seals holds one byte (a row of one empty field);
an empty object (one empty final chunk) is storage.sealing's own case (tests/unit/storage/test_sealing.py)."""
from __future__ import annotations

import hashlib
import io
import os
import socket
import subprocess
import threading

import pytest
from tests.unit.logical.backup.test_worker import worker_in

from lastline.core.errors import PipelineError
from lastline.logical.backup.parts import DirectPart, PartWriter, open_part
from lastline.logical.backup.worker import DumpWorker, WorkerError
from lastline.storage import sealing
from lastline.storage.envelope import BackupSeal
from lastline.storage.file import FileStorage
from lastline.storage.sealing import HEADER_SIZE, TAG, DataKey, SealError

SMALL = sealing.MIN_CHUNK
DB = "unit_worker_seal"
ROWS = 300  # rows of 1,000 bytes (999 letters and LF) for the big part


def _seal(cipher: str = "aes-256-gcm") -> BackupSeal:
    return BackupSeal(DataKey.generate(), "b1", cipher, SMALL)


@pytest.fixture(scope="module")
def worker(target):
    with worker_in(target.server(), DB, "unit-seal") as w:
        yield w


@pytest.fixture
def store(tmp_path) -> FileStorage:
    return FileStorage(str(tmp_path / "dest") + "/")


def _one_row(size: int) -> tuple[str, bytes]:
    """A query of one row whose line is `size` bytes, and that line."""
    return f"SELECT REPEAT('a', {size - 1}), 7 FROM {DB}.seq_1_to_1", b"a" * (size - 1) + b"\n"


BIG_SQL = f"SELECT REPEAT(CHAR(97 + seq % 26), 999), seq FROM {DB}.seq_1_to_{ROWS}"
BIG = b"".join(bytes([97 + s % 26]) * 999 + b"\n" for s in range(1, ROWS + 1))


class Dump:
    """One dump into sealed parts: each part's key, what Python handed the worker for it, and a link to its file
    (`kept`) that outlives an abort."""

    def __init__(self, store: FileStorage, seal: BackupSeal | None, pipe: bool = False, compression: str = "none") -> None:
        self.store, self.seal, self.pipe, self.compression = store, seal, pipe, compression
        self.handed: dict[str, bytes] = {}
        self.kept: dict[str, str] = {}

    def new_part(self, i: int):
        key = f"b1/data/db/t/00000-{i:03d}.tsv"
        if self.pipe:
            part = PartWriter(self.store, key, self.compression, seal=self.seal)
        else:
            part = open_part(self.store, key, self.compression, seal=self.seal)
            self.kept[key] = f"{part.writer.tmp}.kept"
            os.link(part.writer.tmp, self.kept[key])
        given = part.handover

        def spied() -> bytes:
            self.handed[key] = given()
            return self.handed[key]
        part.handover = spied  # type: ignore[method-assign]
        return key, part

    def run(self, worker: DumpWorker, sql: str, part_rows: int = 0):
        return worker.dump(sql, part_rows, self.new_part, self.compression)


@pytest.mark.parametrize("way", ["own-file", "pipe"])
@pytest.mark.parametrize("cipher", list(sealing.CIPHERS))
@pytest.mark.parametrize("size", [1, SMALL - 1, SMALL, SMALL + 1, 2 * SMALL, len(BIG)],
                         ids=["one-byte", "a-byte-short-of-a-chunk", "exactly-a-chunk", "a-chunk-and-a-byte",
                              "exactly-two-chunks", "big-many-rows"])
def test_a_part_sealed_by_the_worker_opens_with_the_python_reader(worker, store, way, cipher, size):
    seal = _seal(cipher)
    sql, plain = (BIG_SQL, BIG) if size == len(BIG) else _one_row(size)
    dump = Dump(store, seal, pipe=way == "pipe")
    result = dump.run(worker, sql)
    [part] = result.parts
    stored = store.read_bytes(part.key)
    assert part.raw_bytes == len(plain) and len(stored) == sealing.sealed_size(len(plain), SMALL)
    assert (part.bytes, part.sha256) == (len(stored), hashlib.sha256(stored).hexdigest())  # the bytes at rest
    message = dump.handed[part.key]
    assert message[:2] == (b"SO" if way == "pipe" else b"SF") and stored[:HEADER_SIZE] == message[-HEADER_SIZE:]
    assert len(plain) < 16 or plain[:16] not in stored
    reader = seal.reader(io.BytesIO(stored), part.key)
    assert (reader.cipher, reader.chunk_size) == (cipher, SMALL)
    assert reader.read() == plain
    with pytest.raises(SealError, match="its header"):
        seal.reader(io.BytesIO(stored), "b1/data/db/t/00000-009.tsv").read()  # bound to its name


def test_parts_compressed_in_the_worker_are_sealed_each_under_its_own_header(worker, store):
    seal = _seal("chacha20-poly1305")
    dump = Dump(store, seal, compression="zstd")
    result = dump.run(worker, BIG_SQL, part_rows=100)
    assert [p.raw_bytes for p in result.parts] == [100_000] * 3
    assert len({dump.handed[p.key][-HEADER_SIZE:] for p in result.parts}) == 3  # a fresh salt for each part
    plain = b""
    for p in result.parts:
        stored = store.read_bytes(p.key)
        assert (p.bytes, p.sha256) == (len(stored), hashlib.sha256(stored).hexdigest())
        frame = seal.reader(io.BytesIO(stored), p.key).read()
        plain += subprocess.run(["zstd", "-q", "-d", "-c"], input=frame, capture_output=True, check=True).stdout
    assert plain == BIG


@pytest.mark.parametrize("cipher", list(sealing.CIPHERS))
def test_a_part_the_worker_abandons_has_no_final_chunk_and_the_next_part_is_not_sealed(worker, store, cipher):
    seal = _seal(cipher)
    dump = Dump(store, seal)
    with pytest.raises(WorkerError, match="row hash was NULL"):
        dump.run(worker, f"SELECT REPEAT('x', 999), IF(seq = 1400, NULL, seq) FROM {DB}.seq_1_to_1500")
    [(key, kept)] = dump.kept.items()
    assert not store.exists(key)  # discarded; the link shows what the worker had written
    with open(kept, "rb") as f:
        written = f.read()
    assert len(written) > HEADER_SIZE + 1000 * (SMALL + TAG)  # it had sealed chunks (its first MiB) before it stopped
    with pytest.raises(SealError) as error:
        seal.reader(io.BytesIO(written), key).read()
    assert error.value.reason == "truncated"
    clear = Dump(store, None)
    result = clear.run(worker, _one_row(SMALL + 1)[0])
    assert store.read_bytes(result.parts[0].key) == _one_row(SMALL + 1)[1]  # nothing of the seal stayed behind


def test_a_flipped_byte_is_named_with_its_chunk(worker, store):
    seal = _seal()
    sql, plain = _one_row(2 * SMALL + 1)
    [part] = Dump(store, seal).run(worker, sql).parts
    stored = bytearray(store.read_bytes(part.key))
    stored[HEADER_SIZE + (SMALL + TAG) + 5] ^= 1  # in chunk 1
    with pytest.raises(SealError) as error:
        seal.reader(io.BytesIO(bytes(stored)), part.key).read()
    assert (error.value.chunk, error.value.reason) == (1, "changed")


@pytest.mark.parametrize(("where", "byte"), [(1, ord("X")), (2 + 32 + 7, 9), (2 + 32 + 10, 0)],
                         ids=["kind-not-F-or-O", "unknown-cipher", "chunk-size-under-1-KiB"])
def test_a_seal_message_the_worker_cannot_take_is_refused_with_nothing_written(worker, store, where, byte):
    dump = Dump(store, _seal())
    real = dump.new_part

    def bent(i: int):
        key, part = real(i)
        given = part.handover

        def changed() -> bytes:
            message = bytearray(given())
            message[where] = byte
            return bytes(message)
        part.handover = changed  # type: ignore[method-assign]
        return key, part
    dump.new_part = bent  # type: ignore[method-assign]
    with pytest.raises(WorkerError, match="sealed part"):
        dump.run(worker, _one_row(10)[0])
    [kept] = dump.kept.values()
    assert os.path.getsize(kept) == 0
    worker.execute("SELECT 1")  # still usable


def _older_worker(sock: socket.socket) -> None:
    """What a worker built before sealing answers: a NEED, then no output for a message that is not O or F."""
    sock.recv(1 << 16)
    sock.send(b"NEED")
    _, fds, _, _ = socket.recv_fds(sock, 1 << 16, 1)
    for fd in fds:
        os.close(fd)
    sock.send(b"ERR 0 expected an output for the next part")


def test_an_older_worker_that_does_not_seal_is_refused_naming_make_setup(store):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    old = DumpWorker.__new__(DumpWorker)
    old.sock, old.name = ours, "old"
    thread = threading.Thread(target=_older_worker, args=(theirs,), daemon=True)
    thread.start()
    dump = Dump(store, _seal())
    try:
        with pytest.raises(PipelineError, match="make setup"):
            dump.run(old, "SELECT 1, 1")
    finally:
        thread.join(5)
        ours.close()
        theirs.close()
    assert not any(store.exists(k) for k in dump.kept)


def test_a_clear_part_is_handed_over_as_before(store):
    part = open_part(store, "b1/k.tsv", "zstd")
    try:
        assert isinstance(part, DirectPart) and part.handover() == b"F"
    finally:
        part.abort()


@pytest.mark.parametrize("size", [sealing.CHUNK_SIZE, sealing.CHUNK_SIZE + 1], ids=["exactly-a-chunk", "a-chunk-and-a-byte"])
def test_a_part_sealed_at_the_default_chunk_size_opens_with_the_python_reader(worker, store, size):
    # the chunk size the backups use (its header bytes parsed whole; a chunk sealed in several EVP updates)
    seal = BackupSeal(DataKey.generate(), "b1", "aes-256-gcm", sealing.CHUNK_SIZE)
    sql, plain = _one_row(size)
    [part] = Dump(store, seal).run(worker, sql).parts
    stored = store.read_bytes(part.key)
    assert len(stored) == sealing.sealed_size(len(plain), sealing.CHUNK_SIZE)
    reader = seal.reader(io.BytesIO(stored), part.key)
    assert reader.chunk_size == sealing.CHUNK_SIZE and reader.read() == plain
