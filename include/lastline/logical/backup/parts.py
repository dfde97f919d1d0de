"""Where a dump part's bytes go: the part's own file, written by the worker itself through a descriptor handed over
(DirectPart: a local folder, compressed in the worker or not at all), or a pipe drained by a thread into the
storage's writer, through a compressor process if one is used (PartWriter: S3, SSH, pigz). An encrypted part is
sealed by the worker as it writes (handed the part's AEAD key and header with the descriptor: `handover()`), so the
thread only moves and hashes sealed bytes; only behind a compressor process does the thread seal (SealWriter). Either
is committed only when the worker says the part is whole, and aborted otherwise."""
from __future__ import annotations

import errno
import hashlib
import os
import re
import subprocess
import threading

from lastline.core import impact
from lastline.core.child_env import child_env
from lastline.core.compression import codec
from lastline.core.errors import PipelineError, StorageError
from lastline.core.pipeline import widen_pipe
from lastline.storage import Storage, Writer
from lastline.storage.envelope import BackupSeal
from lastline.storage.sealing import SealWriter, sealed_header

# compressions the worker does itself (libzstd level 1 with a content checksum, as `zstd -1` writes):
# the raw lines then never cross a pipe (`make bench-logical ARGS=--design` times both ways)
IN_WORKER = {"zstd"}
READ_BLOCK = 1 << 20
BUILT_FROM = "lastline-tsvdump (native/tsvdump.c)"


def _handover(kind: bytes, key: str, seal: BackupSeal | None) -> bytes:
    """The answer to the worker's NEED (its descriptor goes with it): F (the part's file) or O (a pipe); sealed by the
    worker, S, the kind, the part's AEAD key (32 bytes) and its header (storage.sealing, a fresh salt). The key crosses
    the control socket only."""
    if seal is None:
        return kind
    header, aead_key = sealed_header(seal.data_key, seal.backup_id, key, seal.cipher, seal.chunk_size)
    return b"S" + kind + aead_key + header


class PartWriter:
    """A pipe whose read end is compressed (or not) into `key` of storage; committed only by commit().

    The write end goes to the worker; the file is written through `<key>.partial` by the storage
    writer, and discarded by abort() (a part is never taken for complete unless the worker said so). With `seal`, the
    worker seals what it writes, or, behind a compressor process, the thread seals what it reads."""

    def __init__(self, storage: Storage, key: str, compression: str, priority: str = "normal",
                 seal: BackupSeal | None = None) -> None:
        self.storage, self.key = storage, key
        self.read_fd, self.write_fd = os.pipe()
        widen_pipe(self.write_fd)
        c = codec(compression)
        self.proc: subprocess.Popen | None = None
        source = self.read_fd
        if c.tool is not None and compression not in IN_WORKER:
            self.proc = subprocess.Popen(
                impact.prefix(priority) + c.compress_argv(1, fast=True), stdin=self.read_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=child_env(),
            )
            os.close(self.read_fd)
            self.read_fd = -1
            assert self.proc.stdout is not None
            source = self.proc.stdout.fileno()
            widen_pipe(source)
        self.source = source
        # who seals: the thread, behind a compressor process; the worker, which writes what is stored, otherwise
        self.seal: BackupSeal | None = seal if self.proc else None
        self.worker_seal: BackupSeal | None = None if self.proc else seal
        self.decided = threading.Event()
        self.commit_ok = False
        self.bytes = 0
        self.sha256 = ""
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._drain, name=f"part-{key}", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        try:
            with self.storage.writer(self.key, durable=False) as writer:  # made durable at once before the manifest
                stored = _Hashed(writer)  # the bytes at rest: what the manifest's size and sha256 pin
                sink = self.seal.writer(stored, self.key) if self.seal else stored
                while data := os.read(self.source, READ_BLOCK):
                    sink.write(data)
                self.decided.wait()
                if not self.commit_ok:
                    raise PipelineError("part aborted")  # the writer discards what it wrote
                if isinstance(sink, SealWriter):
                    sink.close()  # the final chunk: only a part the worker called whole has one
                self.bytes, self.sha256 = stored.bytes, stored.digest.hexdigest()
        except BaseException as exc:  # noqa: BLE001 - reported by commit()
            self.error = exc

    def handover(self) -> bytes:
        """The answer to the worker's NEED: a pipe, sealed by the worker unless a compressor process reads it."""
        return _handover(b"O", self.key, self.worker_seal)

    def handed_over(self) -> None:
        """The worker has its own copy of the write end: close ours, so its close is the end of file."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def complete(self) -> None:
        """Wait for the end of file and check the compressor (the file stays uncommitted)."""
        self.handed_over()
        code = self.proc.wait() if self.proc else 0
        if code != 0 and self.proc is not None:
            tail = self.proc.stderr.read().decode(errors="replace").strip()[-500:] if self.proc.stderr else ""
            program = str(list(self.proc.args)[0]) if isinstance(self.proc.args, list | tuple) else str(self.proc.args)
            self.abort()
            raise PipelineError(f"compressing {self.key} failed ({program} exit {code}: {tail})")

    def commit(self) -> tuple[int, str]:
        """Commit the file (after complete()); returns (bytes, sha256)."""
        self.commit_ok = True
        self.decided.set()
        self.thread.join()
        self._close()
        if self.error is not None:
            raise self.error
        return self.bytes, self.sha256

    def abort(self) -> None:
        """Stop the compressor and discard the file."""
        self.handed_over()
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
        self.commit_ok = False
        self.decided.set()
        self.thread.join(timeout=60)
        if self.proc:
            self.proc.wait()
        self._close()

    def _close(self) -> None:
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1
        if self.proc:
            for f in (self.proc.stdout, self.proc.stderr):
                if f:
                    f.close()


class _Hashed:
    """A storage writer that counts and hashes what goes through it."""

    def __init__(self, writer: Writer) -> None:
        self.writer, self.digest, self.bytes = writer, hashlib.sha256(), 0

    def write(self, data: bytes | memoryview) -> int:
        self.digest.update(data)
        self.writer.write(data)
        self.bytes += len(data)
        return len(data)


class DirectPart:
    """A part the worker writes straight into its file under the destination (`<key>.partial`, made as the storage's
    writer makes it): the worker counts and hashes what it writes (sealed, with `seal`); commit() checks the file's
    size against that count and renames it. Same interface as PartWriter."""

    def __init__(self, key: str, writer: Writer, fd: int, seal: BackupSeal | None = None) -> None:
        self.key, self.writer, self.write_fd, self.seal = key, writer, fd, seal
        self.bytes, self.sha256 = -1, ""

    def handover(self) -> bytes:
        """The answer to the worker's NEED: the part's file, sealed by the worker if the backup is encrypted."""
        return _handover(b"F", self.key, self.seal)

    def handed_over(self) -> None:
        """Nothing: the worker writes through its own copy of the descriptor and closes it at the part's end; ours
        stays open for the commit."""

    def reported(self, fields: list[str]) -> None:
        """What the worker says it wrote into the file: the end of its PART answer (bytes, sha256)."""
        if len(fields) != 2 or not fields[0].isdigit() or not re.fullmatch(r"[0-9a-f]{64}", fields[1]):
            raise PipelineError(f"part {self.key}: the dump worker did not say what it wrote into the file ({fields!r}): an "
                                f"older {BUILT_FROM}? Run `make setup` (or rebuild the image) to build it again.")
        self.bytes, self.sha256 = int(fields[0]), fields[1]

    def complete(self) -> None:
        """Nothing to wait for: the worker closed the file before it answered PART."""

    def write_failed(self, code: int, text: str) -> StorageError:
        """The error for the worker's failed write into the file (its WFAIL answer)."""
        hint = "the destination is full: free space or choose another destination" if code == errno.ENOSPC else "check the destination"
        return StorageError(f"cannot write {getattr(self.writer, 'tmp', self.key)}: {text} ({hint}).")

    def commit(self) -> tuple[int, str]:
        """Check the file holds what the worker wrote, then make it visible; returns (bytes, sha256)."""
        size = os.fstat(self.write_fd).st_size
        if size != self.bytes:
            self.abort()
            raise StorageError(f"part {self.key}: the file holds {size} bytes, the dump worker wrote {self.bytes}; "
                               "the backup is incomplete (no manifest is written) and the task retries.")
        self.writer.commit()
        return self.bytes, self.sha256

    def abort(self) -> None:
        """Discard the file (the worker, stopped or done, no longer writes to it)."""
        self.writer.abort()


Part = PartWriter | DirectPart


def open_part(storage: Storage, key: str, compression: str, priority: str = "normal", seal: BackupSeal | None = None) -> Part:
    """Where a part's bytes go: its own file, written by the worker, where the destination is a local folder and the
    worker writes the file's bytes as they are stored (it compresses with zstd, or there is nothing to compress; it
    seals with `seal` if the backup is encrypted); otherwise a PartWriter (a pipe drained into the storage's writer by a
    thread, through a compressor process if one is used). Parts are made durable all at once before the manifest (the
    storage's sync())."""
    if storage.local_files and (compression in IN_WORKER or codec(compression).tool is None):
        writer = storage.writer(key, durable=False)
        fd = writer.fileno()
        assert fd is not None, "a storage with local_files writes files"
        return DirectPart(key, writer, fd, seal)
    return PartWriter(storage, key, compression, priority, seal)
