"""The logical backup's plan and result: what preflight decided, read by the dump (see core.plans)."""
from __future__ import annotations

from dataclasses import dataclass

from lastline.core.impact import DEFAULT_PRIORITY
from lastline.core.plans import MAX_REPLICA_LAG, Plan, Result


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
    replica: dict | None = None  # replicas.backup_source.check, when the source is a replica


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
    writes_blocked_seconds: float = 0.0  # the longest a write could wait behind the snapshot, the lock's wait included
