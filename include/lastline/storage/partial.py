"""A file of a local backup folder written whole: under a `.partial` name of its own writer's, renamed on commit,
private to its owner (0600 files, 0700 folders); and what writers that died left behind, swept.

Everything is done by descriptor from a folder opened without following a link on the way (FileStorage opens it):
a link planted in a backup folder never takes a write, a rename or a deletion elsewhere. Two writers of one key (the
binlog stream and retention, both writing a chain) never share a file: each writes `<key>.<token>.partial`, created
with O_EXCL (nothing planted there is opened or followed), and the last to commit wins, as an S3 PUT does. A writer
holds an flock on its file while it lives (a mark, never waited for): `sweep` removes what no live writer holds (a
writer killed mid-stream), so a retry does not leave the dead one's bytes beside its own. On a filesystem without
locks or where they may be local to a host (NFS), a file unchanged for STALE_AFTER seconds is taken as dead; a removed
file of a writer still alive makes its commit fail (and the task retry), never a mixed file.
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import secrets
import stat
import time

from lastline.core.errors import IntegrityError, StorageError
from lastline.storage.base import Writer

log = logging.getLogger(__name__)

PARTIAL = ".partial"
FRESH = 5.0  # seconds: a file this young may be one a writer has just made and not yet locked: kept
STALE_AFTER = 3600.0  # seconds unchanged: dead, where locks cannot tell (none, or NFS)
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
    """Writes `<name>.<token>.partial` (a name of its own; 0600) in the folder `folder_fd` (owned: closed at the end),
    fsyncs (when `durable`) and renames it to `name` on commit. `shown`: the file's path, for messages."""

    def __init__(self, folder_fd: int, name: str, shown: str, durable: bool = True) -> None:
        self.folder, self.name, self.path, self.durable = folder_fd, name, shown, durable
        self.tmp_name = f"{name}.{secrets.token_hex(8)}{PARTIAL}"
        self.tmp = f"{shown}.{self.tmp_name[len(name) + 1:]}"
        try:
            fd = os.open(self.tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=folder_fd)
        except BaseException:
            os.close(folder_fd)
            raise
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the mark sweep() leaves alone
            except OSError as exc:
                if exc.errno not in _NO_LOCKS:
                    raise
            self.fh = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            _unlink(self.tmp_name, folder_fd)
            os.close(folder_fd)
            raise

    def fileno(self) -> int:
        return self.fh.fileno()

    def write(self, data: bytes | memoryview) -> None:
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
            # still locked: a sweep never takes it first
            os.replace(self.tmp_name, self.name, src_dir_fd=self.folder, dst_dir_fd=self.folder)
        except OSError as exc:
            self.abort()
            hint = " (the destination is full: free space or choose another destination)" if exc.errno == errno.ENOSPC else ""
            if exc.errno == errno.ENOENT:
                hint = " (it was removed while written: by hand, or by a sweep on a filesystem without locks)"
            raise StorageError(f"cannot finish {self.tmp}: {exc.strerror}{hint}.") from exc
        self.fh.close()
        os.close(self.folder)

    def abort(self) -> None:
        if not self.fh.closed:
            _unlink(self.tmp_name, self.folder)
            try:
                self.fh.close()
            except OSError:  # closing flushes what is buffered: on a full destination that fails, and the file goes
                pass
            os.close(self.folder)


def _unlink(name: str, folder_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=folder_fd)
    except FileNotFoundError:
        pass


def sweep(folder_fd: int, shown: str, by_age: bool = False, now: float | None = None) -> list[str]:
    """Remove the `.partial` files in the folder `folder_fd` (not closed here; `shown`: its path, for messages) that
    writers which died left: no flock held (one named as a writer of today names it, older than FRESH), or with
    `by_age` (locks that cannot tell: NFS) unchanged for STALE_AFTER. Best effort: what cannot be looked at or removed
    is left, logged. Returns the names removed."""
    try:
        names = [n for n in os.listdir(folder_fd) if n.endswith(PARTIAL)]
    except OSError as exc:
        log.warning("storage: cannot list %s for what dead writers left (%s): left as it is", shown, exc.strerror)
        return []
    now = time.time() if now is None else now
    removed = []
    for name in names:
        try:
            st = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                log.warning("storage: %s/%s is not a file lastline made (a link or a special file): left alone", shown,
                            name)
                continue
            age = now - st.st_mtime
            if (_tokened(name) and age < FRESH) or (by_age and age < STALE_AFTER):
                continue
            if _removed_if_dead(folder_fd, name, st, age):
                removed.append(name)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("storage: cannot remove %s/%s, left by a writer that died (%s): left as it is", shown, name,
                        exc.strerror)
    return removed


def refuse_planted(folder_fd: int, name: str, shown: str) -> None:
    """Refuse to write `name` where an earlier lastline's `<name>.partial` is a link or not a file: someone put it
    there (it would never be written through; the refusal says so)."""
    try:
        st = os.stat(name + PARTIAL, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise IntegrityError(f"cannot write to {shown}: its .partial is {kind}, and lastline never writes through one; "
                             "remove it (someone put it there) and re-run.")


def _tokened(name: str) -> bool:
    """Whether `name` is one a FileWriter makes (`<key>.<16 hex>.partial`): an earlier lastline's `<key>.partial`, or
    anything else ending so, no writer of today makes, so it is never one about to be locked."""
    token = name[:-len(PARTIAL)].rpartition(".")[2]
    return len(token) == 16 and all(c in "0123456789abcdef" for c in token)


def _removed_if_dead(folder_fd: int, name: str, seen: os.stat_result, age: float) -> bool:
    """Remove `name` if no live writer holds it (its flock free; where there are no locks: unchanged for STALE_AFTER),
    holding its lock until it is gone, and only if the name is still the file looked at."""
    try:  # for writing: an exclusive flock over NFS needs it (never truncated, never created)
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno not in _NO_LOCKS or age < STALE_AFTER:
                return False
        held = os.fstat(fd)
        if (held.st_dev, held.st_ino) != (seen.st_dev, seen.st_ino):
            return False
        os.unlink(name, dir_fd=folder_fd)
        return True
    finally:
        os.close(fd)
