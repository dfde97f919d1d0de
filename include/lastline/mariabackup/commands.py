"""mariabackup's commands and the facts read from its output, for the physical backup and restore and the replica
rebuild alike.

The backup stream is ``mariabackup --backup --stream=xbstream --parallel=N | compressor``; the restore
stream is ``decompressor | mbstream -x --parallel=N -C datadir``; then ``mariabackup --prepare``.
"""
from __future__ import annotations

import re

from lastline.core import impact
from lastline.core.compression import codec
from lastline.core.errors import PreflightError, ReplicationError
from lastline.core.hosts import LOCAL, Host, Stage
from lastline.core.servers import base_version

ARTIFACT_BASE = "backup.xbstream"
# mariabackup's redo copier looks for new redo every 1000 ms by default, and under BACKUP STAGE BLOCK_DDL and
# BLOCK_COMMIT it waits for the copier to reach the current LSN: up to a second that every write (BLOCK_COMMIT)
# or every write to a MyISAM/Aria table (BLOCK_DDL) waits. Measured (tests/e2e/test_production_safety.py): the
# worst InnoDB insert 0.9 s at 1000 ms, 0.1 s at 20 ms.
LOG_COPY_INTERVAL_MS = 20


# what mariabackup --backup holds open besides the tablespaces it counts: redo, the stream, its connection, libraries
OPEN_FILES_MARGIN = 100
# a datadir's tablespaces: each table's or partition's .ibd; an .isl where DATA DIRECTORY put the .ibd elsewhere;
# the undo tablespaces and the system tablespace. -L: a symlinked datadir or database folder is followed
_COUNT_SPACES = ('echo "hard=$(ulimit -Hn)"; '
                 'echo "spaces=$(find -L "$1"/ -type f \\( -name "*.ibd" -o -name "*.isl" -o -name "undo[0-9]*" '
                 '-o -name "ibdata*" \\) | wc -l)"')


def check_open_files(host: Host, datadir: str, what: str) -> int:
    """mariabackup --backup opens every InnoDB tablespace of `datadir` and keeps it open until the copy ends, within
    the open-files limit it runs under (the soft one, unless --open-files-limit raises it: never past the hard one).
    Refuse, before anything streams, a datadir whose tablespaces need more descriptors than a process on `host` may
    open; return the --open-files-limit to run mariabackup with (the hard limit, or twice the need if unlimited).
    Measured: 20,000 tables under a limit of 20,000 failed half-way with "Too many open files"."""
    out = host.sh(_COUNT_SPACES, datadir)
    found = dict(re.findall(r"^(hard|spaces)=(\S+)$", out, re.M))
    if set(found) != {"hard", "spaces"} or not found["spaces"].isdigit() or not (
            found["hard"] == "unlimited" or found["hard"].isdigit()):
        raise PreflightError(f"{what}: cannot read the open-files limit and the tablespaces of {datadir} on {host.name} "
                             f"(the check printed {out.strip()[:300]!r}); check the shell there, then re-run.")
    spaces = int(found["spaces"])
    need = spaces + OPEN_FILES_MARGIN
    if found["hard"] == "unlimited":
        return max(2 * need, 65536)
    if need > int(found["hard"]):
        raise PreflightError(
            f"{what}: its datadir {datadir} holds {spaces:,} InnoDB tablespaces, and mariabackup keeps each one open "
            f"until the copy ends: it needs about {need:,} open files, but a process on {host.name} may open at most "
            f"{int(found['hard']):,} (`ulimit -Hn`). Raise the open-files limit to at least {need:,} for whatever runs "
            "mariabackup there (LimitNOFILE= in the worker's or sshd's systemd unit, or nofile, soft and hard, in "
            "/etc/security/limits.conf); for a backup, a logical one needs no such limit. Nothing was copied.")
    return int(found["hard"])


def artifact_name(compression: str) -> str:
    """The artifact's file name inside the backup folder."""
    return ARTIFACT_BASE + codec(compression).suffix


def backup_stages(optfile: str, datadir: str, parallel: int, compression: str, tmpdir: str = "/tmp",
                  host: Host | None = None, priority: str = "normal", max_read_mb_per_s: float = 0,
                  replica: bool = False, open_files: int = 0) -> list[Stage]:
    """The backup stream's stages, on the source's `host`: mariabackup, a read cap (pv, if asked), then the
    compressor (if any), each at `priority` (core.impact; mariabackup at its I/O priority only). From a `replica`: its primary's coordinates
    (--slave-info), and its SQL thread stopped while no temporary table is open (--safe-slave-backup), so the
    copy holds no half-replicated temporary state."""
    nice = impact.prefix(priority)
    argv = [
        "mariabackup", f"--defaults-extra-file={optfile}", "--backup", "--stream=xbstream",
        f"--parallel={parallel}", f"--datadir={datadir}", f"--target-dir={tmpdir}",
        f"--log-copy-interval={LOG_COPY_INTERVAL_MS}",
    ]
    if open_files:  # check_open_files: without it, mariabackup stays within the soft limit (often 1,024)
        argv.append(f"--open-files-limit={open_files}")
    if replica:
        argv += ["--slave-info", "--safe-slave-backup"]
    stages = [Stage("mariabackup", impact.prefix(priority, cpu=False) + argv, keep_stderr=True, host=host)]
    if max_read_mb_per_s:
        stages.append(Stage("throttle", nice + impact.pv_argv(max_read_mb_per_s), host=host))
    c = codec(compression)
    if c.compress:
        stages.append(Stage("compress", nice + c.compress_argv(parallel), host=host))
    return stages


def restore_stages(datadir: str, parallel: int, compression: str, host: Host | None = None,
                   run_as: list[str] | None = None) -> list[Stage]:
    """The restore stream's stages, on the target's `host`: decompressor (if any), then mbstream into
    the datadir, both as the datadir's owner (`run_as`: core.datadir.as_owner): they parse what storage holds."""
    c = codec(compression)
    run_as = run_as or []
    stages = [Stage("decompress", [*run_as, *c.decompress_argv(parallel)], host=host)] if c.decompress else []
    stages.append(Stage("mbstream", [*run_as, "mbstream", "-x", f"--parallel={parallel}", "-C", datadir], host=host))
    return stages


def prepare_argv(datadir: str, use_memory: int) -> list[str]:
    """mariabackup --prepare on an extracted datadir."""
    return ["mariabackup", "--prepare", f"--target-dir={datadir}", f"--use-memory={use_memory}"]


def default_use_memory(host: Host = LOCAL) -> int:
    """Memory for --prepare on `host` (where it runs): a quarter of what is available there, at least
    256 MiB, at most 8 GiB."""
    out = host.sh("awk '/^MemAvailable:/ {print $2}' /proc/meminfo", check=False).strip()
    avail = int(out) * 1024 if out.isdigit() else 1 << 30
    return int(min(max(avail // 4, 256 << 20), 8 << 30))


_BINLOG_RE = re.compile(
    r"MySQL binlog position: filename '(?P<file>[^']*)', position '(?P<pos>\d+)'"
    r"(?:, GTID of the last change '(?P<gtid>[^']*)')?"
)
_VERSION_RE = re.compile(r"Using server version (\S+)")


def parse_backup_log(stderr: str) -> dict:
    """Binlog file/position, GTID and server version from mariabackup's stderr."""
    out: dict = {"binlog_file": None, "binlog_position": None, "gtid": None, "server_version": None}
    if m := _BINLOG_RE.search(stderr):
        out.update(binlog_file=m["file"], binlog_position=int(m["pos"]), gtid=m["gtid"] or None)
    if m := _VERSION_RE.search(stderr):
        out["server_version"] = m[1]
    return out


_SLAVE_RE = re.compile(
    r"MySQL slave binlog position: (?:gtid_slave_pos '(?P<gtid>[^']*)'|master '[^']*' filename '(?P<file>[^']*)' "
    r"position '(?P<pos>\d+)')"
)


def primary_position(stderr: str) -> dict:
    """The primary's coordinates mariabackup --slave-info printed (a backup taken from a replica): a GTID position
    when the replica uses GTIDs, else the primary's binlog file and position."""
    m = _SLAVE_RE.search(stderr)
    if not m:
        raise ReplicationError("mariabackup --slave-info printed no primary position; the backup cannot say where "
                               "the primary was. Check that the source is a replica.")
    if m["gtid"] is not None:
        return {"gtid": m["gtid"] or None, "binlog_file": None, "binlog_position": None}
    return {"gtid": None, "binlog_file": m["file"], "binlog_position": int(m["pos"])}


def backup_completed(stderr: str) -> bool:
    """mariabackup prints `completed OK!` only when the backup is whole."""
    return "completed OK!" in stderr


def tool_version(host: Host = LOCAL) -> str:
    """The server version the mariabackup on `host` was built from (`mariabackup --version`)."""
    out = host.run(["mariabackup", "--version"])
    text = (out.stdout + out.stderr).decode()
    m = re.search(r"server (\S+)", text)
    if not m:
        raise PreflightError(f"cannot read mariabackup's version on {host.name} from: {text.strip()[:200]}")
    return m[1]


def check_versions(tool_version: str, server_version: str) -> None:
    """mariabackup must be of the server's major.minor series (it cannot read other InnoDB formats)."""
    tool, server = base_version(tool_version), base_version(server_version)
    if tool[:2] != server[:2]:
        raise PreflightError(
            f"mariabackup {'.'.join(map(str, tool))} cannot back up or prepare MariaDB "
            f"{'.'.join(map(str, server))}: install the mariadb-backup package of the server's "
            f"{server[0]}.{server[1]} series."
        )
