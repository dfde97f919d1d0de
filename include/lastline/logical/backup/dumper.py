"""The dump's engine: one splitter thread cuts each table into key ranges of chunk_rows, and one thread per
snapshot worker process runs those chunk jobs (big tables first), streaming each part to storage.

(Over 300 lines on purpose: one class whose threads share one condition variable and its state; split,
the locking would spread over files.)"""
from __future__ import annotations

import heapq
import itertools
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from lastline.core.compression import codec
from lastline.core.errors import IntegrityError, LastlineError, PipelineError, PreflightError, ServerError
from lastline.core.progress import Progress
from lastline.core.servers import Server
from lastline.core.sql import LOST_CONNECTION, holds_any, sql_error
from lastline.logical.backup.parts import Part, open_part
from lastline.logical.backup.snapshot import SAVEPOINT, SESSION
from lastline.logical.backup.worker import DumpWorker, WorkerError, WorkerWarning
from lastline.logical.format import chunking, dialect
from lastline.manifest import (
    ChunkInfo,
)
from lastline.storage import Storage
from lastline.storage.envelope import BackupSeal

log = logging.getLogger(__name__)

DDL_POLL = 0.2  # seconds between the DDL watcher's looks at the processlist
YIELDS = 3  # times one chunk gives way to a DDL before it holds its metadata lock to its end
QUERY_INTERRUPTED = 1317


def _statement(worker: DumpWorker, sql: str) -> None:
    """A savepoint statement, once more if a KILL QUERY meant for the chunk before it landed on it."""
    try:
        worker.execute(sql)
    except WorkerError as exc:
        if sql_error(exc)[0] != QUERY_INTERRUPTED:
            raise
        worker.execute(sql)


def _names_table(statement: str, table: str) -> bool:
    """Whether a waiting statement names `table` (as a bare or quoted identifier): only decides whether a chunk
    gives way, never what is safe."""
    return re.search(r"(?<![\w$`])`?" + re.escape(table.replace("`", "``")) + r"`?(?![\w$])", statement, re.IGNORECASE) is not None


@dataclass
class TableState:
    """A table being dumped: what its chunks added up to so far (guarded by the Dumper's lock)."""

    plan: chunking.TablePlan
    consistent: bool = True
    rows: int = 0
    checksum: int = 0
    bytes: int = 0
    raw_bytes: int = 0
    seconds: float = 0.0
    pending: int = 0
    chunks: list[ChunkInfo] = field(default_factory=list)
    next_seq: int = 0


@dataclass(order=True)
class Job:
    """A unit of work: split a table into ranges (the splitter), or dump one range (a snapshot worker)."""

    priority: tuple
    kind: str = field(compare=False)  # split | chunk
    table: TableState = field(compare=False)
    seq: int = field(default=0, compare=False)
    lower: list[str] | None = field(default=None, compare=False)
    upper: list[str] | None = field(default=None, compare=False)
    yields: int = field(default=0, compare=False)  # how often it gave way to a DDL (Dumper._watch_ddl)

    def describe(self) -> str:
        """`db.table` and the key range, for errors."""
        plan = self.table.plan
        if self.kind == "split":
            return f"{plan.full_name} (splitting)"
        if not plan.key:
            return f"{plan.full_name} (the whole table, no usable key)"
        key = ", ".join(k.name for k in plan.key)
        lo = "the start" if self.lower is None else f"({', '.join(self.lower)})"
        hi = "the end" if self.upper is None else f"({', '.join(self.upper)})"
        return f"{plan.full_name} (chunk {self.seq}: ({key}) from {lo} to {hi})"


def chunk_key(backup_id: str, plan: chunking.TablePlan, seq: int, part: int, suffix: str) -> str:
    """Storage key of a chunk file (names percent-encoded, dots too: any identifier is a safe path segment,
    never `.` or `..`)."""
    db, table = (quote(n, safe="").replace(".", "%2E") for n in (plan.schema, plan.name))
    return f"{backup_id}/data/{db}/{table}/{seq:05d}-{part:03d}.tsv{suffix}"


class Dumper:
    """Runs a dump's jobs: one splitter thread (its own connection; cut points need no snapshot) and one
    thread per snapshot worker process; a failure kills the other workers, so every thread stops at once."""

    def __init__(self, server: Server, storage: Storage, backup_id: str, compression: str, chunk_rows: int,
                 states: list[TableState], est_rows: int) -> None:
        self.server, self.storage = server, storage
        self.backup_id, self.compression = backup_id, compression
        self.suffix = codec(compression).suffix
        self.chunk_rows = chunk_rows
        self.cv = threading.Condition()
        self.splits: list[Job] = []
        self.heap: list[Job] = []
        self.active = 0
        self.failure: BaseException | None = None
        self.counter = itertools.count()
        self.progress = Progress("dump", counts={"tables": len(states), "chunks": None, "rows": est_rows, "written_bytes": None},
                                 eta_by="rows")
        self.workers: list[DumpWorker] = []
        self.priority = "normal"  # core.impact: the compressors' nice and ionice
        self.seal: BackupSeal | None = None  # the backup's seal when it is encrypted (storage.envelope)
        self.savepoints = False  # workers in their snapshot roll back to a savepoint after each chunk (snapshot module doc)
        self.reading: dict[int, Job] = {}  # worker connection id -> the chunk it reads now (guarded by cv)
        self.yielded: set[int] = set()  # workers whose chunk query the DDL watcher stopped (guarded by cv)
        # workers that set the savepoint: ROLLBACK TO SAVEPOINT keeps it, so one SAVEPOINT serves every chunk (one
        # statement a chunk instead of two: at 10,000 tables each cost a lane 2 s); each worker adds its own
        self.saved: set[int] = set()
        self.yields = 0

    # --- the queues ------------------------------------------------------------------------
    def put(self, kind: str, state: TableState, lower=None, upper=None) -> None:
        """Queue a job; chunk jobs of bigger tables first, splits of bigger tables first."""
        with self.cv:
            seq = 0
            if kind == "chunk":
                seq, state.next_seq = state.next_seq, state.next_seq + 1
                per_chunk = state.plan.est_bytes / max(1, chunking.chunk_count(state.plan.est_rows, self.chunk_rows))
                prio = (1, -per_chunk, next(self.counter))
            else:
                prio = (0, -state.plan.est_bytes, next(self.counter))
            state.pending += 1
            heapq.heappush(self.splits if kind == "split" else self.heap, Job(prio, kind, state, seq, lower, upper))
            self.cv.notify_all()

    def _get(self, kind: str) -> Job | None:
        queue = self.splits if kind == "split" else self.heap
        with self.cv:
            while True:
                if self.failure is not None:
                    return None
                if queue:
                    self.active += 1
                    return heapq.heappop(queue)
                if self.active == 0 and not self.splits and not self.heap:
                    return None
                self.cv.wait()

    def _done(self, job: Job) -> None:
        with self.cv:
            self.active -= 1
            job.table.pending -= 1
            if job.table.pending == 0:
                self.progress.count(tables=1)
            self.cv.notify_all()

    def _fail(self, exc: BaseException) -> None:
        with self.cv:
            first = self.failure is None
            self.failure = self.failure or exc
            self.cv.notify_all()
        if first:  # the dump is lost: stop the other workers' queries now rather than after their chunks
            for worker in self.workers:
                worker.kill()

    # --- running ---------------------------------------------------------------------------
    def run(self, workers: list[DumpWorker]) -> None:
        """Drain the queues (one thread per worker, one splitter; with savepoints, a DDL watcher); re-raise the first
        failure."""
        self.workers = workers
        threads = [threading.Thread(target=self._split_loop, name="dump-split", daemon=True)]
        threads += [
            threading.Thread(target=self._work, args=(w,), name=f"dump-{i}", daemon=True) for i, w in enumerate(workers)
        ]
        finished = threading.Event()
        watcher = threading.Thread(target=self._watch_ddl, args=(finished,), name="dump-ddl-watch", daemon=True)
        for t in threads:
            t.start()
        if self.savepoints:
            watcher.start()
        for t in threads:
            t.join()
        finished.set()
        if watcher.is_alive():
            watcher.join(timeout=10)
        if self.failure is not None:
            raise self.failure

    def _watch_ddl(self, finished: threading.Event) -> None:
        """A DDL waiting for a table a worker reads would hold every write on that table behind it until the chunk
        ends (a metadata lock request queues new ones): stop that chunk's query, which rolls back to its savepoint
        and lets the DDL through, and read the chunk again afterwards (once per waiting session, at most YIELDS times
        per chunk: a DDL that waits on someone else's lock is given way to once, and then waited for). Best effort: a failing watcher
        leaves the dump as it was (writes then wait up to one chunk's time)."""
        try:
            conn = self.server.connect()
        except LastlineError as exc:
            log.warning("dump: no DDL watcher (%s); a DDL on a table being read waits for its chunk to end", exc)
            return
        try:
            conn.autocommit(True)
            cur = conn.cursor()
            cur.execute("SELECT CONNECTION_ID()")
            workers = {w.connection_id: w for w in self.workers}
            own = {int(cur.fetchone()[0]), *workers}
            given: set[int] = set()  # the waiting sessions a chunk gave way to
            if not holds_any(cur, "ALL PRIVILEGES ON *.*", "PROCESS"):
                log.warning("dump: without the PROCESS privilege the DDL watcher sees no other account's statements: a "
                            "DDL on a table being read waits for its chunk to end (GRANT PROCESS ON *.* to the backup user)")
            while not finished.wait(DDL_POLL):
                cur.execute("SELECT ID, INFO FROM information_schema.PROCESSLIST "
                            "WHERE STATE = 'Waiting for table metadata lock' AND INFO IS NOT NULL")
                waiting = [(int(i), str(info)) for i, info in cur.fetchall() if int(i) not in own]
                if not waiting:
                    continue
                with self.cv:
                    reading = dict(self.reading)
                for conn_id, job in reading.items():
                    plan = job.table.plan
                    # once per waiting session: if it still waits after a chunk gave way, someone else holds it back,
                    # and the chunk's read again would only queue behind it too
                    hit = next((w for w in waiting if w[0] not in given and _names_table(w[1], plan.name)), None)
                    if hit is None or job.yields >= YIELDS:
                        continue
                    given.add(hit[0])
                    with self.cv:  # held meanwhile: the worker cannot move on to its next chunk
                        if self.reading.get(conn_id) is not job:
                            continue
                        job.yields += 1
                        self.yielded.add(conn_id)
                        # the worker stops reading (the server may have sent the whole chunk already), and the
                        # server stops a query still running
                        workers[conn_id].give_way()
                        cur.execute(f"KILL QUERY {int(conn_id)}")
                    log.info("dump: session %d waits to change %s (%r): chunk %d gives way and is read again",
                             hit[0], plan.full_name, hit[1][:80], job.seq)
        except Exception as exc:  # noqa: BLE001 - best effort, see the docstring
            log.warning("dump: the DDL watcher stopped (%s); a DDL on a table being read waits for its chunk to end", exc)
        finally:
            conn.close()

    def _split_loop(self) -> None:
        conn = None
        try:
            while (job := self._get("split")) is not None:
                try:
                    if conn is None:
                        conn = self.server.connect()
                        conn.autocommit(True)  # each cut point query ends its own metadata lock: a DDL never waits on it
                        conn.cursor().execute(SESSION)
                    self._split(conn, job.table)
                except BaseException as exc:  # noqa: BLE001 - handed to run()
                    self._fail(self._explain(exc, job))
                    return
                finally:
                    self._done(job)
        finally:
            if conn is not None:
                conn.close()

    def _work(self, worker: DumpWorker) -> None:
        while (job := self._get("chunk")) is not None:
            try:
                self._chunk(worker, job)
            except BaseException as exc:  # noqa: BLE001 - handed to run()
                try:
                    if self._gave_way(worker, job, exc):
                        continue
                except BaseException as again:  # noqa: BLE001 - the savepoint could not go back: the dump is lost
                    exc = again
                self._fail(self._explain(exc, job))
                return
            finally:
                with self.cv:
                    self.reading.pop(worker.connection_id, None)
                self._done(job)

    def _gave_way(self, worker: DumpWorker, job: Job, exc: BaseException) -> bool:
        """Whether `exc` is the DDL watcher's stop of this chunk: then the savepoint goes back (the table's metadata
        lock with it) and the chunk is queued again, whole (its parts are rewritten under the same names)."""
        with self.cv:
            mine = worker.connection_id in self.yielded
            self.yielded.discard(worker.connection_id)
        if not mine or sql_error(exc)[0] != QUERY_INTERRUPTED:
            return False
        _statement(worker, f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
        with self.cv:
            self.yields += 1
            job.table.pending += 1
            heapq.heappush(self.heap, job)
            self.cv.notify_all()
        return True

    def _explain(self, exc: BaseException, job: Job) -> BaseException:
        if isinstance(exc, LastlineError):
            return exc
        code, msg = sql_error(exc)
        what = job.describe()
        if isinstance(exc, WorkerWarning):
            column = self._warning_column(job)
            return IntegrityError(
                f"dumping {what}: the server warned ({msg}){f' on column {column}' if column else ''}. A warning "
                "on a dump query can mean a value was cut or replaced, so this backup is not complete (no "
                "manifest is written); fix the cause (the warning says what) and run the backup again."
            )
        if code in LOST_CONNECTION:
            return ServerError(
                f"lost the connection to the source while dumping {what}: {msg}. The backup is incomplete (no "
                "manifest is written) and the task retries from scratch."
            )
        if code in (1142, 1143, 1227):
            return PreflightError(f"dumping {what}: {msg}; grant the backup user SELECT on it.")
        if code in (1412, 1054, 1146):  # rebuilt, a column dropped or renamed, the table renamed or dropped
            return ServerError(f"{what} was altered (DDL) during the dump: {msg}. The backup is incomplete (no manifest is "
                               "written); the task retries with a new snapshot.")
        return PipelineError(f"dumping {what} failed: {exc}")

    def _warning_column(self, job: Job) -> str | None:
        """Which column's expressions warn on this range (asked again outside the snapshot; None if none does now)."""
        plan = job.table.plan
        where = chunking.range_where(plan.key, job.lower, job.upper) if plan.key else None
        try:
            conn = self.server.connect()
        except LastlineError:
            return None
        try:
            cur = conn.cursor()
            cur.execute(SESSION)
            for col in plan.columns:
                sql = f"SELECT COUNT({dialect.field_sql(col)}), COUNT({dialect.hash_token_sql(col)}) FROM {dialect.qualified(plan.schema, plan.name)}"
                cur.execute(f"{sql} WHERE {where}" if where else sql)
                cur.fetchall()
                if conn.warning_count():
                    return dialect.quote_ident(col.name)
        except Exception:  # noqa: BLE001 - a diagnosis only; the warning itself is the error
            return None
        finally:
            conn.close()
        return None

    def _split(self, conn: Any, state: TableState) -> None:
        plan = state.plan
        cur = conn.cursor()
        if len(plan.key) == 1 and plan.key[0].data_type in chunking.INTEGER_TYPES:
            for lower, upper in chunking.integer_ranges(cur, plan, self.chunk_rows):
                self.put("chunk", state, lower, upper)
            return
        lower = None
        for bound in chunking.walk_bounds(cur, plan, self.chunk_rows):
            self.put("chunk", state, lower, bound)
            lower = bound
        self.put("chunk", state, lower, None)

    def _chunk(self, worker: DumpWorker, job: Job) -> None:
        state, plan = job.table, job.table.plan
        started = time.monotonic()
        where = chunking.range_where(plan.key, job.lower, job.upper) if plan.key else None
        limit = self.chunk_rows * 2 if plan.key else self.chunk_rows

        def new_part(part: int) -> tuple[str, Part]:
            key = chunk_key(self.backup_id, plan, job.seq, part, self.suffix)
            return key, open_part(self.storage, key, self.compression, self.priority, self.seal)

        if self.savepoints:
            if worker.connection_id not in self.saved:
                _statement(worker, f"SAVEPOINT {SAVEPOINT}")
                self.saved.add(worker.connection_id)
            with self.cv:
                self.reading[worker.connection_id] = job
        result = worker.dump(dialect.select_sql(plan.schema, plan.name, plan.columns, where), limit, new_part,
                             self.compression)
        if self.savepoints:  # the table's metadata lock goes: a DDL on it need not wait for the end of the dump
            with self.cv:
                self.reading.pop(worker.connection_id, None)
                self.yielded.discard(worker.connection_id)  # stopped too late: the chunk was whole
            _statement(worker, f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
        with self.cv:
            for p in result.parts:
                state.chunks.append(ChunkInfo(
                    file=p.key.split("/", 1)[1], rows=p.rows, bytes=p.bytes, raw_bytes=p.raw_bytes, sha256=p.sha256,
                    lower=job.lower, upper=job.upper, checksum=str(p.checksum),
                ))
                state.bytes += p.bytes
                state.raw_bytes += p.raw_bytes
                self.progress.count(chunks=1, rows=p.rows, written_bytes=p.bytes)
                self.progress.add(p.raw_bytes)
            state.rows += result.rows
            state.checksum += result.checksum
            state.seconds += time.monotonic() - started

    def queue_tables(self, states: list[TableState]) -> None:
        """The first jobs of each table: a split job, or one chunk for a small or keyless table."""
        for state in states:
            plan = state.plan
            integer_key = len(plan.key) == 1 and plan.key[0].data_type in chunking.INTEGER_TYPES
            if plan.key and (integer_key or chunking.chunk_count(plan.est_rows, self.chunk_rows) > 1):
                self.put("split", state)
            else:
                self.put("chunk", state)
