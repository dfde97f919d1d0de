"""The logical restore's stages: preflight, snapshot_config, tune, create_schema, plan, load, finalize,
revert, verify, report. Each is one Airflow task; see dags/logical_restore.py for the shape."""
from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime
from typing import Any

from lastline import connections
from lastline.core import accounts, bounds, stopping
from lastline.core import datadir as dd
from lastline.core.errors import IntegrityError, LastlineError, PreflightError
from lastline.core.plans import PARALLEL, Conf
from lastline.core.progress import plural
from lastline.core.servers import base_version, refuse_restore_into_source
from lastline.core.sql import (  # noqa: F401
    ASIDE_PREFIX,
    SYSTEM_SCHEMAS,
    VOLATILE,
    as_text,
    never_restored,
    placeholders,
    server_identity,
    tables_at_risk,
)
from lastline.logical.restore import tuning
from lastline.logical.restore.backup_files import (
    RUN_SESSION,
    checked_schema,
    open_backup,
    refuse_names_one_by_case,
    require_chunk_files,
    require_engines,
    run_server,
    selected,
    target_server,
)
from lastline.logical.restore.create import (  # noqa: F401 - the DAG's stages, in order, are this module's
    INLINE_INDEXES_BELOW,
    create_schema,
    table_creates,
)
from lastline.logical.restore.finalize import (
    complete_table,
    finalize,  # noqa: F401 - the DAG's stages, in order, are this module's
)
from lastline.logical.restore.lanes import load_lane as lane_loader
from lastline.logical.restore.load import load_unit
from lastline.logical.restore.plans import INDEX_BUILDS, ConfigSnapshot, RestorePlan, Reverted, SchemaCreated, Tuned, UnitLoaded
from lastline.logical.restore.schema_checks import grant_reach, validate_schema
from lastline.logical.restore.target_state import (  # noqa: F401
    STATE,
    aside_name,
    clear_state,
    dbs_key,
    ensure_state,
    resume_defer_indexes,
    resuming,
    set_aside,
)
from lastline.logical.restore.verify import keep_chunk_sums, verify  # noqa: F401
from lastline.logical.restore.work_units import WorkUnit, plan_units
from lastline.manifest import LogicalManifest, backup_age, read_manifest, resolve_backup

log = logging.getLogger(__name__)


DEFAULT_REDO_BYTES = 1 << 30


def preflight(conf: dict, role: str | None = None) -> RestorePlan:
    """Target not protected; manifest present; databases absent or empty (unless force, a person's approval or
    resuming);
    local_infile usable; room on disk; a server version that reads the backup. Changes nothing."""
    params = Conf(conf)
    server = connections.server(params.required("target_conn_id"))
    server.require_target(role)  # role: the DAG's (staging_refresh, restore_drill), never the conf's
    parallel = bounds.parallel(server, params.integer("parallel", PARALLEL, minimum=1))  # refused before anything is read
    storage, backup_id = resolve_backup(params.required("backup"), params.text("aws_conn_id"), "logical")
    # a staging refresh pins the manifest its PII guard read: the restore reads that very one
    manifest = read_manifest(storage, backup_id, "logical", sha256=params.text("manifest_sha256"))
    schema = checked_schema(storage, manifest)  # checked against the manifest before anything is touched
    in_backup = [d["name"] for d in manifest.databases]
    named = params.names("databases")
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
        raise PreflightError(f"database(s) {', '.join(missing)} are not in backup {backup_id}; it holds: {', '.join(in_backup)}.")
    restore_grants = params.flag("restore_grants")
    if restore_grants and not server.restore_grants:  # accounts with the backup's passwords: the deployment decides
        raise PreflightError(
            f"restore_grants: {server.describe()} does not let restores create accounts (they would log in with passwords "
            "the backup chose): set the extra \"restore_grants\": true on its connection if it should. Nothing was touched."
        )
    if restore_grants and not manifest.include_grants:
        raise PreflightError(f"restore_grants: backup {backup_id} was taken without include_grants; it holds no accounts.")
    engines = validate_schema(schema, wanted, restore_grants)  # every statement the restore would run is the CREATE it claims to be
    same_tables(schema, manifest, wanted)
    require_chunk_files(storage, manifest, wanted)
    with server.session() as cur:  # @@local_infile is the server's: this connection allows no LOCAL INFILE itself
        cur.execute("SELECT @@version, @@local_infile, @@datadir")
        version, local_infile, datadir = cur.fetchone()
        refuse_restore_into_source(server, server_identity(cur), manifest.source_identity, manifest.source_conn_id,
                                   params.text("restore_into_source"))
        if not int(local_infile):
            raise PreflightError(
                f"local_infile is OFF on {server.describe()}: set local_infile=ON (SET GLOBAL or my.cnf); "
                "lastline loads chunks with LOAD DATA LOCAL INFILE."
            )
        if base_version(manifest.server_version)[:2] > base_version(version)[:2]:
            raise PreflightError(
                f"backup {backup_id} comes from {manifest.server_version}, newer than the target's {version}: its DDL may "
                "not load there. Restore into a server of the same or a newer version."
            )
        require_engines(cur, manifest, wanted, engines, server.describe())
        keys = refuse_names_one_by_case(cur, schema, wanted, server.describe())
        if restore_grants:
            refuse_wide_grants(cur, schema, wanted)
        resume = resuming(cur, backup_id, wanted)
        defer_indexes = params.flag("defer_indexes", RestorePlan.defer_indexes)
        kept, recorded = resume_defer_indexes(cur, backup_id, wanted) if resume else (defer_indexes, True)
        if kept != defer_indexes:  # its tables were created one way: their indexes are built that way
            log.warning("defer_indexes=%s asked, but " + (
                "the unfinished restore this run resumes created its tables with defer_indexes=%s: kept" if recorded else
                "the unfinished restore this run resumes was started by an earlier lastline, which did not record how "
                "it created its tables: resumed with defer_indexes=%s, under which finalize adds every held-back index "
                "and foreign key a table lacks") + ", so that every table gets its indexes exactly once", defer_indexes, kept)
            defer_indexes = kept
        # with the tables an earlier forced run set aside (aside_name): a run that stopped before it created any
        # table leaves the database empty, and its old tables are still the ones at stake. One query for them all
        # (one per database cost 6 ms each at 400 databases of 10,000 tables: the server reads no other database)
        names = [*wanted, *(aside_name(db) for db in wanted)]
        # by name casefolded, as information_schema matched them (`Sales` and `sales`: both), or as the server does
        key = keys.learn(names) if keys.folds else str.casefold
        held: dict[str, int] = {}
        if names:  # a backup of no database (accounts only) has none
            cur.execute("SELECT TABLE_SCHEMA, COALESCE(SUM(DATA_LENGTH + INDEX_LENGTH), 0) FROM information_schema.TABLES "
                        f"WHERE TABLE_SCHEMA IN ({placeholders(names)}) GROUP BY TABLE_SCHEMA", names)
            for schema, size in cur.fetchall():
                held[key(as_text(schema))] = held.get(key(as_text(schema)), 0) + int(size)
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
    restart_allowed = params.flag("restart_allowed")
    volatile = [f"{t.schema}.{t.name}" for t in selected(manifest, wanted) if t.engine.lower() in VOLATILE and t.rows]
    if restart_allowed and volatile:  # revert's restart would empty them after their load, and verify fail
        log.warning("restart_allowed: no restart profile for this restore: %s MEMORY table(s) with rows (%s) would lose "
                    "them when revert restarts the target", len(volatile), ", ".join(volatile[:5]))
        restart_allowed = False
    where = server.datadir or datadir
    if where:  # looked at on the server's own host (local or over SSH); set-aside tables stay in place
        dd.require_room(server.runner(), where, int(need * 1.3),
                        f"loading {dd.size_text(need)} of rows with their indexes" + (
                            f" (the {dd.size_text(kept_bytes)} that force replaces stay on disk until the restore is verified)"
                            if kept_bytes else ""))
    plan = RestorePlan(
        target_conn_id=server.conn_id,
        destination=storage.url,
        backup_id=backup_id,
        aws_conn_id=params.text("aws_conn_id"),
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
        manifest_sha256=manifest.read_sha256,
        authenticity=manifest.authenticity.describe(),
        enable_events=params.flag("enable_events"),
    )
    log.info(
        "preflight ok: %s/%s (%d tables, %.1f MB) into %s%s", storage.url, backup_id, len(selected(manifest, wanted)),
        need / 1e6, server.describe(), " - resuming an unfinished restore of this backup" if resume else "",
    )
    return plan


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


def snapshot_config(plan: RestorePlan, run: str = "") -> ConfigSnapshot:
    """The setup: record the production values durably on the target (changes no setting); `run`: the run that took
    it (an Airflow run id), named to whoever finds it left behind."""
    return tuning.take_snapshot(target_server(plan), run, datetime.now(UTC).isoformat())


def tune(plan: RestorePlan) -> Tuned:
    """Apply the restore profile (see tuning), or nothing when tune is off."""
    server = target_server(plan)
    snap = tuning.read_snapshot(server)
    if snap is None:
        raise LastlineError("tune: no config snapshot on the target; snapshot_config must run first.")
    if not plan.tune:
        log.info("tune: off for this run; loading on the target's own settings (but %s)", tuning.REQUIRED)
    return tuning.apply(
        server, snap, restart_allowed=plan.restart_allowed, redo_bytes=plan.redo_log_bytes,
        buffer_pool_bytes=plan.buffer_pool_bytes, profile=plan.tune,
    )


def plan_load(plan: RestorePlan) -> list[dict]:
    """The work units, as dicts (what the log and the benches show; each lane derives them again)."""
    _storage, manifest = open_backup(plan)
    units = plan_units(manifest, selected(manifest, plan.databases), plan.parallel)
    log.info("plan: %s for %s: %s", plural(len(units), "work unit"), plural(plan.parallel, "lane"),
             "; ".join(f"{u.name} ({u.bytes / 1e6:.1f} MB)" for u in units))
    return [u.to_dict() for u in units]


def prepare(plan: RestorePlan) -> tuple[dict[str, Tuned | SchemaCreated], list[str]]:
    """tune, create_schema and plan as one task (each takes well under a second; a task costs Airflow about
    that much again): their results, and the lanes the load runs on."""
    return {"tune": tune(plan), "create_schema": create_schema(plan)}, plan_lanes(plan)


def plan_lanes(plan: RestorePlan) -> list[str]:
    """The `parallel` lanes that load the work units (logged here; each lane derives the same units from the
    checked manifest, see plan_load)."""
    plan_load(plan)
    return [f"lane {i + 1} of {plan.parallel}" for i in range(plan.parallel)]


@stopping.stops_cleanly
def load_lane(plan: RestorePlan, lane: str) -> list[UnitLoaded]:
    """One of `parallel` lanes: load the units no other lane holds, in plan order (see logical.load)."""
    storage, manifest = open_backup(plan)
    units = plan_units(manifest, selected(manifest, plan.databases), plan.parallel)
    server = run_server(plan)  # the chunks, the held-back indexes and the checks: all under the run account
    schema = checked_schema(storage, manifest)
    built = None
    if plan.index_build == "per_table":  # without defer_indexes the indexes are there: only the checksum
        tables = {(t["schema"], t["name"]): t for t in schema["tables"]}
        in_manifest = {(t.schema, t.name): t for t in manifest.tables}

        def built(cur: Any, schema: str, name: str) -> None:  # in this lane's slot, while the other lanes load
            kept = keep_chunk_sums(cur, manifest, [in_manifest[(schema, name)]])
            indexes, check = complete_table(cur, manifest, tables[(schema, name)], None if kept else in_manifest[(schema, name)])
            # said at info when it took a while: a line per table (10,000 of them) costs the task's log more than it tells
            log.log(logging.INFO if indexes + check >= 1.0 else logging.DEBUG, "%s: %s.%s: indexes built in %.1f s, "
                    "checksum for verify in %.1f s", lane, schema, name, indexes, check)

    return lane_loader(server, storage, manifest, units, lane, plan.parallel, on_table_done=built, setup=RUN_SESSION,
                       create=table_creates(plan, manifest, schema))


@stopping.stops_cleanly
def load(plan: RestorePlan, unit: dict) -> UnitLoaded:
    """Load one work unit (a dict of work_units.WorkUnit, as plan_load gives it)."""
    storage, manifest = open_backup(plan)
    return load_unit(run_server(plan), storage, manifest, WorkUnit.from_dict(unit), plan.parallel,
                     table_creates(plan, manifest, checked_schema(storage, manifest)))


def revert(plan: RestorePlan) -> Reverted:
    """The teardown: drop the run account and lock the objects owner (always first: nothing from the backup
    runs after this), then put the production configuration back and read it back (fails loudly on a
    difference)."""
    server = target_server(plan)
    dropped = accounts.drop(server, plan.restore_account) if plan.restore_account else False
    accounts.lock(server, accounts.owner_name(plan.databases))
    return dataclasses.replace(tuning.revert(server), run_account_dropped=dropped)
