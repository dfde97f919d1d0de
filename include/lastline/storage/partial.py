"""A file of a local backup folder written whole: under a `.partial` name of its own writer's, renamed on commit,
private to its owner (0600 files, 0700 folders); and what writers that died left behind, swept.

Two writers of one key (the binlog stream and retention, both writing a chain) never share a file: each writes
`<key>.<token>.partial`, created with O_EXCL (nothing planted there can be opened, followed or hard-linked), and the
last to commit wins, as an S3 PUT does. A writer holds an flock on its file while it lives (a mark, never waited for):
`sweep` removes what no live writer holds (a writer killed mid-stream), so a retry does not leave the dead one's
bytes beside its own. Where the filesystem has no locks (an NFS mount with `nolock`), a file unchanged for
STALE_AFTER seconds is taken as dead; a removed file of a writer still alive makes its commit fail (and the task
retry), never a mixed file.
"""
from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
import time

from lastline.core.errors import IntegrityError, StorageError
from lastline.storage.base import Writer

PARTIAL = ".partial"
FRESH = 5.0  # seconds: a file this young may be one a writer has just made and not yet locked: kept
STALE_AFTER = 3600.0  # seconds unchanged: dead, where the filesystem cannot lock
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def private_dirs(path: str) -> None:
    """Create the folders of `path` readable by their owner only (0700): backups can hold password hashes."""
    if not os.path.isdir(path):
        private_dirs(os.path.dirname(path))
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass


class FileWriter(Writer):
    """Writes `<key>.<token>.partial` (a name of its own; 0600, folders 0700), fsyncs (when `durable`) and renames it
    on commit."""

    def __init__(self, path: str, durable: bool = True) -> None:
        self.path, self.durable = path, durable
        self.tmp = f"{path}.{secrets.token_hex(8)}{PARTIAL}"
        private_dirs(os.path.dirname(path))
        fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the mark sweep() leaves alone
        except OSError:
            pass  # no locks here: sweep goes by age
        self.fh = os.fdopen(fd, "wb")

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
            os.replace(self.tmp, self.path)  # still locked: a sweep never takes it first
        except OSError as exc:
            self.abort()
            hint = " (the destination is full: free space or choose another destination)" if exc.errno == errno.ENOSPC else ""
            if exc.errno == errno.ENOENT:
                hint = " (it was removed while written: by hand, or by a sweep on a filesystem without locks)"
            raise StorageError(f"cannot finish {self.tmp}: {exc.strerror}{hint}.") from exc
        self.fh.close()

    def abort(self) -> None:
        if not self.fh.closed:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass
            try:
                self.fh.close()
            except OSError:  # closing flushes what is buffered: on a full destination that fails, and the file goes
                pass


def sweep(folder: str, now: float | None = None) -> list[str]:
    """Remove the `.partial` files in `folder` that writers which died left (no flock held; one named as a writer of
    today names it, older than FRESH; where the filesystem has no locks, unchanged for STALE_AFTER). A link, a FIFO or a folder under such a name is refused:
    lastline never makes one, someone put it there. Returns the names removed."""
    try:
        names = [n for n in os.listdir(folder) if n.endswith(PARTIAL)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    now = time.time() if now is None else now
    removed = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            raise IntegrityError(f"{path}: its .partial is {kind}, and lastline never writes through one; remove it "
                                 "(someone put it there) and re-run.")
        if _tokened(name) and now - st.st_mtime < FRESH:
            continue
        if _dead(path, now - st.st_mtime):
            try:
                os.unlink(path)
                removed.append(name)
            except FileNotFoundError:
                pass
    return removed


def _tokened(name: str) -> bool:
    """Whether `name` is one a FileWriter makes (`<key>.<16 hex>.partial`): an earlier lastline's `<key>.partial`, or
    anything else ending so, no writer of today makes, so it is never one about to be locked."""
    token = name[:-len(PARTIAL)].rpartition(".")[2]
    return len(token) == 16 and all(c in "0123456789abcdef" for c in token)


def _dead(path: str, age: float) -> bool:
    """Whether no live writer holds `path` (its flock free; without locks: unchanged for STALE_AFTER)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as exc:
        return exc.errno in _NO_LOCKS and age >= STALE_AFTER
    finally:
        os.close(fd)
