"""The manifest: what a backup holds, written LAST as the commit marker of a complete backup.

(Over 300 lines on purpose: this file is the whole on-disk contract between a backup and its restore,
both formats and the checks of what is read back, so one reading shows all a backup folder may hold.)

A backup lives at `<destination>/<backup_id>/`; backup ids are UTC timestamps and 6 random hex digits
(`20261128T161432Z-7c93b6`), so they sort by time. A folder without `manifest.json` is an incomplete backup: never restored,
pruned once older than a grace period.
"""
from __future__ import annotations

import builtins
import json
import logging
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from lastline.core.errors import ConfigError, IntegrityError
from lastline.storage import Storage, auth, control, open_storage, place_name, require_allowed

log = logging.getLogger(__name__)

# what Airflow recorded of the newest backup of a kind in a destination, out of a storage writer's reach: a function
# (canonical destination, kind) -> {"backup_id", "manifest_sha256"} or None, installed by lastline.airflow.assets
_recorded_newest: list[Callable[[str, str], dict[str, Any] | None]] = []


def install_newest_record(reader: Callable[[str, str], dict[str, Any] | None]) -> None:
    """Make `reader` where `latest` looks for the newest backup Airflow recorded (see resolve_backup)."""
    _recorded_newest[:] = [reader]

MANIFEST = "manifest.json"
ID_FORMAT = "%Y%m%dT%H%M%SZ"
FORMAT = "lastline-physical/1"
LOGICAL_FORMAT = "lastline-logical/2"
# the only keys a logical manifest may name inside its folder: data/<db>/<table>/<chunk>-<part>.tsv[.zst|.gz]
# (names percent-encoded, so no '/' or '..' can hide in them)
CHUNK_FILE = re.compile(r"^data/(?!\.\.?/)[A-Za-z0-9%._~-]+/(?!\.\.?/)[A-Za-z0-9%._~-]+/\d{5}-\d{3}\.tsv(?:\.zst|\.gz)?$")
# read too: backups made before the row-hash checksum and the file list (verified the old way)
LOGICAL_FORMATS = ("lastline-logical/1", LOGICAL_FORMAT)


# a backup id: its UTC time, then 6 random hex digits so that two backups started in the same second
# never share a folder (ids of older backups have no suffix)
ID_RE = re.compile(r"\d{8}T\d{6}Z(?:-[0-9a-f]{6})?")  # whole names only: fullmatch (a $ lets a trailing newline through)


def new_backup_id(now: datetime | None = None, taken: Iterable[str] = ()) -> str:
    """A new backup id for `now` (UTC) that is none of `taken` (the destination's folders)."""
    stamp, taken = (now or datetime.now(UTC)).strftime(ID_FORMAT), set(taken)
    while True:
        backup_id = f"{stamp}-{secrets.token_hex(3)}"
        if backup_id not in taken:
            return backup_id


def backup_time(backup_id: str) -> datetime | None:
    """When a backup id was made, or None for a folder whose name is not exactly a backup id."""
    if not ID_RE.fullmatch(backup_id):
        return None
    return datetime.strptime(backup_id[:16], ID_FORMAT).replace(tzinfo=UTC)


def backup_age(backup_id: str, now: datetime | None = None) -> dict[str, Any]:
    """A backup's id, when it was taken and its age in hours (for an operator deciding on a restore)."""
    taken = backup_time(backup_id)
    age = ((now or datetime.now(UTC)) - taken).total_seconds() / 3600 if taken else None
    return {"backup_id": backup_id, "taken_at": taken.isoformat() if taken else None,
            "age_hours": round(age, 1) if age is not None else None}


_FIELDS: dict[type, list[str]] = {}


def _fields_of(obj: Any) -> dict[str, Any]:
    """One dataclass's fields as a dict, one level deep: json's C encoder asks for each dataclass it meets and walks
    the plain lists and dicts itself. (A Python walk of the whole manifest first, dataclasses.asdict without its
    copies, took 2.2 s of the dump's last step at 20,000 tables.)"""
    if is_dataclass(obj) and not isinstance(obj, type):
        names = _FIELDS.get(type(obj))
        if names is None:
            names = _FIELDS[type(obj)] = [f.name for f in fields(obj)]
        return {n: getattr(obj, n) for n in names}
    raise TypeError(f"a {type(obj).__name__} has no place in a manifest")


def json_lines(data: dict) -> str:
    """`data` as JSON for people and diffs: one key of it per line, and each item of a list on its own line, keys
    sorted; dataclasses in it as their fields. Made by json's C encoder (`indent` forces its Python one): at 10,000
    tables a manifest took 4x the time and 4x the memory with indent=1, a list of every token before the join."""
    def value(v: Any) -> str:
        if isinstance(v, list | tuple) and v:
            return "[\n  " + ",\n  ".join(json.dumps(x, sort_keys=True, default=_fields_of) for x in v) + "\n ]"
        return json.dumps(v, sort_keys=True, default=_fields_of)
    return "{\n" + ",\n".join(f" {json.dumps(str(k))}: {value(data[k])}" for k in sorted(data)) + "\n}\n"


def _to_json(manifest: Any) -> str:
    """A manifest dataclass as JSON (json_lines)."""
    return json_lines(_fields_of(manifest))


def _parsed(text: str | bytes | dict, *expected: str) -> dict:
    """The JSON of a manifest (or its data, parsed by storage.control), checked to be of one of the `expected` formats."""
    data = text if isinstance(text, dict) else control.parse(text.encode() if isinstance(text, str) else text, "manifest")
    if not isinstance(data, dict):
        raise IntegrityError(f"a manifest is a JSON object, not {type(data).__name__}.")
    data.pop(auth.FIELD, None)
    if data.get("format") not in expected:
        raise IntegrityError(f"unknown manifest format {data.get('format')!r}; expected {' or '.join(map(repr, expected))}.")
    return data


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
    primary: dict | None = None  # from a replica: its primary's gtid/binlog_file/binlog_position (replicas.backup_source)
    tables: list[TableInfo] = field(default_factory=list)
    source_identity: str | None = None  # servers.server_identity of the source (None in older backups)
    prepare_options: dict[str, str] | None = None  # mariabackup.prepare_options, from the source (None in older backups)
    # the artifact's encryption: storage.envelope's Envelope as JSON (never a key); None: the artifact is not sealed
    encryption: dict | None = None
    format: str = FORMAT
    kind: str = "physical"

    def to_json(self) -> str:
        """Pretty JSON, stable key order."""
        return _to_json(self)

    @classmethod
    def from_json(cls, text: str | builtins.bytes | dict) -> PhysicalManifest:
        """Parse and check the format."""
        data = _parsed(text, FORMAT)
        data["tables"] = [TableInfo(**t) for t in data.get("tables", [])]
        return cls(**data)


@dataclass
class ChunkInfo:
    """One chunk file of a logical backup: its key range, rows, sizes, sha256 and the sum of its rows'
    hashes (dialect.CHECKSUM; None in format 1)."""

    file: str
    rows: int
    bytes: int
    raw_bytes: int
    sha256: str
    lower: list[str] | None = None
    upper: list[str] | None = None
    checksum: str | None = None


@dataclass
class FileInfo:
    """A file of a backup folder (key relative to the folder), with its size and sha256."""

    name: str
    bytes: int
    sha256: str


@dataclass
class LogicalTable:
    """A table of a logical backup: how it was cut, its exact row count and checksum in the snapshot."""

    schema: str
    name: str
    engine: str
    charset: str | None
    collation: str | None
    consistent: bool
    chunking: str
    key: list[str]
    columns: list[dict]
    rows: int
    checksum: str
    bytes: int
    raw_bytes: int
    seconds: float
    auto_increment: int | None = None
    chunks: list[ChunkInfo] = field(default_factory=list)


@dataclass
class LogicalManifest:
    """Everything a logical restore needs: schema file, tables with their chunks, snapshot coordinates."""

    backup_id: str
    source_conn_id: str
    server_version: str
    sql_mode: str
    time_zone: str
    dialect: str
    compression: str
    chunk_rows: int
    parallel: int
    databases: list[dict]
    schema_file: str
    schema_sha256: str
    started_at: str
    finished_at: str
    seconds: float
    lock_seconds: float
    rows: int
    bytes: int
    raw_bytes: int
    mb_per_s: float
    binlog_file: str | None = None
    binlog_position: int | None = None
    gtid: str | None = None
    primary: dict | None = None  # from a replica: its primary's gtid/binlog_file/binlog_position (replicas.backup_source)
    include_grants: bool = False
    tables: list[LogicalTable] = field(default_factory=list)
    # every file of the backup but the manifest (schema files and chunks), with size and sha256
    files: list[FileInfo] = field(default_factory=list)
    checksum: str = ""  # what the tables' checksums are (dialect.CHECKSUM); "" in format 1
    source_identity: str | None = None  # servers.server_identity of the source (None in older backups)
    # the chunk files' encryption: storage.envelope's Envelope as JSON (key ids and wrapped keys, never a key); None:
    # the chunk files are not sealed
    encryption: dict | None = None
    format: str = LOGICAL_FORMAT
    kind: str = "logical"

    def to_json(self) -> str:
        """Pretty JSON, stable key order."""
        return _to_json(self)

    @classmethod
    def from_json(cls, text: str | builtins.bytes | dict) -> LogicalManifest:
        """Parse and check the format."""
        data = _parsed(text, *LOGICAL_FORMATS)
        data["tables"] = [LogicalTable(**{**t, "chunks": [ChunkInfo(**c) for c in t["chunks"]]}) for t in data["tables"]]
        data["files"] = [FileInfo(**f) for f in data.get("files", [])]
        manifest = cls(**data)
        bad = [c.file for t in manifest.tables for c in t.chunks if not CHUNK_FILE.match(c.file)]
        bad += [f.name for f in manifest.files if not (CHUNK_FILE.match(f.name) or f.name in ("schema.json", "schema.sql"))]
        if bad or manifest.schema_file != "schema.json":
            raise IntegrityError(
                f"manifest of {manifest.backup_id}: file names outside the backup's own layout ({', '.join(map(repr, bad[:3])) or manifest.schema_file!r}); refused."
            )
        return manifest

    def file(self, name: str) -> FileInfo | None:
        """The manifest's entry for one file of the backup (None if it lists no such file)."""
        return next((f for f in self.files if f.name == name), None)


MANIFEST_CLASSES: dict[str, Any] = {"physical": PhysicalManifest, "logical": LogicalManifest}


def write_manifest(storage: Storage, manifest: PhysicalManifest | LogicalManifest) -> str:
    """Write the manifest (atomically), once every file it names is durable (storage.sync): a backup whose manifest
    exists is whole, whatever crashed; returns its location."""
    key = f"{manifest.backup_id}/{MANIFEST}"
    storage.sync()
    control.write(storage, key, manifest.to_json())  # signed with the deployment's storage key (storage.auth)
    return storage.location(key)


def manifest_kind(storage: Storage, backup_id: str) -> str | None:
    """`physical` or `logical`: which kind of backup a complete backup folder holds; None (with a warning
    naming it) for a manifest that cannot be read, so one broken folder never breaks `latest` or prune."""
    try:  # bounded in size and depth, whatever the folder holds (storage.control)
        data = control.parse(control.read_bytes(storage, f"{backup_id}/{MANIFEST}"), storage.location(f"{backup_id}/{MANIFEST}"))
        kind = data.get("kind", "physical") if isinstance(data, dict) else None
    except IntegrityError as exc:  # unreadable, too big, too deep, or not a regular file
        log.warning("%s is unreadable (%s): that backup is skipped; look at it or remove it",
                    storage.location(f"{backup_id}/{MANIFEST}"), getattr(exc, "reason", exc))
        return None
    if kind not in MANIFEST_CLASSES:
        log.warning("%s is of no kind lastline knows (%r): that backup is skipped", storage.location(f"{backup_id}/{MANIFEST}"), kind)
        return None
    return kind


def _no_such_backup(storage: Storage, backup_id: str, kind: str, folders: list[str], show: int = 3) -> str:
    """What a restore says of a backup id with no folder: the complete backups of `kind` nearest to it in time (the
    manifests of the nearest few read only), so the operator can pick one."""
    asked = backup_time(backup_id)
    dated = [(t, b) for b in folders if (t := backup_time(b))]
    dated.sort(key=lambda tb: abs((tb[0] - asked).total_seconds()) if asked else -tb[0].timestamp())
    near = []
    for t, b in dated[:50]:
        if storage.exists(f"{b}/{MANIFEST}") and manifest_kind(storage, b) == kind:
            if asked is None:
                near.append(b)
            else:
                minutes = round((t - asked).total_seconds() / 60)
                span = (f"{abs(minutes)} min" if abs(minutes) < 120 else f"{abs(minutes) / 60:.1f} h"
                        if abs(minutes) < 48 * 60 else f"{abs(minutes) / 1440:,.0f} days")
                near.append(f"{b} ({span} {'later' if minutes > 0 else 'earlier'})")
            if len(near) >= show:
                break
    where = f"there is no backup {backup_id} in {storage.url}"
    if not near:
        which = f"none of the backups near it is a complete {kind} backup" if dated else "it holds no backup at all"
        return f"{where}, and {which}: check the destination in the backup's URL, or run a backup first."
    return (f"{where}. The complete {kind} backups nearest to it: {', '.join(near)}. Name one of them "
            f"(<destination>/<backup_id>) or use {storage.url}/latest.")


def read_manifest(storage: Storage, backup_id: str, kind: str = "physical", sha256: str | None = None,
                  require: str | bool | None = None) -> Any:
    """The manifest of a backup of `kind`, or a clear error if the backup is incomplete or another kind. Read once,
    bounded (storage.control); its bytes' sha256 is kept as `.read_sha256` (a preflight pins it in its plan, and every
    later task passes it as `sha256`, so a manifest changed after the preflight is refused) and its MAC's verdict as
    `.authenticity`. `require` names the use (e.g. "a point-in-time restore") that refuses a manifest not
    authenticated (storage.auth.require) before anything else of it is used; unset, a physical manifest is read so
    (a logical restore's trust model holds without a key); False only reads the verdict (a report)."""
    key = f"{backup_id}/{MANIFEST}"
    if not storage.exists(key):
        folders = storage.list_backups()
        if backup_id not in folders:
            raise IntegrityError(_no_such_backup(storage, backup_id, kind, folders))
        raise IntegrityError(
            f"{storage.location(backup_id)} has no {MANIFEST}: the backup is incomplete (it failed or is "
            f"still running) and is never restored; choose another backup or use {storage.url}/latest."
        )
    damaged = (f"{storage.location(key)} cannot be read ({{}}): the manifest is damaged, so this backup is never "
               f"restored; choose another one (`latest` passes over it).")
    try:
        read = control.read(storage, key)  # bounded, parsed, its MAC checked on the bytes as read
    except control.Unreadable as exc:
        raise IntegrityError(damaged.format(exc.reason)) from exc
    read_sha256, data, authenticity = read.sha256, read.data, read.auth
    if sha256 and read_sha256 != sha256:
        raise IntegrityError(
            f"{storage.location(key)} changed after this run's preflight checked it (its sha256 is {read_sha256}, "
            f"preflight read {sha256}): someone wrote to the backup meanwhile. Nothing more is read from it; restore another backup "
            "or start a new run."
        )
    if require or (require is None and kind == "physical"):
        auth.require(authenticity, storage.location(key), require if isinstance(require, str) else "a physical restore")
    if not isinstance(data, dict):
        raise IntegrityError(damaged.format(f"a {type(data).__name__}, not an object"))
    found = data.get("kind", "physical")
    if found != kind:
        raise IntegrityError(
            f"{storage.location(backup_id)} is a {found} backup; a {kind} restore cannot use it "
            f"(use the {found}_restore DAG, or choose a {kind} backup)."
        )
    try:
        manifest = MANIFEST_CLASSES[kind].from_json(data)
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise IntegrityError(damaged.format(f"{type(exc).__name__}: {exc}")) from exc
    manifest.read_sha256 = read_sha256
    manifest.authenticity = authenticity
    if not authenticity.ok:
        log.warning("%s is %s", storage.location(key), authenticity.describe())
    elif require is not False:
        log.info("%s is %s", storage.location(key), authenticity.describe())
    if manifest.backup_id != backup_id:
        raise IntegrityError(
            f"{storage.location(key)} says it is backup {manifest.backup_id!r}, but it is in folder {backup_id!r}: a "
            "manifest copied or edited into another folder is not trusted. Restore another backup."
        )
    return manifest


def newest_complete(storage: Storage, kind: str | None = None, limit: int | None = 1, before: str | None = None) -> list[str]:
    """Up to `limit` (None: all) newest complete backups, those with a readable manifest (of `kind`, if given; older
    than `before`, if given), newest first. Reads manifests from the newest down and stops once it has them: `latest`
    and the form's list cost the same in a destination of 500 backups as in one of 5."""
    out: list[str] = []
    for b in sorted((b for b in storage.list_backups() if backup_time(b) and (before is None or b < before)), reverse=True):
        if storage.exists(f"{b}/{MANIFEST}") and (found := manifest_kind(storage, b)) is not None \
                and (kind is None or found == kind):
            out.append(b)
            if limit is not None and len(out) >= limit:
                break
    return out


def complete_backups(storage: Storage, kind: str | None = None) -> list[str]:
    """Ids of the backups that have a readable manifest (of `kind`, if given), oldest first (each manifest read)."""
    return newest_complete(storage, kind, None)[::-1]


def split_backup_url(url: str) -> tuple[str, str]:
    """`<destination>/<backup_id>` -> (destination, backup_id)."""
    url = url.rstrip("/")
    if "/" not in url.split("://", 1)[-1]:
        raise ConfigError(f"backup {url!r}: expected <destination>/<backup_id> or <destination>/latest.")
    dest, _, backup_id = url.rpartition("/")
    return dest, backup_id


def newest_recorded(place: str, kind: str) -> str:
    """The newest `kind` backup Airflow recorded in `place` (place_name of a destination), "" without a record (a first
    backup, a run outside Airflow) or on storage the deployment declares trusted."""
    record = _recorded_newest[0](place, kind) if _recorded_newest and not auth.storage_trusted() else None
    return str((record or {}).get("backup_id") or "")


def _not_rolled_back(place: str, kind: str, newest: str | None) -> None:
    """Refuse `latest` when it would be older than the newest backup Airflow recorded in `place` (that backup deleted
    or its manifest spoiled by someone who can write the storage: an older, validly signed backup would be restored
    in its stead, silently). Without a record (a first backup, a run outside Airflow) or on trusted storage: no check."""
    recorded = newest_recorded(place, kind)
    if recorded and (newest is None or newest < recorded):
        raise IntegrityError(
            f"{place}: the newest {kind} backup lastline recorded in Airflow, {recorded}, is missing or unreadable, so "
            f"`latest` would be {newest or 'nothing'}: someone who can write the storage removed or spoiled it. Nothing "
            "was restored. Find out who; to restore an older backup all the same, name it (<destination>/<backup_id>).")


def resolve_backup(url: str, aws_conn_id: str | None = None, kind: str = "physical") -> tuple[Storage, str]:
    """Open the storage of `url` and resolve `latest` to the newest complete backup of `kind`."""
    dest, backup_id = split_backup_url(url)
    # a run's conf names backups only under the deployment's roots, through the connection a root is bound to
    place = require_allowed(dest, "backup", aws_conn_id)
    storage = open_storage(place, aws_conn_id)
    if backup_id == "latest":
        done = newest_complete(storage, kind)
        _not_rolled_back(place_name(place, aws_conn_id), kind, done[0] if done else None)
        if not done:
            raise IntegrityError(f"{dest} holds no complete {kind} backup (none has a {MANIFEST} of that kind).")
        backup_id = done[0]
    elif not ID_RE.fullmatch(backup_id):  # a folder's name reaches the approval page, the logs and the reports
        raise ConfigError(f"backup {url!r}: {backup_id!r} is not a backup id (a UTC time and 6 hex digits, "
                          "as lastline names them: 20261128T161432Z-7c93b6); name the backup's folder or "
                          "<destination>/latest.")
    return storage, backup_id


def plan_prune(
    all_ids: list[str], complete_ids: list[str], keep: int, grace: timedelta, now: datetime | None = None
) -> list[str]:
    """Which backups to delete: complete ones beyond the `keep` newest (never the newest one),
    and incomplete ones older than `grace`. Folders whose names are not backup ids are never touched."""
    now = now or datetime.now(UTC)
    complete = sorted(complete_ids)
    doomed = complete[: max(0, len(complete) - max(1, keep))]
    for b in all_ids:
        t = backup_time(b)
        if b not in complete_ids and t is not None and now - t > grace:
            doomed.append(b)
    return sorted(doomed)


def prune_backups(storage: Storage, kind: str, keep: int, grace: timedelta,
                  protect: dict[str, str] | None = None) -> list[str]:
    """Delete complete `kind` backups beyond the `keep` newest and incomplete ones older than `grace`;
    complete backups of another kind sharing the destination are left alone, and so is every backup in
    `protect` ({id: why}, e.g. a base a point-in-time window needs). Returns the deleted ids."""
    ids = [b for b in storage.list_backups() if backup_time(b)]  # only folders named exactly like a backup id
    with_manifest = {b for b in ids if storage.exists(f"{b}/{MANIFEST}")}
    kinds = {b: manifest_kind(storage, b) for b in with_manifest}
    mine = [b for b in ids if kinds.get(b) == kind]
    # another kind's backups and unreadable manifests are never pruned (an unreadable one is not
    # "incomplete": someone has to look at it)
    others = {b for b in with_manifest if kinds[b] != kind}
    doomed = plan_prune([b for b in ids if b not in others], mine, keep, grace)
    for backup_id in [b for b in doomed if b in (protect or {})]:
        log.info("prune: keeping %s beyond keep=%d: %s", storage.location(backup_id), keep, (protect or {})[backup_id])
        doomed.remove(backup_id)
    for backup_id in doomed:
        log.info("prune: deleting %s", storage.location(backup_id))
        storage.delete_backup(backup_id)
    log.info("prune: kept the %d newest complete %s backups, deleted %d", keep, kind, len(doomed))
    return doomed
