"""Chunk files: read one back, checked against its sha256 and decompressed (they are written by tsvdump)."""
from __future__ import annotations

import contextlib
import hashlib
import subprocess
import threading
from typing import Iterator

from lastline.core.compression import codec
from lastline.core.errors import IntegrityError
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
    proc = subprocess.Popen(c.decompress_argv(1), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    errors: list[BaseException] = []

    def feed() -> None:
        try:
            for data in storage.reader(key):
                digest.update(data)
                proc.stdin.write(data)
        except BrokenPipeError:
            pass  # the decompressor stopped: its exit status says why
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
        finally:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()

    feeder = threading.Thread(target=feed, name=f"read-{key}", daemon=True)
    feeder.start()
    try:
        while data := proc.stdout.read(1 << 20):
            yield data
        code = proc.wait()
        feeder.join()
        if errors:
            raise errors[0]
        if code != 0:
            tail = proc.stderr.read().decode(errors="replace").strip()[-500:]
            raise IntegrityError(f"chunk {where} cannot be decompressed ({c.name} exit {code}: {tail}); nothing of it was loaded.")
        check()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        feeder.join(timeout=10)
