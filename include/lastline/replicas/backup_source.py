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
(a `finally`, a SIGTERM handler; for a worker killed outright, the next attempt's start and the DAG's
`resume_replica` teardown, which act only when the backup task did not succeed).
The physical backup passes `--slave-info --safe-slave-backup` to mariabackup, which does the same and prints the
primary's coordinates (`lastline.mariabackup.commands.primary_position`).

Every pause is recorded on the replica before it starts, and a dead run's pause is resumed by the next preflight
(`lastline.replicas.pauses`).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lastline import connections
from lastline.core import stopping
from lastline.core.errors import PreflightError, ReplicationError
from lastline.core.servers import Server
from lastline.core.sql import holds_any
from lastline.replicas import pauses
from lastline.replicas.flavour import (
    Flavour,
    connection_name,
    describe_status,
    field,
    flavour,
    replica_status,
    running,
    sql_thread,
    stopped_on_error,
)

log = logging.getLogger(__name__)

TEMP_TABLE_WAIT = 300.0  # seconds, as mariabackup's --safe-slave-backup-timeout


def wanted(server: Server, asked: bool) -> bool:
    """Whether a backup of `server` is taken as a replica's: the Param, or the connection's extra."""
    return bool(asked or server.replica)


def check(server: Server, max_lag: float, single: bool = False) -> dict[str, Any]:
    """Preflight (and again as the backup starts): the server replicates, no replication thread stopped on an
    error, it is at most `max_lag` seconds behind (0: any lag), and the account may stop its SQL thread.
    `single`: one replication connection only (mariabackup pauses the default one alone). Returns what the
    pause and the teardown need (which SQL threads ran)."""
    pauses.resume_abandoned(server)
    with server.session() as cur:
        fl = flavour(cur)
        statuses = replica_status(cur, fl)
        may_stop = holds_any(cur, "ALL PRIVILEGES ON *.*", "SUPER", "REPLICATION SLAVE ADMIN", "REPLICATION_SLAVE_ADMIN")
        if statuses:
            pauses.unlogged(cur, server)
    if not statuses:
        raise PreflightError(
            f"{server.describe()} is not a replica (no replication connection is configured): back it up without "
            "from_replica, or name the replica's connection."
        )
    if not may_stop:
        raise PreflightError(f"{server.conn_id}'s account may not stop the replica's SQL thread, which a backup from a "
                             "replica needs for its snapshot: GRANT REPLICATION SLAVE ADMIN ON *.* (SUPER before MariaDB 10.5).")
    if single and len(statuses) > 1:
        raise PreflightError(
            f"{server.describe()} has {len(statuses)} replication connections: mariabackup pauses the default one alone, "
            "so a physical backup could not say where every primary was. Back it up with logical_backup (it pauses "
            "each connection), or from a replica of one primary."
        )
    problems = [f"{connection_name(s) or 'default'}: {p}" for s in statuses if (p := stopped_on_error(s))]
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
    found: dict[str, Any] = {
        "connections": [connection_name(s) for s in statuses],
        "sql_running": [connection_name(s) for s in statuses if running(s)[1] == "Yes"],
        "primaries": [f"{field(s, 'Master_Host', 'Source_Host')}:{field(s, 'Master_Port', 'Source_Port')}" for s in statuses],
        "lag_seconds": max(known) if known else None,
        "mariadb": fl.mariadb,
    }
    log.info("backing up a replica: %s, %s behind %s", server.describe(),
             "unknown" if found["lag_seconds"] is None else f"{found['lag_seconds']:g} s", ", ".join(found["primaries"]))
    return found


def open_temp_tables(cur: Any) -> int:
    """Temporary tables the replication SQL threads hold open (Slave_/Replica_open_temp_tables)."""
    cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN ('Slave_open_temp_tables', 'Replica_open_temp_tables')")
    return max((int(v) for _, v in cur.fetchall()), default=0)


def primary_coordinates(cur: Any, fl: Flavour, paused: list[str] | None = None) -> dict[str, Any]:
    """Where the primary was, as this replica has executed it (see coordinates): its GTID position and every
    replication connection's status, read now."""
    cur.execute("SELECT @@GLOBAL.gtid_slave_pos" if fl.mariadb else "SELECT @@GLOBAL.gtid_executed")
    gtid = cur.fetchone()[0] or None
    return coordinates(gtid, replica_status(cur, fl), paused)


def coordinates(gtid: str | None, statuses: list[dict[str, Any]], paused: list[str] | None = None) -> dict[str, Any]:
    """The primary's coordinates from a replica's GTID position and its connections' status rows. Exact only while
    the SQL threads stand still: every connection in `paused` must still show its SQL thread stopped (else someone
    started it: refused). The top-level file and position are given for one connection replicating one GTID domain
    only (after a stop, parallel replication of several domains leaves each at its own point: the GTID position is
    then the exact cut)."""
    restarted = [connection_name(s) or "default" for s in statuses if connection_name(s) in (paused or []) and running(s)[1] == "Yes"]
    if restarted:
        raise ReplicationError(f"the SQL thread of {', '.join(restarted)} was started again while the snapshot opened: "
                               "the primary's coordinates would be later than the data. Retry the backup.")
    connections = [{
        "name": connection_name(s),
        "host": field(s, "Master_Host", "Source_Host"),
        "port": int(field(s, "Master_Port", "Source_Port") or 0),
        "binlog_file": field(s, "Relay_Master_Log_File", "Relay_Source_Log_File") or None,
        "binlog_position": int(field(s, "Exec_Master_Log_Pos", "Exec_Source_Log_Pos") or 0),
    } for s in statuses]
    domains = {g.split("-")[0] for g in (gtid or "").replace(" ", "").split(",") if g}
    first = connections[0] if len(connections) == 1 and len(domains) <= 1 else {}
    return {"gtid": gtid, "binlog_file": first.get("binlog_file"), "binlog_position": first.get("binlog_position"),
            "connections": connections}


@contextmanager
def paused(server: Server, timeout: float = TEMP_TABLE_WAIT, what: str = "a backup's snapshot") -> Iterator[dict[str, Any]]:
    """Stop the SQL threads running now (waiting until no replicated temporary table is open) and yield
    ``{"read": <the primary's coordinates, checked to be still paused>}``; start exactly those threads again on
    the way out, whatever happened. A thread someone else stopped is left as it is."""
    conn = server.connect()
    cur = conn.cursor()
    cur.execute("SET SESSION wait_timeout = 86400")  # idle while the snapshot opens (the guard's wait, MyISAM tables)
    fl = flavour(cur)
    stopped: list[str] = []

    def start() -> None:
        for name in stopped:
            cur.execute(sql_thread(fl, "START", name))
        if stopped:
            log.info("replica %s: SQL thread%s started again", server.describe(), "s" if len(stopped) > 1 else "")
        stopped.clear()

    undo = stopping.add(f"START SLAVE SQL_THREAD on {server.describe()}", start)
    try:
        pauses.record(cur, [connection_name(s) for s in replica_status(cur, fl) if running(s)[1] == "Yes"], what)
        deadline = time.monotonic() + timeout
        while True:
            for status in replica_status(cur, fl):
                if running(status)[1] == "Yes":
                    cur.execute(sql_thread(fl, "STOP", connection_name(status)))
                    stopped.append(connection_name(status))
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
        names = list(stopped)
        yield {"read": lambda: primary_coordinates(cur, fl, names)}
        log.info("replica %s: SQL thread paused %.3f s for the snapshot", server.describe(), time.monotonic() - t0)
    finally:
        try:
            start()
            pauses.clear(cur)
        finally:
            stopping.remove(undo)
            conn.close()


def attempt(server: Server, replica: dict[str, Any], max_lag: float, single: bool = False) -> dict[str, Any]:
    """The start of a backup task on a replica: what an earlier, killed attempt left stopped runs again, and the
    lag is checked anew (check's answer: the lag recorded with the primary's coordinates)."""
    resume(server, replica)
    return check(server, max_lag, single)


def resume_unless_done(conn_id: str, replica: dict[str, Any] | None, result: Any) -> list[str]:
    """The backups' resume_replica teardown: nothing for a primary, nor after a backup task that returned `result` (it
    started what it stopped); after one that did not (result None), resume the replica `conn_id` names."""
    if replica is None or result is not None:
        return []
    return resume(connections.server(conn_id), replica)


def resume(server: Server, replica: dict[str, Any] | None) -> list[str]:
    """After a backup attempt that did not end well (the teardown, and the start of a retry): start again every SQL
    thread that ran at preflight and is stopped now without an error (a killed attempt left it so; a person must
    look at one stopped on an error). Returns the connections started."""
    if not replica:
        return []
    started = []
    with server.session() as cur:
        fl = flavour(cur)
        for s in replica_status(cur, fl):
            name = connection_name(s)
            if name in replica.get("sql_running", []) and running(s)[1] != "Yes" and not stopped_on_error(s):
                cur.execute(sql_thread(fl, "START", name))
                started.append(name or "default")
    if started:
        log.warning("replica %s: started the SQL thread of %s again (a backup attempt ended without doing it)",
                    server.describe(), ", ".join(started))
    return started
