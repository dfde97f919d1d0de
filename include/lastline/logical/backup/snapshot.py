"""One consistent snapshot shared by a pool of connections, without holding production's writes back.
(Over 300 lines: the two methods, the guard and the pool share one control connection's state.)

The method is chosen by server version (`snapshot_method`):

- **backup_stage** (MariaDB 10.4.1+, the default there): `BACKUP STAGE START` then `BLOCK_DDL`: DDL and
  writes to non-transactional tables (MyISAM, Aria...) wait; InnoDB writes and commits go on. Under it the
  caller reads the table list, the schema and the non-transactional tables (`frozen`): nothing of them can
  change. Then `BLOCK_COMMIT` holds commits only while every worker runs `START TRANSACTION WITH CONSISTENT
  SNAPSHOT` and the coordinates are read (milliseconds), and `BACKUP STAGE END` lets everything go. A long
  running write does not delay it: it waits for commits in flight, not for statements.
- **ftwrl** (MySQL, older MariaDB): `FLUSH TABLES WITH READ LOCK`, which waits for every running statement
  and makes every write queue behind it while it waits. So, first, the **long-statement guard**: while a
  statement older than `guard.threshold` runs, the backup waits (up to `guard.wait`) rather than lock behind
  it, then kills it only if `guard.kill`; on MySQL 8 `LOCK INSTANCE FOR BACKUP` keeps DDL out.

Every lock attempt is bounded by `guard.lock_timeout` (a fraction of a second): one that times out gives
its place back to the writes queued behind it, and the backup tries again until `guard.wait` has passed,
then fails naming the statements that held it (id, user, seconds, first characters). With `guard.kill` it kills
only statements older than `guard.threshold`, never a younger one that merely runs as the wait ends.

What the backup reports is how long a write could have waited behind it: from the start of the lock attempt
that succeeded (its wait for the lock included) to the release, or a timed-out attempt's whole length if longer
(`writes_blocked_seconds`), beside how long the lock was held once taken (`lock_seconds`).

The workers are dump worker processes (tsvdump), each with its own connection; they share the snapshot
because each opened its transaction while commits were held (as mydumper's threads do). After each chunk a
worker rolls back to a savepoint, which releases the table's metadata lock (binary logging off for that
read-only session): a DDL on a table already dumped runs at once instead of queueing the application's
writes behind it until the dump ends.
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lastline.core import impact, stopping
from lastline.core.errors import PreflightError, ServerError
from lastline.core.servers import Server
from lastline.core.sql import TIMED_OUT, server_identity, sql_error
from lastline.logical.backup.worker import DumpWorker

log = logging.getLogger(__name__)

SESSION = (
    "SET SESSION time_zone = '+00:00', character_set_results = NULL, net_write_timeout = 3600, "
    "net_read_timeout = 3600, wait_timeout = 86400"
)
METHODS = ("auto", "backup_stage", "ftwrl")
SAVEPOINT = "lastline_chunk"
# processlist commands that are no client statement (replication threads, the server's own)
NOT_STATEMENTS = ("Sleep", "Daemon", "Binlog Dump", "Binlog Dump GTID", "Slave_IO", "Slave_SQL", "Slave_worker", "Killed")


@dataclass
class Coordinates:
    """Where the snapshot sits in the source's history."""

    binlog_file: str | None
    binlog_position: int | None
    gtid: str | None
    server_version: str
    sql_mode: str
    identity: str | None = None


@dataclass(frozen=True)
class Guard:
    """How the snapshot treats the statements it would wait for (seconds; see the module doc)."""

    threshold: float = 60.0  # a statement running longer than this is waited for, never locked behind
    wait: float = 300.0  # how long the backup waits for long statements (and retries its lock) before it gives up
    kill: bool = False  # at the end of the wait, KILL QUERY the long statements instead of giving up
    lock_timeout: float = 0.5  # one lock attempt: the longest any write waits behind the backup


@dataclass(frozen=True)
class Blocker:
    """A statement the lock waited for."""

    id: int
    user: str
    seconds: float
    text: str

    def describe(self) -> str:
        return f"id {self.id} by {self.user}, running {self.seconds:.0f} s: {self.text!r}"


def snapshot_method(version: str, asked: str = "auto") -> str:
    """The cheapest correct method for `version` (the server's @@version): backup_stage on MariaDB 10.4.1+,
    else ftwrl (MySQL has no way to hold commits alone). `asked` other than auto is taken as is, except that
    backup_stage on a server without it is refused."""
    if asked not in METHODS:
        raise PreflightError(f"lock_method={asked!r}: choose one of {', '.join(METHODS)}.")
    mariadb = "mariadb" in version.lower()
    has_stages = mariadb and _numbers(version) >= (10, 4, 1)
    if asked == "backup_stage" and not has_stages:
        raise PreflightError(f"lock_method=backup_stage needs MariaDB 10.4.1 or newer; the source is {version}. Use auto.")
    if asked != "auto":
        return asked
    return "backup_stage" if has_stages else "ftwrl"


def instance_lock(version: str) -> bool:
    """MySQL 8.0+: `LOCK INSTANCE FOR BACKUP` keeps DDL out of the dump (the ftwrl method takes it first)."""
    return "mariadb" not in version.lower() and _numbers(version) >= (8, 0, 0)


def _numbers(version: str) -> tuple[int, ...]:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


# client errors for a connection that went away: server gone, lost mid-query, killed


class SnapshotPool:
    """A control connection and `n` dump workers opened on one snapshot (see the module doc)."""

    def __init__(self, server: Server, n: int, guard: Guard | None = None, method: str = "auto", priority: str = "normal",
                 max_read_mb_per_s: float = 0) -> None:
        self.server, self.n, self.guard, self.asked = server, n, guard or Guard(), method
        self.priority, self.max_read_mb_per_s = priority, max_read_mb_per_s
        self.control: Any = None
        self.workers: list[DumpWorker] = []
        self.method = ""
        self.lock_seconds = 0.0  # how long commits were held once the lock was taken (ftwrl: every write)
        self.writes_blocked_seconds = 0.0  # the longest a write could wait behind the backup: attempts' waits included
        self._attempt_at = 0.0  # when the attempt that took the lock began (its wait for the lock included)
        self.ddl_seconds = 0.0  # how long DDL (and non-transactional writes) waited
        self.savepoints = False
        self._stage = False
        self._own: set[int] = set()
        self.version = ""

    def open(self, frozen: Callable[[], None]) -> Coordinates:
        """Take the locks (guarded), call `frozen()` while DDL and non-transactional writes wait, open a snapshot
        on every worker while commits are held, read the coordinates, and let everything go."""
        self.control = self.server.connect()
        cur = self.control.cursor()
        cur.execute("SELECT @@version, CONNECTION_ID()")
        version, control_id = cur.fetchone()
        self.version = str(version)
        self.method = snapshot_method(self.version, self.asked)
        self._stop: int | None = stopping.add(f"snapshot: KILL QUERY on the control connection ({self.method}, schema reads)",
                                  stopping.kill_query(self.server, self.control.thread_id()))
        self.workers = [DumpWorker(self.server, f"dump-{i}", self.priority) for i in range(self.n)]
        self._own = {int(control_id)}
        for worker in self.workers:
            worker.execute(SESSION)
            worker.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        self.savepoints = self._unlogged_workers()
        if self.method == "backup_stage":
            coords = self._open_staged(cur, frozen)
        else:
            coords = self._open_ftwrl(cur, version, frozen)
        # the read cap from here on: what `frozen` read under the locks went at full speed, to keep them short
        share = impact.worker_share(self.max_read_mb_per_s, self.n)
        for worker in self.workers if share else ():
            worker.pace(share)
        return coords

    # --- the methods -----------------------------------------------------------------------
    def _open_staged(self, cur: Any, frozen: Callable[[], None]) -> Coordinates:
        started = time.monotonic()
        self._acquire(cur, ("BACKUP STAGE START", "BACKUP STAGE BLOCK_DDL"), "BACKUP STAGE END", wait_first=False)
        self._stage = True
        ddl_at = self._attempt_at  # BLOCK_DDL held non-transactional writes from its attempt's start
        frozen()
        # commits in flight only (a running statement is not waited for): a short wait, or the task retries
        commit_at = time.monotonic()
        if not self._attempt(cur, "BACKUP STAGE BLOCK_COMMIT"):
            self.writes_blocked_seconds = max(self.writes_blocked_seconds, time.monotonic() - commit_at)
            blockers = self._running(cur, 0)
            self._end(cur)
            raise ServerError(f"BACKUP STAGE BLOCK_COMMIT waited over {self.guard.lock_timeout} s for commits in flight"
                              f"{': ' + '; '.join(b.describe() for b in blockers[:3]) if blockers else ''}. The task retries.")
        held_at = time.monotonic()
        coords = self._snapshots(cur)
        cur.execute("BACKUP STAGE END")
        self._stage = False
        now = time.monotonic()
        self.lock_seconds, self.ddl_seconds = now - held_at, now - ddl_at
        self.writes_blocked_seconds = max(self.writes_blocked_seconds, now - commit_at)
        log.info("snapshot (backup_stage) opened on %d connections in %.2f s: commits blocked up to %.3f s (the wait for "
                 "the lock included; held %.3f s), DDL and non-transactional writes blocked %.2f s; binlog %s:%s, gtid %s",
                 self.n, now - started, self.writes_blocked_seconds, self.lock_seconds, self.ddl_seconds,
                 coords.binlog_file, coords.binlog_position, coords.gtid)
        return coords

    def _open_ftwrl(self, cur: Any, version: str, frozen: Callable[[], None]) -> Coordinates:
        started = time.monotonic()
        if instance_lock(version):
            cur.execute("LOCK INSTANCE FOR BACKUP")  # DDL waits; DML does not (held by this session until it ends)
        self._acquire(cur, ("FLUSH TABLES WITH READ LOCK",), "UNLOCK TABLES", wait_first=True)
        held_at = time.monotonic()
        coords = self._snapshots(cur)
        frozen()
        cur.execute("UNLOCK TABLES")
        now = time.monotonic()
        self.lock_seconds = now - held_at
        # FLUSH TABLES WITH READ LOCK makes every write queue from the moment it starts waiting for the lock
        self.writes_blocked_seconds = self.ddl_seconds = max(self.writes_blocked_seconds, now - self._attempt_at)
        log.info("snapshot (ftwrl) opened on %d connections in %.2f s: every write blocked up to %.2f s (the wait for the "
                 "lock included; held %.2f s); binlog %s:%s, gtid %s", self.n, now - started, self.writes_blocked_seconds,
                 self.lock_seconds, coords.binlog_file, coords.binlog_position, coords.gtid)
        return coords

    def _snapshots(self, cur: Any) -> Coordinates:
        for worker in self.workers:
            worker.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        return self._coordinates(cur)

    # --- the guard -------------------------------------------------------------------------
    def _acquire(self, cur: Any, statements: tuple[str, ...], undo: str, wait_first: bool) -> None:
        """Run `statements` in order, each attempt bounded by the lock timeout; on a timeout `undo`, wait, and
        try again until the guard's wait has passed. `wait_first`: wait while a long statement runs before each
        attempt (ftwrl, which would queue every write behind it)."""
        g = self.guard
        deadline = time.monotonic() + g.wait
        attempts, said = 0, False
        while True:
            long = self._running(cur, g.threshold) if wait_first else []
            if not long:
                attempts += 1
                if self._try(cur, statements, undo):
                    if attempts > 1:
                        log.info("lock taken at attempt %d", attempts)
                    return
            if time.monotonic() >= deadline:
                blockers = long or self._running(cur, min(g.threshold, 1.0))
                old = [b for b in blockers if b.seconds >= g.threshold]  # a younger statement is never killed
                if g.kill and old:
                    for b in old:
                        log.warning("kill_long_queries: KILL QUERY %s", b.describe())
                        try:
                            cur.execute(f"KILL QUERY {int(b.id)}")
                        except Exception as exc:  # noqa: BLE001 - 1094: it ended meanwhile
                            if sql_error(exc)[0] != 1094:
                                raise
                    time.sleep(0.2)
                    if self._try(cur, statements, undo):
                        return
                names = "; ".join(b.describe() for b in blockers[:5]) or "none seen (a lock held by LOCK TABLES or a backup?)"
                raise ServerError(
                    f"the backup did not take its lock ({' + '.join(statements)}) within {g.wait:.0f} s without holding "
                    f"writes back: blocking statement(s): {names}. It waits rather than freeze production behind them; "
                    "the task retries. Let them finish, raise long_query_wait, or set kill_long_queries."
                )
            if long and not said:
                said = True
                log.info("waiting for %d long statement(s) before locking: %s", len(long), "; ".join(b.describe() for b in long[:3]))
            time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))

    def _try(self, cur: Any, statements: tuple[str, ...], undo: str) -> bool:
        """One attempt at `statements`; its start is kept (writes queue from then on), and a timed-out attempt's
        length counts towards how long writes were blocked."""
        self._attempt_at = time.monotonic()
        if all(self._attempt(cur, sql) for sql in statements):
            return True
        self._undo(cur, undo)
        self.writes_blocked_seconds = max(self.writes_blocked_seconds, time.monotonic() - self._attempt_at)
        return False

    @staticmethod
    def _undo(cur: Any, undo: str) -> None:
        """Give back what a timed-out attempt took (nothing, if its first statement timed out)."""
        try:
            cur.execute(undo)
        except Exception as exc:  # noqa: BLE001 - 1094/4xxx: no backup stage or lock was taken
            log.debug("%s after a timed-out attempt: %s", undo, exc)

    def _attempt(self, cur: Any, sql: str) -> bool:
        """One lock statement, bounded by the lock timeout; False if it timed out (nothing then held by it)."""
        t = self.guard.lock_timeout
        try:
            if "mariadb" in self.version.lower():
                cur.execute(f"SET STATEMENT max_statement_time = {t:.3f} FOR {sql}")
            else:  # MySQL: whole seconds, at least 1
                cur.execute(f"SET SESSION lock_wait_timeout = {max(1, round(t))}")
                cur.execute(sql)
            return True
        except Exception as exc:
            code, msg = sql_error(exc)
            if code in TIMED_OUT:
                return False
            if code in (1227, 1044, 1045):
                raise PreflightError(
                    f"{sql} refused ({msg}): the backup user needs the RELOAD privilege to open one consistent snapshot "
                    "for all workers (GRANT RELOAD ON *.* TO ...)."
                ) from exc
            raise

    def _running(self, cur: Any, older_than: float) -> list[Blocker]:
        """Client statements running for `older_than` seconds or more, this backup's own left out, oldest first."""
        mariadb = "mariadb" in self.version.lower()
        time_col, scale = ("TIME_MS", 1000) if mariadb else ("TIME", 1)
        cur.execute(
            f"SELECT ID, USER, {time_col} / {scale}, LEFT(INFO, 80) FROM information_schema.PROCESSLIST WHERE INFO IS NOT NULL "
            f"AND COMMAND NOT IN ({', '.join(['%s'] * len(NOT_STATEMENTS))}) AND {time_col} >= %s AND ID <> CONNECTION_ID() "
            f"ORDER BY {time_col} DESC",
            (*NOT_STATEMENTS, older_than * scale),
        )
        return [Blocker(int(i), _text(u), float(s), _text(q)) for i, u, s, q in cur.fetchall()
                if int(i) not in self._own and not _text(q).upper().startswith(("BACKUP STAGE", "FLUSH TABLES WITH"))]

    def _unlogged_workers(self) -> bool:
        """Binary logging off in the workers' (read-only) sessions, so that rolling back to a savepoint releases a
        dumped table's metadata lock (the server keeps it otherwise). Without the privilege: kept, and said."""
        try:
            for worker in self.workers:
                worker.execute("SET SESSION sql_log_bin = 0")
            return True
        except Exception as exc:  # noqa: BLE001 - no BINLOG ADMIN / SUPER
            log.warning("the backup user may not set sql_log_bin (%s): each worker keeps the metadata lock of every table it "
                        "dumped until the dump ends, so a DDL on such a table waits, and writes to it queue behind the DDL. "
                        "GRANT BINLOG ADMIN (MariaDB 10.5.2+) or SUPER to avoid it.", exc)
            return False

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

    def _end(self, cur: Any) -> None:
        if self._stage:
            cur.execute("BACKUP STAGE END")
            self._stage = False

    def close(self) -> None:
        """Release any lock still held and close every connection (idempotent)."""
        for conn in [self.control, *self.workers]:
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - already gone
                    pass
        self._stage = False
        self.control, self.workers = None, []
        token = getattr(self, "_stop", None)
        if token is not None:
            stopping.remove(token)
            self._stop = None

    def __enter__(self) -> SnapshotPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, (bytes, bytearray)) else str(value or "")
