"""The point-in-time restore's report: the roll-forward's verdict first (the target, `until` as asked and the point it
resolved to, the base, the transactions replayed, the last one applied and its commit time, the recoverable window the
archive offered, the method, how it was verified), then the figures; saved ahead of the base restore's own report in
the run's folder (lastline.reports)."""
from __future__ import annotations

import json
import logging
from typing import Any

from lastline import reports
from lastline.core.progress import plural
from lastline.pitr.plans import PitrPlan, PitrReport, Replayed

log = logging.getLogger(__name__)
FILE = "point_in_time_restore.md"


def base_verification(dag_id: str, run_id: str, kind: str) -> str:
    """What the base's restore proved, in words, as its own report (saved earlier in this run) says it."""
    try:
        saved = json.loads(reports.read(dag_id, run_id, f"{kind}_restore.json"))
    except (FileNotFoundError, ValueError):
        return "Verified by the base's restore (its report is not in this run's folder)."
    return str(saved.get("verification") or "Verified by the base's restore.")


def _method(replayed: Replayed, threads: int) -> str:
    if replayed.method == "parallel":
        return f"the target's own parallel applier ({plural(threads, 'thread')})"
    return "mariadb-binlog | mariadb (one session)"


def resolved(replayed: Replayed) -> str:
    """The point `until` resolved to: the last transaction applied and its commit time."""
    if not replayed.last_gtid:
        return "the base itself (no transaction to apply)"
    return f"GTID {replayed.last_gtid}, committed at {replayed.last_time_utc}"


def replayed_count(replayed: Replayed) -> str:
    """How many transactions were replayed: by this run, or by its last attempt where it resumed an earlier one's."""
    return plural(replayed.transactions, "transaction") + " replayed" + (" in this attempt" if replayed.resumed else "")


def verified(replayed: Replayed) -> str:
    """How the replay was checked, by its method: the parallel applier records each transaction's GTID with its data;
    the pipe records nothing, so its position is lastline's own word."""
    checked = "each transaction checked against its archived segment's sha256 before it was applied"
    position = replayed.gtid_position or "empty"
    if replayed.method == "pipe" and replayed.transactions:
        return f"The pipe ended without error; lastline set the GTID position ({position}); {checked}."
    if replayed.method == "pipe":
        return f"Nothing to replay; the target's GTID position is {position}."
    return f"Verified: the target's GTID position ({position}) holds every transaction replayed, {checked}."


def verdict(plan: PitrPlan, replayed: Replayed, target: str) -> str:
    """The report's first line: what was restored where, rolled forward to what, and how that was verified."""
    return (f"Restored {plan.kind} base {plan.base} into {target} and rolled it forward to {plan.until}: "
            f"{replayed_count(replayed)}, the last applied {resolved(replayed)}. {verified(replayed)}")


def markdown(plan: PitrPlan, replayed: Replayed, base_verified: str) -> str:
    """The Report tab's first page."""
    target = str(plan.replay["target_conn_id"])
    w: dict[str, Any] = plan.window or {}
    until_how = {"latest": "resolved to the archive's end", "GTID": "applied through that transaction"}.get(
        plan.until.split(" ")[0], "resolved to the last transaction committed at or before that second")
    window = (f"from {w.get('from_time') or 'its first file'} to {w.get('to_time') or 'its end'}"
              + (f", its last transaction GTID {w['to_gtid']}" if w.get("to_gtid") else "")
              + f", branch {w.get('branch', plan.branch)}; "
              + (f"holes: {', '.join(w['holes'])}" if w.get("holes") else "no hole"))
    lines = [
        f"# Point-in-time restore of {target} to {plan.until}: {replayed_count(replayed)}, the last "
        f"{resolved(replayed)}", "",
        f"**{verdict(plan, replayed, target)}**", "",
        f"- **Until:** {plan.until} as asked; {until_how}: {resolved(replayed)}",
        f"- **Recoverable window** the archive offered this base: {window}",
        f"- **Base:** {plan.kind} backup {plan.base}, at GTID {plan.replay['span'].get('base_gtid') or 'none'}. "
        f"{base_verified}",
        f"- **Replay:** {plural(replayed.transactions, 'transaction')}"
        f"{' in this attempt (it resumed an earlier one)' if replayed.resumed else ''}, {replayed.bytes:,} bytes of archived binlogs, "
        f"by {_method(replayed, int(plan.replay.get('threads') or 1))}, in {replayed.seconds:,.1f} s",
        f"- **Not applied:** {replayed.not_applied or 'nothing the archive holds'}",
    ]
    if plan.archive:
        lines.append(f"- **Archive:** {plan.archive}")
    if replayed.left_out_count:
        lines.append(f"- **Left out:** {plural(replayed.left_out_count, 'statement')} on other databases than the "
                     "restored ones (a logical base's replay never runs them): "
                     + "; ".join(f"{s['gtid']} `{s['statement'][:80]}`" for s in replayed.left_out[:5]))
    if replayed.prepared_xa:
        lines.append(f"- **XA transactions left prepared** (their XA COMMIT comes after until): "
                     f"{'; '.join(f'`` {x} ``' for x in replayed.prepared_xa)}; end each on the target with `XA COMMIT <id>` "
                     "or `XA ROLLBACK <id>`, the id as shown")
    return "\n".join(lines) + "\n"


def write(plan: PitrPlan, replayed: Replayed, dag_id: str = "point_in_time_restore",
          run_id: str | None = None) -> PitrReport:
    """Save the report (its Markdown first in the run's report, then its figures as JSON) and log its verdict.
    `run_id`: the run's (as a task, Airflow's context gives it)."""
    run_id = run_id or "manual"
    target = str(plan.replay["target_conn_id"])
    base_verified = base_verification(dag_id, run_id, plan.kind)
    figures = {"verdict": verdict(plan, replayed, target), "target": target, "until": plan.until,
               "base": plan.base, "kind": plan.kind, "branch": plan.branch, "window": plan.window,
               "base_verification": base_verified, "archive": plan.archive, **replayed.to_dict()}
    where = reports.save(dag_id, run_id, {FILE: markdown(plan, replayed, base_verified),
                                          "point_in_time_restore.json": json.dumps(figures, indent=1, default=str)},
                         lead=True)  # the roll-forward's verdict opens the run's report, before the base's restore
    log.info("report: %s", figures["verdict"])
    log.info("report: %s/%s", where, FILE)
    return PitrReport(figures["verdict"], f"{where}/{FILE}")
