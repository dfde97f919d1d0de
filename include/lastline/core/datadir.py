"""A server's data directory, on whichever host it lives: state, in-progress marker, clearing, moving
aside, free space, size, ownership. Every operation is a small POSIX shell script run through a
:class:`~lastline.runner.Host`, so the same code serves a local datadir and one reached over SSH.

The in-progress marker `<datadir>/.lastline-restore-in-progress` (JSON) says "this datadir holds an
unfinished restore": nothing starts a server on it, and a retry clears it and starts again.
"""
from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime

from lastline.core.errors import PipelineError, PreflightError
from lastline.core.hosts import Host

log = logging.getLogger(__name__)

MARKER = ".lastline-restore-in-progress"

_STATE = r'''
d=$1; m=$2
[ -d "$d" ] || { echo missing; exit 0; }
[ -e "$d/$m" ] && { echo partial; exit 0; }
if [ -n "$(ls -A "$d" | grep -vx 'lost+found')" ]; then echo data; else echo empty; fi
'''
_CLEAR = r'''find "$1" -mindepth 1 -maxdepth 1 ! -name 'lost+found' -exec rm -rf {} +'''
_ASIDE = r'''
a=$2; n=1
until mkdir "$a" 2>/dev/null; do
  if [ ! -e "$a" ] && [ ! -L "$a" ]; then mkdir "$a" && break; exit 1; fi
  [ "$n" -lt 100 ] || { echo "$2 and $2-2 to $2-100 exist already: remove the ones no longer needed" >&2; exit 1; }
  n=$((n+1)); a="$2-$n"
done
find "$1" -mindepth 1 -maxdepth 1 ! -name 'lost+found' -exec mv -t "$a" {} + && printf '%s' "$a"
'''
_FREE = r'''
p=$1
while [ ! -e "$p" ] && [ "$p" != / ]; do p=$(dirname "$p"); done
df -P -B1 "$p" | awk 'NR==2 {print $4}'
'''


def state(host: Host, path: str) -> str:
    """'missing', 'empty', 'partial' (our marker: an unfinished restore) or 'data'."""
    return host.sh(_STATE, path, MARKER).strip()


def read_marker(host: Host, path: str) -> dict:
    """The marker's JSON ({} if there is none or it is unreadable)."""
    text = host.sh('cat "$1/$2" 2>/dev/null || true', path, MARKER)
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return {}


def write_marker(host: Host, path: str, data: dict) -> None:
    """Create the folder if needed and mark it as holding an unfinished restore."""
    host.sh('mkdir -p "$1" && cat > "$1/$2"', path, MARKER, input=json.dumps(data).encode())


def remove_marker(host: Host, path: str) -> None:
    """The restore is whole: the server may start on this datadir."""
    host.run(["rm", "-f", f"{path.rstrip('/')}/{MARKER}"])


def clear(host: Host, path: str) -> None:
    """Remove everything inside `path`, keeping the folder itself (its owner and mode)."""
    host.sh(_CLEAR, path)


def move_aside(host: Host, path: str) -> str:
    """Move the datadir's contents into a new sibling folder; return its path. A folder of the same second that
    a restore kept (its verify failed) is never reused: the name gains `-2`, `-3`, ... (`mkdir` picks, atomically)."""
    base = f"{path.rstrip('/')}.lastline-aside-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    aside = host.sh(_ASIDE, path, base)
    if aside != base and not re.fullmatch(re.escape(base) + r"-[0-9]{1,3}", aside):  # a login shell's chatter, say
        raise PipelineError(f"moving {path} aside on {host.name} printed {aside[:200]!r}, not the folder it made "
                            f"({base} or {base}-N): find the old datadir's contents there and check that host's shell.")
    log.info("moved the old datadir contents aside to %s on %s (deleted once the restore is verified)", aside, host.name)
    return aside


def remove(host: Host, path: str) -> None:
    """Delete a folder and everything in it."""
    host.run(["rm", "-rf", "--", path])


def free_bytes(host: Host, path: str) -> int:
    """Free bytes on the filesystem that holds `path` (or would: its nearest existing parent)."""
    out = host.sh(_FREE, path).strip()
    try:
        return int(out)
    except ValueError as exc:
        raise PreflightError(f"cannot read the free space of {path} on {host.name}: {out!r}") from exc


def used_bytes(host: Host, path: str) -> int:
    """Bytes used by the files under `path`."""
    out = host.sh('du -sb "$1" | cut -f1', path).strip()
    return int(out or 0)


def own_like_folder(host: Host, path: str) -> None:
    """Give every file the owner and group of the datadir folder itself (the server's user)."""
    host.run(["chown", "-R", "--reference", path, path])


_OWNER = r'''
[ -d "$1" ] || { echo missing; exit 0; }
printf '%s %s %s %s\n' "$(id -u)" "$(stat -L -c %u "$1")" "$(stat -L -c %g "$1")" "$(command -v setpriv || echo -)"
'''


def as_owner(host: Host, path: str) -> list[str]:
    """The argv prefix that runs a command on `host` as the owner of the folder `path` (the server's OS user): setpriv
    to its uid and gid, no other groups, no new privileges, when commands there run as root and the folder is another
    user's; nothing when they run as that user already, as another non-root user, or as root on a root-owned folder."""
    out = host.sh(_OWNER, path).strip()
    if out == "missing":
        return []
    found = re.fullmatch(r"([0-9]+) ([0-9]+) ([0-9]+) (\S+)", out)
    if not found:
        raise PreflightError(f"cannot read the owner of {path} on {host.name} (the check printed {out[:200]!r}): "
                             "check the shell there, then re-run.")
    me, uid, gid, setpriv = found.groups()
    if me != "0" or uid == "0":
        return []
    if setpriv == "-":
        raise PreflightError(
            f"{path} on {host.name} belongs to uid {uid}, and lastline extracts and prepares a backup as that user, "
            "never as root, with setpriv: install it there (util-linux), then re-run. Nothing was changed.")
    prefix = [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs", "--"]
    if host.run([*prefix, "sh", "-c", 'cd "$1" && [ -w . ]', "lastline", path], check=False).returncode != 0:
        raise PreflightError(
            f"{path} on {host.name} belongs to uid {uid}, and lastline extracts and prepares a backup as that user, "
            "never as root, but that user cannot enter or write it (a parent folder closed to it?): give it access "
            "as the server itself needs, then re-run. Nothing was changed.")
    return prefix


def size_text(n: float) -> str:
    """Bytes for people: `12.3 MB` below a GB, `1.23 GB` above."""
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def require_room(host: Host, path: str, need: int, what: str) -> None:
    """PreflightError unless `need` bytes fit on the filesystem of `path`."""
    free = free_bytes(host, path)
    if free < need:
        raise PreflightError(
            f"{path} on {host.name} has {size_text(free)} free; {what} needs about {size_text(need)}: "
            "free space on the target's datadir filesystem."
        )


def prepare_for_restore(host: Host, path: str, force: bool, backup_id: str) -> str | None:
    """Make `path` ready to receive a backup and mark it in progress; returns where old contents went.

    missing: created; empty: used; partial (an earlier attempt): cleared, keeping what it had set
    aside; data: moved aside with `force`, else refused.
    """
    current = state(host, path)
    aside = read_marker(host, path).get("aside") if current == "partial" else None
    if current == "partial":
        log.info("datadir %s holds an unfinished restore: clearing it and starting again", path)
        clear(host, path)
    elif current == "data":
        if not force:
            raise PreflightError(f"target datadir {path} is not empty and force is off.")
        aside = move_aside(host, path)
    write_marker(host, path, {"backup_id": backup_id, "aside": aside})
    return aside
