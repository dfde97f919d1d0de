"""The point-in-time restore's plans (what its preflight decided) and its steps' results (see core.plans)."""
from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class Cleaned(Result):
    """The replay's teardown: whether a replay's leftovers (its connection, the globals it changed) were put back."""

    cleaned: bool
