"""A file of a local backup folder written whole: under `<key>.partial`, renamed on commit, one writer of a key at a
time (an flock held until the rename), private to its owner (0600 files, 0700 folders).
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import time

from lastline.core.errors import StorageError
from lastline.storage.base import Writer

log = logging.getLogger(__name__)


def private_dirs(path: str) -> None:
    """Create the folders of `path` readable by their owner only (0700): backups can hold password hashes."""
    if not os.path.isdir(path):
        private_dirs(os.path.dirname(path))
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass


class FileWriter(Writer):
    """Writes `<key>.partial` (0600, folders 0700), fsyncs (when `durable`) and renames it on commit. Two writers of
    one key (the binlog stream and retention, both writing a chain) take turns on an flock of the `.partial`, held
    until the rename: each one's file is whole, and the last to commit wins (as an S3 PUT)."""

    def __init__(self, path: str, durable: bool = True) -> None:
        self.path, self.tmp, self.durable = path, path + ".partial", durable
        private_dirs(os.path.dirname(path))
        self.fh = os.fdopen(locked_partial(self.tmp), "wb")

    def fileno(self) -> int:
        return self.fh.fileno()

    def write(self, data: bytes) -> None:
        try:
            self.fh.write(data)
        except OSError as exc:
            hint = "the destination is full: free space or choose another destination" if exc.errno == errno.ENOSPC else "check the destination"
            raise StorageError(f"cannot write {self.tmp}: {exc.strerror} ({hint}).") from exc

    def commit(self) -> None:
        try:
            self.fh.flush()
            if self.durable:
                os.fsync(self.fh.fileno())
            os.replace(self.tmp, self.path)  # under the lock: the next writer waits for a .partial of its own
        except OSError as exc:
            self.abort()
            hint = " (the destination is full: free space or choose another destination)" if exc.errno == errno.ENOSPC else ""
            raise StorageError(f"cannot finish {self.tmp}: {exc.strerror}{hint}.") from exc
        self.fh.close()

    def abort(self) -> None:
        if not self.fh.closed:
            try:
                os.unlink(self.tmp)  # while the lock is held: it is this writer's .partial
            except FileNotFoundError:
                pass
            try:
                self.fh.close()
            except OSError:  # closing flushes what is buffered: on a full destination that fails, and the file goes
                pass


def locked_partial(tmp: str, warn_every: float = 60.0) -> int:
    """`tmp` opened for writing (0600, never through a symlink), emptied, under an exclusive flock: another writer of
    the same key is waited for (a warning each `warn_every` s), and a file it renamed away meanwhile is left alone (the
    lock is taken again on a new one). What a killed writer left holds no lock: it is emptied and written over."""
    waited = time.monotonic()
    while True:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() - waited >= warn_every:
                        log.warning("waiting for another writer of %s to finish", tmp)
                        waited = time.monotonic()
                    time.sleep(0.01)
            opened = os.fstat(fd)
            try:
                now = os.stat(tmp, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino):
                os.ftruncate(fd, 0)
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the other writer renamed it (or aborted): that file is not ours to write
