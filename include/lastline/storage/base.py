"""The storage interface: write a stream, read a stream, list, delete. Storage knows nothing of MariaDB."""
from __future__ import annotations

import abc
from collections.abc import Iterator

from lastline.core.errors import IntegrityError, StorageError


class Unreadable(IntegrityError):
    """A control file too big, too deep or not JSON (storage.control): never used, named in the message."""

    def __init__(self, location: str, reason: str) -> None:
        super().__init__(f"{location} is unreadable ({reason}): it is not used; look at it or remove it.")
        self.location, self.reason = location, reason


class Writer(abc.ABC):
    """A stream being written; it becomes visible only on commit(), and abort() leaves nothing."""

    @abc.abstractmethod
    def write(self, data: bytes | memoryview) -> None:
        """Append bytes (used before it returns: a sealing writer reuses its buffer)."""

    @abc.abstractmethod
    def commit(self) -> None:
        """Make the object visible under its key."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Drop what was written."""

    def fileno(self) -> int | None:
        """The descriptor of the file being written, where the stream is one (a local folder): another process may then
        write into it directly (the logical dump's worker does); None elsewhere."""
        return None

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def checked_key(key: str, where: str) -> str:
    """A storage key as lastline writes them: relative, no empty, `.` or `..` segment (keys are built from
    names a manifest gives, and a backup folder is untrusted input)."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\x00" in key:
        raise IntegrityError(f"refusing storage key {key!r}: keys are relative paths inside {where}.")
    return key


def refusal(location: str, what: str) -> IntegrityError:
    """The refusal of a backup file that is not a regular file reached through plain folders (file and ssh
    storage read none other: a link in a backup folder must not lead a restore to another file)."""
    return IntegrityError(
        f"{location}: {what}; backups are read without following links and only from regular files, so "
        "nothing was loaded from it. Someone changed the backup folder: restore another backup."
    )


class Storage(abc.ABC):
    """A place that holds backups as `<backup_id>/<name>` objects."""

    url: str
    local_files = False  # whether its writers write local files (Writer.fileno gives their descriptor)

    @abc.abstractmethod
    def writer(self, key: str, durable: bool = True) -> Writer:
        """A writer for `key`; use as a context manager. `durable=False`: its commit need not reach the disk yet
        (sync() does, for every such object at once, before the manifest that makes them a backup is written)."""

    def open_file(self, key: str) -> int:
        """A descriptor on the regular file `key`, reached without following a link (where local_files)."""
        raise NotImplementedError(f"{self.url} holds no local files")

    def sync(self) -> None:  # noqa: B027 - a no-op where every commit is durable (S3, SSH)
        """Make every object committed so far durable (where commits are not already: see writer)."""

    @abc.abstractmethod
    def reader(self, key: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        """The bytes of `key`, in chunks."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool:
        """Whether `key` exists."""

    @abc.abstractmethod
    def size(self, key: str) -> int:
        """The size of `key` in bytes."""

    def size_if_exists(self, key: str) -> int | None:
        """The size of `key`, or None if it does not exist (backends answer both in one request where they can)."""
        return self.size(key) if self.exists(key) else None

    @abc.abstractmethod
    def list_backups(self) -> list[str]:
        """The backup ids (first-level folders), sorted."""

    @abc.abstractmethod
    def delete_backup(self, backup_id: str) -> None:
        """Remove a backup folder and everything in it."""

    def delete_objects(self, keys: list[str]) -> None:
        """Remove single objects (one missing is no error: a delete tried again after a crash); a folder is never
        removed by it (delete_backup does that)."""
        raise NotImplementedError(f"{self.url} deletes no single object")

    @abc.abstractmethod
    def check_writable(self) -> None:
        """Raise StorageError unless a small object can be written and removed."""

    def free_bytes(self) -> int | None:
        """Free space, where the backend knows it (None: unknown or unlimited)."""
        return None

    def require_free(self, need: int, what: str) -> None:
        """Raise StorageError unless about `need` bytes fit (backends that cannot tell always pass)."""
        free = self.free_bytes()
        if free is not None and free < need:
            raise StorageError(
                f"destination {self.url} has {free / 1e9:.2f} GB free; {what} may need {need / 1e9:.2f} GB: "
                "free space or choose another destination."
            )

    def read_bytes(self, key: str, limit: int | None = None) -> bytes:
        """The whole (small) object; with `limit`, refused (Unreadable) beyond `limit` bytes, of which at most
        limit + 1 are ever read (a bigger object is refused by its size where the backend tells it first)."""
        if limit is None:
            return b"".join(self.reader(key))
        size = self.size_if_exists(key)
        if size is not None and size > limit:
            raise Unreadable(self.location(key), f"{size:,} bytes, over the {limit:,} bytes a control file may have "
                                                 "(LASTLINE_CONTROL_FILE_MAX_MB); not read")
        got, total = [], 0
        chunks = self.reader(key, min(limit + 1, 1 << 20))
        try:
            for chunk in chunks:
                got.append(chunk)
                total += len(chunk)
                if total > limit:
                    raise Unreadable(self.location(key), f"over the {limit:,} bytes a control file may have "
                                                         "(LASTLINE_CONTROL_FILE_MAX_MB); read no further")
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()  # the backend's reader stops (and closes its stream) at once
        return b"".join(got)

    def write_bytes(self, key: str, data: bytes) -> None:
        """Write a whole (small) object atomically."""
        with self.writer(key) as w:
            w.write(data)

    def location(self, key: str) -> str:
        """The URL of `key`, for messages."""
        return f"{self.url.rstrip('/')}/{key}"
