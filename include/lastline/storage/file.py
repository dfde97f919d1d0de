"""A backup folder on a local (or mounted) filesystem."""
from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator

from lastline.core.errors import StorageError
from lastline.storage.base import Storage, Writer, checked_key


def private_dirs(path: str) -> None:
    """Create the folders of `path` readable by their owner only (0700): backups can hold password hashes."""
    if not os.path.isdir(path):
        private_dirs(os.path.dirname(path))
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass


class FileWriter(Writer):
    """Writes `<key>.partial` (0600, folders 0700), fsyncs and renames it on commit."""

    def __init__(self, path: str) -> None:
        self.path, self.tmp = path, path + ".partial"
        private_dirs(os.path.dirname(path))
        self.fh = os.fdopen(os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")

    def write(self, data: bytes) -> None:
        try:
            self.fh.write(data)
        except OSError as exc:
            hint = "the destination is full: free space or choose another destination" if exc.errno == errno.ENOSPC else "check the destination"
            raise StorageError(f"cannot write {self.tmp}: {exc.strerror} ({hint}).") from exc

    def commit(self) -> None:
        try:
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
        except OSError as exc:
            self.abort()
            raise StorageError(f"cannot finish {self.tmp}: {exc.strerror}.") from exc
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        if not self.fh.closed:
            self.fh.close()
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass


class FileStorage(Storage):
    """Backups under a local directory."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/") or "/"
        self.url = f"file://{self.root}"

    def _path(self, key: str) -> str:
        return os.path.join(self.root, checked_key(key, self.url))

    def writer(self, key: str) -> Writer:
        try:
            return FileWriter(self._path(key))
        except OSError as exc:
            raise StorageError(f"cannot write to {self.location(key)}: {exc.strerror}.") from exc

    def reader(self, key: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        path = self._path(key)
        try:
            fh = open(path, "rb")
        except FileNotFoundError as exc:
            raise StorageError(f"{self.location(key)} does not exist.") from exc
        with fh:
            while data := fh.read(chunk):
                yield data

    def exists(self, key: str) -> bool:
        return os.path.exists(self._path(key))

    def size(self, key: str) -> int:
        return os.path.getsize(self._path(key))

    def list_backups(self) -> list[str]:
        if not os.path.isdir(self.root):
            return []
        return sorted(e.name for e in os.scandir(self.root) if e.is_dir() and not e.name.startswith("."))

    def delete_backup(self, backup_id: str) -> None:
        shutil.rmtree(self._path(backup_id), ignore_errors=True)

    def check_writable(self) -> None:
        probe = self._path(".lastline-write-probe")
        try:
            private_dirs(self.root)
            with open(probe, "wb") as fh:
                fh.write(b"ok")
            os.unlink(probe)
        except OSError as exc:
            raise StorageError(f"destination {self.url} is not writable: {exc.strerror}.") from exc

    def free_bytes(self) -> int | None:
        st = os.statvfs(self.root)
        return st.f_bavail * st.f_frsize
