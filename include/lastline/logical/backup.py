"""The logical backup's stages: preflight, dump (one snapshot, a pool of workers), prune.

Layout of `<destination>/<backup_id>/`: `schema.json` (every schema object, see logical_schema),
`schema.sql` (the same, readable), `data/<db>/<table>/<chunk>-<part>.tsv.zst` (see dialect), and
`manifest.json`, written last: a folder without it is incomplete and never restored. The manifest lists
every other file of the folder with its size and sha256.

The rows are read by `parallel` worker processes (tsvdump: C, one connection each, all opened on one
snapshot) that escape each value on the client in one linear pass; the server adds each row's hash,
computed from the stored values, which the manifest sums per chunk and per table (see dialect).
"""
from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from lastline import connections
from lastline.core import stopping
from lastline.core.compression import DEFAULT_COMPRESSION, codec
from lastline.core.errors import IntegrityError, LastlineError, PipelineError, PreflightError, Refusal, ServerError
from lastline.core.plans import Conf
from lastline.core.servers import Server
from lastline.logical import chunking, dialect
from lastline.logical.plans import BackupPlan
from lastline.logical.schema import auto_increment, read_schema, render_sql, resolve_databases
from lastline.logical.snapshot import LOST_CONNECTION, SESSION, SnapshotPool, sql_error
from lastline.logical.worker import DumpWorker, PartWriter, WorkerWarning
from lastline.manifest import (
    MANIFEST,
    ChunkInfo,
    FileInfo,
    LogicalManifest,
    LogicalTable,
    new_backup_id,
    prune_backups,
    write_manifest,
)
from lastline.physical.tools import require_tools
from lastline.storage import Storage, open_storage

log = logging.getLogger(__name__)

# bench/logical_bench.py: 100k-1M rows all dump at the same speed here; 250k keeps chunk files
# around 20-60 MB raw, enough of them for a parallel restore to balance, few enough for Airflow.
DEFAULT_CHUNK_ROWS = 250_000
SCHEMA_FILE = "schema.json"
SCHEMA_SQL = "schema.sql"


def preflight(conf: dict) -> dict:
    """Check credentials, databases, privileges, tools and destination; choose the backup id. Changes nothing."""
    params = Conf(conf)
    server = connections.server(params.required("source_conn_id"))
    compression = params.text("compression", DEFAULT_COMPRESSION)
    require_tools(codec(compression).tool)
    chunk_rows = params.integer("chunk_rows", DEFAULT_CHUNK_ROWS)
    if chunk_rows < 1000:
        raise PreflightError(f"chunk_rows={chunk_rows}: use at least 1000 (100k-1M is the useful range).")
    conn = server.connect()
    try:
        cur = conn.cursor()
        databases = resolve_databases(cur, params.names("databases") or None)
        cur.execute("SELECT @@version")
        version = cur.fetchone()[0]
        plans = chunking.table_plans(cur, databases)
    finally:
        conn.close()
    storage = open_storage(params.required("destination"), params.text("aws_conn_id"))
    storage.check_writable()
    est = sum(p.est_bytes for p in plans)
    storage.require_free(est // 4, f"compressed chunks of {est / 1e9:.2f} GB of data")  # TSV + zstd: ~1/4 of InnoDB
    plan = BackupPlan(
        backup_id=new_backup_id(taken=storage.list_backups()),
        source_conn_id=server.conn_id,
        destination=storage.url,
        aws_conn_id=params.text("aws_conn_id"),
        databases=databases,
        compression=compression,
        chunk_rows=chunk_rows,
        parallel=params.integer("parallel", 2, minimum=1),
        include_grants=params.flag("include_grants"),
        lock_nontransactional=params.flag("lock_nontransactional", True),
        server_version=version,
    )
    log.info(
        "preflight ok: %s, %d databases, %d tables (~%.1f MB) -> %s/%s",
        server.describe(), len(databases), len(plans), est / 1e6, storage.url, plan.backup_id,
    )
    return plan.to_dict()


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


class Progress:
    """Tables and chunks done, rows, bytes and MB/s, logged at most every `every` seconds."""

    def __init__(self, tables: int, est_rows: int, every: float = 5.0) -> None:
        self.tables, self.est_rows, self.every = tables, est_rows, every
        self.start = self.last = time.monotonic()
        self.tables_done = self.chunks = self.rows = self.raw = self.bytes = 0

    def line(self, final: bool = False) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-6)
        text = (
            f"dump: {self.tables_done}/{self.tables} tables, {self.chunks} chunks, {self.rows:,} rows, "
            f"{self.raw / 1e6:,.1f} MB raw -> {self.bytes / 1e6:,.1f} MB, {self.raw / 1e6 / elapsed:.1f} MB/s"
        )
        if not final and self.est_rows and self.rows < self.est_rows and self.rows:
            text += f", ~{(self.est_rows - self.rows) * elapsed / self.rows:.0f} s left (estimated rows)"
        return text

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            log.info("%s", self.line())


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
        self.progress = Progress(len(states), est_rows)
        self.workers: list[DumpWorker] = []

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
                self.progress.tables_done += 1
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
        """Drain the queues (one thread per worker, one splitter); re-raise the first failure."""
        self.workers = workers
        threads = [threading.Thread(target=self._split_loop, name="dump-split", daemon=True)]
        threads += [
            threading.Thread(target=self._work, args=(w,), name=f"dump-{i}", daemon=True) for i, w in enumerate(workers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.failure is not None:
            raise self.failure

    def _split_loop(self) -> None:
        conn = None
        try:
            while (job := self._get("split")) is not None:
                try:
                    if conn is None:
                        conn = self.server.connect()
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
                self._fail(self._explain(exc, job))
                return
            finally:
                self._done(job)

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
        if code == 1412:
            return ServerError(f"{what} was altered (DDL) during the dump: {msg}. The task retries with a new snapshot.")
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

        def new_part(part: int) -> tuple[str, PartWriter]:
            key = chunk_key(self.backup_id, plan, job.seq, part, self.suffix)
            return key, PartWriter(self.storage, key, self.compression)

        result = worker.dump(dialect.select_sql(plan.schema, plan.name, plan.columns, where), limit, new_part,
                             self.compression)
        with self.cv:
            for p in result.parts:
                state.chunks.append(ChunkInfo(
                    file=p.key.split("/", 1)[1], rows=p.rows, bytes=p.bytes, raw_bytes=p.raw_bytes, sha256=p.sha256,
                    lower=job.lower, upper=job.upper, checksum=str(p.checksum),
                ))
                state.bytes += p.bytes
                state.raw_bytes += p.raw_bytes
                self.progress.chunks += 1
                self.progress.rows += p.rows
                self.progress.raw += p.raw_bytes
                self.progress.bytes += p.bytes
            self.progress.tick()
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


@stopping.stops_cleanly
def dump(plan: BackupPlan | dict) -> dict:
    """Open one snapshot on `parallel` connections and dump schema and data; write the manifest last."""
    plan = BackupPlan.of(plan)
    server = connections.server(plan.source_conn_id)
    storage = open_storage(plan.destination, plan.aws_conn_id)
    backup_id = plan.backup_id
    if storage.exists(f"{backup_id}/{MANIFEST}"):
        raise Refusal(f"{storage.location(backup_id)} is already complete; trigger a new run for a new backup.")
    storage.delete_backup(backup_id)  # what an earlier, failed attempt of this task left
    started_at = datetime.now(timezone.utc)
    t0 = time.monotonic()
    with SnapshotPool(server, plan.parallel) as pool:
        probe = server.connect()
        try:
            plans = chunking.table_plans(probe.cursor(), plan.databases)
        finally:
            probe.close()
        states = [TableState(p) for p in plans]
        dumper = Dumper(server, storage, plan.backup_id, plan.compression, plan.chunk_rows, states, sum(p.est_rows for p in plans))
        coords = pool.open()
        _check_tables_unchanged(pool.control.cursor(), plan.databases, plans)
        locked = [s for s in states if not s.plan.transactional]
        if locked and plan.lock_nontransactional:
            log.info("dumping %d non-transactional tables under the lock: %s", len(locked), ", ".join(s.plan.full_name for s in locked))
            dumper.queue_tables(locked)
            dumper.run(pool.workers)
        else:
            for s in locked:
                s.consistent = False
        pool.release()
        dumper.queue_tables([s for s in states if s.plan.transactional or not plan.lock_nontransactional])
        schema_holder: dict[str, Any] = {}
        reader = threading.Thread(target=_read_schema_into, args=(pool.control, plan, schema_holder), daemon=True)
        reader.start()
        dumper.run(pool.workers)
        reader.join()
        if "error" in schema_holder:
            raise schema_holder["error"]
    schema = schema_holder["schema"]
    schema_files = []
    for name, data in ((SCHEMA_FILE, json.dumps(schema, indent=1, sort_keys=True).encode()), (SCHEMA_SQL, render_sql(schema).encode())):
        storage.write_bytes(f"{backup_id}/{name}", data)
        schema_files.append(FileInfo(name, len(data), hashlib.sha256(data).hexdigest()))
    seconds = time.monotonic() - t0
    log.info("%s", dumper.progress.line(final=True))
    manifest = build_manifest(plan, coords, states, schema, schema_files, started_at, seconds, pool.lock_seconds)
    where = write_manifest(storage, manifest)
    log.info(
        "logical backup complete: %d tables, %s rows, %.1f MB raw -> %.1f MB in %.1f s (%.1f MB/s); lock held %.2f s; manifest %s",
        len(manifest.tables), f"{manifest.rows:,}", manifest.raw_bytes / 1e6, manifest.bytes / 1e6, seconds, manifest.mb_per_s,
        pool.lock_seconds, where,
    )
    return {"manifest": where, "tables": len(manifest.tables), "rows": manifest.rows, "bytes": manifest.bytes, "seconds": round(seconds, 3)}


def _read_schema_into(conn: Any, plan: BackupPlan, holder: dict) -> None:
    try:
        holder["schema"] = read_schema(conn.cursor(), plan.databases, plan.include_grants)
    except BaseException as exc:  # noqa: BLE001 - re-raised by dump()
        holder["error"] = exc


def _check_tables_unchanged(cur: Any, databases: list[str], plans: list[chunking.TablePlan]) -> None:
    """Under the lock: the table list read before it still holds (else a DDL raced the start)."""
    now = set(chunking.base_tables(cur, databases))
    before = {(p.schema, p.name) for p in plans}
    if now != before:
        changed = sorted(f"{s}.{n}" for s, n in now ^ before)
        raise ServerError(f"tables changed while the dump started ({', '.join(changed)}); the task retries.")


def build_manifest(
    plan: BackupPlan | dict, coords: Any, states: list[TableState], schema: dict, schema_files: list[FileInfo],
    started_at: datetime, seconds: float, lock_seconds: float,
) -> LogicalManifest:
    """The manifest of a finished dump: every table with its chunks, every file with its sha256."""
    plan = BackupPlan.of(plan)
    creates = {(t["schema"], t["name"]): t["create"] for t in schema["tables"]}
    tables = [
        LogicalTable(
            schema=s.plan.schema, name=s.plan.name, engine=s.plan.engine, charset=s.plan.charset,
            collation=s.plan.collation, consistent=s.consistent, chunking=s.plan.chunking,
            key=[k.name for k in s.plan.key], columns=[c.to_dict() for c in s.plan.columns],
            rows=s.rows, checksum=str(s.checksum), bytes=s.bytes, raw_bytes=s.raw_bytes, seconds=round(s.seconds, 3),
            auto_increment=auto_increment(creates.get((s.plan.schema, s.plan.name), "")),
            chunks=sorted(s.chunks, key=lambda c: c.file),
        )
        for s in states
    ]
    raw = sum(t.raw_bytes for t in tables)
    files = schema_files + sorted(
        (FileInfo(c.file, c.bytes, c.sha256) for t in tables for c in t.chunks), key=lambda f: f.name
    )
    return LogicalManifest(
        backup_id=plan.backup_id, source_conn_id=plan.source_conn_id, server_version=coords.server_version,
        sql_mode=coords.sql_mode, time_zone="+00:00", dialect=dialect.DIALECT, compression=plan.compression,
        chunk_rows=plan.chunk_rows, parallel=plan.parallel,
        databases=[{k: d[k] for k in ("name", "charset", "collation")} for d in schema["databases"]],
        schema_file=SCHEMA_FILE, schema_sha256=schema_files[0].sha256, files=files, checksum=dialect.CHECKSUM, started_at=started_at.isoformat(),
        finished_at=datetime.now(timezone.utc).isoformat(), seconds=round(seconds, 3), lock_seconds=round(lock_seconds, 3),
        rows=sum(t.rows for t in tables), bytes=sum(t.bytes for t in tables), raw_bytes=raw,
        mb_per_s=round(raw / 1e6 / max(seconds, 1e-6), 2), binlog_file=coords.binlog_file,
        binlog_position=coords.binlog_position, gtid=coords.gtid, source_identity=coords.identity, include_grants=plan.include_grants,
        tables=tables,
    )


def prune(conf: dict) -> list[str]:
    """Delete complete logical backups beyond `keep` and incomplete ones older than the grace period."""
    params = Conf(conf)
    storage = open_storage(params.required("destination"), params.text("aws_conn_id"))
    grace = timedelta(hours=params.number("incomplete_grace_hours", 24))
    return prune_backups(storage, "logical", int(params.number("keep", 7)), grace)
