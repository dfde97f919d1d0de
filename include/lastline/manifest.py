"""The manifest: what a backup holds, written LAST as the commit marker of a complete backup.

A backup lives at `<destination>/<backup_id>/`; backup ids are UTC timestamps (`20261122T004500Z`),
so they sort by time. A folder without `manifest.json` is an incomplete backup: never restored,
pruned once older than a grace period.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone

from lastline.errors import IntegrityError, LastlineError
from lastline.storage import Storage, open_storage

MANIFEST = "manifest.json"
ID_FORMAT = "%Y%m%dT%H%M%SZ"
FORMAT = "lastline-physical/1"


def new_backup_id(now: datetime | None = None) -> str:
    """A backup id for `now` (UTC)."""
    return (now or datetime.now(timezone.utc)).strftime(ID_FORMAT)


def backup_time(backup_id: str) -> datetime | None:
    """When a backup id was made, or None for a folder that is not one of ours."""
    try:
        return datetime.strptime(backup_id[:16], ID_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


@dataclass
class TableInfo:
    """A table as the backup saw it (row count is InnoDB's estimate for physical backups)."""

    schema: str
    name: str
    engine: str | None
    rows: int
    bytes: int


@dataclass
class PhysicalManifest:
    """Everything a restore needs to know and check about a physical backup."""

    backup_id: str
    source_conn_id: str
    server_version: str
    tool_version: str
    artifact: str
    compression: str
    bytes: int
    sha256: str
    started_at: str
    finished_at: str
    seconds: float
    mb_per_s: float
    parallel: int
    datadir_bytes: int
    binlog_file: str | None = None
    binlog_position: int | None = None
    gtid: str | None = None
    tables: list[TableInfo] = field(default_factory=list)
    format: str = FORMAT
    kind: str = "physical"

    def to_json(self) -> str:
        """Pretty JSON, stable key order."""
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> PhysicalManifest:
        """Parse and check the format."""
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise IntegrityError(f"unknown manifest format {data.get('format')!r}; expected {FORMAT!r}.")
        data["tables"] = [TableInfo(**t) for t in data.get("tables", [])]
        return cls(**data)


def write_manifest(storage: Storage, manifest: PhysicalManifest) -> str:
    """Write the manifest (atomically); returns its location."""
    key = f"{manifest.backup_id}/{MANIFEST}"
    storage.write_bytes(key, manifest.to_json().encode())
    return storage.location(key)


def read_manifest(storage: Storage, backup_id: str) -> PhysicalManifest:
    """The manifest of a backup, or a clear error if the backup is incomplete."""
    key = f"{backup_id}/{MANIFEST}"
    if not storage.exists(key):
        raise IntegrityError(
            f"{storage.location(backup_id)} has no {MANIFEST}: the backup is incomplete (it failed or is "
            f"still running) and is never restored; choose another backup or use {storage.url}/latest."
        )
    return PhysicalManifest.from_json(storage.read_bytes(key))


def complete_backups(storage: Storage) -> list[str]:
    """Ids of the backups that have a manifest, oldest first."""
    return [b for b in storage.list_backups() if backup_time(b) and storage.exists(f"{b}/{MANIFEST}")]


def split_backup_url(url: str) -> tuple[str, str]:
    """`<destination>/<backup_id>` -> (destination, backup_id)."""
    url = url.rstrip("/")
    if "/" not in url.split("://", 1)[-1]:
        raise LastlineError(f"backup {url!r}: expected <destination>/<backup_id> or <destination>/latest.")
    dest, _, backup_id = url.rpartition("/")
    return dest, backup_id


def resolve_backup(url: str, aws_conn_id: str | None = None) -> tuple[Storage, str]:
    """Open the storage of `url` and resolve `latest` to the newest complete backup."""
    dest, backup_id = split_backup_url(url)
    storage = open_storage(dest, aws_conn_id)
    if backup_id == "latest":
        done = complete_backups(storage)
        if not done:
            raise IntegrityError(f"{dest} holds no complete backup (none has a {MANIFEST}).")
        backup_id = done[-1]
    return storage, backup_id


def plan_prune(
    all_ids: list[str], complete_ids: list[str], keep: int, grace: timedelta, now: datetime | None = None
) -> list[str]:
    """Which backups to delete: complete ones beyond the `keep` newest (never the newest one),
    and incomplete ones older than `grace`. Folders whose names are not backup ids are never touched."""
    now = now or datetime.now(timezone.utc)
    complete = sorted(complete_ids)
    doomed = complete[: max(0, len(complete) - max(1, keep))]
    for b in all_ids:
        t = backup_time(b)
        if b not in complete_ids and t is not None and now - t > grace:
            doomed.append(b)
    return sorted(doomed)
