"""A backup folder on another host, reached over SSH: `ssh://<ssh_conn_id>/<absolute path>`.

Streams go through the SSH channel (the OpenSSH client of :class:`~lastline.runner.SshHost`): a
writer is one `cat` into `<key>.<token>.partial` on the remote host (a name of its own, made exclusively, in a folder
reached through no link: _WRITE), fsynced and renamed on commit; a reader is one
`cat` of a descriptor the remote shell opened and checked (_READ). Nothing is staged on this machine.

A backup folder is untrusted input: a symlink in it must not take a restore to another file of the
remote host. The remote shell opens the file on a descriptor and reads it only if that descriptor is a
regular file at exactly `<resolved root>/<key>` (`readlink /proc/$$/fd/3`): a link anywhere on the way
resolves elsewhere and is refused. Sizes are answered the same way, never following a link.
"""
from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator

from lastline import connections
from lastline.core.datadir import free_bytes
from lastline.core.errors import LastlineError, StorageError
from lastline.core.hosts import SshHost
from lastline.storage.base import Storage, Writer, checked_key, refusal

# Each script starts in the root (made if missing: the deployment chose it) and goes down the key's folders one at a
# time, never through a link (each folder looked at, then entered with `cd -P`, then the real path compared), so that
# what it creates, renames or removes is in the backup folder and named relative to where it stands.
_DOWN = r"""cd_down() {  # $1: the root, $2: the key's folders ('' for none), $3: make them; leaves $want = the real path
  if [ "$3" != make ] && [ ! -d "$1" ]; then return 2; fi
  { [ "$3" != make ] || mkdir -p -- "$1"; } && cd -P -- "$1" || return 1
  want=$(pwd -P); rest=$2
  while [ -n "$rest" ]; do
    c=${rest%%/*}; if [ "$c" = "$rest" ]; then rest=; else rest=${rest#*/}; fi
    if [ -L "$c" ]; then echo "a folder on its path is a symlink" >&2; return 65; fi
    if [ ! -d "$c" ]; then [ "$3" = make ] && { mkdir -- "$c" 2>/dev/null || [ -d "$c" ]; } || return 2; fi
    cd -P -- "$c" || return 1
    want="${want%/}/$c"
  done
  if [ "$(pwd -P)" != "$want" ]; then echo "a folder on its path is a symlink" >&2; return 65; fi
}
"""
# $1: the root, $2: the key's folders, $3: its name, $4: its name as a find(1) pattern matches it literally; this
# writer's token comes first on stdin (never in a command line a user of the host can read). The file is
# `<name>.<token>.partial`, a name of its own (two writers of one key never share one; the last rename wins), made
# only where nothing is (looked at, then created with noclobber) and refused unless the descriptor opened is a regular
# file there; a dead writer's leftovers of this key, an hour old, go first (no lock is seen across an SSH channel: by
# age). Prints nothing; exit 65 (REFUSED) names what it refused.
_WRITE = _DOWN + r"""umask 077
IFS= read -r tok || exit 1
case "$tok" in ""|*[!0-9a-f]*) exit 1;; esac
cd_down "$1" "$2" make || exit $?
find . -maxdepth 1 -type f \( -name "$4.partial" -o -name "$4.[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f].partial" \) -mmin +60 -delete 2>/dev/null
t="$3.$tok.partial"
if [ -e "$t" ] || [ -L "$t" ]; then echo "its .partial is there already: someone put it there" >&2; exit 65; fi
set -C
exec 3> "./$t" || exit 1
if [ "$(readlink "/proc/$$/fd/3")" != "${want%/}/$t" ] || [ ! -f "/proc/$$/fd/3" ]; then
  echo "what was opened is not a file of the backup folder" >&2; rm -f -- "./$t"; exit 65
fi
cat >&3 && sync -- "./$t"
"""
# $1: the root, $2: the key's folders, $3: its name, $4: the token
_COMMIT = _DOWN + 'cd_down "$1" "$2" || exit $?; exec mv -fT -- "./$3.$4.partial" "./$3"'
_ABORT = _DOWN + 'cd_down "$1" "$2" || exit 0; exec rm -f -- "./$3.$4.partial"'
# $1: the root, $2: rm's flags, then the keys: each removed from within its folder, reached through no link (a key
# that is itself a link is removed as a link, never followed)
_DELETE = _DOWN + r"""root=$1; f=$2; shift 2
for k in "$@"; do
  d=; b=$k
  case "$k" in */*) d=${k%/*}; b=${k##*/};; esac
  (cd_down "$root" "$d"; s=$?; [ $s -eq 2 ] && exit 0; [ $s -eq 0 ] || exit $s; exec rm $f -- "./$b") || exit $?
done
"""
REFUSED = 65  # the exit status of _READ for a file it will not read (stderr says why)
# $1: the destination root (resolved here: the deployment chose it), $2: the key (checked_key: no `.`, `..`, `//`).
# A FIFO or device is never opened (looked at first); what is opened decides (the descriptor's path and type).
_READ = """r=$(readlink -f -- "$1") || exit 1
p="$r/$2"
if [ -L "$p" ]; then echo "it is a symlink" >&2; exit 65; fi
if [ -e "$p" ] && [ ! -f "$p" ]; then echo "it is not a regular file" >&2; exit 65; fi
exec 3< "$p" || exit 1
if [ "$(readlink "/proc/$$/fd/3")" != "$p" ]; then echo "a folder on its path is a symlink" >&2; exit 65; fi
if [ ! -f "/proc/$$/fd/3" ]; then echo "it is not a regular file" >&2; exit 65; fi
exec cat <&3
"""
# one line: `size N`, `missing`, or `refused <why>`
_SIZE = """r=$(readlink -f -- "$1") || { echo missing; exit 0; }
p="$r/$2"
if [ -L "$p" ]; then echo "refused it is a symlink"; exit 0; fi
if [ ! -e "$p" ]; then echo missing; exit 0; fi
if [ "$(readlink -f -- "$p")" != "$p" ]; then echo "refused a folder on its path is a symlink"; exit 0; fi
if [ ! -f "$p" ]; then echo "refused it is not a regular file"; exit 0; fi
stat -c "size %s" -- "$p"
"""


def _stderr_tail(proc: subprocess.Popen) -> str:
    text = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    return "\n".join(text.strip().splitlines()[-5:]) or "(no message)"


def _hint(message: str) -> str:
    if "No space left" in message:
        return " (the destination is full: free space or choose another destination)"
    if "Connection" in message or "closed" in message:
        return " (the SSH connection was lost: check the network and retry)"
    return ""


def _parts(key: str) -> tuple[str, str]:
    """(the key's folders, '' for none; its name)."""
    folders, _, name = key.rpartition("/")
    return folders, name


def _literal(name: str) -> str:
    """`name` as a find(1) -name pattern that matches it alone."""
    return "".join(f"[{c}]" if c in "*?[]" else "\\\\" if c == "\\" else c for c in name)


class SshWriter(Writer):
    """Writes `<key>.<token>.partial` on the remote host through one ssh process (_WRITE); renames it on commit."""

    def __init__(self, host: SshHost, root: str, key: str, location: str) -> None:
        folders, name = _parts(key)
        self.host, self.location, self.token = host, location, secrets.token_hex(8)
        self.args = (root, folders, name)
        self.proc = host.popen_script(_WRITE, root, folders, name, _literal(name), stdin=subprocess.PIPE)
        self.write(self.token.encode() + b"\n")

    def _failed(self, what: str) -> LastlineError:
        try:
            code = self.proc.wait(timeout=5)  # a refusal's exit status, not the kill's
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        tail = _stderr_tail(self.proc)
        if code == REFUSED:
            return refusal(self.location, f"{tail}; lastline never writes through one")
        return StorageError(f"cannot {what} {self.location} on {self.host.name}: {tail}{_hint(tail)}.")

    def write(self, data: bytes | memoryview) -> None:
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
            err = self._failed("finish")
            self.abort()
            raise err
        done = self.host.popen_script(_COMMIT, *self.args, self.token)
        _, stderr = done.communicate()
        if done.returncode != 0:
            self.abort()
            raise StorageError(f"cannot finish {self.location} on {self.host.name}: "
                               f"{stderr.decode('utf-8', 'replace').strip()[-300:]}.")

    def abort(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.host.popen_script(_ABORT, *self.args, self.token).communicate()


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

    def writer(self, key: str, durable: bool = True) -> Writer:  # durable either way
        return SshWriter(self.host, self.root, checked_key(key, self.url), self.location(key))

    def reader(self, key: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        proc = self.host.popen_script(_READ, self.root, checked_key(key, self.url))
        try:
            assert proc.stdout is not None
            while data := proc.stdout.read(chunk):
                yield data
            code = proc.wait()
            if code == REFUSED:
                raise refusal(self.location(key), _stderr_tail(proc))
            if code != 0:
                tail = _stderr_tail(proc)
                raise StorageError(f"cannot read {self.location(key)}: {tail}{_hint(tail)}.")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def size_if_exists(self, key: str) -> int | None:
        answer = self.host.sh(_SIZE, self.root, checked_key(key, self.url)).strip()
        if answer == "missing":
            return None
        if answer.startswith("refused "):
            raise refusal(self.location(key), answer.removeprefix("refused "))
        if not answer.startswith("size "):
            raise StorageError(f"cannot look at {self.location(key)} on {self.host.name}: {answer or '(no answer)'}.")
        return int(answer.removeprefix("size "))

    def exists(self, key: str) -> bool:
        return self.size_if_exists(key) is not None

    def size(self, key: str) -> int:
        size = self.size_if_exists(key)
        if size is None:
            raise StorageError(f"{self.location(key)} does not exist.")
        return size

    def list_backups(self) -> list[str]:
        out = self.host.sh('[ -d "$1" ] || exit 0; find "$1" -mindepth 1 -maxdepth 1 -type d ! -name ".*" -printf "%f\\n"',
                           self.root)
        return sorted(out.split())

    def delete_backup(self, backup_id: str) -> None:
        self._delete("-rf", [checked_key(backup_id, self.url)])

    def delete_objects(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 500):  # `rm -f`: a missing one is no error, a folder is refused
            self._delete("-f", [checked_key(k, self.url) for k in keys[i:i + 500]])

    def _delete(self, flags: str, keys: list[str]) -> None:
        """`rm <flags>` of `keys` on the host (_DELETE): a key behind a link (a folder on its way) is refused, never
        deleted through; a key that is itself a link is removed as one."""
        out = self.host.run(["sh", "-c", _DELETE, "lastline", self.root, flags, *keys], check=False)
        if out.returncode == REFUSED:
            raise refusal(self.url, out.stderr.decode("utf-8", "replace").strip()[-300:] + "; nothing was deleted through it")
        if out.returncode != 0:
            raise StorageError(f"cannot delete under {self.url}: {out.stderr.decode('utf-8', 'replace').strip()[-300:]}.")

    def check_writable(self) -> None:
        probe = self._path(".lastline-write-probe")
        out = self.host.run(["sh", "-c", 'mkdir -p "$1" && echo ok > "$2" && rm -f "$2"', "x", self.root, probe], check=False)
        if out.returncode != 0:
            tail = out.stderr.decode("utf-8", "replace").strip()[-500:]
            raise StorageError(f"destination {self.url} is not writable: {tail}.")

    def free_bytes(self) -> int | None:
        return free_bytes(self.host, self.root)
