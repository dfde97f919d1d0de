"""The point-in-time restore's plans (what its preflight decided) and its steps' results (see core.plans)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from lastline.core.plans import Plan, Result


@dataclass(frozen=True)
class ReplayPlan(Plan):
    """The roll forward: the span of the archive to apply (span.Span's dict form), how, and into what."""

    target_conn_id: str
    destination: str
    span: dict[str, Any]
    method: str = "auto"  # replay.METHODS
    threads: int = 4
    aws_conn_id: str | None = None
    databases: list[str] | None = None  # a logical base's: the replay reaches these and no others


@dataclass(frozen=True)
class PitrPlan(Plan):
    """One point-in-time restore: the base and its restore's Params (under its kind), the line of history, the
    replay. The restore groups read `physical` or `logical` as their Params, the replay reads `replay`."""

    kind: str  # physical or logical: the base's
    base: str
    until: str
    branch: str
    window: dict[str, Any]
    replay: dict[str, Any]  # ReplayPlan's dict form
    physical: dict[str, Any] | None = None
    logical: dict[str, Any] | None = None
    archive: str = ""  # how the archive was checked against the head Airflow recorded (catalog.check_head), in words


@dataclass(frozen=True)
class Replayed(Result):
    """The roll forward's result: what it applied, how, up to where, and the target's GTID position after it."""

    method: str  # parallel or pipe (replay.METHODS, as chosen)
    transactions: int  # applied by this run (a resumed run: by its last attempt)
    bytes: int  # of archived binlogs, cut to the span
    seconds: float
    until: str  # as asked, resolved to a time, a GTID or latest (window.Until.describe)
    gtid_position: str  # the target's, after the replay: it holds every transaction applied
    last_gtid: str | None = None  # the last transaction applied (None: nothing to apply)
    last_time: int | None = None  # its commit time on the source (UTC seconds)
    last_time_utc: str | None = None
    not_applied: str = ""  # what the archive holds after the stop, in words
    prepared_xa: list[str] = field(default_factory=list)  # XA transactions left prepared, as on the source then
    left_out: list[dict[str, str]] = field(default_factory=list)  # a logical base's: statements on other databases
    left_out_count: int = 0
    resumed: bool = False  # this run's replay resumed an earlier attempt's (transactions: the last attempt's only)

    @classmethod
    def of_result(cls, result: dict[str, Any]) -> Replayed:
        """From replay.apply's result (as its ledger records it: fields it does not name are left out)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in result.items() if k in names})


@dataclass(frozen=True)
class PitrReport(Result):
    """The point-in-time restore's report: its verdict in words, and where the report was saved."""

    verdict: str
    report: str


@dataclass(frozen=True)
class Cleaned(Result):
    """The replay's teardown: whether a replay's leftovers (its connection, the globals it changed) were put back."""

    cleaned: bool
