"""The staging refresh's plan (what its preflight decided) and its steps' results (see core.plans)."""
from __future__ import annotations

from dataclasses import dataclass, field

from lastline.backups import BackupRef
from lastline.core.plans import Plan, Result
from lastline.staging.rules import Rule


@dataclass(frozen=True)
class StagingPlan(Plan):
    """One staging refresh: the backup, the staging target, the rules, and the restore it runs."""

    target_conn_id: str
    backup: BackupRef  # its manifest the one the PII guard read: the restore and the late objects read that one
    databases: list[str]
    rules: list[dict]
    masking_key_conn_id: str
    open_for_writes: bool
    restore: dict = field(default_factory=dict)
    kept_objects: list[str] = field(default_factory=list)  # "<db>.<object>": "keep" rules (schema text kept as is)

    def rule_list(self) -> list[Rule]:
        return [Rule(**r) for r in self.rules]


@dataclass(frozen=True)
class Masked(Result):
    """mask: the tables masked by this try, and those a first try had masked already (a retry skips them)."""

    seconds: float
    tables: int
    skipped: list[str]


@dataclass(frozen=True)
class MaskingVerified(Result):
    """verify_masking's audit: per masked column its strategy, values, rows changed and survivors (none), and the
    joins between masked columns that still match."""

    columns: list[dict]
    joins: list[dict]


@dataclass(frozen=True)
class LateObjects(Result):
    """The triggers and events created once the masking was verified, and their definer."""

    created: int
    definer: str


@dataclass(frozen=True)
class Opened(Result):
    """open: whether staging was opened for writes (else it stays read-only)."""

    open_for_writes: bool


@dataclass(frozen=True)
class Locked(Result):
    """The quarantine's setup: the accounts locked until the masking is verified, and the sessions ended."""

    locked: list[str]
    sessions_killed: int


@dataclass(frozen=True)
class Closed(Result):
    """The quarantine's teardown: what it dropped (an unverified run's data) and the accounts it unlocked."""

    dropped: list[str]
    unlocked: list[str]
