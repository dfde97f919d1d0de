"""Load a work unit's chunks exactly once: LOAD DATA from a FIFO, one transaction per chunk with its ledger row.

Over 300 lines, kept whole: a chunk's transaction (Loader: its ledger row, its LOAD DATA, its check, the commit) and
load_unit's walk over a unit's chunks (in key order, or helping from the end) are one protocol of the ledger.

Each chunk is streamed from the backup (S3 or SSH), its sha256 checked, into a named pipe read by `LOAD DATA LOCAL
INFILE` (no temporary copy, bounded memory): chunks go in compressed and lastline's handler (logical.format.infile;
never the client library's own) decompresses them in the client, capped at the chunk's raw size. A chunk in a local
folder is offered to the handler as the descriptor the storage opened (no link followed, a regular file), and the
handler checks its sha256 as it reads (Loader._read_local); a sealed one is first opened whole, all checked, into an
anonymous file (chunk_files.opened_chunk). The statement passes no args (a literal path). The ledger row is
inserted first, in the same transaction as the rows: a retried task, a re-triggered run, a killed loader or a crashed
server either finds the row (the chunk is in, skip it) or finds neither the row nor the data (load it again). A second
loader racing on the same chunk waits on the ledger row's lock, then skips it. Where a table's chunks are key ranges,
each chunk's rows are checked against the manifest before its commit (logical.restore.verify).

Non-transactional tables (MyISAM, Aria) keep a failed statement's rows and cannot share the ledger's transaction: one
unit loads each whole (emptied first unless all its chunks are recorded), each chunk proven in a private copy first.

Each unit takes one of `parallel` named locks on the target: two runs on one target never load more than `parallel`
units at once between them (which lane loads which unit: logical.restore.lanes)."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from typing import Any

from lastline.backups import backup_seal
from lastline.core import accounts, stopping
from lastline.core.errors import IntegrityError, LastlineError, ServerError
from lastline.core.progress import Progress
from lastline.core.servers import Server
from lastline.core.sql import LOST_CONNECTION, META_DB, NON_TRANSACTIONAL, sql_error, string_literal
from lastline.logical.format import dialect, infile
from lastline.logical.format.chunk_files import OPENED_MOST, opened_chunk, prove_chunk, write_chunk
from lastline.logical.restore.create import Creates, TableMaker
from lastline.logical.restore.plans import UNIT_TABLES, UnitLoaded
from lastline.logical.restore.target_state import empty_table, loaded_files
from lastline.logical.restore.verify import chunk_checks, table_checksum
from lastline.logical.restore.work_units import Part, WorkUnit
from lastline.manifest import ChunkInfo, LogicalManifest, LogicalTable
from lastline.storage import Storage

log = logging.getLogger(__name__)
LEDGER_TRIES = 5  # a chunk's ledger INSERT, chosen as a deadlock's victim (see Loader.load_chunk)


class Lane:
    """One of `parallel` named locks on the target, held while a unit loads."""

    def __init__(self, server: Server, parallel: int, label: str) -> None:
        self.server, self.parallel, self.label = server, parallel, label
        self.conn: Any = None
        self.name: str | None = None

    def __enter__(self) -> Lane:
        self.conn = self.server.connect()
        cur = self.conn.cursor()
        waited, t0 = False, time.monotonic()
        while True:
            for i in range(self.parallel):
                name = f"lastline-load-lane-{i}"
                cur.execute("SELECT GET_LOCK(%s, 0)", (name,))
                if cur.fetchone()[0] == 1:
                    self.name = name
                    if waited:
                        log.info("%s: got lane %d after %.0f s", self.label, i, time.monotonic() - t0)
                    return self
            if not waited:
                log.info("%s: all %d lanes busy on the target; waiting for one", self.label, self.parallel)
                waited = True
            time.sleep(0.2)

    def __exit__(self, *exc: Any) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()  # releases the lock


class Loader:
    """Loads chunks into one target connection (see the module doc)."""

    def __init__(self, server: Server, storage: Storage, manifest: LogicalManifest, progress: Progress) -> None:
        self.server, self.storage, self.manifest, self.progress = server, storage, manifest, progress
        infile.require()  # before connecting: ConfigError unless lastline's handler is built (never the library's)
        self.conn = server.connect(local_infile=1)
        self.infile = infile.install(self.conn)
        self.in_client, self.seal = infile.in_client(), backup_seal(storage, manifest)  # in_client: False with LASTLINE_INFILE_LIB=off
        self._stop = stopping.add(f"{progress.label}: KILL QUERY on the loader's connection",
                                  stopping.kill_query(server, self.conn.thread_id()))
        self.cur = self.conn.cursor()
        self.check_seconds = 0.0  # spent reading chunks back for their checks
        self.cur.execute(dialect.LOAD_SESSION)
        accounts.unlogged(self.cur)  # the run account may not set sql_log_bin itself
        self.cur.execute("SET SESSION innodb_lock_wait_timeout = 3600, autocommit = 0")

    def close(self) -> None:
        stopping.remove(self._stop)
        with contextlib.suppress(Exception):
            self.conn.close()

    def _stream_into(self, t: LogicalTable, c: ChunkInfo) -> int:
        """LOAD DATA one chunk through a FIFO inside the caller's transaction (its sha256 is known only at its
        end: a refused chunk is rolled back with the transaction); returns rows loaded. A chunk in a local folder
        is read by the handler itself (_read_local; a sealed one larger than OPENED_MOST comes through the FIFO)."""
        if self.in_client and self.storage.local_files and (self.seal is None or c.bytes <= OPENED_MOST):
            return self._read_local(t, c)
        key, what = f"{self.manifest.backup_id}/{c.file}", f"{t.schema}.{t.name}"

        def pump(fh: Any) -> None:  # progress in raw bytes, estimated from the compressed ones
            write_chunk(self.storage, key, self.manifest.compression, c.sha256, fh, what, lambda n: self.progress.add(
                n * c.raw_bytes // max(c.bytes, 1)), decompress=not self.in_client, seal=self.seal)

        errors: list[BaseException] = []
        try:
            with infile.fed_fifo(pump, f"pump-{c.file}") as (fifo, errors):
                self.infile.offer(fifo, self.manifest.compression if self.in_client else "none", c.raw_bytes)
                rows = self._load(t, c, fifo)
        except Exception as exc:  # noqa: BLE001 - the statement failed: a check of the pump's (a sealed chunk's) is why
            if errors and isinstance(errors[0], IntegrityError):
                raise errors[0] from exc
            raise
        if errors and not isinstance(errors[0], BrokenPipeError):
            raise errors[0]
        if errors:
            raise ServerError(f"chunk {self.storage.location(key)} ({what}): the server stopped reading it (did it go away?); the task retries.")
        return self._loaded(t, c, rows)

    def _read_local(self, t: LogicalTable, c: ChunkInfo) -> int:
        """LOAD DATA one local chunk inside the caller's transaction: opened by descriptor (storage.open_file), read by
        the handler, whose sha256 check at the file's end fails the statement (rolled back); a sealed one from the
        anonymous file it is opened into (opened_chunk). Returns rows loaded."""
        key = f"{self.manifest.backup_id}/{c.file}"
        with contextlib.ExitStack() as stack:
            if self.seal is not None:
                fd, sha256 = stack.enter_context(opened_chunk(self.storage, key, c, self.seal, f"{t.schema}.{t.name}"))
            else:
                fd, sha256 = self.storage.open_file(key), c.sha256
                stack.callback(os.close, fd)
                if (size := os.fstat(fd).st_size) != c.bytes:  # before a byte is sent (frames that decompress to nothing)
                    raise IntegrityError(f"chunk {self.storage.location(key)} ({t.schema}.{t.name}) is {size} bytes, the manifest "
                                         f"says {c.bytes}; nothing of it was loaded. Restore from another backup or re-run the backup.")
            rows = self._load_fd(t, c, fd, sha256)
        self.progress.add(c.raw_bytes)
        return self._loaded(t, c, rows)

    def _load_fd(self, t: LogicalTable, c: ChunkInfo, fd: int, sha256: str) -> int:
        """LOAD DATA from the regular file open on `fd` (offer_fd: the statement fails unless it hashes to `sha256`)."""
        token = self.infile.offer_fd(fd, self.manifest.compression, c.raw_bytes, sha256)
        try:
            rows = self._load(t, c, token)
            if not self.infile.verified:  # success means the handler read the file to its end and its hash matched
                raise IntegrityError(f"chunk {self.storage.location(f'{self.manifest.backup_id}/{c.file}')} ({t.schema}."
                                     f"{t.name}) loaded without its sha256 checked at its end; not recorded as loaded.")
        finally:
            self.infile.withdraw()
        return rows

    def _load(self, t: LogicalTable, c: ChunkInfo, path: str) -> int:
        """Run the chunk's LOAD DATA on the offered `path` (a literal: no args, so a `%` in a name stays a `%`);
        the handler's own error (what it found in the chunk) becomes an IntegrityError naming the chunk."""
        try:
            self.cur.execute(dialect.load_sql(t.schema, t.name, [dialect.Column(**col) for col in t.columns], string_literal(path)))
        except BaseException as exc:
            refused = self.infile.refusal(exc, f"{self.storage.location(f'{self.manifest.backup_id}/{c.file}')} ({t.schema}.{t.name})")
            if refused is not None:
                raise refused from exc
            raise
        return self.cur.rowcount

    def _loaded(self, t: LogicalTable, c: ChunkInfo, rows: int) -> int:
        """`rows`, once the statement is known to have left no warning and loaded the manifest's row count."""
        where = f"{self.storage.location(f'{self.manifest.backup_id}/{c.file}')} ({t.schema}.{t.name})"
        if self.conn.warning_count():
            self.cur.execute("SHOW WARNINGS LIMIT 3")
            shown = "; ".join(f"{w[2]}" for w in self.cur.fetchall())
            raise IntegrityError(f"chunk {where} loaded with warnings: {shown}; nothing of it was kept.")
        if rows != c.rows:
            raise IntegrityError(f"chunk {where} loaded {rows} rows, the manifest says {c.rows}; nothing of it was kept.")
        return rows

    def load_chunk(self, t: LogicalTable, c: ChunkInfo, checked: bool = False, where: str | None = None) -> bool:
        """Load one chunk of a transactional table exactly once; False if the ledger already had it. `checked`:
        before the commit, the chunk's rows (those `where` picks; None: the whole table) must have the
        manifest's count and checksum, kept on its ledger row (logical.restore.verify)."""
        for attempt in range(1, LEDGER_TRIES + 1):
            try:
                self.cur.execute(
                    f"INSERT INTO {META_DB}.ledger (backup_id, file, rows_loaded) VALUES (%s, %s, %s)",
                    (self.manifest.backup_id, c.file, c.rows),
                )
                break
            except Exception as exc:
                self.conn.rollback()
                code = sql_error(exc)[0]
                if code == 1062:  # another loader got it in first
                    return False
                # two loaders waited on the row of a third that rolled back (a lane and its helper, or two runs): the
                # server picks one as a deadlock's victim; it asks again, and finds the row free or the other's
                if code != 1213 or attempt == LEDGER_TRIES:
                    raise
                log.info("chunk %s: its ledger row was contended (deadlock, try %d of %d); asking again", c.file, attempt,
                         LEDGER_TRIES)
        try:
            self._stream_into(t, c)
            if checked:
                self._check(t, c, where)
            self.conn.commit()
        except BaseException:
            self._rollback()
            raise
        self.progress.count(chunks=1, rows=c.rows)
        return True

    def _check(self, t: LogicalTable, c: ChunkInfo, where: str | None) -> None:
        """The chunk's rows as the target stores them, read while they are in the buffer pool (see load_chunk)."""
        t0 = time.monotonic()
        rows, checksum = table_checksum(self.cur, self.manifest, t, where)
        self.check_seconds += time.monotonic() - t0
        if (rows, checksum) != (c.rows, c.checksum):
            raise IntegrityError(
                f"chunk {self.storage.location(f'{self.manifest.backup_id}/{c.file}')} ({t.schema}.{t.name}) loaded as "
                f"{rows} rows with checksum {checksum} in its key range; the manifest says {c.rows} rows, checksum "
                f"{c.checksum}; nothing of it was kept. The backup does not match its manifest: restore another one."
            )
        self.cur.execute(f"UPDATE {META_DB}.ledger SET checksum_seen = %s WHERE backup_id = %s AND file = %s",
                         (checksum, self.manifest.backup_id, c.file))

    def load_whole(self, t: LogicalTable) -> None:
        """Reload a non-transactional table from scratch (target_state.empty_table), then record all its chunks."""
        empty_table(self.cur, t.schema, t.name, t.engine)
        for c in t.chunks:  # each from a private copy proven first (prove_chunk: an anonymous file, by descriptor): a
            # refused chunk leaves no row, a killed worker no plaintext of an encrypted one
            with prove_chunk(self.storage, f"{self.manifest.backup_id}/{c.file}", c, self.manifest.compression,
                             f"{t.schema}.{t.name}", lambda n: self.progress.add(n * c.raw_bytes // max(c.bytes, 1)),  # noqa: B023
                             self.seal) as (fd, sha256):  # (the lambda above is used in this iteration only)
                self._loaded(t, c, self._load_fd(t, c, fd, sha256))
            self.progress.count(chunks=1, rows=c.rows)
        self.cur.executemany(
            f"INSERT INTO {META_DB}.ledger (backup_id, file, rows_loaded) VALUES (%s, %s, %s)",
            [(self.manifest.backup_id, c.file, c.rows) for c in t.chunks],
        )
        self.conn.commit()

    def _rollback(self) -> None:
        with contextlib.suppress(Exception):  # the connection may be gone; the server rolls back then
            self.conn.rollback()


def helpable(unit: WorkUnit, tables: dict[tuple[str, str], LogicalTable]) -> list[Part]:
    """The parts of `unit` a lane that helps may load (load_unit's `backwards`): those of transactional tables with
    chunks (a non-transactional table is loaded whole, by the lane that holds it)."""
    return [p for p in unit.parts if p.last >= p.first and tables[(p.schema, p.table)].engine.lower() not in NON_TRANSACTIONAL]


def load_unit(server: Server, storage: Storage, manifest: LogicalManifest, unit: WorkUnit, parallel: int,
              create: Creates | None = None, tables: dict[tuple[str, str], LogicalTable] | None = None,
              backwards: bool = False) -> UnitLoaded:
    """Load every chunk of `unit` not yet in the ledger, each table created first when `create` gives its statement
    (None: they exist already; `tables`: the manifest's by name, if the caller has them); returns UnitLoaded.

    `backwards`: help the lane that holds `unit` (logical.restore.lanes): its transactional chunks from the last one
    down, until one is found in the ledger (that lane got there; a chunk it is loading is waited for on its ledger
    row), so the two meet and the rest of the unit takes about half the time. Each chunk is still loaded exactly
    once; the holding lane goes on in key order, finds the rest in the ledger, and completes the unit's tables."""
    tables = tables if tables is not None else {(t.schema, t.name): t for t in manifest.tables}
    if backwards:
        unit = dataclasses.replace(unit, parts=helpable(unit, tables)[::-1])
    total_chunks = sum(p.last - p.first + 1 for p in unit.parts)
    progress = Progress(f"{'help' if backwards else 'load'} {unit.name}", None if backwards else unit.bytes,
                        counts={"chunks": None if backwards else total_chunks, "rows": None})
    stats: dict[str, dict] = {}
    started_at = time.time()
    created, create_seconds = 0, 0.0
    helped, met = 0, False  # backwards: chunks this lane loaded; whether it met the holding lane
    by_others = 0  # forward: chunks a lane that helped loaded meanwhile
    with Lane(server, parallel, unit.name):
        loader = Loader(server, storage, manifest, progress)
        maker = None
        try:
            done = loaded_files(loader.cur, manifest.backup_id, unit.files(tables))
            loader.conn.commit()
            parts = unit.parts
            if create is not None:
                maker = TableMaker(server, create)
                # its empty tables first: once any chunk of a unit is in the ledger, its tables without chunks exist
                # (a unit found loaded whole creates them if they are not: lanes.load_lane)
                parts = sorted(parts, key=lambda p: p.last >= p.first)
            for part in parts:
                t = tables[(part.schema, part.table)]
                chunks = t.chunks[part.first: part.last + 1]
                if maker is not None and not (backwards and any(c.file in done for c in chunks)):
                    # every part: the ranges of a split table may reach other lanes first (helping, a part the
                    # holding lane has begun exists: its CREATE would wait for the holder's chunk to commit)
                    t0 = time.monotonic()
                    created += maker.make(t.schema, t.name)
                    create_seconds += time.monotonic() - t0
                t0, checks0 = time.monotonic(), loader.check_seconds
                loaded_rows = loaded_bytes = skipped = others = mine = 0
                if t.engine.lower() in NON_TRANSACTIONAL:
                    mine = len(chunks)
                    if all(c.file in done for c in chunks):
                        skipped = len(chunks)
                    else:
                        loader.load_whole(t)
                        loaded_rows, loaded_bytes = t.rows, t.raw_bytes
                elif backwards:  # from the top down, until the holding lane's chunks (see the doc)
                    wheres = chunk_checks(manifest, t)
                    for i, c in reversed(list(enumerate(chunks, part.first))):
                        if c.file in done and not (helped or mine):
                            continue  # above where this lane starts: another helper's, or an earlier try's
                        if c.file in done or not loader.load_chunk(t, c, wheres is not None, wheres[i] if wheres else None):
                            met = True
                            break
                        loaded_rows += c.rows
                        loaded_bytes += c.raw_bytes
                        mine += 1
                    helped += mine
                else:
                    wheres = chunk_checks(manifest, t)
                    for i, c in enumerate(chunks, part.first):
                        if c.file in done or not loader.load_chunk(t, c, wheres is not None, wheres[i] if wheres else None):
                            if c.file in done:
                                skipped += 1  # an earlier try's
                            else:
                                others += 1  # a lane that helped (or another run) loaded it meanwhile
                            progress.count(chunks=1)
                            progress.add(c.raw_bytes)
                            continue
                        loaded_rows += c.rows
                        loaded_bytes += c.raw_bytes
                    mine, by_others = len(chunks) - others, by_others + others  # an earlier try's count as before
                seconds = time.monotonic() - t0
                if mine or not backwards:
                    stats[f"{t.schema}.{t.name}"] = {
                        "rows": loaded_rows, "bytes": loaded_bytes, "seconds": round(seconds, 3), "chunks": mine,
                        "skipped": skipped, "check_seconds": round(loader.check_seconds - checks0, 3),
                    }
                if skipped:
                    log.info("%s.%s: %d chunk(s) already in the ledger, skipped", t.schema, t.name, skipped)
                if met:
                    break
        except Exception as exc:
            code, msg = sql_error(exc)
            if code in LOST_CONNECTION:
                raise ServerError(
                    f"lost the connection to the target while loading {unit.name}: {msg}. Chunks committed so far are "
                    "in the ledger; a retry (or a new run for the same backup) resumes after them."
                ) from exc
            if isinstance(exc, LastlineError):
                raise
            if code in (1114, 1021):  # the table is full / disk full: the datadir's filesystem ran out (or a MEMORY table)
                raise ServerError(
                    f"loading {unit.name} failed: {msg}: the target's datadir filesystem is full (or a MEMORY table reached "
                    "max_heap_table_size). Free space there, then re-run: chunks committed so far are in the ledger and the "
                    "re-run resumes after them.") from exc
            raise LastlineError(f"loading {unit.name} failed: {exc}") from exc
        finally:
            loader.close()
            if maker is not None:
                maker.close()
    log.info("%s; of that, %.1f s reading chunks back for their checks%s%s", progress.line(), loader.check_seconds,
             f", and {create_seconds:.1f} s creating {created} table(s) before their first chunk" if create else "",
             f"; {by_others} chunk(s) loaded meanwhile by a lane that helped" if by_others else "")
    slowest = dict(sorted(stats.items(), key=lambda kv: -kv[1]["seconds"])[:UNIT_TABLES])
    return UnitLoaded(f"{unit.name}, from its end" if backwards else unit.name, slowest,
                      round(time.monotonic() - progress.start, 3), started_at, time.time(),
                      # a split table: by its first unit alone; a unit helped: by the lane that holds it
                      table_count=0 if backwards else sum(p.first == 0 for p in unit.parts),
                      **{k: sum(s[k] for s in stats.values()) for k in ("rows", "bytes", "chunks", "skipped")},
                      check_seconds=round(sum(s["check_seconds"] for s in stats.values()), 3),
                      created=created, create_seconds=round(create_seconds, 3))
