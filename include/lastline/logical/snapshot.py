"""One consistent snapshot shared by a pool of connections.

`FLUSH TABLES WITH READ LOCK` is held only while every worker connection runs
`START TRANSACTION WITH CONSISTENT SNAPSHOT` and the binlog/GTID position is read: all workers then see
the same instant, and the coordinates match it. Non-transactional tables (MyISAM, Aria...) are not
covered by MVCC: the caller dumps them before `release()`, while nothing can change them.

The workers are dump worker processes (tsvdump), each with its own connection; they share the
snapshot because each opened its transaction while the lock was held (as mydumper's threads do).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from lastline.core import stopping
from lastline.core.errors import PreflightError, ServerError
from lastline.core.servers import Server
from lastline.core.sql import server_identity
from lastline.logical.worker import DumpWorker

log = logging.getLogger(__name__)

SESSION = (
    "SET SESSION time_zone = '+00:00', character_set_results = NULL, net_write_timeout = 3600, "
    "net_read_timeout = 3600, wait_timeout = 86400"
)


@dataclass
class Coordinates:
    """Where the snapshot sits in the source's history."""

    binlog_file: str | None
    binlog_position: int | None
    gtid: str | None
    server_version: str
    sql_mode: str
    identity: str | None = None


# client errors for a connection that went away: server gone, lost mid-query, killed
LOST_CONNECTION = (2006, 2013, 1927)


def sql_error(exc: Exception) -> tuple[int | None, str]:
    """(code, message) of a MySQLdb error."""
    args = getattr(exc, "args", ())
    code = args[0] if args and isinstance(args[0], int) else None
    return code, str(args[-1]) if args else str(exc)


class SnapshotPool:
    """A control connection and `n` dump workers opened on one snapshot (see the module doc)."""

    def __init__(self, server: Server, n: int, lock_wait_timeout: int = 60) -> None:
        self.server, self.n, self.lock_wait_timeout = server, n, lock_wait_timeout
        self.control: Any = None
        self.workers: list[DumpWorker] = []
        self.locked_at: float | None = None
        self.lock_seconds = 0.0

    def open(self) -> Coordinates:
        """Lock, open a snapshot on every worker, read the coordinates. The lock stays until release()."""
        self.control = self.server.connect()
        self._stop = stopping.add("snapshot: KILL QUERY on the control connection (FLUSH TABLES WITH READ LOCK, schema reads)",
                                  stopping.kill_query(self.server, self.control.thread_id()))
        cur = self.control.cursor()
        cur.execute("SET SESSION lock_wait_timeout = %s", (self.lock_wait_timeout,))
        self.workers = [DumpWorker(self.server, f"dump-{i}") for i in range(self.n)]
        for worker in self.workers:
            worker.execute(SESSION)
            worker.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        started = time.monotonic()
        try:
            cur.execute("FLUSH TABLES WITH READ LOCK")
        except Exception as exc:
            code, msg = sql_error(exc)
            if code in (1227, 1044, 1045):
                raise PreflightError(
                    f"FLUSH TABLES WITH READ LOCK refused ({msg}): the backup user needs the RELOAD privilege "
                    "to open one consistent snapshot for all workers (GRANT RELOAD ON *.* TO ...)."
                ) from exc
            if code == 1205:
                raise ServerError(
                    f"could not take the global read lock within {self.lock_wait_timeout} s: a long query or "
                    "an open LOCK TABLES holds it. The backup retries; look at SHOW PROCESSLIST on the source."
                ) from exc
            raise
        self.locked_at = time.monotonic()
        for worker in self.workers:
            worker.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        coords = self._coordinates(cur)
        log.info(
            "snapshot opened on %d connections in %.2f s (lock waited %.2f s): binlog %s:%s, gtid %s",
            self.n, time.monotonic() - started, self.locked_at - started, coords.binlog_file, coords.binlog_position, coords.gtid,
        )
        return coords

    def _coordinates(self, cur: Any) -> Coordinates:
        try:
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
        except Exception as exc:
            code, msg = sql_error(exc)
            if code == 1227:
                raise PreflightError(
                    f"SHOW MASTER STATUS refused ({msg}): the backup user needs BINLOG MONITOR (MariaDB 10.5+) "
                    "or REPLICATION CLIENT to record the snapshot's binlog position."
                ) from exc
            raise
        cur.execute("SELECT @@global.gtid_binlog_pos, @@version, @@global.sql_mode")
        gtid, version, sql_mode = cur.fetchone()
        return Coordinates(
            binlog_file=row[0] if row else None,
            binlog_position=int(row[1]) if row else None,
            gtid=gtid or None,
            server_version=version,
            sql_mode=sql_mode,
            identity=server_identity(cur),
        )

    def release(self) -> None:
        """Let writes go on (the workers keep their snapshot)."""
        if self.locked_at is not None:
            self.control.cursor().execute("UNLOCK TABLES")
            self.lock_seconds = time.monotonic() - self.locked_at
            self.locked_at = None
            log.info("global read lock released after %.2f s", self.lock_seconds)

    def close(self) -> None:
        """Release the lock if still held and close every connection (idempotent)."""
        for conn in [self.control, *self.workers]:
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - already gone
                    pass
        self.locked_at = None
        self.control, self.workers = None, []
        if getattr(self, "_stop", None) is not None:
            stopping.remove(self._stop)
            self._stop = None

    def __enter__(self) -> SnapshotPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
