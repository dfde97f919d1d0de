"""The logical restore's plan and its stages' results: what preflight decided, read by every later task (see
core.plans)."""
from __future__ import annotations

from dataclasses import dataclass, field

from lastline.backups import BackupRef
from lastline.core.plans import PARALLEL, Plan, Result

INDEX_BUILDS = ("per_table", "after_all")  # per_table: the lane that commits a table's last chunk builds its indexes


@dataclass(frozen=True)
class RestorePlan(Plan):
    """One logical restore: the backup, the target, and how to load it."""

    target_conn_id: str
    backup: BackupRef  # resolved, its manifest pinned: later tasks refuse any other (backups.open_backup)
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
    at_risk: dict | None = None  # what the restore would replace, when it asks for approval first (core.sql.tables_at_risk)
    restore_account: str = ""  # the run account every statement from the backup runs under (core.accounts)
    authenticity: str = ""  # whether the storage key authenticated that manifest, in words (every report says it)
    enable_events: bool = False  # restored events come back disabled unless the run asks


@dataclass(frozen=True)
class ConfigSnapshot(Result):
    """The restore's setup: the target's production values, as found before a restore tuned anything."""

    variables: dict[str, str]
    restart_profile: bool
    taken_at: str
    run_id: str
    inherited: bool = False  # left by an earlier run that did not revert


@dataclass(frozen=True)
class Tuned(Result):
    """What tune set (the restart settings through the drop-in, when it restarted)."""

    applied: dict[str, str]
    restarted: bool


@dataclass(frozen=True)
class SchemaCreated(Result):
    """create_schema: tables and sequences created (their held-back indexes come later); `in_lanes`: the tables left
    to the lanes, each created by the lane that loads it."""

    tables: int
    seconds: float
    in_lanes: int = 0


@dataclass(frozen=True)
class UnitLoaded(Result):
    """One work unit a lane loaded: its totals, and its slowest tables (`schema.name`: rows, bytes, seconds, chunks,
    skipped, check_seconds; at most UNIT_TABLES of them, so that a lane's XCom stays small at any table count)."""

    unit: str
    tables: dict[str, dict]
    seconds: float
    started_at: float  # epoch seconds: the report's timeline
    finished_at: float
    table_count: int = 0
    rows: int = 0
    bytes: int = 0
    chunks: int = 0
    skipped: int = 0
    check_seconds: float = 0.0
    created: int = 0  # tables this unit created before their first chunk (logical.restore.create.table_creates)
    create_seconds: float = 0.0


UNIT_TABLES = 20  # the slowest tables a UnitLoaded names


@dataclass(frozen=True)
class Finalized(Result):
    """finalize: its seconds, and each part's (indexes, auto_increment, objects, grants, analyze)."""

    seconds: float
    steps: dict[str, float]


@dataclass(frozen=True)
class Reverted(Result):
    """The teardown: the values put back, whether it restarted, and whether the run account was dropped."""

    reverted: dict[str, str]
    restarted: bool
    snapshot: dict[str, str] | None = None  # the production values read back (None: nothing was tuned)
    run_account_dropped: bool = False


@dataclass(frozen=True)
class Verified(Result):
    """What a logical restore's verify proved: rows and checksums of every table, every object present."""

    tables: int
    rows: int
    objects: dict[str, int]
    row_hashes: bool  # False: a backup from before row hashes (its checksums are over the dump's text)
    seconds: float
