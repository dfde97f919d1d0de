"""backup_verify's report: per backup its verdict (ok / damaged / missing, naming each file and what differs), its
newest restore drill, how far the archive rolls it forward and whether its sealed files were opened; the archive's own verdict; saved in the run's Report
and in a history the Backups page reads (each backup's newest read-back). What to alert about, and the refusal that
fails the run when anything is damaged or missing."""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from lastline import drill, reports
from lastline.core.errors import IntegrityError
from lastline.core.plans import plain
from lastline.core.progress import plural
from lastline.manifest import backup_time
from lastline.verify.plans import GONE, OK, ArchiveVerdict, BackupVerdict, Coverage, VerifyPlan

log = logging.getLogger(__name__)
HISTORY = "backup_verify"  # the read-backs' history in the reports' storage (the Backups page's "Read back" column)
UNREAD = "unread"  # a backup whose task did not end (it failed after its retries): nothing is known of it


def verdicts_of(plan: VerifyPlan, found: Any) -> list[BackupVerdict]:
    """Every backup of the plan with its verdict, in the plan's order; one whose task left none is `unread`. `found`:
    the mapped tasks' XComs (one instance's alone, as Airflow hands a single one back, or none)."""
    by = {v.backup_id: v for v in (BackupVerdict.of(x) for x in _flat(found))}
    return [by.get(b) or BackupVerdict(b, None, UNREAD) for b in plan.backups]


def _flat(found: Any) -> list[Mapping[str, Any]]:
    """The verdicts in `found`: one, a task's list of them, or the mapped tasks' lists (a failed task's too)."""
    if isinstance(found, Mapping):
        return [found]
    return [v for x in found or [] if x for v in _flat(x)]


def newest_drills(destination: str, history: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The newest drill of each backup of `destination`, by backup id (the drills' history, lastline.drill)."""
    out: dict[str, dict[str, Any]] = {}
    for entry in history:
        dest, _, backup_id = str(entry.get("backup") or "").rstrip("/").rpartition("/")
        if dest == destination.rstrip("/"):
            out[backup_id] = entry
    return out


def left_behind(plan: VerifyPlan, now: datetime | None = None, grace: timedelta = timedelta(hours=24)) -> list[str]:
    """The plan's own problems, one line each: the newest backup of a kind Airflow recorded and the destination no longer
    holds complete, and folders without a manifest for longer than `grace` (a backup that never finished, which prune
    removes after that long, or one whose manifest was removed)."""
    now = now or datetime.now(UTC)
    out = [f"the newest {lost} Airflow recorded is gone or incomplete: someone who can write the storage removed it or "
           "its manifest" for lost in plan.lost]
    old = [b for b in plan.incomplete if (t := backup_time(b)) is not None and now - t > grace]
    if old:
        out.append(f"{plural(len(old), 'backup folder')} without a manifest for more than {grace.total_seconds() / 3600:.0f} "
                   f"hours ({', '.join(old[:5])}{' ...' if len(old) > 5 else ''}): backups that never finished (prune "
                   "removes those) or whose manifest was removed")
    return out


def problems(verdicts: list[BackupVerdict], archive: ArchiveVerdict | None) -> list[str]:
    """What fails the run, one line each: a backup damaged, missing or unread, the archive not ok."""
    out = [f"backup {v.backup_id} is {v.status}" + (": " + "; ".join(f.describe() for f in v.findings) if v.findings
                                                    else ": its task did not end (see its log)" if v.status == UNREAD else "")
           for v in verdicts if v.status not in (OK, GONE)]
    if archive is None:
        out.append("the binlog archive is unread: its task did not end (see its log)")
    elif archive.status != OK:
        newest = next((c for c in reversed(archive.coverage) if c.branch), None)
        said = "; ".join(f.describe() for f in archive.findings) or (f"the newest base {newest.backup_id} {newest.note}"
                                                                     if newest else "")
        out.append(f"the binlog archive is {archive.status}: {said}")
    return out


def _drilled(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "never"
    return f"{'passed' if entry.get('ok') else 'FAILED'} {entry.get('finished')}"


def newest_drill(drills: dict[str, dict[str, Any]]) -> str:
    """The destination's newest restore drill in a sentence (the drills' history, lastline.drill)."""
    if not drills:
        return "No restore drill of a backup of this destination is recorded: run restore_drill."
    backup_id, entry = max(drills.items(), key=lambda item: str(item[1].get("finished")))
    kind = f"{entry['kind']} " if entry.get("kind") else ""
    return f"Newest restore drill: {kind}backup {backup_id}, {_drilled(entry)}."


def _covered(c: Coverage | None) -> str:
    if c is None:
        return "-"
    return f"{c.start} to {c.end} ({c.branch}): {c.note}" if c.branch else c.note


def markdown(plan: VerifyPlan, verdicts: list[BackupVerdict], archive: ArchiveVerdict | None,
             drills: dict[str, dict[str, Any]], found: list[str]) -> str:
    """The report page: the verdict first, then a row per backup, then the archive."""
    read = sum(v.bytes for v in verdicts) + (archive.bytes if archive else 0)
    head = (f"# Backup verify of {plan.destination}: " + (f"{plural(len(found), 'problem')}" if found else "every backup ok")
            + f" ({plural(len(verdicts), 'backup')}, {read:,} bytes read back)")
    lines = [head, ""] + [f"**Problem:** {p}" for p in found] + ["", newest_drill(drills)]
    lines += [f"**Not opened** (sizes and sha256 checked, not the sealed chunks): backup {v.backup_id}: {v.sealed}."
              for v in verdicts if v.sealed.startswith("sealed, not opened:")]
    lines += ["", "| backup | kind | status | files | bytes | what differs | newest drill | point-in-time | sealed contents |",
              "|---|---|---|---:|---:|---|---|---|---|"]
    cover = {c.backup_id: c for c in (archive.coverage if archive else [])}
    for v in verdicts:
        differs = "; ".join(f.describe() for f in v.findings) or "-"
        lines.append(f"| {v.backup_id} | {v.kind or '?'} | {v.status} | {v.files} | {v.bytes:,} | {differs} | "
                     f"{_drilled(drills.get(v.backup_id))} | {_covered(cover.get(v.backup_id))} | {v.sealed or '-'} |")
    if plan.incomplete:
        lines += ["", f"Incomplete (no manifest, never restored, not read): {', '.join(plan.incomplete)}."]
    if archive is not None:
        lines += ["", f"## Binlog archive: {archive.status}", "", f"{plural(archive.branches, 'branch')}, "
                  f"{plural(archive.segments, 'segment')}, {archive.bytes:,} bytes read back."]
        lines += [f"- {f.describe()}" for f in archive.findings]
    return "\n".join(lines) + "\n"


def record(plan: VerifyPlan, found: Any, archive: Any, dag_id: str, run_id: str) -> dict[str, Any]:
    """Save the report and the history entry; return the summary (its `problems` fail the run: fail_if_bad)."""
    verdicts = verdicts_of(plan, found)
    archived = ArchiveVerdict.of(archive) if archive else None
    drills = newest_drills(plan.destination, reports.history(drill.HISTORY))
    found_problems = left_behind(plan) + problems(verdicts, archived)
    entry = {"destination": plan.destination, "run_id": run_id, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "backups": {v.backup_id: {"status": v.status, "what": "; ".join(f.describe() for f in v.findings)[:500]}
                         for v in verdicts}, "archive": archived.status if archived else UNREAD}
    reports.append_history(HISTORY, entry)
    page = markdown(plan, verdicts, archived, drills, found_problems)
    where = reports.save(dag_id, run_id, {"backup_verify.md": page, "backup_verify.json": json.dumps(
        {**entry, "verdicts": [v.to_dict() for v in verdicts], "archive": archived.to_dict() if archived else None,
         "problems": found_problems}, indent=1)}, lead=True)
    log.info("verify %s: %s; report %s/backup_verify.md", plan.destination,
             "; ".join(found_problems) or "every backup ok", where)
    return {"destination": plan.destination, "problems": found_problems, "backups": entry["backups"], "archive": entry["archive"]}


def read_backs(history: list[dict[str, Any]], destination: str) -> dict[str, dict[str, Any]]:
    """The newest read-back of each backup of `destination` in the history, by id: {status, what, finished, run_id}."""
    out: dict[str, dict[str, Any]] = {}
    for entry in history:
        if str(entry.get("destination", "")).rstrip("/") == destination.rstrip("/"):
            for backup_id, got in (entry.get("backups") or {}).items():
                out[backup_id] = {**got, "finished": entry.get("finished"), "run_id": entry.get("run_id")}
    return out


def kept(found: Any, ti: Any, what: str) -> Any:
    """`found` (a verdict, or a task's list of them), or, when one is not ok, a refusal after `found` was pushed as the
    task's return value (`ti`: the task instance): the task that read the damage fails at once (red in the Grid, never
    retried) and the report still reads what it found."""
    one = not isinstance(found, list)
    bad = [v for v in ([found] if one else found) if v.status not in (OK, GONE)]
    if not bad:
        return found
    ti.xcom_push("return_value", plain(found))
    shown = "; ".join(f"{what if one else f'backup {v.backup_id}'} is {v.status}: "
                      + ("; ".join(f.describe() for f in v.findings[:5]) + (" ..." if len(v.findings) > 5 else "")
                         or "nothing could be read") for v in bad[:3])
    raise IntegrityError(f"{shown}{' ...' if len(bad) > 3 else ''}. The run's report lists every finding; restore from "
                         "another backup and find out who or what changed the storage.")


def fail_if_bad(summary: dict[str, Any]) -> None:
    """A run that found anything damaged, missing or unread fails (after its report was saved and the alert sent)."""
    if summary["problems"]:
        raise IntegrityError(f"backup_verify of {summary['destination']}: " + "; ".join(summary["problems"])
                             + ". Restore from another backup; find out who or what changed the storage.")
