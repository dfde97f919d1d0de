"""logical.backup.parts: where a dump part's bytes go. On a local folder the worker writes the part's own file
(DirectPart), checked against what it says it wrote; elsewhere, or through a compressor process, a pipe drained into
the storage's writer (PartWriter). An encrypted part is sealed by the worker (it is handed the part's AEAD key and
header with the descriptor), but behind a compressor process, which Python's SealWriter seals after. Either leaves a
file only when committed, never when aborted. Here the test writes the bytes into the descriptor a worker would get
(tests/unit/logical/backup/test_worker_sealing.py has the real worker seal)."""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from lastline.core.errors import PipelineError, StorageError
from lastline.logical.backup.parts import DirectPart, PartWriter, open_part
from lastline.storage import sealing
from lastline.storage.envelope import BackupSeal
from lastline.storage.file import FileStorage
from lastline.storage.sealing import DataKey

DATA = b"1\tone\n2\t\\N\n" * 1000
KEY = "b1/data/db/t/00000-000.tsv"


@pytest.fixture
def store(tmp_path) -> FileStorage:
    return FileStorage(str(tmp_path / "dest") + "/")


def _files(store: FileStorage) -> list[str]:
    root = store.root
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def _worker_writes(part, data: bytes) -> None:
    """What the worker does with the descriptor it is handed: write the part, close its copy."""
    fd = os.dup(part.write_fd)
    part.handed_over()
    with os.fdopen(fd, "wb") as out:
        out.write(data)


@pytest.mark.parametrize(("compression", "kind"), [("none", DirectPart), ("zstd", DirectPart), ("pigz", PartWriter)],
                         ids=["raw-file-by-the-worker", "worker-compresses-itself", "compressor-process-through-a-pipe"])
def test_open_part_on_a_local_folder(store, compression, kind):
    if compression == "pigz" and not shutil.which("pigz"):
        pytest.skip("pigz is not installed")
    part = open_part(store, KEY, compression)
    try:
        assert isinstance(part, kind)
    finally:
        part.abort()
    assert _files(store) == []


def test_a_direct_part_is_committed_when_it_holds_what_the_worker_said(store):
    part = open_part(store, KEY, "none")
    _worker_writes(part, DATA)
    part.reported([str(len(DATA)), hashlib.sha256(DATA).hexdigest()])
    part.complete()
    assert part.commit() == (len(DATA), hashlib.sha256(DATA).hexdigest())
    assert store.read_bytes(KEY) == DATA and _files(store) == [KEY]


def test_a_direct_part_shorter_than_the_worker_said_leaves_nothing(store):
    part = open_part(store, KEY, "none")
    _worker_writes(part, DATA[:-1])
    part.reported([str(len(DATA)), hashlib.sha256(DATA).hexdigest()])
    with pytest.raises(StorageError, match=f"holds {len(DATA) - 1} bytes, the dump worker wrote {len(DATA)}"):
        part.commit()
    assert _files(store) == []


@pytest.mark.parametrize("fields", [[], ["12"], ["x", "0" * 64], ["12", "0" * 63], ["12", "G" * 64]],
                         ids=["nothing", "no-sha256", "bytes-not-a-number", "short-sha256", "not-hex"])
def test_a_direct_part_refuses_an_answer_without_bytes_and_sha256(store, fields):
    part = open_part(store, KEY, "none")
    try:
        with pytest.raises(PipelineError, match="did not say what it wrote"):
            part.reported(fields)
    finally:
        part.abort()


def test_a_failed_write_names_a_full_destination(store):
    part = open_part(store, KEY, "none")
    try:
        assert "destination is full" in str(part.write_failed(28, "No space left on device"))
        assert "check the destination" in str(part.write_failed(5, "Input/output error"))
    finally:
        part.abort()


@pytest.mark.parametrize("compression", ["none", "pigz"], ids=["plain-pipe", "through-pigz"])
def test_a_pipe_part_is_written_through_its_compressor_when_committed(store, compression):
    if compression == "pigz" and not shutil.which("pigz"):
        pytest.skip("pigz is not installed")
    part = PartWriter(store, KEY, compression)
    _worker_writes(part, DATA)
    part.complete()
    nbytes, sha = part.commit()
    stored = store.read_bytes(KEY)
    assert (nbytes, sha) == (len(stored), hashlib.sha256(stored).hexdigest())
    assert (gzip.decompress(stored) if compression == "pigz" else stored) == DATA


def test_an_aborted_pipe_part_leaves_nothing(store):
    part = PartWriter(store, KEY, "none")
    _worker_writes(part, DATA)
    part.abort()
    assert _files(store) == [] and part.read_fd == -1


def _seal() -> BackupSeal:
    return BackupSeal(DataKey.generate(), "b1", "aes-256-gcm", sealing.MIN_CHUNK)


def _as_the_worker_seals(message: bytes, plain: bytes) -> bytes:
    """What the worker writes for a part of less than a chunk given `message` (S, F or O, AEAD key, header)."""
    aead_key, header = message[2:34], message[34:]
    return header + AESGCM(aead_key).encrypt(bytes(11) + b"\x01", plain, header[:44])


@pytest.mark.parametrize("compression", ["none", "zstd"], ids=["plain", "zstd-in-the-worker"])
def test_an_encrypted_part_in_a_local_folder_is_the_workers_own_file_sealed_by_it(store, compression):
    seal = _seal()
    part = open_part(store, KEY, compression, seal=seal)
    assert isinstance(part, DirectPart)  # no pipe and no thread: the worker seals as it writes
    message = part.handover()
    assert message[:2] == b"SF" and len(message) == 2 + 32 + sealing.HEADER_SIZE
    assert message[2:34] != seal.data_key.raw() and part.handover()[34:] != message[34:]  # a fresh salt each time
    stored = _as_the_worker_seals(message, DATA[:500])
    _worker_writes(part, stored)
    part.reported([str(len(stored)), hashlib.sha256(stored).hexdigest()])
    assert part.commit() == (len(stored), hashlib.sha256(stored).hexdigest())
    assert seal.reader(io.BytesIO(store.read_bytes(KEY)), KEY).read() == DATA[:500]  # the header Python built
    with pytest.raises(sealing.SealError, match="its header"):
        seal.reader(io.BytesIO(stored), "b1/data/db/t/00001-000.tsv").read()  # bound to its name


def test_an_encrypted_part_through_a_pipe_is_stored_as_the_worker_sealed_it(store):
    seal = _seal()
    part = PartWriter(store, KEY, "zstd", seal=seal)  # a destination that is not a local folder: S3, SSH
    message = part.handover()
    assert message[:2] == b"SO"
    stored = _as_the_worker_seals(message, DATA[:500])
    _worker_writes(part, stored)
    part.complete()
    assert part.commit() == (len(stored), hashlib.sha256(stored).hexdigest())  # the manifest pins the bytes at rest
    assert store.read_bytes(KEY) == stored  # moved and hashed, not sealed again
    assert seal.reader(io.BytesIO(stored), KEY).read() == DATA[:500]


def test_an_encrypted_part_behind_a_compressor_process_is_sealed_in_python(store):
    if not shutil.which("pigz"):
        pytest.skip("pigz is not installed")
    seal = _seal()
    part = open_part(store, KEY, "pigz", seal=seal)
    assert isinstance(part, PartWriter) and part.handover() == b"O"  # the worker's lines go to pigz unsealed
    _worker_writes(part, DATA)
    part.complete()
    nbytes, sha = part.commit()
    stored = store.read_bytes(KEY)
    assert (nbytes, sha) == (len(stored), hashlib.sha256(stored).hexdigest())
    assert stored.startswith(sealing.MAGIC) and gzip.decompress(seal.reader(io.BytesIO(stored), KEY).read()) == DATA


def test_an_aborted_encrypted_part_leaves_nothing(store):
    part = PartWriter(store, KEY, "none", seal=_seal())
    _worker_writes(part, DATA)
    part.abort()
    assert _files(store) == []
