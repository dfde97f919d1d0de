"""The backups of one destination read back: which folders are complete (the preflight), and for one backup its
manifest (bounded, its MAC checked) and every file it names (presence, size, sha256, streamed; for an encrypted backup
whose data key the deployment's keys open, every sealed chunk authenticated in the same read): ok, damaged or missing,
naming each file that differs and how. It reads, never writes (an opened chunk's plaintext is dropped)."""
from __future__ import annotations

import logging
from typing import Any

from lastline.backups import backup_seal
from lastline.core.errors import IntegrityError
from lastline.core.plans import Conf, RunParams
from lastline.core.progress import plural
from lastline.manifest import (
    MANIFEST,
    FileInfo,
    LogicalManifest,
    PhysicalManifest,
    backup_time,
    manifest_kind,
    newest_recorded,
    read_manifest,
)
from lastline.storage import Storage, open_storage, place_name, require_allowed
from lastline.verify.plans import GONE, OK, BackupVerdict, Finding, VerifyPlan, status_of
from lastline.verify.reading import Opening, check_object, mac_finding, opening

log = logging.getLogger(__name__)


def preflight(conf: RunParams) -> VerifyPlan:
    """The destination (under the deployment's roots) and its backup folders: those with a manifest, oldest first."""
    params = Conf(conf)
    aws_conn_id = params.text("aws_conn_id") or None
    place = require_allowed(params.required("destination"), "destination", aws_conn_id)
    storage = open_storage(place, aws_conn_id)
    folders = [b for b in storage.list_backups() if backup_time(b)]
    complete = [b for b in folders if storage.exists(f"{b}/{MANIFEST}")]
    incomplete = [b for b in folders if b not in complete]
    # the newest backup of each kind Airflow recorded, out of the storage writer's reach, must still be there
    lost = [f"{kind} backup {b}" for kind in ("physical", "logical")
            if (b := newest_recorded(place_name(place, aws_conn_id), kind)) and b not in complete]
    log.info("verify %s: %s to read back (%d incomplete, not read)%s", place, plural(len(complete), "backup"),
             len(incomplete), "".join(f"; the newest {x} Airflow recorded is not complete there" for x in lost))
    return VerifyPlan(place, aws_conn_id, complete, incomplete, lost)


# the most verify_backup instances a run maps: under Airflow's [core] max_map_length (1024 by default)
MAX_TASKS = 1000


def batches(plan: VerifyPlan, most: int = MAX_TASKS) -> list[list[str]]:
    """The backups to read back, a task each (named by its id), or, where there are more than `most`, runs of consecutive
    ones: at most `most` tasks (Airflow maps a task over a task's own return value, at most max_map_length times)."""
    size = max(1, -(-len(plan.backups) // most))
    return [plan.backups[i:i + size] for i in range(0, len(plan.backups), size)]


def expected_files(manifest: PhysicalManifest | LogicalManifest) -> list[FileInfo]:
    """Every file a manifest names, with its size (-1: not recorded) and sha256: a physical backup's artifact; a
    logical backup's file list (format 1, without one: its schema file and its chunks)."""
    if isinstance(manifest, PhysicalManifest):
        if "/" in manifest.artifact:
            raise IntegrityError(f"manifest of {manifest.backup_id} names the artifact {manifest.artifact!r}, outside its folder")
        return [FileInfo(manifest.artifact, int(manifest.bytes), manifest.sha256)]
    if manifest.files:
        return list(manifest.files)
    chunks = [FileInfo(c.file, int(c.bytes), c.sha256) for t in manifest.tables for c in t.chunks]
    return [FileInfo(manifest.schema_file, -1, manifest.schema_sha256), *chunks]


def gone(storage: Storage, backup_id: str) -> bool:
    """Whether the backup's folder is no longer there at all (prune deletes whole folders, an old backup's while a long
    run reads): not damage. A folder still there with a file or its manifest gone is."""
    return backup_id not in storage.list_backups()


def read_back_manifest(storage: Storage, backup_id: str) -> tuple[Any, list[Finding]]:
    """A backup's manifest as read_manifest reads it (bounded, parsed, its id checked; its `.authenticity` the MAC's
    verdict), or None, and what is wrong with it."""
    try:
        if storage.size_if_exists(f"{backup_id}/{MANIFEST}") is None:
            return None, [Finding(MANIFEST, "missing", "a manifest", "no such file (removed since the listing)")]
        kind = manifest_kind(storage, backup_id)
        if kind is None:
            return None, [Finding(MANIFEST, "unreadable", "a manifest lastline wrote", "unreadable, or of no known kind")]
        manifest = read_manifest(storage, backup_id, kind, require=False)
    except IntegrityError as exc:
        return None, [Finding(MANIFEST, "unreadable", "a manifest lastline wrote", str(exc)[:300])]
    found = mac_finding(manifest.authenticity, MANIFEST)
    return manifest, [found] if found else []


def _sealed(encrypted: bool, opened: Opening, status: str) -> str:
    """Whether an encrypted backup's sealed files were opened, in words ("" for a backup that is not encrypted)."""
    if not encrypted:
        return ""
    if opened.seal is None:
        return opened.note or "sealed, not opened (see its findings)"
    return "opened: " + ("every sealed chunk authenticated" if status == OK else "see its findings")


def verify_backup(plan: VerifyPlan, backup_id: str) -> BackupVerdict:
    """One backup read back (see the module)."""
    storage = open_storage(plan.destination, plan.aws_conn_id)
    manifest, findings = read_back_manifest(storage, backup_id)
    if manifest is None:
        if gone(storage, backup_id):
            log.info("verify %s/%s: removed since the listing (pruned?): not read", plan.destination, backup_id)
            return BackupVerdict(backup_id, None, GONE)
        return BackupVerdict(backup_id, None, status_of(findings), findings=findings)
    try:
        files = expected_files(manifest)
    except IntegrityError as exc:
        findings.append(Finding(MANIFEST, "unreadable", "files inside the backup's folder", str(exc)[:300]))
        files = []
    # the seal a restore here would open it with (or why not): every file of an encrypted backup is sealed
    opened = opening(manifest.encryption, lambda: backup_seal(storage, manifest),
                     storage.location(f"{backup_id}/{MANIFEST}"), MANIFEST)
    findings += [opened.finding] if opened.finding else []
    total = 0
    for info in files:
        found, n = check_object(storage, f"{backup_id}/{info.name}", int(info.bytes), info.sha256, info.name, opened.seal)
        total += n
        if found is not None:
            findings.append(found)
    status = status_of(findings)
    if status != OK and gone(storage, backup_id):
        log.info("verify %s/%s: removed while it was read (pruned?): not read", plan.destination, backup_id)
        return BackupVerdict(backup_id, manifest.kind, GONE, len(files), total)
    sealed = _sealed(manifest.encryption is not None, opened, status)
    verdict = BackupVerdict(backup_id, manifest.kind, status, len(files), total, findings, manifest.authenticity.describe(),
                            sealed)
    log.info("verify %s/%s: %s, %s read (%s bytes)%s%s", plan.destination, backup_id, verdict.status,
             plural(len(files), "file"), f"{total:,}", f"; {sealed}" if sealed else "",
             "".join(f"; {f.describe()}" for f in findings))
    return verdict
