"""The Assets lastline's backups update: a downstream DAG (staging_refresh, a drill) is scheduled on them.

Each complete backup emits one event whose extra says which backup it was: its URL (<destination>/<id>), id,
kind, size, the manifest's sha256, whether the manifest is authenticated (storage.auth) and the binlog/GTID
position it is consistent with, read back from the manifest just written.

Anti-rollback: the binlog archive's head (pitr.catalog.head: its newest branch, last file, bytes, last segment's sha256,
GTID state and covered position) is recorded after each run in Airflow, out of reach of whoever can write the
storage: on the archive's Asset event and in the Variable `lastline_archive_head_<digest of the destination>`, which a
point-in-time restore reads (pitr.catalog.check_head).
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from typing import Any

from airflow.sdk import Asset, Variable, get_current_context

from lastline import backup_report, reports
from lastline.manifest import install_newest_record, read_manifest
from lastline.pitr import check
from lastline.storage import canonical, open_storage

log = logging.getLogger(__name__)

LOGICAL_BACKUP = Asset(name="lastline_logical_backup", uri="lastline://backups/logical")
PHYSICAL_BACKUP = Asset(name="lastline_physical_backup", uri="lastline://backups/physical")
BINLOG_ARCHIVE = Asset(name="lastline_binlog_archive", uri="lastline://backups/binlogs")  # extra: the recoverable window


def announce(asset: Asset, kind: str, destination: str, backup_id: str, aws_conn_id: str | None = None) -> dict:
    """Set the running task's event on `asset` to this backup (the task must list it in its outlets): its URL, id,
    kind, coordinates, size and the manifest's sha256; and save the run's report (lastline.backup_report: what was
    backed up, against the backups before it, and how far the binlog archive rolls it forward)."""
    storage = open_storage(destination, aws_conn_id)
    manifest = read_manifest(storage, backup_id, kind, require=False)
    url = f"{destination.rstrip('/')}/{backup_id}"
    extra = {"url": url, "backup_id": backup_id, "kind": kind, "bytes": manifest.bytes,
             "manifest_sha256": manifest.read_sha256, "authenticated": manifest.authenticity.key_id,
             "binlog_file": manifest.binlog_file,
             "binlog_position": manifest.binlog_position, "gtid": manifest.gtid}
    context = get_current_context()
    context["outlet_events"][asset].extra = extra
    record_newest(destination, kind, backup_id, manifest.read_sha256, aws_conn_id)
    try:  # the report never holds the Asset event back (a drill or a staging refresh runs on it)
        report = backup_report.build(storage, manifest, kind, url, check.base_window(storage, backup_id))
        where = reports.save(context["dag"].dag_id, context["run_id"], backup_report.files(report))
        log.info("report: %s", report["summary"])
        log.info("report: %s (%s)", report["point_in_time"], f"{where}/backup.md")
    except Exception as exc:  # noqa: BLE001 - reports storage down, an unreadable archive: named, not fatal
        log.warning("report: could not be written (%s: %s); the backup and its Asset event stand", type(exc).__name__, exc)
    return {"backup_id": backup_id, "url": url, "bytes": manifest.bytes}


def _variable(what: str, place: str) -> str:
    """The Variable that holds what Airflow records of `place` (a canonical destination, storage.canonical)."""
    return f"lastline_{what}_" + hashlib.sha256(place.encode()).hexdigest()[:16]


def _record(what: str, place: str, value: dict[str, Any], description: str) -> None:
    Variable.set(_variable(what, place), json.dumps({**value, "destination": place}),
                 description=f"lastline: {description} (anti-rollback); do not edit")


def _recorded(what: str, place: str) -> dict[str, Any] | None:
    """What was recorded of `place`, or None (nothing yet, or no Airflow to ask: a step run outside a task)."""
    try:
        text = Variable.get(_variable(what, place), default=None)
    except Exception:  # noqa: BLE001 - the SDK raises several types outside a task
        return None
    found = json.loads(text) if text else None
    return found if isinstance(found, dict) and found.get("destination") == place else None


def newest_variable(place: str, kind: str) -> str:
    """The Variable that holds the newest `kind` backup recorded in `place` (a canonical destination)."""
    return _variable(f"newest_{kind}", place)


def record_newest(destination: str, kind: str, backup_id: str, sha256: str, aws_conn_id: str | None = None) -> None:
    """Record a completed backup as the newest of its kind in its destination (never an older one over a newer)."""
    place = canonical(destination, aws_conn_id)
    before = recorded_newest(place, kind)
    if before and str(before.get("backup_id") or "") > backup_id:
        return
    _record(f"newest_{kind}", place, {"backup_id": backup_id, "manifest_sha256": sha256},
            f"the newest {kind} backup in {place}")


def recorded_newest(place: str, kind: str) -> dict[str, Any] | None:
    """The newest `kind` backup recorded in `place` (a canonical destination), or None."""
    return _recorded(f"newest_{kind}", place)


def newest_pin(destination: str, aws_conn_id: str | None = None) -> Callable[[str, str, str], bool]:
    """What a key rotation calls once it re-wrote a manifest, `pin(kind, backup_id, sha256)`: when that backup is the
    newest of its kind recorded in `destination`, its record takes the manifest's new sha256 (True); else nothing."""
    place = canonical(destination, aws_conn_id)

    def pin(kind: str, backup_id: str, sha256: str) -> bool:
        before = recorded_newest(place, kind)
        if not before or before.get("backup_id") != backup_id or before.get("manifest_sha256") == sha256:
            return False
        _record(f"newest_{kind}", place, {"backup_id": backup_id, "manifest_sha256": sha256},
                f"the newest {kind} backup in {place}")
        return True

    return pin


install_newest_record(recorded_newest)  # `latest` (manifest.resolve_backup) refuses a rolled-back destination


def triggering_backup() -> dict | None:
    """The backup a run was started for: its asset event's extra (url, backup_id, kind, ...), the newest over
    every asset if several (a DAG on both backups' Assets can be started by events of both); None for a run
    not started by a backup's event."""
    events = get_current_context().get("triggering_asset_events") or {}
    found = [e for asset_events in events.values() for e in asset_events if (e.extra or {}).get("url")]
    return dict(max(found, key=lambda e: e.timestamp).extra) if found else None


def backup_from_event(default: str) -> str:
    """The backup a run was triggered for (its asset event's URL), else `default` (the Param)."""
    found = triggering_backup()
    return str(found["url"]) if found else default


def head_variable(destination: str, aws_conn_id: str | None = None) -> str:
    """The Variable that holds the recorded head of the binlog archive in `destination` (its canonical place: another
    spelling of the same folder finds the same record)."""
    return _variable("archive_head", canonical(destination, aws_conn_id))


def record_archive_head(destination: str, head: dict[str, Any] | None, aws_conn_id: str | None = None) -> None:
    """Record the archive's head after a run (nothing for an empty archive)."""
    if head:
        place = canonical(destination, aws_conn_id)
        _record("archive_head", place, head, f"the binlog archive's head in {place} after its last run")


def recorded_archive_head(destination: str, aws_conn_id: str | None = None) -> dict[str, Any] | None:
    """The head recorded for the archive in `destination`, or None (no run has recorded one)."""
    return _recorded("archive_head", canonical(destination, aws_conn_id))
