"""The physical backup's stages: preflight, stream, manifest (its prune: physical.prune). Each is one Airflow task.

With an encryption key connection (storage.encryption_keys) the stream is sealed (storage.sealing) in this process on
its way from the compressor to the storage's writer (`mariabackup | zstd | seal -> storage`: the key never reaches a
child process), and the manifest records the envelope; its size and sha256 are of the sealed bytes as stored."""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict
from datetime import UTC, datetime

from lastline import connections
from lastline.core import bounds, impact, stopping
from lastline.core import datadir as datadir_ops
from lastline.core.compression import DEFAULT_COMPRESSION, codec
from lastline.core.errors import IntegrityError, PipelineError, StorageError
from lastline.core.hosts import require_tools
from lastline.core.option_files import option_file
from lastline.core.pipeline import run_pipeline
from lastline.core.plans import MAX_REPLICA_LAG, PARALLEL, Conf, RunParams
from lastline.core.servers import Server
from lastline.core.sql import SYSTEM_SCHEMAS
from lastline.manifest import PhysicalManifest, TableInfo, new_backup_id, write_manifest
from lastline.mariabackup import commands
from lastline.mariabackup.target_datadir import options_of
from lastline.physical.plans import BackupPlan, StreamResult
from lastline.replicas import backup_source, pauses
from lastline.storage import open_allowed, open_storage
from lastline.storage.encryption_keys import deployment_encryption_keys
from lastline.storage.envelope import BackupSeal, new_seal

log = logging.getLogger(__name__)
TABLES_FILE = "tables.json"  # the stream's table list (InnoDB's estimates), read into the manifest by finish


def table_estimates(server: Server) -> list[TableInfo]:
    """Every user base table with its engine, estimated rows and bytes."""
    rows = server.query(
        "SELECT TABLE_SCHEMA, TABLE_NAME, ENGINE, COALESCE(TABLE_ROWS, 0), "
        "COALESCE(DATA_LENGTH, 0) + COALESCE(INDEX_LENGTH, 0) FROM information_schema.TABLES "
        "WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN (%s, %s, %s, %s) "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME",
        SYSTEM_SCHEMAS,
    )
    return [TableInfo(s, n, e, int(r), int(b)) for s, n, e, r, b in rows]


def preflight(conf: RunParams) -> BackupPlan:
    """Check tools, credentials, versions and the destination; choose the backup id. Changes nothing."""
    params = Conf(conf)
    server = connections.server(params.required("source_conn_id"))
    server.require_datadir()
    host = server.runner()
    compression = params.text("compression", DEFAULT_COMPRESSION)
    c = codec(compression)
    priority = bounds.priority(server, params.choice("priority", tuple(impact.PRIORITIES), impact.DEFAULT_PRIORITY))
    max_read = bounds.read_cap(server, impact.read_cap(params.number("max_read_mb_per_s", 0, minimum=0)))
    parallel = bounds.parallel(server, params.integer("parallel", PARALLEL, minimum=1))  # mariabackup's copy threads
    require_tools("mariabackup", c.tool, *impact.tools(priority, max_read), host=host)
    commands.check_open_files(host, server.require_datadir(), server.describe())
    max_lag = params.number("max_replica_lag", MAX_REPLICA_LAG, minimum=0)
    replica = None
    if backup_source.wanted(server, params.flag("from_replica")):
        max_lag = bounds.replica_lag(server, max_lag)
        replica = backup_source.check(server, max_lag, single=True)
    version, identity = server.variables("version")["version"], server.identity()
    tool = commands.tool_version(host)
    commands.check_versions(tool, version)
    storage = open_allowed(params.required("destination"), params.text("aws_conn_id"))
    storage.check_writable()
    data_bytes = sum(t.bytes for t in table_estimates(server))
    # compressed InnoDB backups are typically 25-50% of the data; demand the conservative half
    storage.require_free(data_bytes // 2, f"the backup of {data_bytes / 1e9:.2f} GB of data")
    plan = BackupPlan(
        backup_id=new_backup_id(taken=storage.list_backups()),
        source_identity=identity,
        source_conn_id=server.conn_id,
        destination=storage.url,
        aws_conn_id=params.text("aws_conn_id"),
        compression=compression,
        parallel=parallel,
        artifact=commands.artifact_name(compression),
        server_version=version,
        tool_version=tool,
        priority=priority,
        max_read_mb_per_s=max_read,
        max_replica_lag=max_lag,
        replica=replica,
    )
    log.info("preflight ok: %s -> %s/%s/%s", server.describe(), storage.url, plan.backup_id, plan.artifact)
    return plan


class _Sealed:
    """The stream sealed into the storage's writer (`sealer`: write the compressor's output there, close it at the
    end), what is stored counted and hashed: the manifest's size and sha256."""

    def __init__(self, write: Callable[[bytes | memoryview], object], seal: BackupSeal, key: str) -> None:
        self._write, self.bytes, self.digest = write, 0, hashlib.sha256()
        self.sealer = seal.writer(self, key)

    def write(self, data: bytes | memoryview) -> None:
        self._write(data)
        self.bytes += len(data)
        self.digest.update(data)

    def feed(self, data: bytes) -> None:
        """The compressor's output, sealed."""
        self.sealer.write(data)


@stopping.stops_cleanly
def stream(plan: BackupPlan) -> StreamResult:
    """Run `mariabackup --stream | compressor` (on the source's host) into the destination; sha256 and
    bytes counted in-stream."""
    server = connections.server(plan.source_conn_id)
    datadir = server.require_datadir()
    host = server.runner()
    storage = open_storage(plan.destination, plan.aws_conn_id)
    tables = table_estimates(server)
    open_files = commands.check_open_files(host, datadir, server.describe())  # again: the datadir may have grown
    replica = None
    if plan.replica is not None:  # mariabackup leaves a SQL thread it finds stopped as it is
        replica = backup_source.attempt(server, plan.replica, plan.max_replica_lag, single=True)
    options = options_of(server)  # what the restore's prepare will read, never the stream's backup-my.cnf
    keys = deployment_encryption_keys()  # a wrong key connection is refused before the stream starts
    seal, envelope = new_seal(keys, plan.backup_id) if keys else (None, None)
    started = datetime.now(UTC)
    key = f"{plan.backup_id}/{plan.artifact}"
    # mariabackup --safe-slave-backup pauses the replica's SQL thread: recorded for as long as the stream runs
    pause = pauses.recorded(server, plan.replica["sql_running"], f"physical backup {plan.backup_id}") \
        if plan.replica is not None else nullcontext()
    with pause, option_file(server, ("client", "mariabackup"), on_host=True) as opt, storage.writer(key) as writer:
        sealed = _Sealed(writer.write, seal, key) if seal else None
        stages = commands.backup_stages(opt, datadir, plan.parallel, plan.compression, host=host, priority=plan.priority,
                                        max_read_mb_per_s=plan.max_read_mb_per_s, replica=plan.replica is not None,
                                        open_files=open_files)
        log.info("stream: %s", " | ".join(s.display() for s in stages))
        try:
            result = run_pipeline(stages, sink=sealed.feed if sealed else writer.write, label="backup stream",
                                  hash_sink=sealed is None)  # sealed: the stored bytes are hashed (_Sealed)
        except PipelineError as exc:
            raise PipelineError(f"{exc}\nNothing was kept at {storage.location(key)}; the backup can be re-run.") from exc
        mb_log = result.stderr["mariabackup"]
        if not commands.backup_completed(mb_log):
            raise PipelineError("mariabackup exited 0 without `completed OK!`; the stream is not trusted.")
        if sealed:
            sealed.sealer.close()  # its final chunk: a stream cut before it reads as cut
    finished = datetime.now(UTC)
    facts = commands.parse_backup_log(mb_log)
    listed = json.dumps([asdict(t) for t in tables]).encode()
    storage.write_bytes(f"{plan.backup_id}/{TABLES_FILE}", listed)
    stats = StreamResult(
        bytes=sealed.bytes if sealed else result.bytes_out, seconds=round(result.seconds, 3),
        sha256=sealed.digest.hexdigest() if sealed else result.sha256_out or "",
        mb_per_s=round(result.mb_per_s, 2), started_at=started.isoformat(), finished_at=finished.isoformat(),
        datadir_bytes=datadir_ops.used_bytes(host, datadir), binlog_file=facts["binlog_file"],
        binlog_position=facts["binlog_position"], gtid=facts["gtid"],
        server_version=facts["server_version"] or plan.server_version, tables=len(tables),
        tables_sha256=hashlib.sha256(listed).hexdigest(), tables_bytes=len(listed), primary=primary_of(replica, mb_log),
        prepare_options=options, encryption=envelope.to_json() if envelope else None)
    log.info("backup stream done: %.1f MB in %.1f s (%.1f MB/s), binlog %s:%s, gtid %s", stats.bytes / 1e6, stats.seconds,
             stats.mb_per_s, stats.binlog_file, stats.binlog_position, stats.gtid)
    return stats


def primary_of(replica: dict | None, mb_log: str) -> dict | None:
    """From a replica: where its primary was (mariabackup --slave-info), with the replica's lag as the stream began."""
    if replica is None:
        return None
    found = commands.primary_position(mb_log)
    return {**found, "primaries": replica["primaries"], "lag_seconds": replica["lag_seconds"]}


def resume_replica(plan: BackupPlan, streamed: StreamResult | None = None) -> list[str]:
    """Teardown: the replica's SQL thread runs again if the stream was killed while mariabackup held it stopped
    (`streamed`, the stream's result, is None then); after a stream that completed, nothing."""
    return backup_source.resume_unless_done(plan.source_conn_id, plan.replica, streamed)


def finish(plan: BackupPlan, stats: StreamResult) -> str:
    """Check the artifact is whole, then write manifest.json: the commit marker of a complete backup."""
    storage = open_storage(plan.destination, plan.aws_conn_id)
    key = f"{plan.backup_id}/{plan.artifact}"
    size = storage.size(key)
    if size != stats.bytes:
        raise StorageError(f"{storage.location(key)} holds {size} bytes, the stream wrote {stats.bytes}: re-run the backup.")
    listing = f"{plan.backup_id}/{TABLES_FILE}"
    wrong = IntegrityError(f"{storage.location(listing)} is not the table list the stream wrote: re-run the backup.")
    if storage.size_if_exists(listing) != stats.tables_bytes:  # the size first: never read more than was written
        raise wrong
    listed = storage.read_bytes(listing)
    if hashlib.sha256(listed).hexdigest() != stats.tables_sha256:
        raise wrong
    manifest = PhysicalManifest(
        backup_id=plan.backup_id,
        source_conn_id=plan.source_conn_id,
        tool_version=plan.tool_version,
        artifact=plan.artifact,
        compression=plan.compression,
        parallel=plan.parallel,
        source_identity=plan.source_identity,
        tables=[TableInfo(**t) for t in json.loads(listed)],
        **{k: v for k, v in stats.to_dict().items() if k not in ("tables", "tables_sha256", "tables_bytes")},
    )
    where = write_manifest(storage, manifest)
    log.info("manifest written: %s (%d tables)", where, len(manifest.tables))
    return where

