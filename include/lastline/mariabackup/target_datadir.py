"""A restore target's datadir, shared by physical restore and replica rebuild: checked before anything is
touched, prepared with mariabackup on the target's host, the server started on it; each step's result."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from lastline.core import datadir as datadirs
from lastline.core.datadir import MARKER
from lastline.core.errors import IntegrityError, PreflightError
from lastline.core.hosts import Host
from lastline.core.pipeline import run_logged
from lastline.core.plans import Result
from lastline.core.servers import Server
from lastline.mariabackup import commands, prepare_options

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepResult(Result):
    """One step on a target's datadir (a physical restore's or a rebuild's): how long it took (and what it moved, and
    where the old datadir went)."""

    seconds: float
    bytes: int = 0
    mb_per_s: float = 0.0
    aside: str | None = None  # extract: the old datadir's contents, kept until verify


def check_datadir(server: Server, need: int, force: bool) -> str:
    """Refuse a non-empty datadir without `force` where no person is asked to approve its replacement (where one is,
    the approval step that follows preflight waits), and too little room; return the datadir's state."""
    datadir, host = server.require_datadir(), server.runner()
    state = datadirs.state(host, datadir)
    if state == "data" and not force and not server.asks_approval():
        raise PreflightError(
            f"target datadir {datadir} on {host.name} is not empty, and {server.unforced()} (its contents are moved "
            f"aside to {datadir}.lastline-aside-<time>[-N], deleted only after a verified restore); or empty it yourself."
        )
    datadirs.require_room(host, datadir, need, "the unpacked backup")
    datadirs.as_owner(host, datadir)  # refuses a host where extract and prepare could not drop root
    return state


def options_of(server: Server) -> dict[str, str]:
    """The options prepare needs for a backup of `server`, from its global variables (prepare_options.ALLOWED)."""
    return prepare_options.from_variables(server.variables(*prepare_options.ALLOWED))


def prepare_datadir(server: Server, datadir: str, use_memory: int, options: dict[str, str] | None,
                    where: str) -> float:
    """mariabackup --prepare on the server's host, as the datadir's owner, reading the backup-my.cnf lastline writes
    from `options` (a manifest's recorded prepare options; None for a backup that records none: the extracted file,
    through the allow-list); then the datadir's owner on every file; clears the in-progress marker. Returns seconds."""
    host = server.runner()
    if datadirs.state(host, datadir) != "partial":
        raise PreflightError(f"{datadir} holds no extracted backup ({MARKER} missing): run the extract step first.")
    t0 = time.monotonic()
    run_as = datadirs.as_owner(host, datadir)
    refuse_server_state(host, datadir, run_as, where)
    if options is None:
        options = prepare_options.parse(_backup_cnf(host, datadir, run_as, where), where)
        log.info("%s records no prepare options: read the backup's %s through the allow-list", where,
                 prepare_options.CNF)
    write_prepare_cnf(host, datadir, prepare_options.checked(options, where), run_as)
    if links := remove_links(host, datadir, run_as):
        log.info("%s: removed %d .isl file(s) (links to tablespaces outside the datadir), their tables restore into "
                 "the datadir: %s", where, len(links), ", ".join(links[:10]))
    run_logged([*run_as, *commands.prepare_argv(datadir, use_memory)], "prepare", host=host)
    datadirs.own_like_folder(host, datadir)
    datadirs.remove_marker(host, datadir)
    return time.monotonic() - t0


_READ_CNF = 'f="$1/$2"; { [ -f "$f" ] && [ ! -L "$f" ]; } || exit 3; head -c "$3" "$f"'
_WRITE_CNF = 'f="$1/$2"; rm -rf -- "$f" && set -C && cat > "$f" && chmod 0644 "$f"'


def _backup_cnf(host: Host, datadir: str, run_as: list[str], where: str) -> str:
    """The extracted backup-my.cnf's text, read as the datadir's owner, never through a symlink, at most
    MAX_CNF_BYTES (IntegrityError beyond, or if it is not a plain file)."""
    out = host.run([*run_as, "sh", "-c", _READ_CNF, "lastline", datadir, prepare_options.CNF,
                    str(prepare_options.MAX_CNF_BYTES + 1)], check=False)
    if out.returncode != 0 or len(out.stdout) > prepare_options.MAX_CNF_BYTES:
        raise IntegrityError(f"{where}: the backup's {prepare_options.CNF} is missing, not a plain file, or over "
                             f"{prepare_options.MAX_CNF_BYTES} bytes: choose another backup; the target stays down.")
    return out.stdout.decode("utf-8", "replace")


# what a server reads at startup from its datadir and acts on (replication: which primary to connect to and apply;
# binlog and relay log indexes: files it opens, and purges; the DDL and XA recovery logs: actions it replays on
# tables and files): mariabackup never puts any of them in a backup
_SERVER_STATE = ('cd "$1" && for f in master.info relay-log.info multi-master.info master-*.info relay-log-*.info '
                 '*.index ddl_recovery.log tc.log; do if [ -e "$f" ] || [ -L "$f" ]; then printf "%s\\n" "$f"; fi; '
                 'done')


def refuse_server_state(host: Host, datadir: str, run_as: list[str], where: str) -> None:
    """IntegrityError naming the replication or binlog state files an extracted backup brings (before prepare: the
    target stays down), since a restored server would act on them: connect to the primary a master.info names and
    apply its events with full rights, open and purge the files a binlog index lists, replay a DDL log's actions."""
    out = host.run([*run_as, "sh", "-c", _SERVER_STATE, "lastline", datadir]).stdout.decode("utf-8", "replace")
    if found := out.split():
        raise IntegrityError(
            f"{where}: the backup's stream holds {', '.join(found[:10])}: replication or binlog state that a server "
            "reads at startup and acts on (connecting to the primary it names and applying its events, opening and "
            "purging the files an index lists, replaying recovery actions). mariabackup never writes these into a "
            "backup, so it was changed after it was written: choose another backup. The target stays down, its "
            "datadir marked as an unfinished restore.")


_REMOVE_LINKS = 'cd "$1" && find . -name "*.isl" ! -type d -print -exec rm -f -- {} +'


def remove_links(host: Host, datadir: str, run_as: list[str]) -> list[str]:
    """Remove every .isl file (InnoDB's link to a tablespace outside the datadir: DATA DIRECTORY) from an extracted
    backup, as the datadir's owner, before prepare: the backup chose those paths, and the server would open them
    (another server's live tablespace on the same host, say). The stream brings each tablespace itself, which prepare
    puts in the datadir. Returns the files removed."""
    out = host.run([*run_as, "sh", "-c", _REMOVE_LINKS, "lastline", datadir])
    return out.stdout.decode("utf-8", "replace").split()


def write_prepare_cnf(host: Host, datadir: str, options: dict[str, str], run_as: list[str]) -> None:
    """Replace the backup's backup-my.cnf (whatever it is: file, folder, symlink) with lastline's, the only option file
    prepare reads, as the datadir's owner; created anew (noclobber: never written through a link)."""
    host.run([*run_as, "sh", "-c", _WRITE_CNF, "lastline", datadir, prepare_options.CNF],
             input=prepare_options.render(options).encode())


def start_server(server: Server, timeout: float = 180) -> float:
    """Start a server (never on a half-restored datadir) and wait until it answers; returns seconds."""
    datadir = server.require_datadir()
    if datadirs.state(server.runner(), datadir) == "partial":
        raise IntegrityError(f"{datadir} holds an unfinished restore ({MARKER}): refusing to start {server.describe()}.")
    return server.start_service(timeout)
