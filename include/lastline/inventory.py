"""The deployment's backups as the Backups page shows them: per destination, every backup with its kind, age, size,
duration, whether it is authenticated, verified and drilled, and the point-in-time window it opens, with the restore
each can start. (Over 300 lines: each column of a row, from the manifest, the archive, the drills and the restore runs,
is read here, so that one view reads each source once.)

The destinations are the deployment's: `LASTLINE_BACKUPS_PAGE_DESTINATIONS` (storage URLs separated by commas; an S3
one may end in `?aws_conn_id=<connection>`), else `LASTLINE_DESTINATION`. Listing S3 or SSH costs a round trip per
manifest, so each destination shows its newest `LASTLINE_BACKUPS_PAGE_LIMIT` backup folders (default 30) and says how
many more it holds.

- **authenticated**: the manifest's MAC checked with the deployment's storage key (storage.auth), as a restore does;
- **verified**: a run restored it and verified every table: a restore drill that passed (the drills' history,
  lastline.drill) or a successful restore run that restored it (`verifications`: the backup its restore's preflight
  resolved, `latest` too, which the page reads from Airflow's XCom); both are matched by the backup's destination and
  id, never by its id alone (two destinations may hold the same id);
- **drilled**: the newest restore drill of it, passed or failed, with its time to restore;
- **read back**: the newest backup_verify of it (lastline.verify): ok, damaged or missing, and what differs;
- **point-in-time window**: where the destination holds a binlog archive, the line of history that holds the
  backup's binlog position (read from the archive's chain files only; the restore's plan checks the bytes) and how
  far it reaches: from the backup's end to the archive's covered end, or to the first hole after the backup.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlparse

from lastline import drill, reports
from lastline.core.errors import LastlineError
from lastline.manifest import MANIFEST, backup_age, backup_time, manifest_kind, read_manifest
from lastline.pitr.archive import PREFIX, branches
from lastline.pitr.window import Line, find_base, lineage, utc
from lastline.storage import Storage, allowed_roots, open_storage
from lastline.verify import report as verify_report

log = logging.getLogger(__name__)
DEFAULT_LIMIT = 30
RESTORE_DAGS = {"physical": "physical_restore", "logical": "logical_restore"}
PITR_DAG = "point_in_time_restore"


@dataclass
class Backup:
    """One backup folder of a destination, as the page shows it (`problem` says why a folder is not restorable)."""

    backup_id: str
    url: str
    kind: str | None = None
    taken_at: str | None = None
    finished_at: str | None = None  # the manifest's end of the backup, when it has one
    age_hours: float | None = None
    bytes: int | None = None
    seconds: float | None = None
    authenticated: bool = False
    authenticity: str = ""
    verified: str | None = None
    verified_by: dict[str, Any] | None = None  # {dag_id, run_id, finished}: the run that restored and verified it last
    drilled: str | None = None
    drill_ok: bool | None = None
    read_back: str | None = None  # the newest backup_verify of it: `ok 2026-11-29T04:00:12Z`, or what differs
    read_back_ok: bool | None = None
    window: dict[str, Any] | None = None
    problem: str | None = None
    restores: list[dict[str, Any]] = field(default_factory=list)  # {dag_id, conf, label}: the restores it can start


@dataclass
class Destination:
    """One destination's listing: its newest backups (at most `limit`), how many folders it holds, its archive."""

    url: str
    aws_conn_id: str | None
    backups: list[Backup]
    folders: int
    limit: int
    archive: list[dict[str, Any]] = field(default_factory=list)  # each branch's recoverable window
    problem: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def destinations() -> list[tuple[str, str | None]]:
    """The destinations the page lists: (URL, AWS connection) for each (see the module)."""
    named = os.environ.get("LASTLINE_BACKUPS_PAGE_DESTINATIONS", "") or os.environ.get(
        "LASTLINE_DESTINATION", "file:///var/backups/lastline")
    out = []
    for item in (i.strip() for i in named.split(",") if i.strip()):
        base, _, query = item.partition("?")
        aws = (parse_qs(query).get("aws_conn_id") or [""])[0] or _root_connection(base)
        out.append((base.rstrip("/"), aws or None))
    return list(dict.fromkeys(out))


def _root_connection(url: str) -> str | None:
    """The AWS connection the deployment's backup root holding an S3 `url` names (LASTLINE_BACKUP_ROOTS), if any:
    the destination is read the way the runs reach it."""
    if not url.startswith("s3://"):
        return None
    for root in allowed_roots():
        place, _, query = root.partition("?")
        segments, prefix = url.rstrip("/").split("/"), place.rstrip("/").split("/")
        if query and segments[:len(prefix)] == prefix:
            return (parse_qs(query).get("aws_conn_id") or [""])[0] or None
    return None


def limit() -> int:
    """How many backup folders a destination shows (LASTLINE_BACKUPS_PAGE_LIMIT, default 30, at least 1)."""
    try:
        return max(1, int(os.environ.get("LASTLINE_BACKUPS_PAGE_LIMIT", DEFAULT_LIMIT)))
    except ValueError:
        return DEFAULT_LIMIT


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h" if seconds >= 5400 else f"{seconds / 60:,.0f} min" if seconds >= 90 else f"{seconds:,.1f} s"


def _coordinates(manifest: Any) -> tuple[str | None, str | None]:
    """(binlog file, GTID state) where a backup joins the binlog chain (its primary's, taken from a replica)."""
    primary = manifest.primary or {}
    if primary.get("gtid"):
        return primary.get("binlog_file"), str(primary["gtid"])
    return manifest.binlog_file, (str(manifest.gtid) if manifest.gtid else None)


def _lines(storage: Storage) -> tuple[list[Line], list[dict[str, Any]], str | None]:
    """The archive's lines of history (newest branch first), each branch's window, and why none could be read."""
    from lastline.pitr.window import line_window

    if not storage.exists(f"{PREFIX}/branches.json"):
        return [], [], None
    try:
        lines = [lineage(storage, b["id"]) for b in branches(storage)]
    except LastlineError as exc:
        return [], [], f"the binlog archive cannot be read: {exc}"
    return lines[::-1], [line_window(line) for line in lines], None


def window(lines: list[Line], facts: Facts) -> dict[str, Any] | None:
    """The point-in-time window a backup opens (see the module), or None (no archive holds its position)."""
    if not facts.gtid:
        return None
    for line in lines:
        at = find_base(line, facts.binlog_file, facts.gtid)
        if at is None:
            continue
        after = line.files[at:]
        hole = next((i for i, (_, e) in enumerate(after) if i and (e.unusable or e.tail_hole)), None)
        if hole is None:
            end = line.covered_time() or max((e.last_time for _, e in after), default=0)
        else:
            reach = after[:hole + 1] if after[hole][1].tail_hole else after[:hole]
            end = max((e.last_time for _, e in reach), default=0)
        ended = int(datetime.fromisoformat(facts.finished_at.replace("Z", "+00:00")).timestamp())
        # until the archive confirms a point past the backup's end (its next run), there is nothing to roll forward
        return {"branch": line.branch, "from": utc(ended), "to": utc(end), "reaches": end >= ended,
                "holes_after": [e.name for _, e in after if e.unusable or e.tail_hole],
                "proven_empty_after": [e.name for _, e in after if e.proven_empty]}
    return None


@dataclass(frozen=True)
class Facts:
    """What the page shows of a backup's manifest (read once per backup and kept: a manifest is written once)."""

    kind: str
    bytes: int
    seconds: float
    started_at: str
    finished_at: str
    binlog_file: str | None
    gtid: str | None
    authenticated: bool
    authenticity: str


_FACTS: dict[tuple[str, str, int], tuple[float, Facts]] = {}  # (destination, id, manifest size) -> (when read, facts)
FACTS_TTL = 600.0  # seconds: a changed storage key shows within this (a restore checks the manifest itself, always)


def _facts(storage: Storage, url: str, backup_id: str) -> Facts | str:
    """A backup's manifest facts, or why it is not restorable (in words). A manifest read in the last FACTS_TTL seconds
    with the same size is not read again: a page of 30 large logical manifests would parse them all at every view."""
    key = f"{backup_id}/{MANIFEST}"
    size = storage.size_if_exists(key)
    if size is None:
        return "incomplete: no manifest (it failed, or it is still running); never restored"
    cached = _FACTS.get((url, backup_id, size))
    if cached and time.monotonic() - cached[0] < FACTS_TTL:
        return cached[1]
    kind = manifest_kind(storage, backup_id)
    if kind is None:
        return "its manifest is unreadable or of no kind lastline knows: never restored"
    try:
        manifest = read_manifest(storage, backup_id, kind, require=False)
    except LastlineError as exc:
        return str(exc)
    file, gtid = _coordinates(manifest)
    facts = Facts(kind, int(manifest.bytes), float(manifest.seconds), str(manifest.started_at), str(manifest.finished_at),
                  file, gtid, manifest.authenticity.ok, manifest.authenticity.describe())
    if len(_FACTS) > 5000:
        _FACTS.clear()
    _FACTS[(url, backup_id, size)] = (time.monotonic(), facts)
    return facts


def _drills(history: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The drills by (backup URL, kind); an entry without its backup's URL matches no backup."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in history:
        if entry.get("backup"):
            by.setdefault((str(entry["backup"]).rstrip("/"), str(entry.get("kind"))), []).append(entry)
    return by


def _restores(url: str, backup: Backup, aws_conn_id: str | None) -> list[dict[str, Any]]:
    """The restores a complete backup can start: its kind's restore, and a point-in-time restore where it opens a window."""
    aws = {"aws_conn_id": aws_conn_id} if aws_conn_id else {}
    out = [{"dag_id": RESTORE_DAGS[str(backup.kind)], "label": f"{backup.kind} restore",
            "conf": {"backup": backup.url, **aws}}]
    if backup.window and backup.window["reaches"]:
        out.append({"dag_id": PITR_DAG, "label": "point-in-time restore",
                    "conf": {"destination": url, "base": backup.backup_id, "base_kind": backup.kind, "until": "latest", **aws}})
    return out


def describe(storage: Storage, url: str, backup_id: str, lines: list[Line], drills: dict, verifications: dict,
             aws_conn_id: str | None = None, now: datetime | None = None,
             read_backs: dict[str, dict[str, Any]] | None = None) -> Backup:
    """One backup folder of `storage` as a row of the page (`read_backs`: verify.report.read_backs of its destination)."""
    age = backup_age(backup_id, now)
    row = Backup(backup_id, f"{url}/{backup_id}", taken_at=age["taken_at"], age_hours=age["age_hours"])
    try:
        facts = _facts(storage, url, backup_id)
    except LastlineError as exc:  # a manifest that is a link, or not a regular file: refused, named
        facts = str(exc)
    if isinstance(facts, str):
        row.problem = facts
        return row
    kind = row.kind = facts.kind
    row.bytes, row.seconds, row.taken_at = facts.bytes, facts.seconds, facts.started_at or row.taken_at
    row.finished_at = facts.finished_at or None
    row.authenticated, row.authenticity = facts.authenticated, facts.authenticity
    ran = drills.get((row.url, kind), [])
    if ran:
        last = ran[-1]
        row.drill_ok = bool(last.get("ok"))
        row.drilled = (f"passed {last.get('finished')}: restored and verified in {_hours(float(last.get('rto_seconds') or 0))}"
                       + ("" if last.get("within_budget", True) else " (over its RTO budget)") if row.drill_ok
                       else f"FAILED {last.get('finished')}")
    passed = [e for e in ran if e.get("ok")]
    named = verifications.get(row.url, [])
    by = {k: named[-1].get(k) for k in ("dag_id", "run_id", "finished")} if named else None
    if passed and (not by or str(passed[-1].get("finished")) > str(by["finished"])):
        by = {"dag_id": "restore_drill", "run_id": passed[-1].get("run_id"), "finished": passed[-1].get("finished")}
    if by:
        row.verified, row.verified_by = f"restored and verified by {by['dag_id']} {by['finished']}", by
    got = (read_backs or {}).get(backup_id)
    if got:
        row.read_back_ok = got.get("status") == "ok"
        row.read_back = f"{got.get('status')} {got.get('finished')}" + (f": {got['what']}" if got.get("what") else "")
    row.window = window(lines, facts)
    row.restores = _restores(url, row, aws_conn_id)
    return row


def list_destination(url: str, aws_conn_id: str | None = None, cap: int | None = None,
                     drill_history: list[dict[str, Any]] | None = None,
                     verifications: dict[str, list[dict[str, Any]]] | None = None,
                     now: datetime | None = None, verify_history: list[dict[str, Any]] | None = None) -> Destination:
    """The newest `cap` backup folders of a destination (see the module), newest first; a destination that cannot be
    listed comes back with its `problem` in words, never as an exception (one bad destination leaves the page up)."""
    cap = cap or limit()
    try:
        storage = open_storage(url, aws_conn_id)
        if url.startswith("file://") and not os.path.isdir(urlparse(url).path):
            return Destination(url, aws_conn_id, [], 0, cap, problem="no such folder on the machine this page runs on "
                               "(the api-server's): mount the destination there, or list it by a URL it can reach")
        ids = sorted((b for b in storage.list_backups() if backup_time(b)), reverse=True)
        lines, archive, problem = _lines(storage)
        drills = _drills(drill_history if drill_history is not None else _history(drill.HISTORY))
        read = verify_report.read_backs(verify_history if verify_history is not None else _history(verify_report.HISTORY), url)
        rows = [describe(storage, url, b, lines, drills, verifications or {}, aws_conn_id, now, read) for b in ids[:cap]]
    except Exception as exc:  # noqa: BLE001 - storage errors of every backend: said on the page, per destination
        log.warning("backups page: %s cannot be listed: %s", url, exc)
        return Destination(url, aws_conn_id, [], 0, cap, problem=f"cannot be listed: {exc}")
    return Destination(url, aws_conn_id, rows, len(ids), cap, archive, problem)


def _history(name: str) -> list[dict[str, Any]]:
    """A history beside the reports (the drills', lastline.drill; the read-backs', lastline.verify.report), or nothing
    when the reports' storage cannot be read."""
    try:
        return reports.history(name)
    except Exception as exc:  # noqa: BLE001 - the page shows the backups without it
        log.warning("backups page: the history %s cannot be read (%s)", name, exc)
        return []


def listing(verifications: dict[str, list[dict[str, Any]]] | None = None, now: datetime | None = None,
            drills: bool = True, read_backs: bool = True) -> list[Destination]:
    """Every destination the page lists (see destinations), the drills' and the read-backs' histories read once (not at
    all when `drills` or `read_backs` is false: a user who may not read restore_drill, or backup_verify, sees none)."""
    history = _history(drill.HISTORY) if drills else []
    verified = _history(verify_report.HISTORY) if read_backs else []
    return [list_destination(url, aws, None, history, verifications, now or datetime.now(UTC), verified)
            for url, aws in destinations()]


# Each restoring DAG's restore preflight (its restore task group's): its plan's `backup` (in its return_value XCom) is the
# backup the run opened, `latest` resolved, its manifest pinned. A run's conf is never read: it is not what was restored.
RESTORE_PREFLIGHTS: dict[str, tuple[str, ...]] = {"logical_restore": ("preflight",), "physical_restore": ("preflight",),
    "staging_refresh": ("restore.preflight",), "restore_drill": ("logical.preflight", "physical.preflight"),
    "point_in_time_restore": ("logical_base.preflight", "physical_base.preflight")}


def backup_restored(dag_id: str, task_id: str, value: Any) -> str | None:
    """`<destination>/<id>` of the backup `dag_id`'s restore preflight `task_id` opened (its plan's `backup`, a
    BackupRef's dict form: an id, a kind, its manifest pinned), else None."""
    if task_id not in RESTORE_PREFLIGHTS.get(dag_id, ()) or not isinstance(value, dict):
        return None
    dest, backup_id = str(value.get("destination") or "").rstrip("/"), str(value.get("backup_id") or "")
    opened = dest and backup_time(backup_id) and value.get("kind") in RESTORE_DAGS and value.get("manifest_sha256")
    return f"{dest}/{backup_id}" if opened else None


def verifications(runs: list[tuple[str, str, str]], plans: list[tuple[str, str, str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Successful restore runs ((dag_id, run_id, finished), oldest first) by the backup each verified, from their
    preflights' plans `plans` ((dag_id, run_id, task_id, the plan's `backup`)); a run naming none, or two, verified none."""
    restored: dict[tuple[str, str], set[str | None]] = {}
    for dag_id, run_id, task_id, value in plans:
        if task_id in RESTORE_PREFLIGHTS.get(dag_id, ()):  # another task's `backup` (a staging refresh's own plan)
            restored.setdefault((dag_id, run_id), set()).add(backup_restored(dag_id, task_id, value))
    out: dict[str, list[dict[str, Any]]] = {}
    for dag_id, run_id, finished in runs:
        found = restored.get((dag_id, run_id), set())
        if len(found) == 1 and (url := next(iter(found))):
            out.setdefault(url, []).append({"dag_id": dag_id, "run_id": run_id, "finished": finished})
    return out
