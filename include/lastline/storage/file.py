"""A backup folder on a local (or mounted) filesystem.

Everything read from a backup folder is untrusted input, and a symlink in it would take a restore to any
file the worker can read (its environment, a key). So every read is made by descriptor: each folder on the
way is opened relative to the one before it with O_NOFOLLOW, the file last, and only a regular file is read
(`refusal` says why not). Only the destination root, which the deployment chose, is resolved (once).
"""
from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import stat
import threading
from collections.abc import Iterator

from lastline.core.errors import IntegrityError, StorageError
from lastline.storage.base import Storage, Writer, checked_key, refusal
from lastline.storage.partial import FileWriter, private_dirs, refuse_planted, sweep

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in after the check must not hang the open (it is refused by fstat then)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _kind(mode: int) -> str:
    return ("a symlink" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "a file" if stat.S_ISREG(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")


# local filesystems whose syncfs(2) flushes what fsync(2) of each file would (FUSE and network mounts may not)
SYNCFS_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "tmpfs"})


def filesystem_type(path: str) -> str | None:
    """The type of the filesystem holding `path` (resolved): its mount in /proc/self/mountinfo with the longest mount
    point above it; None where that cannot be read."""
    best, kind = "", None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) < 5 or not right:
                    continue
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, right.split()[0]
    except OSError:
        return None
    return kind


def syncfs_reports_errors() -> bool:
    """Whether this kernel's syncfs(2) reports the write-back errors of files written since the descriptor it is given
    was opened (Linux 5.8+), and the C library has it."""
    numbers = [int(x) for x in re.findall(r"\d+", os.uname().release)[:2]]
    return len(numbers) == 2 and tuple(numbers) >= (5, 8) and hasattr(ctypes.CDLL(None), "syncfs")


class FileStorage(Storage):
    """Backups under a local directory."""

    local_files = True

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/") or "/"
        self.url = f"file://{self.root}"
        self.real_root = os.path.realpath(self.root)  # the deployment's choice: the one path ever resolved
        self._lock = threading.Lock()
        self._swept: set[str] = set()  # folders swept of dead writers' .partial files (storage.partial.sweep)
        self._nfs: bool | None = None
        self._sync_fd: int | None = None  # open since the first deferred writer: syncfs reports errors from then on
        self._deferrable: bool | None = None

    def _path(self, key: str) -> str:
        """Where `key` is written (or removed): under the root resolved once, the filesystem sync() flushes."""
        return os.path.join(self.real_root, checked_key(key, self.url))

    def _folder(self, key: str) -> tuple[int, str] | None:
        """(descriptor of the folder holding `key`, the file's name) with no symlink followed on the way;
        None if a folder on the way does not exist. The caller closes the descriptor."""
        parts = checked_key(key, self.url).split("/")
        try:
            fd = os.open(self.real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        for i, part in enumerate(parts[:-1]):
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                mode = None
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    try:
                        mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                    except OSError:
                        pass
                os.close(fd)
                if exc.errno == errno.ENOENT:
                    return None
                if mode is not None:
                    raise refusal(self.location(key), f"its folder {'/'.join(parts[:i + 1])} is {_kind(mode)}") from exc
                raise StorageError(f"cannot open {self.location(key)}: {exc.strerror}.") from exc
            os.close(fd)
            fd = nxt
        return fd, parts[-1]

    def _stat(self, key: str) -> os.stat_result | None:
        """lstat of `key` (never following a link, nor one on its path); None if it does not exist; refused
        unless it is a regular file."""
        found = self._folder(key)
        if found is None:
            return None
        fd, name = found
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refusal(self.location(key), f"it is {_kind(st.st_mode)}")
        return st

    def open_file(self, key: str) -> int:
        """A descriptor on the regular file `key`, opened by descriptor from the root with no symlink followed
        (IntegrityError if anything on the way is not a plain folder or file; StorageError if it is missing)."""
        found = self._folder(key)
        if found is None:
            raise StorageError(f"{self.location(key)} does not exist.")
        dir_fd, name = found
        try:
            try:  # looked at first, so that a FIFO or a device is never even opened
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError as exc:
                raise StorageError(f"{self.location(key)} does not exist.") from exc
            if not stat.S_ISREG(st.st_mode):
                raise refusal(self.location(key), f"it is {_kind(st.st_mode)}")
            try:
                fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # swapped for a link since the look
                    raise refusal(self.location(key), "it is a symlink") from exc
                raise StorageError(f"cannot open {self.location(key)}: {exc.strerror}.") from exc
        finally:
            os.close(dir_fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # what was opened decides, not what was looked at
            os.close(fd)
            raise refusal(self.location(key), f"it is {_kind(st.st_mode)}")
        os.set_blocking(fd, True)
        return fd

    def _defer(self) -> bool:
        """Whether a writer may leave its fsync to sync(): only on a local filesystem whose syncfs reports every error
        since the descriptor sync() will use was opened (opened here, before the first such file is written)."""
        with self._lock:
            if self._deferrable is None:
                self._deferrable = syncfs_reports_errors() and filesystem_type(self.real_root) in SYNCFS_FILESYSTEMS
            if self._deferrable and self._sync_fd is None:
                private_dirs(self.real_root)  # as a writer makes its folders (0700)
                self._sync_fd = os.open(self.real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            return self._deferrable

    def writer(self, key: str, durable: bool = True) -> Writer:
        durable = durable or not self._defer()
        try:
            fd, name = self._made_folder(key)
        except OSError as exc:
            raise StorageError(f"cannot write to {self.location(key)}: {exc.strerror}.") from exc
        try:
            folder = key.rpartition("/")[0]  # checked by _made_folder
            with self._lock:
                first = folder not in self._swept
                self._swept.add(folder)
            if first:  # once a folder: what a writer that died (a killed task) left, gone before its retry writes
                sweep(fd, self.location(folder or "."), by_age=self._locks_may_not_tell())
            refuse_planted(fd, name, self.location(key))
        except BaseException:
            os.close(fd)
            raise
        try:
            return FileWriter(fd, name, self._path(key), durable)
        except OSError as exc:
            raise StorageError(f"cannot write to {self.location(key)}: {exc.strerror}.") from exc

    def _made_folder(self, key: str) -> tuple[int, str]:
        """(descriptor of the folder holding `key`, each folder on the way made where missing (0700) and opened
        without following a link, the file's name): a link planted in the backup folder never takes a write elsewhere.
        The caller closes the descriptor."""
        parts = checked_key(key, self.url).split("/")
        private_dirs(self.real_root)  # the deployment's choice, resolved once
        fd = os.open(self.real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for i, part in enumerate(parts[:-1]):
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                    raise IntegrityError(f"cannot write to {self.location(key)}: its folder {'/'.join(parts[:i + 1])} "
                                         f"is {_kind(mode)}, and lastline never writes through one; remove it "
                                         "(someone put it there) and re-run.") from exc
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd, parts[-1]

    def _locks_may_not_tell(self) -> bool:
        """Whether an flock here may be local to a host (NFS): the sweep goes by age there."""
        if self._nfs is None:
            self._nfs = (filesystem_type(self.real_root) or "").startswith("nfs")
        return self._nfs

    def sync(self) -> None:
        """The files written without their own fsync (writer's durable=False), all at once: syncfs(2) of the root's
        filesystem on the descriptor opened before the first of them, so that a write-back error on any of them is
        reported here even if another process saw it first (an fsync each cost a tenth of a dump of 10,000 tables).
        Nothing to do when every file was fsynced (a physical backup, or a filesystem not in SYNCFS_FILESYSTEMS)."""
        with self._lock:
            fd, self._sync_fd = self._sync_fd, None
        if fd is None:
            return
        try:
            if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
                err = ctypes.get_errno()
                raise StorageError(f"cannot make the files written under {self.url} durable: {os.strerror(err)}; the backup "
                                   "is left without its manifest (incomplete): check the destination's disk, then re-run.")
        finally:
            os.close(fd)

    def __del__(self) -> None:
        if getattr(self, "_sync_fd", None) is not None:
            os.close(self._sync_fd)  # type: ignore[arg-type]

    def reader(self, key: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        with os.fdopen(self.open_file(key), "rb", buffering=0) as fh:
            while data := fh.read(chunk):
                yield data

    def exists(self, key: str) -> bool:
        return self._stat(key) is not None

    def size(self, key: str) -> int:
        st = self._stat(key)
        if st is None:
            raise StorageError(f"{self.location(key)} does not exist.")
        return st.st_size

    def size_if_exists(self, key: str) -> int | None:
        st = self._stat(key)
        return None if st is None else st.st_size

    def list_backups(self) -> list[str]:
        if not os.path.isdir(self.root):
            return []
        # a linked folder is no backup of this destination (and reading it would be refused)
        return sorted(e.name for e in os.scandir(self.root) if e.is_dir(follow_symlinks=False) and not e.name.startswith("."))

    def delete_backup(self, backup_id: str) -> None:
        found = self._folder(backup_id)  # no link followed on the way, nor at its end (rmtree refuses one)
        if found is None:
            return
        fd, name = found
        try:
            shutil.rmtree(name, dir_fd=fd, ignore_errors=True)
        finally:
            os.close(fd)

    def delete_objects(self, keys: list[str]) -> None:
        for key in keys:
            found = self._folder(key)  # no link followed on the way: a link in a folder is never deleted through
            if found is None:
                continue
            fd, name = found
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageError(f"cannot delete {self.location(key)}: {exc.strerror}.") from exc
            finally:
                os.close(fd)

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
