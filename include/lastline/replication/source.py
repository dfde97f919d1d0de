"""A backup taken from a replica: the lag checked before it starts, the primary's coordinates recorded, and the
replica's SQL thread paused only as long as the snapshot needs it.

A busy primary is spared the backup's reads when a replica takes it (`from_replica`, or `"replica": true` in
the connection's extra). What a restore, a rebuild or point-in-time recovery needs from such a backup is
where the *primary* was: the replica's `gtid_slave_pos` and, per replication connection, the primary's
binlog file and position it has executed (`Relay_Master_Log_File`/`Exec_Master_Log_Pos`).

Those coordinates are exact only while the SQL thread stands still, and a snapshot taken while a replicated
statement-based temporary table is open would replay into nothing. So, as XtraBackup's
`--safe-slave-backup` does: stop the SQL thread; if temporary tables are open, let it run again a moment
and retry until none are; open the snapshot and read the coordinates; start the SQL thread again, always
(a `finally`, a SIGTERM handler, and the DAG's `resume_replica` teardown for a worker killed outright).
The physical backup passes `--slave-info --safe-slave-backup` to mariabackup, which does the same.
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lastline.core import stopping
from lastline.core.errors import PreflightError, ReplicationError
from lastline.core.servers import Server
from lastline.replication.flavour import Flavour, broken, describe_status, field, flavour, replica_status, running

log = logging.getLogger(__name__)

TEMP_TABLE_WAIT = 300.0  # seconds, as mariabackup's --safe-slave-backup-timeout


def wanted(server: Server, asked: bool) -> bool:
    """Whether a backup of `server` is taken as a replica's: the Param, or the connection's extra."""
    return bool(asked or server.replica)


def _name(status: dict[str, Any]) -> str:
    return str(status.get("Connection_name") or "")


def _error(status: dict[str, Any]) -> str | None:
    """A replication thread stopped on an error (a thread merely stopped is not one: see the lag check)."""
    problem = broken(status)
    return problem if problem and "threads not running" not in problem else None


def check(server: Server, max_lag: float) -> dict[str, Any]:
    """Preflight: the server replicates, no replication thread stopped on an error, and it is at most
    `max_lag` seconds behind (0: any lag). Returns what the teardown needs (which SQL threads ran)."""
    with server.session() as cur:
        fl = flavour(cur)
        statuses = replica_status(cur, fl)
    if not statuses:
        raise PreflightError(
            f"{server.describe()} is not a replica (no replication connection is configured): back it up without "
            "from_replica, or name the replica's connection."
        )
    problems = [f"{_name(s) or 'default'}: {p}" for s in statuses if (p := _error(s))]
    if problems:
        raise PreflightError(f"replication is broken on {server.describe()} ({'; '.join(problems)}): its data is not the "
                             "primary's. Repair replication (or rebuild the replica) before backing it up.")
    lags = []
    for s in statuses:
        io, sql = running(s)
        lag = field(s, "Seconds_Behind_Master", "Seconds_Behind_Source")
        if max_lag and (io != "Yes" or sql != "Yes" or lag is None or float(lag) > max_lag):
            raise PreflightError(
                f"{server.describe()} is not within {max_lag:g} s of its primary ({describe_status(s)}): a backup "
                "now would miss what the primary has since written. Wait for it to catch up, start replication, or "
                "set max_replica_lag to 0 to back it up as it is."
            )
        lags.append(None if lag is None else float(lag))
    known = [x for x in lags if x is not None]
    found = {
        "connections": [_name(s) for s in statuses],
        "sql_running": [_name(s) for s in statuses if running(s)[1] == "Yes"],
        "primaries": [f"{field(s, 'Master_Host', 'Source_Host')}:{field(s, 'Master_Port', 'Source_Port')}" for s in statuses],
        "lag_seconds": max(known) if known else None,
        "mariadb": fl.mariadb,
    }
    log.info("backing up a replica: %s, %s behind %s", server.describe(),
             "unknown" if found["lag_seconds"] is None else f"{found['lag_seconds']:g} s", ", ".join(found["primaries"]))
    return found


def _sql_thread(fl: Flavour, verb: str, name: str) -> str:
    """STOP/START the SQL thread of one replication connection."""
    word = "REPLICA" if fl.replica_words else "SLAVE"
    quoted = f" '{name.replace(chr(92), chr(92) * 2).replace(chr(39), chr(39) * 2)}'" if name else ""
    return f"{verb} {word}{quoted} SQL_THREAD"


def open_temp_tables(cur: Any) -> int:
    """Temporary tables the replication SQL threads hold open (Slave_/Replica_open_temp_tables)."""
    cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN ('Slave_open_temp_tables', 'Replica_open_temp_tables')")
    return max((int(v) for _, v in cur.fetchall()), default=0)


def primary_coordinates(cur: Any, fl: Flavour) -> dict[str, Any]:
    """Where the primary was, as this replica has executed it: its GTID position and, per connection, the
    primary's binlog file and position (exact only while the SQL threads are stopped)."""
    if fl.mariadb:
        cur.execute("SELECT @@GLOBAL.gtid_slave_pos")
    else:
        cur.execute("SELECT @@GLOBAL.gtid_executed")
    gtid = cur.fetchone()[0] or None
    connections = []
    for s in replica_status(cur, fl):
        connections.append({
            "name": _name(s),
            "host": field(s, "Master_Host", "Source_Host"),
            "port": int(field(s, "Master_Port", "Source_Port") or 0),
            "binlog_file": field(s, "Relay_Master_Log_File", "Relay_Source_Log_File") or None,
            "binlog_position": int(field(s, "Exec_Master_Log_Pos", "Exec_Source_Log_Pos") or 0),
        })
    first = connections[0] if len(connections) == 1 else {}
    return {"gtid": gtid, "binlog_file": first.get("binlog_file"), "binlog_position": first.get("binlog_position"),
            "connections": connections}


@contextmanager
def paused(server: Server, replica: dict[str, Any], timeout: float = TEMP_TABLE_WAIT) -> Iterator[dict[str, Any]]:
    """Stop the SQL threads that run (waiting until no replicated temporary table is open), yield a dict the
    caller fills by calling ``read()``; start them again on the way out, whatever happened."""
    conn = server.connect()
    cur = conn.cursor()
    fl = flavour(cur)
    names = [n for n in replica["connections"] if n in set(replica.get("sql_running", []))]
    stopped: list[str] = []

    def start() -> None:
        for name in stopped:
            cur.execute(_sql_thread(fl, "START", name))
        if stopped:
            log.info("replica %s: SQL thread%s started again", server.describe(), "s" if len(stopped) > 1 else "")
        stopped.clear()

    undo = stopping.add(f"START SLAVE SQL_THREAD on {server.describe()}", lambda: resume(server, replica))
    try:
        deadline = time.monotonic() + timeout
        while True:
            for name in names:
                cur.execute(_sql_thread(fl, "STOP", name))
                stopped.append(name)
            held = open_temp_tables(cur)
            if held == 0:
                break
            if time.monotonic() > deadline:
                raise ReplicationError(
                    f"the replica {server.describe()} kept {held} replicated temporary table(s) open for {timeout:.0f} s: a "
                    "snapshot now would lose them. Retry when its statement-based batch is over."
                )
            log.info("replica %s: %d replicated temporary table(s) open; the SQL thread runs on a moment", server.describe(), held)
            start()
            time.sleep(1.0)
        t0 = time.monotonic()
        state: dict[str, Any] = {"read": lambda: primary_coordinates(cur, fl)}
        yield state
        log.info("replica %s: SQL thread paused %.3f s for the snapshot", server.describe(), time.monotonic() - t0)
    finally:
        try:
            start()
        finally:
            stopping.remove(undo)
            conn.close()


def resume(server: Server, replica: dict[str, Any] | None) -> list[str]:
    """The teardown: start again every SQL thread that ran at preflight and is stopped now, unless it stopped on an
    error (a person must look at that). Returns the connections started."""
    if not replica:
        return []
    started = []
    with server.session() as cur:
        fl = flavour(cur)
        for s in replica_status(cur, fl):
            name = _name(s)
            if name in replica.get("sql_running", []) and running(s)[1] != "Yes" and not _error(s):
                cur.execute(_sql_thread(fl, "START", name))
                started.append(name or "default")
    if started:
        log.warning("replica %s: started the SQL thread of %s again (the backup stopped without doing it)",
                    server.describe(), ", ".join(started))
    return started


_SLAVE_RE = re.compile(
    r"MySQL slave binlog position: (?:gtid_slave_pos '(?P<gtid>[^']*)'|master '[^']*' filename '(?P<file>[^']*)' "
    r"position '(?P<pos>\d+)')"
)


def from_backup_log(stderr: str) -> dict[str, Any]:
    """The primary's coordinates mariabackup --slave-info printed: a GTID position when the replica uses GTIDs,
    else the primary's binlog file and position."""
    m = _SLAVE_RE.search(stderr)
    if not m:
        raise ReplicationError("mariabackup --slave-info printed no primary position; the backup cannot say where "
                               "the primary was. Check that the source is a replica.")
    if m["gtid"] is not None:
        return {"gtid": m["gtid"] or None, "binlog_file": None, "binlog_position": None}
    return {"gtid": None, "binlog_file": m["file"], "binlog_position": int(m["pos"])}
