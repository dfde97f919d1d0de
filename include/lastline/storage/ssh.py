"""A backup folder on another host, reached over SSH: `ssh://<ssh_conn_id>/<absolute path>`.

Streams go through the SSH channel (the OpenSSH client of :class:`~lastline.runner.SshHost`): a
writer is one `cat > <key>.partial` on the remote host, fsynced and renamed on commit; a reader is one
`cat <key>`. Nothing is staged on this machine.
"""
from __future__ import annotations

import subprocess
from collections.abc import Iterator

from lastline import connections
from lastline.core.datadir import free_bytes
from lastline.core.errors import StorageError
from lastline.core.hosts import SshHost
from lastline.storage.base import Storage, Writer, checked_key

_WRITE = 'umask 077 && mkdir -p "$(dirname "$1")" && cat > "$1.partial" && sync "$1.partial"'


def _stderr_tail(proc: subprocess.Popen) -> str:
    text = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    return "\n".join(text.strip().splitlines()[-5:]) or "(no message)"


def _hint(message: str) -> str:
    if "No space left" in message:
        return " (the destination is full: free space or choose another destination)"
    if "Connection" in message or "closed" in message:
        return " (the SSH connection was lost: check the network and retry)"
    return ""


class SshWriter(Writer):
    """Writes `<path>.partial` on the remote host through one ssh process; renames it on commit."""

    def __init__(self, host: SshHost, path: str, location: str) -> None:
        self.host, self.path, self.location = host, path, location
        self.proc = host.popen_script(_WRITE, path, stdin=subprocess.PIPE)

    def _failed(self, what: str) -> StorageError:
        self.proc.kill()
        self.proc.wait()
        tail = _stderr_tail(self.proc)
        return StorageError(f"cannot {what} {self.location} on {self.host.name}: {tail}{_hint(tail)}.")

    def write(self, data: bytes) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
        except (BrokenPipeError, OSError) as exc:
            raise self._failed("write") from exc

    def commit(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except (BrokenPipeError, OSError) as exc:
            raise self._failed("finish") from exc
        if self.proc.wait() != 0:
            tail = _stderr_tail(self.proc)
            self.abort()
            raise StorageError(f"cannot finish {self.location} on {self.host.name}: {tail}{_hint(tail)}.")
        self.host.run(["mv", "-f", self.path + ".partial", self.path])

    def abort(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.host.run(["rm", "-f", self.path + ".partial"], check=False)


class SshStorage(Storage):
    """Backups under a folder of an SSH host (an Airflow SSH connection)."""

    def __init__(self, conn_id: str, root: str) -> None:
        if not root.startswith("/"):
            raise StorageError(f"ssh://{conn_id}/{root}: the path must be absolute (ssh://<ssh_conn_id>/<path>).")
        self.host = connections.ssh_host(conn_id)
        self.root = root.rstrip("/") or "/"
        self.url = f"ssh://{conn_id}{self.root}"

    def _path(self, key: str) -> str:
        return f"{self.root}/{checked_key(key, self.url)}"

    def writer(self, key: str) -> Writer:
        return SshWriter(self.host, self._path(key), self.location(key))

    def reader(self, key: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        proc = self.host.popen_script('exec cat "$1"', self._path(key))
        try:
            assert proc.stdout is not None
            while data := proc.stdout.read(chunk):
                yield data
            if proc.wait() != 0:
                tail = _stderr_tail(proc)
                raise StorageError(f"cannot read {self.location(key)}: {tail}{_hint(tail)}.")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def exists(self, key: str) -> bool:
        return self.host.run(["test", "-e", self._path(key)], check=False).returncode == 0

    def size(self, key: str) -> int:
        return int(self.host.run(["stat", "-c", "%s", self._path(key)]).stdout)

    def list_backups(self) -> list[str]:
        out = self.host.sh('[ -d "$1" ] || exit 0; find "$1" -mindepth 1 -maxdepth 1 -type d ! -name ".*" -printf "%f\\n"',
                           self.root)
        return sorted(out.split())

    def delete_backup(self, backup_id: str) -> None:
        self.host.run(["rm", "-rf", "--", self._path(backup_id)])

    def check_writable(self) -> None:
        probe = self._path(".lastline-write-probe")
        out = self.host.run(["sh", "-c", 'mkdir -p "$1" && echo ok > "$2" && rm -f "$2"', "x", self.root, probe], check=False)
        if out.returncode != 0:
            tail = out.stderr.decode("utf-8", "replace").strip()[-500:]
            raise StorageError(f"destination {self.url} is not writable: {tail}.")

    def free_bytes(self) -> int | None:
        return free_bytes(self.host, self.root)
