"""Chunk files: read one back, checked against its sha256 and decompressed (they are written by tsvdump)."""
from __future__ import annotations

import hashlib
from collections.abc import Iterator

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

    def check() -> None:
        if digest.hexdigest() != sha256:
            raise IntegrityError(
                f"chunk {where} is corrupt: sha256 {digest.hexdigest()} differs from the manifest's {sha256}; "
                "nothing of it was loaded. Restore from another backup or re-run the backup."
            )

    if c.tool is None:
        for data in storage.reader(key):
            digest.update(data)
            yield data
        check()
        return

    def hashed() -> Iterator[bytes]:
        for data in storage.reader(key):
            digest.update(data)
            yield data

    try:
        yield from filtered(c.decompress_argv(1), hashed(), f"decompress {key}")
    except PipelineError as exc:
        raise IntegrityError(f"chunk {where} cannot be decompressed ({exc}); nothing of it was loaded.") from exc
    check()
