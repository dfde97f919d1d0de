"""The logical pipelines' plans: what preflight decided, read by every later task (see core.plans)."""
from __future__ import annotations

from dataclasses import dataclass, field

from lastline.core.impact import DEFAULT_PRIORITY
from lastline.core.plans import MAX_REPLICA_LAG, PARALLEL, Plan, Result

INDEX_BUILDS = ("per_table", "after_all")  # per_table: the lane that commits a table's last chunk builds its indexes


@dataclass(frozen=True)
class BackupPlan(Plan):
    """One logical backup: source, destination, what and how to dump."""

    backup_id: str
    source_conn_id: str
    destination: str
    databases: list[str]
    compression: str
    chunk_rows: int
    parallel: int
    server_version: str
    aws_conn_id: str | None = None
    include_grants: bool = False
    lock_nontransactional: bool = True
    lock_method: str = "auto"  # snapshot.snapshot_method: auto, backup_stage or ftwrl
    long_query_guard: float = 60.0  # snapshot.Guard, in seconds
    long_query_wait: float = 300.0
    kill_long_queries: bool = False
    lock_timeout: float = 0.5
    priority: str = DEFAULT_PRIORITY  # core.impact
    max_read_mb_per_s: float = 0.0
    max_replica_lag: float = MAX_REPLICA_LAG
    replica: dict | None = None  # replication.source.check, when the source is a replica


@dataclass(frozen=True)
class DumpResult(Result):
    """A finished dump: where its manifest is, what it holds, and what it held production back for."""

    manifest: str
    tables: int
    rows: int
    bytes: int
    seconds: float
    lock_method: str  # snapshot.snapshot_method's choice: backup_stage or ftwrl
    commits_held_seconds: float
    ddl_held_seconds: float
    ddl_yields: int  # times the dump let a waiting DDL statement through (dumper.Dumper.yields)


@dataclass(frozen=True)
class RestorePlan(Plan):
    """One logical restore: the backup, the target, and how to load it."""

    target_conn_id: str
    destination: str
    backup_id: str
    databases: list[str] = field(default_factory=list)
    parallel: int = PARALLEL
    tune: bool = True
    restart_allowed: bool = False
    defer_indexes: bool = True
    index_build: str = INDEX_BUILDS[0]  # a lane builds a table's indexes once its rows are in; or after_all: finalize
    force: bool = False
    restore_grants: bool = False
    resume: bool = False
    redo_log_bytes: int = 1 << 30
    buffer_pool_bytes: int | None = None
    bytes: int = 0
    aws_conn_id: str | None = None
    at_risk: dict | None = None  # what the restore would replace, when it asks for approval first (core.sql.tables_at_risk)
    restore_account: str = ""  # the run account every statement from the backup runs under (core.accounts)
    manifest_sha256: str = ""  # the manifest preflight checked: later tasks refuse any other (manifest.read_manifest)
    enable_events: bool = False  # restored events come back disabled unless the run asks
