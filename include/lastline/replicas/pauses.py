"""Every pause lastline makes of a replica's SQL thread, recorded on the replica itself so that the next run finds it.

A pause is written before it starts (`_lastline.replica_pauses`: the connection name and the id of the session that
holds the pause, unlogged so that no local transaction reaches the replica's binlog) and its row is deleted once the
thread runs again. A worker that died mid-pause leaves its row behind a session that no longer exists: the next
preflight of any backup of that replica starts the thread again, with an alert, before it measures the lag
(`resume_abandoned`)."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lastline.core.alerting import alert
from lastline.core.errors import PreflightError
from lastline.core.servers import Server
from lastline.core.sql import META_DB, sql_error, table_exists
from lastline.replicas.flavour import connection_name, flavour, replica_status, running, sql_thread, stopped_on_error

log = logging.getLogger(__name__)

PAUSES = "replica_pauses"  # in META_DB on the replica: one row per SQL thread a live or dead backup paused


def unlogged(cur: Any, server: Server) -> None:
    """This session writes nothing to the replica's binlog (a pause's record must not become a local transaction
    there, which a failover would carry); an account that may not do so is refused, saying what to grant."""
    try:
        _unlog(cur)
    except Exception as exc:
        if sql_error(exc)[0] not in (1227, 1044, 1045):
            raise
        raise PreflightError(
            f"{server.conn_id}'s account may not turn binary logging off for its session ({sql_error(exc)[1]}): a backup from "
            "a replica records each pause of its SQL thread on the replica, unlogged, so that the next run can resume a "
            "pause a dead run left. GRANT BINLOG ADMIN ON *.* (SUPER before MariaDB 10.5.2), and CREATE, INSERT, DELETE, "
            f"SELECT ON {META_DB}.*."
        ) from exc


def _unlog(cur: Any) -> None:
    """Binary logging off for this session (outside a transaction, which the server requires: the reads before
    it opened one)."""
    cur.connection.commit()
    cur.execute("SET SESSION sql_log_bin = 0")


def record(cur: Any, names: list[str], what: str) -> None:
    """Record, before the pause, that this session pauses the SQL threads of `names` (committed at once)."""
    unlogged_table(cur)
    for name in names:
        cur.execute(f"REPLACE INTO `{META_DB}`.`{PAUSES}` (connection_name, holder, server_id, paused_at, what) "
                    "VALUES (%s, CONNECTION_ID(), @@server_id, UTC_TIMESTAMP(6), %s)", (name, what[:255]))
    cur.connection.commit()


def clear(cur: Any) -> None:
    """This session's pauses are over: their rows go."""
    cur.execute(f"DELETE FROM `{META_DB}`.`{PAUSES}` WHERE holder = CONNECTION_ID()")
    cur.connection.commit()


def unlogged_table(cur: Any) -> None:
    """The pauses' table on the replica (this session unlogged: see `unlogged`)."""
    _unlog(cur)
    cur.execute(f"CREATE DATABASE IF NOT EXISTS `{META_DB}`")
    cur.execute(f"CREATE TABLE IF NOT EXISTS `{META_DB}`.`{PAUSES}` (connection_name VARCHAR(64) NOT NULL, "
                "holder BIGINT UNSIGNED NOT NULL, server_id INT UNSIGNED NOT NULL, paused_at DATETIME(6) NOT NULL, "
                "what VARCHAR(255) NOT NULL, PRIMARY KEY (connection_name, holder)) ENGINE=InnoDB")


@contextmanager
def recorded(server: Server, names: list[str], what: str) -> Iterator[None]:
    """A pause someone else makes (mariabackup --safe-slave-backup) recorded for as long as the block runs: a
    session of this process holds the record, so a worker that dies leaves it behind a session that is gone."""
    conn = server.connect()
    cur = conn.cursor()
    try:
        cur.execute("SET SESSION wait_timeout = 86400")
        record(cur, names, what)
        yield
        clear(cur)
    finally:
        conn.close()


def resume_abandoned(server: Server) -> list[str]:
    """Start again the SQL threads that a run which is gone paused (its record's session no longer exists), and
    alert: a replica left paused falls behind until someone notices. A thread stopped on an error is left for a
    person, its record kept. Returns the connections started."""
    with server.session() as cur:
        if not table_exists(cur, META_DB, PAUSES):
            return []
        # a row of another server_id came with a copy of the datadir (a physical backup holds its own pause's row)
        cur.execute(f"SELECT COUNT(*) FROM `{META_DB}`.`{PAUSES}` WHERE server_id <> @@server_id")
        copied = cur.fetchone()[0]
        cur.execute(f"SELECT connection_name, holder, paused_at, what FROM `{META_DB}`.`{PAUSES}` WHERE server_id = @@server_id "
                    "AND holder NOT IN (SELECT ID FROM information_schema.PROCESSLIST)")
        left = cur.fetchall()
        if not left and not copied:
            return []
        unlogged(cur, server)
        cur.execute(f"DELETE FROM `{META_DB}`.`{PAUSES}` WHERE server_id <> @@server_id")
        fl = flavour(cur)
        statuses = {connection_name(s): s for s in replica_status(cur, fl)}
        started = []
        for name, holder, at, what in left:
            status = statuses.get(str(name))
            if status is not None and stopped_on_error(status):
                log.warning("replica %s: %s, paused by %s at %s, is stopped on an error (%s): left for a person",
                            server.describe(), name or "default", what, at, stopped_on_error(status))
                continue
            if status is not None and running(status)[1] != "Yes":
                cur.execute(sql_thread(fl, "START", str(name)))
                started.append(str(name) or "default")
            cur.execute(f"DELETE FROM `{META_DB}`.`{PAUSES}` WHERE connection_name = %s AND holder = %s", (name, holder))
        cur.connection.commit()
    if started:
        text = (f"replica {server.describe()}: started the SQL thread of {', '.join(started)} again; a backup ({left[0][3]}, "
                f"paused at {left[0][2]} UTC) ended without resuming it. Look at why that run died.")
        log.warning("%s", text)
        alert("replica_resumed", text, {"server": server.conn_id, "connections": started})  # where the deployment says
    return started
