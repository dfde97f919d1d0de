"""Restore drills: a backup is only "good" once a drill restored it.

`restore_drill` restores the newest backup (the one a backup's Asset event names, or `<destination>/latest`)
into a scratch server whose connection says `"role": "drill"` (its data is replaced at every drill, so no
other server is accepted), verifies it as every restore does, and records the time to restore (RTO: from
the drill's preflight to its verified end) and the MB/s, per backup, in a history kept beside the reports
(lastline.reports). The drill's report charts that history; an RTO over the budget, or a drill that
failed, alerts.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from lastline import connections, reports
from lastline.backups import BackupRef, open_backup
from lastline.core import bounds, svg
from lastline.core.errors import IntegrityError
from lastline.core.plans import PARALLEL, Conf, Plan, RunParams

log = logging.getLogger(__name__)
HISTORY = "restore_drill"  # the history's name in the reports' storage
KINDS = ("logical", "physical")


@dataclass(frozen=True)
class DrillPlan(Plan):
    """One drill: the backup, the drill server, the RTO budget, when it began, and the restore's Params."""

    kind: str  # KINDS: the backup's (the DAG branches on it)
    backup: BackupRef  # resolved, its manifest pinned: the restore reads that one
    bytes: int
    drill_conn_id: str
    rto_budget_seconds: float
    started: float  # epoch seconds: the RTO counts from here
    restore: dict[str, Any]
    authenticity: str = ""  # whether the storage key authenticated the backup's manifest, in words


def preflight(conf: RunParams) -> DrillPlan:
    """The drill server's guard (role drill, not protected), the backup and its kind; the restore's conf."""
    params = Conf(conf)
    drill_conn_id = params.required("drill_conn_id")
    server = connections.server(drill_conn_id)
    server.require_role("drill", "restores drills into it", "a restore drill replaces its data every time")
    kind = params.choice("kind", KINDS, "logical")
    backup = open_backup(BackupRef.param(params, kind))
    manifest = backup.manifest
    # parallel: bounded here on the drill server, before a drill is recorded (a bad value is a refusal, not a failed
    # drill that alerts); the restore takes it as is
    restore: dict[str, Any] = {"target_conn_id": drill_conn_id, **backup.ref.params(), "force": True,
                               "parallel": bounds.parallel(server, params.integer("parallel", PARALLEL, minimum=1)),
                               "restore_into_source": ""}
    budget = params.number("rto_budget_minutes", 60.0, minimum=0) * 60
    log.info("drill: %s backup %s into %s (RTO budget %.0f s)", kind, backup.ref.url, server.describe(), budget)
    return DrillPlan(kind=kind, backup=backup.ref, bytes=int(manifest.bytes), drill_conn_id=drill_conn_id,
                     rto_budget_seconds=budget, started=time.time(), restore=restore,
                     authenticity=backup.authenticity.describe())


def record(plan: DrillPlan, verified: dict | None, dag_id: str, run_id: str) -> dict:
    """Append this drill to the history (ok or not, RTO, MB/s), save its report (the history charted), and
    return the entry (the history's record); the caller alerts and fails the run when the drill failed or broke its
    budget. `verified`: the restore's verify result (its XCom form), None when the restore did not get there."""
    seconds = max(0.001, time.time() - plan.started)
    entry = {"backup_id": plan.backup.backup_id, "kind": plan.kind, "backup": plan.backup.url, "run_id": run_id,
             "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "ok": verified is not None,
             "rto_seconds": round(seconds, 1), "mb_per_s": round(plan.bytes / 1e6 / seconds, 2) if verified is not None else 0.0,
             "rto_budget_seconds": plan.rto_budget_seconds, "authenticity": plan.authenticity}
    entry["within_budget"] = entry["ok"] and (not plan.rto_budget_seconds or seconds <= plan.rto_budget_seconds)
    history = reports.append_history(HISTORY, entry)
    recent = history[-20:]
    label = [f"{h['backup_id']} ({h['kind'][0]})" + ("" if h["ok"] else " FAILED") for h in recent]
    head = (f"restore drills: {plan.kind} backup {plan.backup.backup_id} "
            + (f"restored and verified in {seconds:,.1f} s ({entry['mb_per_s']:,.1f} MB/s)" if entry["ok"] else "FAILED")
            + (f"; RTO budget {plan.rto_budget_seconds:,.0f} s" if plan.rto_budget_seconds else ""))
    chart = svg.document(head, [
        (list(zip(label, (float(h["rto_seconds"]) for h in recent))), "time to restore per backup (last 20 drills)", "s", "#4477aa"),
        (list(zip(label, (float(h["mb_per_s"]) for h in recent))), "restore rate (the backup's MB per second)", "MB/s", "#228833"),
    ])
    where = reports.save(dag_id, run_id, {"restore_drill.md": markdown(entry, verified, plan.drill_conn_id, recent),
                                          "restore_drill.svg": chart,
                                          "restore_drill.json": json.dumps({**entry, "history": recent}, indent=1)},
                         lead=True)  # the verdict opens the run's report, before the restore's own
    log.info("drill %s: %s in %.1f s (%.1f MB/s), the backup %s; report %s/restore_drill.svg", plan.backup.backup_id,
             "verified" if entry["ok"] else "FAILED", seconds, entry["mb_per_s"], plan.authenticity or "not checked", where)
    return entry


def rto(entry: dict) -> str:
    """The RTO against its budget, in words: `RTO 42.0 s, within the budget of 3,600 s (1%)`."""
    seconds, budget = float(entry["rto_seconds"]), float(entry["rto_budget_seconds"] or 0)
    if not budget:
        return f"RTO {seconds:,.1f} s (no budget set)"
    shown = f"{budget:,.0f}" if budget >= 10 else f"{budget:.2g}"
    return (f"RTO {seconds:,.1f} s, {'within' if seconds <= budget else 'OVER'} the budget of {shown} s "
            f"({100 * seconds / budget:,.0f}%)")


def markdown(entry: dict, verified: dict | None, drill_conn_id: str, recent: list[dict]) -> str:
    """The drill's page: the verdict (restored and verified or FAILED, the RTO against its budget) first, then the
    recent drills. `verified`: the restore's verify result, None when the restore did not get there."""
    what = f"{entry['kind']} backup {entry['backup_id']} into {drill_conn_id}"
    if not entry["ok"]:
        head = f"# Restore drill of {what}: FAILED after {float(entry['rto_seconds']):,.1f} s"
        line = ("**That backup is not known to restore: the restore did not reach its verified end. See the failed "
                f"task's log.** Its manifest was {entry['authenticity'] or 'not checked for authenticity'}.")
    else:
        head = (f"# Restore drill of {what}: verified, {rto(entry)}" if entry["within_budget"]
                else f"# Restore drill of {what}: verified, but {rto(entry)}")
        figures = f"{int(verified.get('tables', 0)):,} tables, {int(verified.get('rows', 0)):,} rows" if verified else ""
        line = (f"**Restored and verified as every restore is ({figures}; the restore's own report follows), "
                f"{rto(entry)}, at {float(entry['mb_per_s']):,.1f} MB/s.** Its manifest was "
                f"{entry['authenticity'] or 'not checked for authenticity'}. The RTO runs from the drill's start to "
                "its verified end.")
    lines = [head, "", line, "", f"- **Backup:** `{entry['backup']}`", "",
             "## The recent drills", "", "| backup | kind | result | RTO (s) | MB/s |", "|---|---|---|---:|---:|"]
    for h in reversed(recent[-10:]):
        result = "FAILED" if not h["ok"] else ("verified" if h.get("within_budget", True) else "verified, over budget")
        lines.append(f"| {h['backup_id']} | {h['kind']} | {result} | {float(h['rto_seconds']):,.1f} | "
                     f"{float(h['mb_per_s']):,.1f} |")
    return "\n".join(lines) + "\n"


def verdict(entry: dict) -> str | None:
    """What to alert about this drill (None: a good drill)."""
    if not entry["ok"]:
        return (f"restore drill of {entry['kind']} backup {entry['backup_id']} FAILED after {entry['rto_seconds']:,.0f} s: "
                "that backup is not known to restore; see the drill run's log")
    if not entry["within_budget"]:
        return (f"restore drill of {entry['kind']} backup {entry['backup_id']} took {entry['rto_seconds']:,.0f} s, over the "
                f"RTO budget of {entry['rto_budget_seconds']:,.0f} s")
    return None


def fail_if_bad(entry: dict) -> None:
    """A failed drill fails its run (after it was recorded and alerted)."""
    if not entry["ok"]:
        raise IntegrityError(verdict(entry) or "drill failed")
