"""The physical pipelines' plans (what preflight decided, read by every later task) and their steps' results
(see core.plans; a step on the target's datadir returns mariabackup.target_datadir.StepResult)."""
from __future__ import annotations

from dataclasses import dataclass

from lastline.backups import BackupRef
from lastline.core.impact import DEFAULT_PRIORITY
from lastline.core.plans import MAX_REPLICA_LAG, PARALLEL, Plan, Result


@dataclass(frozen=True)
class BackupPlan(Plan):
    """One physical backup: source, destination, artifact."""

    backup_id: str
    source_conn_id: str
    destination: str
    compression: str
    parallel: int
    artifact: str
    server_version: str
    tool_version: str
    source_identity: str | None = None
    aws_conn_id: str | None = None
    priority: str = DEFAULT_PRIORITY  # core.impact
    max_read_mb_per_s: float = 0.0
    max_replica_lag: float = MAX_REPLICA_LAG
    replica: dict | None = None  # replicas.backup_source.check, when the source is a replica


@dataclass(frozen=True)
class RestorePlan(Plan):
    """One physical restore: the backup, the target's datadir and how to extract and prepare."""

    target_conn_id: str
    backup: BackupRef  # resolved, its manifest pinned: later tasks refuse any other (backups.open_backup)
    parallel: int = PARALLEL
    use_memory: int = 0
    datadir: str = ""
    datadir_state: str = ""
    force: bool = False
    bytes: int = 0
    at_risk: dict | None = None  # what the restore would replace, when it asks for approval first (core.sql.tables_at_risk)
    authenticity: str = ""  # whether the storage key authenticated that manifest, in words (every report says it)


@dataclass(frozen=True)
class StreamResult(Result):
    """The backup stream: what the artifact is, what the backup is consistent with, what it holds."""

    bytes: int
    sha256: str
    seconds: float
    mb_per_s: float
    started_at: str
    finished_at: str
    datadir_bytes: int
    binlog_file: str | None
    binlog_position: int | None
    gtid: str | None
    server_version: str
    tables: int  # how many: the list itself waits in TABLES_FILE beside the artifact (XCom stays small at any count)
    tables_sha256: str  # of TABLES_FILE, as the stream wrote it: finish reads that very list into the manifest
    tables_bytes: int  # its size: finish reads no more than that of a folder anyone may write to
    primary: dict | None = None  # from a replica: its primary's coordinates
    prepare_options: dict[str, str] | None = None  # what prepare needs, from the source's variables (prepare_options)
    encryption: dict | None = None  # the artifact's envelope (key ids and wrapped keys: never a key); None: not sealed


@dataclass(frozen=True)
class Verified(Result):
    """What a physical restore's verify proved."""

    tables: int
    rows: int
    server_version: str
    seconds: float


@dataclass(frozen=True)
class RestoreReport(Result):
    """The restore's report: its verification in words, its total time."""

    verification: str
    seconds: float
