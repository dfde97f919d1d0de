"""Replication, version-aware: read a replica's status, attach it to a source from a backup's
coordinates, wait until it has caught up, and detach it for good.

Detaching right depends on the server (`detach_statements`):
- MySQL/MariaDB 5.0/5.1: `STOP SLAVE; CHANGE MASTER TO MASTER_HOST=''; RESET SLAVE` (no RESET ... ALL);
- MariaDB 5.5+ and MySQL 5.5 to 8.0.21: `STOP SLAVE; RESET SLAVE ALL`, and on MariaDB 10.0+ for every
  named (multi-source) connection, then `SET GLOBAL gtid_slave_pos = ''`;
- MySQL 8.0.22+: `STOP REPLICA; RESET REPLICA ALL` (8.4 removed the SLAVE forms).
A `master-host`/`master-user`/`master-password`/`master-port` line in an option file the server reads
would bring the old source back at the next restart (5.0/5.1): :func:`stale_master_settings` finds them.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from lastline.core.errors import ReplicationError
from lastline.core.option_files import Setting, read_settings, server_command_line, starting_files
from lastline.core.servers import Server

log = logging.getLogger(__name__)

MASTER_OPTIONS = ("master-host", "master-user", "master-password", "master-port")


@dataclass(frozen=True)
class Flavour:
    """Which server and version: decides the replication statements."""

    mariadb: bool
    version: tuple[int, int, int]

    @classmethod
    def parse(cls, version: str, comment: str = "") -> Flavour:
        m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
        if not m:
            raise ReplicationError(f"cannot read a version from {version!r}")
        return cls("mariadb" in (version + comment).lower(), (int(m[1]), int(m[2]), int(m[3])))

    def describe(self) -> str:
        return f"{'MariaDB' if self.mariadb else 'MySQL'} {'.'.join(map(str, self.version))}"

    @property
    def replica_words(self) -> bool:
        """MySQL 8.0.22+ has STOP/RESET/SHOW REPLICA (8.4 has nothing else)."""
        return not self.mariadb and self.version >= (8, 0, 22)

    @property
    def multi_source(self) -> bool:
        """MariaDB 10.0+ names its replication connections."""
        return self.mariadb and self.version >= (10, 0, 0)


def flavour(cur: Any) -> Flavour:
    """The flavour of the server behind an open cursor."""
    cur.execute("SELECT VERSION(), @@version_comment")
    version, comment = cur.fetchone()
    return Flavour.parse(version, comment or "")


def _quote(name: str) -> str:
    return "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"


def detach_statements(fl: Flavour, connections: list[str]) -> list[str]:
    """The statements that cut a replica off from every source, for this server."""
    if fl.version < (5, 5, 0):
        return ["STOP SLAVE", "CHANGE MASTER TO MASTER_HOST=''", "RESET SLAVE"]
    if fl.replica_words:
        return ["STOP REPLICA", "RESET REPLICA ALL"]
    if not fl.multi_source:
        return ["STOP SLAVE", "RESET SLAVE ALL"]
    names = list(dict.fromkeys([*(c for c in connections if c), ""]))  # the default connection last
    out = []
    for name in names:
        conn = f" {_quote(name)}" if name else ""
        out += [f"STOP SLAVE{conn}", f"RESET SLAVE{conn} ALL"]
    return out + ["SET GLOBAL gtid_slave_pos = ''"]


def status_sql(fl: Flavour) -> str:
    """The statement that lists every replication connection."""
    if fl.multi_source:
        return "SHOW ALL SLAVES STATUS"
    return "SHOW REPLICA STATUS" if fl.replica_words else "SHOW SLAVE STATUS"


def replica_status(cur: Any, fl: Flavour | None = None) -> list[dict[str, Any]]:
    """Every replication connection of the server, as dicts of SHOW ... STATUS columns."""
    cur.execute(status_sql(fl or flavour(cur)))
    cols = [d[0] for d in cur.description] if cur.description else []
    return [dict(zip(cols, row)) for row in cur.fetchall()]


def field(status: dict[str, Any], *names: str) -> Any:
    """A status column under its old or new name (Slave_IO_Running / Replica_IO_Running)."""
    for n in names:
        if n in status:
            return status[n]
    return None


def running(status: dict[str, Any]) -> tuple[str, str]:
    """(IO thread, SQL thread) states: Yes, No or Connecting."""
    return (str(field(status, "Slave_IO_Running", "Replica_IO_Running")),
            str(field(status, "Slave_SQL_Running", "Replica_SQL_Running")))


def describe_status(status: dict[str, Any]) -> str:
    io, sql = running(status)
    name = status.get("Connection_name") or status.get("Channel_Name") or "(default)"
    lag = field(status, "Seconds_Behind_Master", "Seconds_Behind_Source")
    return f"connection {name}: IO {io}, SQL {sql}, {lag if lag is not None else '-'} s behind"


def broken(status: dict[str, Any]) -> str | None:
    """The replication error of a connection whose threads stopped, else None."""
    io, sql = running(status)
    if sql == "No" and field(status, "Last_SQL_Error"):
        return f"SQL thread stopped: {field(status, 'Last_SQL_Error')}"
    if io == "No" and field(status, "Last_IO_Error"):
        return f"IO thread stopped: {field(status, 'Last_IO_Error')}"
    if io == "No" or sql == "No":
        return f"replication threads not running (IO {io}, SQL {sql})"
    return None


def server_settings(server: Server) -> list[Setting]:
    """The settings of the server's groups in every option file the running server reads (and in its
    connection's config_dir)."""
    host = server.runner()
    files, suffix = starting_files(server_command_line(host, server.query("SELECT @@pid_file")[0][0]))
    return read_settings(host, files, [server.config_dir] if server.config_dir else [], suffix)


def stale_master_settings(server: Server) -> list[Setting]:
    """master-host/-user/-password/-port lines in the option files the server reads."""
    return [s for s in server_settings(server) if s.name in MASTER_OPTIONS]


def source_coordinates(cur: Any) -> dict[str, Any]:
    """The source's current binlog file/position and GTID position (MariaDB's gtid_binlog_pos)."""
    cur.execute("SHOW MASTER STATUS")
    row = cur.fetchone()
    if not row:
        raise ReplicationError("the source has no binary log (SHOW MASTER STATUS is empty): enable log-bin.")
    gtid = None
    try:
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        gtid = cur.fetchone()[0] or None
    except Exception:  # noqa: BLE001 - MySQL has no gtid_binlog_pos: file/position only
        gtid = None
    return {"binlog_file": row[0], "binlog_position": int(row[1]), "gtid": gtid}


def change_master_sql(use_gtid: bool) -> str:
    """CHANGE MASTER with %s placeholders (host, port, user, password[, file, position]); the driver
    fills them in, so the password never appears in a statement we build or log."""
    base = "CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s"
    return base + (", MASTER_USE_GTID=slave_pos" if use_gtid else ", MASTER_LOG_FILE=%s, MASTER_LOG_POS=%s")


def attach(target: Server, replication: Server, coords: dict[str, Any], use_gtid: bool) -> None:
    """Point `target` at the source described by the `replication` connection (its host/port as the
    replica sees it, and the replication user's credentials), from the backup's own coordinates."""
    with target.session() as cur:
        fl = flavour(cur)
        if not fl.mariadb:
            raise ReplicationError(f"{target.describe()} runs {fl.describe()}: replica rebuild supports MariaDB only.")
        for status in replica_status(cur, fl):
            if (status.get("Master_Host"), int(status.get("Master_Port") or 0)) == (replication.host, replication.port) \
                    and running(status) != ("No", "No"):
                # a retry after START SLAVE went through: resetting gtid_slave_pos now would replay
                # events the replica has already applied
                log.info("%s already replicates from %s:%s (%s): left as it is", target.describe(),
                         replication.host, replication.port, describe_status(status))
                return
        cur.execute("STOP ALL SLAVES")
        cur.execute("RESET SLAVE ALL")
        args: list[Any] = [replication.host, replication.port, replication.user, replication.password]
        if use_gtid:
            cur.execute("SET GLOBAL gtid_slave_pos = %s", (coords["gtid"],))
        else:
            args += [coords["binlog_file"], int(coords["binlog_position"])]
        cur.execute(change_master_sql(use_gtid), args)
        cur.execute("START SLAVE")
    how = f"GTID {coords['gtid']} (MASTER_USE_GTID=slave_pos)" if use_gtid else \
        f"{coords['binlog_file']}:{coords['binlog_position']}"
    log.info("attached %s to %s:%s as %s from %s; replication started", target.describe(), replication.host,
             replication.port, replication.user, how)


def applied(source: Server, target: Server, within: float) -> tuple[bool, dict[str, Any], list[dict[str, Any]]]:
    """Whether `target` applies, within `within` seconds, everything `source` has written now (MASTER_GTID_WAIT,
    or MASTER_POS_WAIT without GTIDs); fails at once if a replication thread stopped with an error.
    Returns (done, the coordinates waited for, the replica's status rows)."""
    with source.session() as cur:
        coords = source_coordinates(cur)
    with target.session() as cur:
        deadline = time.monotonic() + within
        while True:
            slice_s = max(1, min(2, int(deadline - time.monotonic())))
            if coords["gtid"]:
                cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (coords["gtid"], slice_s))
            else:
                cur.execute("SELECT MASTER_POS_WAIT(%s, %s, %s)", (coords["binlog_file"], coords["binlog_position"], slice_s))
            done = cur.fetchone()[0]
            statuses = replica_status(cur)
            if not statuses:
                raise ReplicationError(f"{target.describe()} has no replication configured.")
            if done is not None and int(done) >= 0:  # -1: this slice timed out; NULL: not replicating
                return True, coords, statuses
            problem = next((p for p in map(broken, statuses) if p), None)
            if problem:
                raise ReplicationError(f"{target.describe()}: {problem}")
            if time.monotonic() >= deadline:
                return False, coords, statuses


def wait_for(source: Server, target: Server, timeout: float, every: float = 10.0) -> dict[str, Any]:
    """Wait (holding this process) until `target` has applied what `source` had written when this was called,
    logging the lag every `every` seconds (the catch_up sensor polls `applied` instead, between reschedules)."""
    t0 = time.monotonic()
    while True:
        done, coords, statuses = applied(source, target, min(every, max(timeout - (time.monotonic() - t0), 1)))
        if done:
            return coords
        elapsed = time.monotonic() - t0
        if elapsed > timeout:
            raise ReplicationError(
                f"{target.describe()} did not catch up with {source.describe()} within {timeout:.0f} s "
                f"({'; '.join(map(describe_status, statuses))}); raise catch_up_timeout or check the link."
            )
        log.info("catching up: %s [%.0f s]", "; ".join(map(describe_status, statuses)), elapsed)


def detach(server: Server) -> list[str]:
    """Stop and forget every replication connection of `server`; returns the statements run."""
    with server.session() as cur:
        fl = flavour(cur)
        names = [str(s.get("Connection_name") or "") for s in replica_status(cur, fl)]
        statements = detach_statements(fl, names)
        for sql in statements:
            log.info("detach %s: %s", server.describe(), sql)
            cur.execute(sql)
        return statements


def leftovers(server: Server) -> list[str]:
    """What is left of replication on `server`: connections still listed, a non-empty gtid_slave_pos."""
    with server.session() as cur:
        fl = flavour(cur)
        found = [describe_status(s) for s in replica_status(cur, fl)]
        if fl.mariadb and fl.version >= (10, 0, 2):
            cur.execute("SELECT @@GLOBAL.gtid_slave_pos")
            pos = cur.fetchone()[0]
            if pos:
                found.append(f"gtid_slave_pos is {pos!r}")
        return found


def connection_name(status: dict[str, Any]) -> str:
    """The replication connection's name (MariaDB's Connection_name, MySQL's Channel_Name; "" the default)."""
    return str(status.get("Connection_name") or status.get("Channel_Name") or "")


def stopped_on_error(status: dict[str, Any]) -> str | None:
    """A replication thread stopped on an error (a thread merely stopped is not one: see the lag check)."""
    problem = broken(status)
    return problem if problem and "threads not running" not in problem else None


def sql_thread(fl: Flavour, verb: str, name: str) -> str:
    """STOP/START the SQL thread of one replication connection (MariaDB: by name; MySQL: FOR CHANNEL)."""
    word = "REPLICA" if fl.replica_words else "SLAVE"
    quoted = f"'{name.replace(chr(92), chr(92) * 2).replace(chr(39), chr(39) * 2)}'"
    if not name:
        return f"{verb} {word} SQL_THREAD" if fl.mariadb else f"{verb} {word} SQL_THREAD FOR CHANNEL ''"
    return f"{verb} {word} {quoted} SQL_THREAD" if fl.mariadb else f"{verb} {word} SQL_THREAD FOR CHANNEL {quoted}"
