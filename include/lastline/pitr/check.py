"""The chain check: for every complete base backup in a destination, up to which time and GTID the binlog
archive can roll it forward without a hole; whether the chain is broken after the newest base, and whether the
archive has fallen behind (its last confirmed position older than a threshold: the RPO at risk).
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any

from lastline import reports
from lastline.core.errors import IntegrityError, LastlineError
from lastline.core.plans import Conf, RunParams
from lastline.core.progress import plural
from lastline.manifest import complete_backups, manifest_kind, read_manifest
from lastline.pitr import archive, events, window
from lastline.pitr.archive import PREFIX
from lastline.pitr.restore import coordinates
from lastline.storage import Storage, auth, control, open_allowed

log = logging.getLogger(__name__)
STATUS = f"{PREFIX}/status.json"  # the last check's problems: an alert goes out when they change


def reach(line: window.Line, file: str | None, gtid: str) -> dict[str, Any]:
    """How far a base (its binlog file and GTID state) rolls forward on `line`: to the end of the last file
    before the first hole after it."""
    at = window.find_base(line, file, gtid)
    if at is None:
        return {"branch": line.branch, "to_time": None, "to_gtid": None, "hole": None,
                "note": "the archive does not reach back to this backup"}
    last, hole = None, None
    for _, entry in line.files[at:]:
        if entry.unusable:
            hole = entry.name
            break
        if entry.missing:  # a hole proven empty: crossed
            continue
        last = entry
        if entry.tail_hole:
            hole = entry.name
            break
    covered = line.covered_time() if hole is None else None
    to_time = covered or (last.last_time if last else None)
    return {"branch": line.branch, "to_time": window.utc(to_time), "to_gtid": last.end_gtids if last else None,
            "hole": hole, "note": f"stops at the hole {hole}" if hole else ""}


def check(storage: Storage, max_age: float, now: float | None = None) -> dict[str, Any]:
    """The archive's windows, each complete base's reach, and the problems (chain broken, archive behind)."""
    now = time.time() if now is None else now
    wins = window.windows(storage)
    bases = []
    for backup_id in complete_backups(storage):
        kind = manifest_kind(storage, backup_id) or "physical"
        try:
            manifest = read_manifest(storage, backup_id, kind)
            file, position, gtid = coordinates(manifest)
            line = window.choose_line(storage, file, gtid, None, position)
            bases.append({"backup_id": backup_id, "kind": kind, **reach(line, file, gtid)})
        except LastlineError as exc:
            bases.append({"backup_id": backup_id, "kind": kind, "to_time": None, "to_gtid": None, "hole": None,
                          "note": str(exc).split(":")[0][:200]})
    problems = []
    if not wins:
        problems.append("the binlog archive is empty: no base backup can be rolled forward")
    else:
        newest = wins[-1]
        age = now - (newest["to_seconds"] or 0)
        if age > max_age:
            problems.append(f"the binlog archive is {age:.0f} s behind (its last confirmed position is of "
                            f"{newest['to_time']}; threshold {max_age:.0f} s): the RPO is at risk")
        reaching = [b for b in bases if b["to_gtid"] is not None]
        if reaching and reaching[-1]["hole"]:
            problems.append(f"the chain is broken after the newest base {reaching[-1]['backup_id']}: "
                            f"{reaching[-1]['hole']} is missing; point-in-time restore stops before it until a new "
                            "base is taken")
    return {"windows": wins, "bases": bases, "problems": problems, "checked_at": window.utc(now)}


def changed(storage: Storage, problems: list[str]) -> bool:
    """Whether `problems` differ from the last check's (recorded in the archive): an alert goes out only then."""
    before: Any = []
    if storage.exists(STATUS):  # bounded and authenticated; one unreadable or forged is as good as none (one alert more)
        try:
            found = control.read(storage, STATUS)
            if found.auth.ok or auth.deployment_keys() is None:
                before = found.data.get("problems") if isinstance(found.data, dict) else None
        except IntegrityError as exc:
            log.warning("%s", exc)
    control.write(storage, STATUS, json.dumps({"problems": problems}, indent=1))
    return before != problems


def base_window(storage: Storage, backup_id: str) -> str:
    """One sentence for a backup's report: how far the binlog archive rolls this base forward, as of now."""
    if not archive.branches(storage):
        return ("Point-in-time: no binlog archive in this destination; run binlog_archive for the source to roll this "
                "backup forward to any second after it.")
    try:
        manifest = read_manifest(storage, backup_id, manifest_kind(storage, backup_id) or "physical")
        file, position, gtid = coordinates(manifest)
        line = window.choose_line(storage, file, gtid, None, position)
    except LastlineError as exc:
        return f"Point-in-time: this backup cannot be rolled forward: {exc}"
    got = reach(line, file, gtid)
    if got["to_gtid"] is None or events.includes(gtid, got["to_gtid"]):
        return (f"Point-in-time: the binlog archive (branch {line.branch}) has not shipped past this backup yet; its next "
                "run does, and from then on the binlog_archive run's report gives how far it rolls forward.")
    return (f"Point-in-time: rolls forward to {got['to_time']} (GTID {got['to_gtid']}) on branch {got['branch']}"
            + (f"; it {got['note']}" if got["note"] else "") + ", as of this report (the archive grows after it).")


def markdown(result: dict[str, Any]) -> str:
    """The check as a report page."""
    newest = result["windows"][-1] if result["windows"] else {}
    reaching = sum(1 for b in result["bases"] if b["to_gtid"])
    head = (f"recoverable to {newest['to_time']}" + (f" (GTID {newest['to_gtid']})" if newest.get("to_gtid") else "")
            + f" on branch {newest['branch']}, {plural(reaching, 'base backup')} it rolls forward"
            if newest.get("to_time") else "nothing recoverable yet")
    lines = [f"# Binlog archive, checked {result['checked_at']}: {head}"
             + (f"; {plural(len(result['problems']), 'problem')}" if result["problems"] else ""), ""]
    lines += [f"**Problem:** {p}" for p in result["problems"]] or ["**No problem: the chain is whole and current.**"]
    lines += ["", "| branch | from | to (time) | to (GTID) | holes |", "|---|---|---|---|---|"]
    for w in result["windows"]:
        empty = w.get("proven_empty") or []
        lines.append(f"| {w['branch']} | {w['from_time'] or '-'} | {w['to_time'] or '-'} | {w['to_gtid'] or '-'} | "
                     f"{', '.join(w['holes']) or 'none'}"
                     + (f" (crossed, proven empty: {', '.join(empty)})" if empty else "") + " |")
    lines += ["", "| base backup | kind | rolls forward to (time) | to (GTID) | note |", "|---|---|---|---|---|"]
    for b in result["bases"]:
        lines.append(f"| {b['backup_id']} | {b['kind']} | {b['to_time'] or '-'} | {b['to_gtid'] or '-'} | {b['note']} |")
    return "\n".join(lines) + "\n"


def run(conf: RunParams, dag_id: str, run_id: str) -> dict[str, Any]:
    """The binlog_archive DAG's check task: the windows, a report, and an alert when the problems change."""
    params = Conf(conf)
    storage = open_allowed(params.required("destination"), params.text("aws_conn_id"))
    result = check(storage, params.number("rpo_alert_seconds", 600, minimum=1))
    where = reports.save(dag_id, run_id, {"binlog_archive.md": markdown(result)})
    log.info("report: %s/binlog_archive.md", where)
    result["alert"] = changed(storage, result["problems"])
    for problem in result["problems"]:
        log.warning("binlog archive: %s", problem)
    newest = result["windows"][-1] if result["windows"] else {}
    log.info("binlog archive: recoverable up to %s (GTID %s) on branch %s; %d base backups can be rolled forward",
             newest.get("to_time"), newest.get("to_gtid"), newest.get("branch"),
             sum(1 for b in result["bases"] if b["to_gtid"]))
    return result
