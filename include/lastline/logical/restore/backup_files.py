"""A logical backup opened for restore: its manifest, schema.json checked against it, the tables a
restore selects, and every chunk file present with its size before anything is touched.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any

from lastline import connections
from lastline.core import accounts
from lastline.core.errors import ConfigError, IntegrityError, PreflightError
from lastline.core.servers import Server
from lastline.core.sql import as_text
from lastline.logical.format import dialect
from lastline.logical.format.plans import RestorePlan
from lastline.manifest import LogicalManifest, read_manifest, resolve_backup
from lastline.storage import Storage

log = logging.getLogger(__name__)
# the session every connection of the run account starts with: the load's sql_mode, time zone and checks, and the
# binary log off through the session procedure (the run account may not set sql_log_bin itself)
RUN_SESSION = (dialect.LOAD_SESSION, f"CALL {accounts.SESSION_PROCEDURE}()")


def target_server(plan: RestorePlan) -> Server:
    """The target as its connection's (admin) account: for lastline's own statements only."""
    return connections.server(plan.target_conn_id)


def run_server(plan: RestorePlan) -> Server:
    """The target as the run account (core.accounts): every statement from the backup runs on it."""
    if not plan.restore_account:
        raise ConfigError("this restore's plan names no run account (a plan from an older lastline?): re-run from preflight.")
    return accounts.run_account(target_server(plan), plan.restore_account, plan.databases, grant_option=plan.restore_grants)


def open_backup(plan: RestorePlan) -> tuple[Storage, LogicalManifest]:
    """The plan's backup, its manifest the very one preflight checked (its sha256 is pinned in the plan)."""
    storage, backup_id = resolve_backup(f"{plan.destination}/{plan.backup_id}", plan.aws_conn_id, "logical")
    return storage, read_manifest(storage, backup_id, "logical", sha256=plan.manifest_sha256 or None)


def checked_schema(storage: Storage, manifest: LogicalManifest) -> dict:
    """schema.json, used only if its sha256 is the manifest's (a backup folder is untrusted input)."""
    data = storage.read_bytes(f"{manifest.backup_id}/{manifest.schema_file}")
    sha = hashlib.sha256(data).hexdigest()
    if sha != manifest.schema_sha256:
        raise IntegrityError(
            f"{storage.location(manifest.backup_id + '/' + manifest.schema_file)} has sha256 {sha}, the manifest says "
            f"{manifest.schema_sha256}: the file was changed after the backup. Nothing was restored from it; "
            "restore another backup."
        )
    return json.loads(data)


def selected(manifest: LogicalManifest, databases: list[str]) -> list:
    """The manifest's tables of `databases` (a set for the look-ups: a list would cost tables x databases)."""
    wanted = set(databases)
    return [t for t in manifest.tables if t.schema in wanted]


def require_engines(cur: Any, manifest: LogicalManifest, databases: list[str], target: str) -> None:
    """Every storage engine the restored tables use is one the target has (SHOW ENGINES: YES or DEFAULT). The load
    session never lets the server substitute another (dialect.LOAD_SESSION: NO_ENGINE_SUBSTITUTION); this names
    the tables and the remedy before anything is touched, not at the first CREATE."""
    cur.execute("SELECT UPPER(ENGINE) FROM information_schema.ENGINES WHERE SUPPORT IN ('YES', 'DEFAULT')")
    have = {as_text(e) for (e,) in cur.fetchall()} | {"HEAP"}  # HEAP: MEMORY's other name
    lacking: dict[str, list[str]] = {}
    for t in selected(manifest, databases):
        if t.engine and t.engine.upper() not in have:
            lacking.setdefault(t.engine.upper(), []).append(f"{t.schema}.{t.name}")
    if lacking:
        raise PreflightError(
            f"{target} lacks the storage engine(s) of these tables: " + "; ".join(
                f"{e} ({len(ts)} table(s): {', '.join(ts[:5])}{', ...' if len(ts) > 5 else ''})" for e, ts in sorted(lacking.items()))
            + ". Install them there first (e.g. INSTALL SONAME 'ha_archive' for ARCHIVE), or leave those databases out; "
            "lastline never lets the server create a table with another engine. Nothing was touched.")


def require_chunk_files(storage: Storage, manifest: LogicalManifest, databases: list[str]) -> None:
    """Every chunk file the restore will load exists with the size the manifest gives (before anything is
    touched: a truncated or missing chunk found mid-load would leave a half-restored target)."""
    t0, bad, n = time.monotonic(), [], 0
    for t in selected(manifest, databases):
        for c in t.chunks:
            key, n = f"{manifest.backup_id}/{c.file}", n + 1
            size = storage.size_if_exists(key)
            if size != c.bytes:
                bad.append(f"{storage.location(key)} ({t.schema}.{t.name}): "
                           + ("missing" if size is None else f"{size} bytes, the manifest says {c.bytes}"))
    if bad:
        raise IntegrityError(
            f"{len(bad)} chunk file(s) of backup {manifest.backup_id} are missing or truncated:\n  " + "\n  ".join(bad[:20])
            + "\nNothing was touched on the target; restore another backup."
        )
    log.info("preflight: %d chunk files present with their sizes (%.1f s)", n, time.monotonic() - t0)
