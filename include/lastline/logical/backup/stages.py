"""The logical backup's stages: preflight, dump (one snapshot, a pool of workers), resume_replica, prune.

Layout of `<destination>/<backup_id>/`: `schema.json` (every schema object, see format.schema),
`schema.sql` (the same, readable), `data/<db>/<table>/<chunk>-<part>.tsv.zst` (see dialect), and
`manifest.json`, written last: a folder without it is incomplete and never restored. The manifest lists
every other file of the folder with its size and sha256. With an encryption key connection (storage.encryption_keys)
every file but the manifest (chunk files, schema.json, schema.sql) is sealed (storage.sealing) with the backup's
data key, whose envelope the manifest records; the manifest's sizes and sha256 are of the sealed bytes as stored.

The rows are read by `parallel` worker processes (tsvdump: C, one connection each, all opened on one
snapshot) that escape each value on the client in one linear pass; the server adds each row's hash,
computed from the stored values, which the manifest sums per chunk and per table (see dialect).
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from lastline import connections
from lastline.core import bounds, impact, stopping
from lastline.core.compression import DEFAULT_COMPRESSION, codec
from lastline.core.errors import PreflightError, Refusal
from lastline.core.hosts import require_tools
from lastline.core.plans import KEEP, MAX_REPLICA_LAG, PARALLEL, Conf, RunParams
from lastline.core.servers import Server
from lastline.core.sql import placeholders
from lastline.logical.backup.dumper import Dumper, TableState
from lastline.logical.backup.plans import BackupPlan, DumpResult
from lastline.logical.backup.snapshot import METHODS, Guard, SnapshotPool, snapshot_method
from lastline.logical.format import chunking, dialect
from lastline.logical.format.schema import auto_increment, read_schema, render_sql, require_object_privileges, resolve_databases
from lastline.manifest import (
    MANIFEST,
    FileInfo,
    LogicalManifest,
    LogicalTable,
    json_lines,
    new_backup_id,
    prune_backups,
    write_manifest,
)
from lastline.replicas import backup_source as replica_source
from lastline.storage import open_allowed, open_storage
from lastline.storage.encryption_keys import deployment_encryption_keys
from lastline.storage.envelope import new_seal

log = logging.getLogger(__name__)

# bench/logical_bench.py: 100k-1M rows all dump at the same speed here; 250k keeps chunk files
# around 20-60 MB raw, enough of them for a parallel restore to balance, few enough for Airflow.
DEFAULT_CHUNK_ROWS = 250_000
SCHEMA_FILE = "schema.json"
SCHEMA_SQL = "schema.sql"


def refuse_versioned(cur: Any, databases: list[str]) -> None:
    """System-versioned tables hold history a logical backup does not carry (it would keep their current rows
    only, and it used to leave them out without a word): refused, naming them."""
    if not databases:
        return
    cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'SYSTEM VERSIONED' "
                f"AND TABLE_SCHEMA IN ({placeholders(databases)}) ORDER BY 1, 2", databases)
    found = [f"{s}.{n}" for s, n in cur.fetchall()]
    if found:
        raise PreflightError(
            f"{len(found)} system-versioned table(s) ({', '.join(found[:10])}): a logical backup does not carry their "
            "history yet. Back these databases up with physical_backup, or leave them out of databases."
        )


def preflight(conf: RunParams) -> BackupPlan:
    """Check credentials, databases, privileges, tools and destination; choose the backup id. Changes nothing."""
    params = Conf(conf)
    server = connections.server(params.required("source_conn_id"))
    compression = params.text("compression", DEFAULT_COMPRESSION)
    priority = bounds.priority(server, params.choice("priority", tuple(impact.PRIORITIES), impact.DEFAULT_PRIORITY))
    require_tools(codec(compression).tool, *impact.tools(priority, pv=False))
    chunk_rows = params.integer("chunk_rows", DEFAULT_CHUNK_ROWS)
    if chunk_rows < 1000:
        raise PreflightError(f"chunk_rows={chunk_rows}: use at least 1000 (100k-1M is the useful range).")
    with server.session() as cur:
        databases = resolve_databases(cur, params.names("databases") or None)
        refuse_versioned(cur, databases)
        require_object_privileges(cur, databases)
        cur.execute("SELECT @@version")
        version = cur.fetchone()[0]
        plans = chunking.table_plans(cur, databases)
    guard = snapshot_guard(server, params, version)
    lock_method = params.choice("lock_method", METHODS, "auto")
    bounds.lock_method(server, lock_method, snapshot_method(version) == "backup_stage")
    snapshot_method(version, lock_method)  # backup_stage on a server without it: refused now
    parallel = bounds.parallel(server, params.integer("parallel", PARALLEL, minimum=1))
    parallel = bounds.free_connections(server, parallel, own=2, label="dump workers")  # + control, replica pause
    max_read = bounds.read_cap(server, impact.read_cap(params.number("max_read_mb_per_s", 0, minimum=0)))
    max_lag = params.number("max_replica_lag", MAX_REPLICA_LAG, minimum=0)
    replica = None
    if replica_source.wanted(server, params.flag("from_replica")):
        max_lag = bounds.replica_lag(server, max_lag)
        replica = replica_source.check(server, max_lag)
    storage = open_allowed(params.required("destination"), params.text("aws_conn_id"))
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
        parallel=parallel,
        include_grants=params.flag("include_grants"),
        lock_nontransactional=params.flag("lock_nontransactional", True),
        lock_method=lock_method,
        long_query_guard=guard.threshold,
        long_query_wait=guard.wait,
        kill_long_queries=guard.kill,
        lock_timeout=guard.lock_timeout,
        server_version=version,
        priority=priority,
        max_read_mb_per_s=max_read,
        max_replica_lag=max_lag,
        replica=replica,
    )
    log.info(
        "preflight ok: %s, %d databases, %d tables (~%.1f MB) -> %s/%s",
        server.describe(), len(databases), len(plans), est / 1e6, storage.url, plan.backup_id,
    )
    return plan


def snapshot_guard(server: Server, params: Conf, version: str) -> Guard:
    """The long-statement guard a run asks for, within its server's bounds (lastline.core.bounds): killing only where
    allowed and past the floor, the lock attempt and the wait under their ceilings."""
    threshold = params.number("long_query_guard", 60.0, minimum=0)
    return Guard(
        threshold=threshold,
        wait=bounds.long_query_wait(server, params.number("long_query_wait", 300.0, minimum=0)),
        kill=bounds.kill_long_queries(server, params.flag("kill_long_queries"), threshold),
        lock_timeout=bounds.lock_timeout(server, params.number("lock_timeout", 0.5, minimum=0.01)),
    )


@stopping.stops_cleanly
def dump(plan: BackupPlan) -> DumpResult:
    """Open one snapshot on `parallel` connections and dump schema and data; write the manifest last."""
    server = connections.server(plan.source_conn_id)
    storage = open_storage(plan.destination, plan.aws_conn_id)
    backup_id = plan.backup_id
    if storage.exists(f"{backup_id}/{MANIFEST}"):
        raise Refusal(f"{storage.location(backup_id)} is already complete; trigger a new run for a new backup.")
    storage.delete_backup(backup_id)  # what an earlier, failed attempt of this task left
    keys = deployment_encryption_keys()  # a wrong key connection is refused before the source is touched
    seal, envelope = new_seal(keys, backup_id) if keys else (None, None)
    started_at = datetime.now(UTC)
    t0 = time.monotonic()
    guard = Guard(plan.long_query_guard, plan.long_query_wait, plan.kill_long_queries, plan.lock_timeout)
    replica = None
    if plan.replica is not None:  # what an earlier, killed attempt left stopped runs again; the lag is checked anew
        replica = replica_source.attempt(server, plan.replica, plan.max_replica_lag)
    held: dict[str, Any] = {}
    workers = bounds.free_connections(server, plan.parallel, own=2, label="dump workers")  # the load may have grown
    with SnapshotPool(server, workers, guard, plan.lock_method, plan.priority, plan.max_read_mb_per_s) as pool:

        def frozen() -> None:
            """DDL waits (and, with backup_stage, writes to non-transactional tables): the table list, the schema
            and the non-transactional tables read here are those of the snapshot."""
            cur = pool.control.cursor()
            plans = chunking.table_plans(cur, plan.databases)
            held["schema"] = read_schema(cur, plan.databases, plan.include_grants)
            held["states"] = states = [TableState(p) for p in plans]
            held["dumper"] = dumper = Dumper(server, storage, plan.backup_id, plan.compression, plan.chunk_rows, states,
                                             sum(p.est_rows for p in plans))
            dumper.priority, dumper.seal = plan.priority, seal
            locked = [s for s in states if not s.plan.transactional]
            if locked and plan.lock_nontransactional:
                log.info("dumping %d non-transactional tables while their writes wait: %s", len(locked),
                         ", ".join(s.plan.full_name for s in locked))
                dumper.queue_tables(locked)
                dumper.run(pool.workers)
            else:
                for s in locked:
                    s.consistent = False

        if replica is None:
            coords, primary = pool.open(frozen), None
        else:  # the SQL thread stands still while the snapshot opens: the primary's coordinates are exact
            with replica_source.paused(server, what=f"logical backup {plan.backup_id}") as paused:
                coords = pool.open(frozen)
                primary = {**paused["read"](), "primaries": replica["primaries"], "lag_seconds": replica["lag_seconds"]}
            log.info("the primary's coordinates: GTID %s, binlog %s:%s", primary["gtid"], primary["binlog_file"],
                     primary["binlog_position"])
        states, dumper = held["states"], held["dumper"]
        dumper.savepoints = pool.savepoints
        dumper.queue_tables([s for s in states if s.plan.transactional or not plan.lock_nontransactional])
        dumper.run(pool.workers)
    schema = held["schema"]
    schema_files = []
    for name, data in ((SCHEMA_FILE, json_lines(schema).encode()), (SCHEMA_SQL, render_sql(schema).encode())):
        data = seal.sealed(data, f"{backup_id}/{name}") if seal else data  # size and sha256: of the stored bytes
        storage.write_bytes(f"{backup_id}/{name}", data)
        schema_files.append(FileInfo(name, len(data), hashlib.sha256(data).hexdigest()))
    seconds = time.monotonic() - t0
    log.info("%s", dumper.progress.line(final=True))
    manifest = build_manifest(plan, coords, states, schema, schema_files, started_at, seconds, pool.writes_blocked_seconds,
                              primary)
    if envelope is not None:
        manifest = dataclasses.replace(manifest, encryption=envelope.to_json())
    where = write_manifest(storage, manifest)
    log.info(
        "logical backup complete: %d tables, %s rows, %.1f MB raw -> %.1f MB in %.1f s (%.1f MB/s); %s: writes blocked up "
        "to %.3f s (the wait for the lock included; held %.3f s), DDL blocked %.2f s; manifest %s",
        len(manifest.tables), f"{manifest.rows:,}", manifest.raw_bytes / 1e6, manifest.bytes / 1e6, seconds, manifest.mb_per_s,
        pool.method, pool.writes_blocked_seconds, pool.lock_seconds, pool.ddl_seconds, where,
    )
    return DumpResult(
        manifest=where, tables=len(manifest.tables), rows=manifest.rows, bytes=manifest.bytes, seconds=round(seconds, 3),
        lock_method=pool.method, commits_held_seconds=round(pool.lock_seconds, 4), ddl_held_seconds=round(pool.ddl_seconds, 3),
        ddl_yields=dumper.yields, writes_blocked_seconds=round(pool.writes_blocked_seconds, 4),
    )


def build_manifest(
    plan: BackupPlan, coords: Any, states: list[TableState], schema: dict, schema_files: list[FileInfo],
    started_at: datetime, seconds: float, lock_seconds: float, primary: dict | None = None,
) -> LogicalManifest:
    """The manifest of a finished dump: every table with its chunks, every file with its sha256; `lock_seconds`: the
    longest a write could wait behind the snapshot, the wait for its lock included."""
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
        finished_at=datetime.now(UTC).isoformat(), seconds=round(seconds, 3), lock_seconds=round(lock_seconds, 3),
        rows=sum(t.rows for t in tables), bytes=sum(t.bytes for t in tables), raw_bytes=raw,
        mb_per_s=round(raw / 1e6 / max(seconds, 1e-6), 2), binlog_file=coords.binlog_file,
        binlog_position=coords.binlog_position, gtid=coords.gtid, primary=primary, source_identity=coords.identity,
        include_grants=plan.include_grants,
        tables=tables,
    )


def resume_replica(plan: BackupPlan, dumped: DumpResult | None = None) -> list[str]:
    """Teardown: the replica's SQL thread runs again if the dump was killed while it stood still (`dumped`, the dump's
    result, is None then); after a dump that completed, nothing (it started what it stopped)."""
    return replica_source.resume_unless_done(plan.source_conn_id, plan.replica, dumped)


def prune(conf: RunParams) -> list[str]:
    """Delete complete logical backups beyond `keep` and incomplete ones older than the grace period."""
    params = Conf(conf)
    storage = open_allowed(params.required("destination"), params.text("aws_conn_id"))
    grace = timedelta(hours=params.number("incomplete_grace_hours", 24))
    return prune_backups(storage, "logical", int(params.number("keep", KEEP)), grace)
