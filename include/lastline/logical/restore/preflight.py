"""The logical restore's preflight: every check a restore makes before it touches the target, and the plan it
decides. Changes nothing; a refusal names what to do."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from lastline import connections
from lastline.backups import BackupRef, open_backup
from lastline.core import accounts, bounds
from lastline.core import datadir as datadirs
from lastline.core.errors import IntegrityError, PreflightError
from lastline.core.plans import PARALLEL, Conf, RunParams
from lastline.core.servers import Server, base_version, refuse_restore_into_source
from lastline.core.sql import (
    ASIDE_PREFIX,
    VOLATILE,
    as_text,
    never_restored,
    placeholders,
    server_identity,
    tables_at_risk,
)
from lastline.logical.restore import tuning
from lastline.logical.restore.backup_files import (
    refuse_names_one_by_case,
    require_chunk_files,
    require_engines,
    selected,
)
from lastline.logical.restore.plans import INDEX_BUILDS, RestorePlan
from lastline.logical.restore.schema_checks import validate_schema
from lastline.logical.restore.schema_grants import grant_reach
from lastline.logical.restore.target_state import aside_name, resume_defer_indexes, resuming
from lastline.manifest import LogicalManifest, backup_age

log = logging.getLogger(__name__)

DEFAULT_REDO_BYTES = 1 << 30


def preflight(conf: RunParams, role: str | None = None) -> RestorePlan:
    """Target not protected; manifest present; databases absent or empty (unless force, a person's approval or
    resuming);
    local_infile usable; room on disk; a server version that reads the backup. Changes nothing."""
    params = Conf(conf)
    server = connections.server(params.required("target_conn_id"))
    server.require_target(role)  # role: the DAG's (staging_refresh, restore_drill), never the conf's
    parallel = bounds.parallel(server, params.integer("parallel", PARALLEL, minimum=1))  # refused before anything is read
    # a staging refresh pins the manifest its PII guard read: the restore reads that very one
    backup = open_backup(BackupRef.param(params, "logical"))
    storage, manifest, backup_id = backup.storage, backup.logical, backup.ref.backup_id
    schema = backup.schema  # checked against the manifest before anything is touched; encrypted: opened with the
    # deployment's key, refused here naming the key ids it needs unless a key held opens it (backups.backup_seal)
    wanted = chosen_databases(manifest, params.names("databases"))
    restore_grants = grants_asked(params, server, manifest)
    engines = validate_schema(schema, wanted, restore_grants)  # every statement the restore would run is the CREATE it claims to be
    same_tables(schema, manifest, wanted)
    require_chunk_files(storage, manifest, wanted)
    with server.session() as cur:  # @@local_infile is the server's: this connection allows no LOCAL INFILE itself
        datadir = require_server(cur, server, manifest, params.text("restore_into_source"))
        require_engines(cur, manifest, wanted, engines, server.describe())
        keys = refuse_names_one_by_case(cur, schema, wanted, server.describe())
        if restore_grants:
            refuse_wide_grants(cur, schema, wanted)
        resume = resuming(cur, backup_id, wanted)
        defer_indexes = kept_defer_indexes(cur, backup_id, wanted, resume, params.flag("defer_indexes", RestorePlan.defer_indexes))
        # by name casefolded, as information_schema matched them (`Sales` and `sales`: both), or as the server does
        names = [*wanted, *(aside_name(db) for db in wanted)]
        key = keys.learn(names) if keys.folds else str.casefold
        held = held_bytes(cur, names, key)
        nonempty = [db for db in wanted if key(db) in held or key(aside_name(db)) in held]
        kept_bytes = sum(held.values())  # force keeps them until verify: both must fit
        # a person approves the replacement first (the deployment or the connection says so, never the run); where
        # none is asked, only force replaces
        force, asks = params.flag("force"), bool(nonempty) and not resume and server.asks_approval()
        if nonempty and not (force or resume or asks):
            raise PreflightError(
                f"database(s) {', '.join(nonempty)} already exist on {server.describe()} and are not empty (or hold the "
                f"tables an unfinished forced restore set aside), and {server.unforced()}; or choose other databases."
            )
        at_risk = {**tables_at_risk(cur, nonempty + [aside_name(d) for d in nonempty]), **backup_age(backup_id),
                   "target": server.describe(), "force": force, "replaces": nonempty} if asks else None
    need = sum(t.raw_bytes for t in selected(manifest, wanted))
    restart_allowed = params.flag("restart_allowed") and not memory_tables_with_rows(manifest, wanted)
    require_room(server, server.datadir or datadir, need, kept_bytes)
    plan = RestorePlan(
        target_conn_id=server.conn_id,
        backup=backup.ref,
        databases=wanted,
        parallel=bounds.free_connections(server, parallel, own=2, label="restore lanes"),  # one connection each
        tune=params.flag("tune", RestorePlan.tune),
        restart_allowed=restart_allowed,
        defer_indexes=defer_indexes,
        index_build=params.choice("index_build", INDEX_BUILDS, INDEX_BUILDS[0]),
        force=force or asks,  # without force, the approval stands for it: nothing after it runs unless approved
        restore_grants=restore_grants,
        resume=resume,
        redo_log_bytes=params.size("redo_log_bytes", DEFAULT_REDO_BYTES),
        buffer_pool_bytes=params.optional_integer("buffer_pool_bytes"),
        bytes=need,
        at_risk=at_risk,
        restore_account=accounts.run_account_name(),
        authenticity=backup.authenticity.describe(),
        enable_events=params.flag("enable_events"),
    )
    log.info(
        "preflight ok: %s/%s (%d tables, %.1f MB) into %s%s", storage.url, backup_id, len(selected(manifest, wanted)),
        need / 1e6, server.describe(), " - resuming an unfinished restore of this backup" if resume else "",
    )
    return plan


def chosen_databases(manifest: LogicalManifest, named: list[str]) -> list[str]:
    """The databases a run restores: those `named`, or every one of the backup's that is ever restored; refused
    when one is never restored (system schemas, lastline's own) or is not in the backup."""
    in_backup = [d["name"] for d in manifest.databases]
    wanted = named or [d for d in in_backup if not never_restored(d)]
    refused = [d for d in {*wanted, *(t.schema for t in selected(manifest, wanted))} if never_restored(d)]
    if refused:  # a backup never holds them (the backup refuses them): one that does was made to
        raise PreflightError(
            f"{', '.join(sorted(refused))}: system schemas, lastline's own {tuning.META_DB} and its set-aside databases "
            f"({ASIDE_PREFIX}...) are never restored (accounts come back with restore_grants); leave them out of databases."
        )
    skipped = sorted(set(in_backup) - set(wanted))
    if skipped and not named:
        log.warning("left out of the restore (system or lastline schemas, which are never restored): %s", ", ".join(skipped))
    missing = [d for d in wanted if d not in in_backup]
    if missing:
        raise PreflightError(
            f"database(s) {', '.join(missing)} are not in backup {manifest.backup_id}; it holds: {', '.join(in_backup)}.")
    return wanted


def grants_asked(params: Conf, server: Server, manifest: LogicalManifest) -> bool:
    """restore_grants, when the run asks for it: only where the deployment lets restores create accounts, and only
    from a backup that holds them."""
    if not params.flag("restore_grants"):
        return False
    if not server.restore_grants:  # accounts with the backup's passwords: the deployment decides
        raise PreflightError(
            f"restore_grants: {server.describe()} does not let restores create accounts (they would log in with passwords "
            "the backup chose): set the extra \"restore_grants\": true on its connection if it should. Nothing was touched."
        )
    if not manifest.include_grants:
        raise PreflightError(f"restore_grants: backup {manifest.backup_id} was taken without include_grants; it holds no accounts.")
    return True


def same_tables(schema: dict, manifest: LogicalManifest, databases: list[str]) -> None:
    """schema.json and the manifest name the same tables of `databases` (each pins the other: a table in one alone
    would be found missing only in the middle of the load or at finalize)."""
    in_schema = {(t.get("schema"), t.get("name")) for t in schema.get("tables", []) if t.get("schema") in databases}
    in_manifest = {(t.schema, t.name) for t in selected(manifest, databases)}
    if in_schema != in_manifest:
        only = [f"{s}.{n} (only in the {where})" for where, names in (("manifest", in_manifest - in_schema),
                                                                   ("schema.json", in_schema - in_manifest))
                for s, n in sorted(names, key=str)]
        raise IntegrityError(
            f"backup {manifest.backup_id}: its manifest and schema.json do not name the same tables: {', '.join(only[:10])}"
            f"{' ...' if len(only) > 10 else ''}. The backup is inconsistent; nothing was touched. Restore another backup."
        )


def require_server(cur: Any, server: Server, manifest: LogicalManifest, into_source: str | None) -> str:
    """The target is not the backup's source (unless the run says so), lets the restore load with LOCAL INFILE and
    reads the backup's DDL (its version is the same or newer); returns the server's @@datadir."""
    cur.execute("SELECT @@version, @@local_infile, @@datadir")
    version, local_infile, datadir = cur.fetchone()
    refuse_restore_into_source(server, server_identity(cur), manifest.source_identity, manifest.source_conn_id, into_source)
    if not int(local_infile):
        raise PreflightError(
            f"local_infile is OFF on {server.describe()}: set local_infile=ON (SET GLOBAL or my.cnf); "
            "lastline loads chunks with LOAD DATA LOCAL INFILE."
        )
    if base_version(manifest.server_version)[:2] > base_version(version)[:2]:
        raise PreflightError(
            f"backup {manifest.backup_id} comes from {manifest.server_version}, newer than the target's {version}: its DDL "
            "may not load there. Restore into a server of the same or a newer version."
        )
    return str(datadir or "")


def refuse_wide_grants(cur: Any, schema: dict, databases: list[str]) -> None:
    """restore_grants recreates accounts with grants on the restored databases only (their GRANTs run under the
    run account, which could not grant more): an account the target lacks whose grants reach further is refused
    here, before anything is touched, rather than half-created at the end."""
    wide = []
    for g in schema.get("grants", []):
        cur.execute("SELECT COUNT(*) FROM mysql.user WHERE User = %s AND Host = %s", (g["user"], g["host"]))
        if cur.fetchone()[0]:
            continue  # left alone: it exists on the target
        wide += [f"{g['user']}@{g['host']}: a grant that {why}" for why in (grant_reach(x, databases) for x in g.get("grants", [])) if why]
    if wide:
        raise PreflightError(
            "restore_grants recreates accounts with grants on the restored databases only; these reach further:\n  "
            + "\n  ".join(wide[:20]) + "\nCreate those accounts by hand (or drop them from the source's backup), or restore "
            "without restore_grants. Nothing was touched."
        )


def kept_defer_indexes(cur: Any, backup_id: str, databases: list[str], resume: bool, asked: bool) -> bool:
    """defer_indexes as the run asks, except when it resumes an unfinished restore: its tables were created one way,
    and their indexes are built that way (each table gets its indexes exactly once)."""
    kept, recorded = resume_defer_indexes(cur, backup_id, databases) if resume else (asked, True)
    if kept != asked:
        log.warning("defer_indexes=%s asked, but " + (
            "the unfinished restore this run resumes created its tables with defer_indexes=%s: kept" if recorded else
            "the unfinished restore this run resumes was started by an earlier lastline, which did not record how "
            "it created its tables: resumed with defer_indexes=%s, under which finalize adds every held-back index "
            "and foreign key a table lacks") + ", so that every table gets its indexes exactly once", asked, kept)
    return kept


def held_bytes(cur: Any, names: list[str], key: Callable[[str], str]) -> dict[str, int]:
    """The bytes of rows and indexes the databases `names` hold on the target, by `key` of each name the server
    matched (those holding no table are absent). With the tables an earlier forced run set aside (aside_name): a run that stopped
    before it created any table leaves the database empty, and its old tables are still the ones at stake. One
    query for them all (one per database cost 6 ms each at 400 databases of 10,000 tables)."""
    held: dict[str, int] = {}
    if names:  # a backup of no database (accounts only) has none
        cur.execute("SELECT TABLE_SCHEMA, COALESCE(SUM(DATA_LENGTH + INDEX_LENGTH), 0) FROM information_schema.TABLES "
                    f"WHERE TABLE_SCHEMA IN ({placeholders(names)}) GROUP BY TABLE_SCHEMA", names)
        for schema, size in cur.fetchall():
            held[key(as_text(schema))] = held.get(key(as_text(schema)), 0) + int(size)
    return held


def memory_tables_with_rows(manifest: LogicalManifest, databases: list[str]) -> list[str]:
    """The MEMORY tables with rows among `databases`: revert's restart would empty them after their load, and
    verify fail, so a restore of any gets no restart profile (said at warning)."""
    volatile = [f"{t.schema}.{t.name}" for t in selected(manifest, databases) if t.engine.lower() in VOLATILE and t.rows]
    if volatile:
        log.warning("restart_allowed: no restart profile for this restore: %s MEMORY table(s) with rows (%s) would lose "
                    "them when revert restarts the target", len(volatile), ", ".join(volatile[:5]))
    return volatile


def require_room(server: Server, datadir: str, need: int, kept_bytes: int) -> None:
    """Room on the target's datadir for `need` bytes of rows with their indexes, and for the `kept_bytes` that force
    replaces (they stay on disk until the restore is verified). Looked at on the server's own host."""
    if not datadir:
        return
    datadirs.require_room(server.runner(), datadir, int(need * 1.3),
                          f"loading {datadirs.size_text(need)} of rows with their indexes" + (
                              f" (the {datadirs.size_text(kept_bytes)} that force replaces stay on disk until the restore "
                              "is verified)" if kept_bytes else ""))
