"""Chunk files: read one back, checked against its sha256, opened if the backup is encrypted (storage.sealing) and
decompressed (they are written by tsvdump); or copy one into an anonymous private file, checked (and opened) before
anything reads it (opened_chunk), and proven (prove_chunk)."""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Generator, Iterator
from typing import Any, BinaryIO

from lastline.core.child_env import child_env
from lastline.core.compression import codec
from lastline.core.errors import IntegrityError, PipelineError, StorageError
from lastline.core.pipeline import filtered
from lastline.logical.format import infile
from lastline.manifest import ChunkInfo
from lastline.storage import Storage
from lastline.storage.envelope import BackupSeal


def _opened(stored: Iterator[bytes], seal: BackupSeal | None, key: str) -> Iterator[bytes]:
    """The bytes of chunk file `key` as written before sealing (each chunk authenticated first), or as stored."""
    if seal is None:
        return stored
    return seal.opened_stream(stored, key)


def read_chunk(storage: Storage, key: str, compression: str, sha256: str, what: str = "",
               seal: BackupSeal | None = None) -> Generator[bytes, None, None]:
    """The uncompressed bytes of a chunk file, streamed (memory stays bounded by pipe buffers).

    Raises IntegrityError naming the file (and `what`, e.g. its table) if it cannot be decompressed or
    its sha256 differs from the manifest's. The check completes only at the end of the file: callers
    load inside a transaction and commit only after the generator is exhausted, so a corrupt chunk
    leaves nothing behind.
    """
    c = codec(compression)
    where = f"{storage.location(key)}{f' ({what})' if what else ''}"
    digest = hashlib.sha256()

    def hashed() -> Iterator[bytes]:
        for data in storage.reader(key):
            digest.update(data)
            yield data

    if c.tool is None:
        yield from _opened(hashed(), seal, key)
        _check(digest, sha256, where)
        return
    try:
        yield from filtered(c.decompress_argv(1), _opened(hashed(), seal, key), f"decompress {key}")
    except PipelineError as exc:
        raise IntegrityError(f"chunk {where} cannot be decompressed ({exc}); nothing of it was loaded.") from exc
    _check(digest, sha256, where)


def _check(digest: Any, sha256: str, where: str) -> None:
    """A chunk's sha256 against the manifest's (once the whole file has been read)."""
    if digest.hexdigest() != sha256:
        raise IntegrityError(
            f"chunk {where} is corrupt: sha256 {digest.hexdigest()} differs from the manifest's {sha256}; "
            "nothing of it was loaded. Restore from another backup or re-run the backup."
        )


def write_chunk(storage: Storage, key: str, compression: str, sha256: str, out: BinaryIO, what: str = "",
                on_bytes: Callable[[int], None] | None = None, decompress: bool = True,
                seal: BackupSeal | None = None) -> None:
    """Write a chunk's uncompressed bytes into `out` (a FIFO's write end), with read_chunk's checks.

    The decompressor writes into `out` itself: Python passes on only the compressed bytes, hashing them on
    the way (`on_bytes` gets each piece's size), and never touches the several times larger output.
    `decompress=False`: the compressed bytes go into `out` as they are (hashed the same way), for a reader
    that decompresses them itself (logical.format.infile). `seal`: the chunk is sealed; each of its chunks is opened
    (authenticated) in Python before a byte of it goes on.
    """
    c = codec(compression if decompress else "none")
    where = f"{storage.location(key)}{f' ({what})' if what else ''}"
    digest = hashlib.sha256()

    def hashed() -> Iterator[bytes]:
        for data in storage.reader(key):
            digest.update(data)
            if on_bytes is not None:
                on_bytes(len(data))
            yield data

    if c.tool is None:
        for data in _opened(hashed(), seal, key):
            out.write(data)
    else:
        proc = subprocess.Popen(c.decompress_argv(1), stdin=subprocess.PIPE, stdout=out, stderr=subprocess.PIPE,
                                env=child_env())
        assert proc.stdin is not None and proc.stderr is not None
        try:
            try:
                for data in _opened(hashed(), seal, key):
                    proc.stdin.write(data)
                proc.stdin.close()
            except BrokenPipeError:
                pass  # the decompressor stopped early: its exit status says why
            code = proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if code == -signal.SIGPIPE:
            raise BrokenPipeError(f"chunk {where}: the reader of the decompressed bytes went away")
        if code != 0:
            tail = proc.stderr.read().decode(errors="replace").strip()[-300:]
            raise IntegrityError(f"chunk {where} cannot be decompressed ({c.tool} exited with status {code}: {tail}); "
                                 "nothing of it was loaded.")
    _check(digest, sha256, where)


def private_file(folder: str | None = None) -> int:
    """A new anonymous file, open read-write (its descriptor): 0600 and linked in no folder (O_TMPFILE in `folder`,
    the temporary one by default; where the filesystem has no O_TMPFILE, created and unlinked at once), so whatever
    ends this process, a kill -9 included, leaves nothing of it on disk."""
    folder = folder or tempfile.gettempdir()
    flag = getattr(os, "O_TMPFILE", 0)
    if flag:
        try:
            return os.open(folder, flag | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError as exc:  # EOPNOTSUPP: the filesystem has none; EISDIR/EINVAL: an older kernel
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    fd, path = tempfile.mkstemp(prefix="lastline-chunk-", dir=folder)  # 0600, O_EXCL, no link followed
    os.unlink(path)
    return fd


def spool_chunk(storage: Storage, key: str, size: int, sha256: str, out: BinaryIO, what: str = "",
                on_bytes: Callable[[int], None] | None = None) -> None:
    """Copy a chunk's bytes as stored into `out` (a private file: private_file) and check their size and sha256
    against the manifest before anyone reads them: for tables that keep the rows of a failed statement (MyISAM,
    Aria), whose chunks must be proven before their first byte is loaded. Raises IntegrityError naming the file."""
    where = f"{storage.location(key)}{f' ({what})' if what else ''}"
    digest, seen = hashlib.sha256(), 0
    for data in storage.reader(key):
        seen += len(data)
        if seen > size:  # no need to copy more of a file already too long
            break
        digest.update(data)
        out.write(data)
        if on_bytes is not None:
            on_bytes(len(data))
    out.flush()
    if seen != size:
        raise IntegrityError(
            f"chunk {where} is {'more than ' if seen > size else ''}{seen} bytes, the manifest says {size}; nothing of it "
            "was loaded. Restore from another backup or re-run the backup."
        )
    _check(digest, sha256, where)


class _Bounded:
    """A sink that hashes what it passes on and refuses more than `most` bytes (an opened chunk is smaller than the
    sealed one the manifest sizes)."""

    def __init__(self, sink: BinaryIO, most: int, where: str) -> None:
        self.sink, self.most, self.where, self.sha, self.n = sink, most, where, hashlib.sha256(), 0

    def write(self, data: bytes) -> None:
        self.n += len(data)
        if self.n > self.most:
            raise IntegrityError(f"chunk {self.where} opens to more than the manifest's {self.most} bytes; nothing of it "
                                 "was loaded. Restore from another backup or re-run the backup.")
        self.sha.update(data)
        self.sink.write(data)


OPENED_MOST = 256 << 20  # a sealed chunk up to this size (as stored) is opened whole before it is loaded (Loader)


@contextlib.contextmanager
def opened_chunk(storage: Storage, key: str, c: ChunkInfo, seal: BackupSeal, what: str = "",
                 on_bytes: Callable[[int], None] | None = None) -> Iterator[tuple[int, str]]:
    """Sealed chunk `c`, opened whole into an anonymous file (private_file) before anything reads it: read once, its
    stored bytes' sha256 checked against the manifest's and every seal chunk authenticated as it passes (write_chunk's
    checks), its plaintext (still compressed) never more than the manifest's size. Yields (descriptor at offset 0,
    sha256 of the plaintext), for infile's offer_fd, and closes it after the block: an opened chunk is left nowhere
    on disk, whatever ends the worker."""
    fd = private_file()
    try:
        with open(fd, "r+b", closefd=False) as out:
            plain = _Bounded(out, c.bytes, f"{storage.location(key)}{f' ({what})' if what else ''}")
            try:
                write_chunk(storage, key, "none", c.sha256, plain, what, on_bytes, decompress=False, seal=seal)  # type: ignore[arg-type]
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                raise StorageError(f"no room in the temporary folder {tempfile.gettempdir()} to open chunk {plain.where} "
                                   f"({c.bytes:,} bytes as stored) into; nothing of it was loaded. Free space there, or "
                                   "point TMPDIR at a larger folder, and retry.") from exc
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd, plain.sha.hexdigest()
    finally:
        os.close(fd)


@contextlib.contextmanager
def prove_chunk(storage: Storage, key: str, c: ChunkInfo, compression: str, what: str = "",
                on_bytes: Callable[[int], None] | None = None,
                seal: BackupSeal | None = None) -> Iterator[tuple[int, str]]:
    """A private copy of chunk `c` (spool_chunk: its size and sha256 the manifest's; a sealed one opened_chunk), proven
    to decompress within its declared raw size by the LOAD DATA handler's own reader: for tables that keep the rows
    of a failed statement (MyISAM, Aria), which must not see a byte of a chunk that will be refused. Yields the copy
    as (descriptor at offset 0, sha256 of its bytes), for infile's offer_fd, and closes it after the block. The copy
    is an anonymous file (private_file): an opened (plaintext) chunk is left nowhere on disk, whatever ends the worker."""
    where = f"{storage.location(key)}{f' ({what})' if what else ''}"
    if seal is not None:
        with opened_chunk(storage, key, c, seal, what, on_bytes) as (fd, sha256):
            infile.measure_fd(fd, compression, c.raw_bytes, where)
            os.lseek(fd, 0, os.SEEK_SET)
            yield fd, sha256
        return
    fd = private_file()
    try:
        with open(fd, "r+b", closefd=False) as out:
            spool_chunk(storage, key, c.bytes, c.sha256, out, what, on_bytes)
        infile.measure_fd(fd, compression, c.raw_bytes, where)
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd, c.sha256
    finally:
        os.close(fd)
