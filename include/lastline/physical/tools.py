"""mariabackup command builders and the facts read from its output.

The backup stream is ``mariabackup --backup --stream=xbstream --parallel=N | compressor``; the restore
stream is ``decompressor | mbstream -x --parallel=N -C datadir``; then ``mariabackup --prepare``.
"""
from __future__ import annotations

import re

from lastline.core import impact
from lastline.core.compression import CODECS, DEFAULT_COMPRESSION, Codec, codec  # noqa: F401 - re-exported
from lastline.core.errors import PreflightError
from lastline.core.hosts import LOCAL, Host, Stage
from lastline.core.servers import base_version

ARTIFACT_BASE = "backup.xbstream"
# mariabackup's redo copier looks for new redo every 1000 ms by default, and under BACKUP STAGE BLOCK_DDL and
# BLOCK_COMMIT it waits for the copier to reach the current LSN: up to a second that every write (BLOCK_COMMIT)
# or every write to a MyISAM/Aria table (BLOCK_DDL) waits. Measured (tests/test_production_safety.py): the
# worst InnoDB insert 0.9 s at 1000 ms, 0.1 s at 20 ms.
LOG_COPY_INTERVAL_MS = 20


# what mariabackup --backup holds open besides the tablespaces: system and undo tablespaces, redo, the stream, its
# connection, libraries
OPEN_FILES_MARGIN = 100


def check_open_files(host: Host, datadir: str, what: str) -> int:
    """mariabackup --backup opens every InnoDB tablespace (.ibd file) of `datadir` and keeps it open until the copy
    ends (it raises its own limit to the hard one, never past it): refuse, before anything streams, a datadir whose
    tablespaces need more descriptors than a process on `host` may open. Returns the number of tablespaces.
    (Measured: 20,000 tables against a hard limit of 20,000 failed half-way with "Too many open files".)"""
    out = host.sh('ulimit -Hn; find "$1" -name "*.ibd" -type f | wc -l', datadir).split()
    hard, spaces = out[0], int(out[1])
    need = spaces + OPEN_FILES_MARGIN
    if hard != "unlimited" and need > int(hard):
        raise PreflightError(
            f"{what}: its datadir {datadir} holds {spaces:,} InnoDB tablespaces (.ibd files), and mariabackup keeps "
            f"each one open until the copy ends: it needs about {need:,} open files, but a process on {host.name} may "
            f"open at most {int(hard):,} (`ulimit -Hn`). Raise that hard limit to at least {need:,} for whatever runs "
            "the backup there (LimitNOFILE= in the worker's or sshd's systemd unit, or nofile in "
            "/etc/security/limits.conf), or take a logical backup of this server. Nothing was copied.")
    return spaces


def artifact_name(compression: str) -> str:
    """The artifact's file name inside the backup folder."""
    return ARTIFACT_BASE + codec(compression).suffix


def backup_stages(optfile: str, datadir: str, parallel: int, compression: str, tmpdir: str = "/tmp",
                  host: Host | None = None, priority: str = "normal", max_read_mb_per_s: float = 0,
                  replica: bool = False) -> list[Stage]:
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
    if replica:
        argv += ["--slave-info", "--safe-slave-backup"]
    stages = [Stage("mariabackup", impact.prefix(priority, cpu=False) + argv, keep_stderr=True, host=host)]
    if max_read_mb_per_s:
        stages.append(Stage("throttle", nice + impact.pv_argv(max_read_mb_per_s), host=host))
    c = codec(compression)
    if c.compress:
        stages.append(Stage("compress", nice + c.compress_argv(parallel), host=host))
    return stages


def restore_stages(datadir: str, parallel: int, compression: str, host: Host | None = None) -> list[Stage]:
    """The restore stream's stages, on the target's `host`: decompressor (if any), then mbstream into
    the datadir."""
    c = codec(compression)
    stages = [Stage("decompress", c.decompress_argv(parallel), host=host)] if c.decompress else []
    stages.append(Stage("mbstream", ["mbstream", "-x", f"--parallel={parallel}", "-C", datadir], host=host))
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
