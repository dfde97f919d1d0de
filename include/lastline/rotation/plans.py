"""What key_rotation decides and does: the destination and its backups (the plan), and per backup or archive branch
an outcome (re-wrapped, or skipped and why), the bytes it wrote, whether Airflow's pin of it was updated."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from lastline.core.plans import Plan, Result

REWRAPPED, WOULD = "rewrapped", "would_rewrap"  # WOULD: a dry run's
CURRENT, UNENCRYPTED, GONE = "current", "unencrypted", "gone"  # nothing to do (GONE: pruned during the run)
# left under an older key: an old key dropped now would leave these unreadable, so each fails the run
UNAUTHENTICATED, UNREADABLE, NOKEY, CHANGED = "unauthenticated", "unreadable", "nokey", "changed"
PROBLEMS = (UNAUTHENTICATED, UNREADABLE, NOKEY, CHANGED)
UNDONE = "undone"  # a backup whose task left no outcome (it failed after its retries)


@dataclasses.dataclass(frozen=True)
class RotationPlan(Plan):
    """One destination (as the deployment's roots allow it), its backup folders with a manifest (oldest first), what
    the rotation wraps under (`wraps_to`: "k2 (kek), ops (x25519)", "" without a key to write with), whether the
    deployment has a storage key (the manifests are then authenticated before and signed after) and `dry_run`."""

    destination: str
    aws_conn_id: str | None
    backups: list[str]
    wraps_to: str = ""
    storage_key: bool = False
    dry_run: bool = False


@dataclasses.dataclass(frozen=True)
class Outcome(Result):
    """One backup (or `binlogs/<branch>`) and what the rotation did with it: `status`, `why` in words for a skip, the
    key ids it was wrapped under before (`was`) and after (`now`), the bytes written and whether the pin Airflow
    keeps of the newest backup was updated."""

    backup_id: str
    kind: str | None
    status: str
    why: str = ""
    was: str = ""
    now: str = ""
    bytes: int = 0
    pinned: bool = False

    def describe(self) -> str:
        """One phrase: `20261128T161432Z-7c93b6 (logical): rewrapped, k1 (kek) -> k2 (kek)`."""
        keys = f", {self.was} -> {self.now}" if self.now else f", under {self.was}" if self.was else ""
        return f"{self.backup_id} ({self.kind or '?'}): {self.status}{keys}" + (f": {self.why}" if self.why else "")


def outcomes(found: Any) -> list[Outcome]:
    """The outcomes in `found`: one, a task's list of them, or the mapped tasks' lists (XCom's dicts typed again)."""
    if isinstance(found, Outcome | Mapping):
        return [Outcome.of(found)]
    return [o for x in found or [] if x for o in outcomes(x)]


def summary(plan: RotationPlan, done: list[Outcome], archive: list[Outcome] | None) -> dict[str, Any]:
    """The run in figures: how many of each status, the bytes written, and the problems (each backup left under an
    older key, by name and why; every backup of the plan without an outcome; the archive unread)."""
    by = {o.backup_id: o for o in done}
    every = [by.get(b) or Outcome(b, None, UNDONE, "its task did not end (see its log)") for b in plan.backups]
    every += archive if archive is not None else [Outcome("binlogs", "binlogs", UNDONE, "its task did not end")]
    counts: dict[str, int] = {}
    for o in every:
        counts[o.status] = counts.get(o.status, 0) + 1
    return {"destination": plan.destination, "dry_run": plan.dry_run, "wraps_to": plan.wraps_to, "counts": counts,
            "bytes_written": sum(o.bytes for o in every if o.status == REWRAPPED),
            "problems": [o.describe() for o in every if o.status in (*PROBLEMS, UNDONE)],
            "outcomes": [o.to_dict() for o in every]}
