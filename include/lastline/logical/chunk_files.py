"""Chunk files: read one back, checked against its sha256 and decompressed (they are written by tsvdump)."""
from __future__ import annotations

import hashlib
import signal
import subprocess
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from lastline.core.compression import codec
from lastline.core.errors import IntegrityError, PipelineError
from lastline.core.pipeline import filtered
from lastline.storage import Storage


def read_chunk(storage: Storage, key: str, compression: str, sha256: str, what: str = "") -> Iterator[bytes]:
    """The uncompressed bytes of a chunk file, streamed (memory stays bounded by pipe buffers).

    Raises IntegrityError naming the file (and `what`, e.g. its table) if it cannot be decompressed or
    its sha256 differs from the manifest's. The check completes only at the end of the file: callers
    load inside a transaction and commit only after the generator is exhausted, so a corrupt chunk
    leaves nothing behind.
    """
    c = codec(compression)
    where = f"{storage.location(key)}{f' ({what})' if what else ''}"
    digest = hashlib.sha256()

    if c.tool is None:
        for data in storage.reader(key):
            digest.update(data)
            yield data
        _check(digest, sha256, where)
        return

    def hashed() -> Iterator[bytes]:
        for data in storage.reader(key):
            digest.update(data)
            yield data

    try:
        yield from filtered(c.decompress_argv(1), hashed(), f"decompress {key}")
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
                on_bytes: Callable[[int], None] | None = None, decompress: bool = True) -> None:
    """Write a chunk's uncompressed bytes into `out` (a FIFO's write end), with read_chunk's checks.

    The decompressor writes into `out` itself: Python passes on only the compressed bytes, hashing them on
    the way (`on_bytes` gets each piece's size), and never touches the several times larger output.
    `decompress=False`: the compressed bytes go into `out` as they are (hashed the same way), for a reader
    that decompresses them itself (logical.infile).
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
        for data in hashed():
            out.write(data)
    else:
        proc = subprocess.Popen(c.decompress_argv(1), stdin=subprocess.PIPE, stdout=out, stderr=subprocess.PIPE)
        assert proc.stdin is not None and proc.stderr is not None
        try:
            try:
                for data in hashed():
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
