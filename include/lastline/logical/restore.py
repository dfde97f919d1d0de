"""The logical restore's stages: preflight, snapshot_config, tune, create_schema, plan, load, finalize,
revert, verify, report. Each is one Airflow task; see dags/logical_restore.py for the shape."""
from __future__ import annotations

import hashlib
import json
import logging
import time
from datetime import datetime, timezone
from typing import Any

from lastline import connections
from lastline.core import datadir as dd
from lastline.core import stopping
from lastline.core.errors import IntegrityError, LastlineError, PreflightError
from lastline.core.plans import Conf
from lastline.core.servers import Server, refuse_restore_into_source
from lastline.core.sql import ASIDE_PREFIX, SYSTEM_SCHEMAS, server_identity, table_exists
from lastline.logical import dialect, tuning
from lastline.logical.load import ensure_ledger, load_unit
from lastline.logical.load import load_lane as lane_loader
from lastline.logical.plans import RestorePlan
from lastline.logical.schema import checked_create, checked_grants, database_create, session_name, split_deferred, validate_schema
from lastline.logical.work_units import WorkUnit, plan_units
from lastline.manifest import LogicalManifest, read_manifest, resolve_backup
from lastline.physical.tools import base_version
from lastline.storage import Storage

log = logging.getLogger(__name__)

DEFAULT_REDO_BYTES = 1 << 30
STATE = f"{tuning.META_DB}.restore_state"


def _target(plan: RestorePlan) -> Server:
    return connections.server(plan.target_conn_id)


def _manifest(plan: RestorePlan) -> tuple[Storage, LogicalManifest]:
    storage, backup_id = resolve_backup(f"{plan.destination}/{plan.backup_id}", plan.aws_conn_id, "logical")
    return storage, read_manifest(storage, backup_id, "logical")


def _schema(storage: Storage, manifest: LogicalManifest) -> dict:
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


def _selected(manifest: LogicalManifest, databases: list[str]) -> list:
    return [t for t in manifest.tables if t.schema in databases]


def _dbs_key(databases: list[str]) -> str:
    """The restore's databases as one key (a resume must restore the very same set)."""
    return hashlib.sha256(json.dumps(sorted(databases)).encode()).hexdigest()


def _state_current(cur: Any) -> bool:
    """Whether the restore-state table exists in its current shape (keyed on backup and databases)."""
    cur.execute(
        "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'restore_state' "
        "AND COLUMN_NAME = 'dbs_key'", (tuning.META_DB,),
    )
    return bool(cur.fetchone()[0])


def _resuming(cur: Any, backup_id: str, databases: list[str]) -> bool:
    """Whether an unfinished restore of this backup into these same databases left its state on this
    target (a new run then resumes it; any other run follows the force rule)."""
    if not _state_current(cur):
        return False
    cur.execute(f"SELECT COUNT(*) FROM {STATE} WHERE backup_id = %s AND dbs_key = %s AND finished_at IS NULL",
                (backup_id, _dbs_key(databases)))
    return bool(cur.fetchone()[0])


def _ensure_state(cur: Any) -> None:
    """The restore-state table; one of an older shape (keyed on the backup alone) is replaced."""
    if table_exists(cur, tuning.META_DB, "restore_state") and not _state_current(cur):
        log.warning("%s has an older shape (keyed on the backup alone): replaced; an unfinished restore started by "
                    "an older lastline starts afresh", STATE)
        cur.execute(f"DROP TABLE {STATE}")
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {STATE} (backup_id VARBINARY(64) NOT NULL, dbs_key CHAR(64) NOT NULL, "
        "dbs TEXT NOT NULL, started_at TIMESTAMP(6) NULL, finished_at TIMESTAMP(6) NULL, "
        "PRIMARY KEY (backup_id, dbs_key)) ENGINE=InnoDB"
    )


def _clear_state(cur: Any, manifest: LogicalManifest, databases: list[str]) -> None:
    """Forget every restore state and ledger row that concerns these databases (any backup): they are being
    replaced, or were just restored."""
    cur.execute(f"SELECT backup_id, dbs_key, dbs FROM {STATE}")
    for backup_id, key, dbs in cur.fetchall():
        if set(json.loads(dbs)) & set(databases):
            cur.execute(f"DELETE FROM {STATE} WHERE backup_id = %s AND dbs_key = %s", (backup_id, key))
    folders = {c.file.split("/")[1] for t in _selected(manifest, databases) for c in t.chunks}
    for folder in sorted(folders):
        prefix = f"data/{folder}/"
        cur.execute(f"DELETE FROM {tuning.META_DB}.ledger WHERE LEFT(file, %s) = %s", (len(prefix), prefix))


def aside_name(db: str) -> str:
    """Where `force` keeps a database's old tables until the restore that replaces them is verified."""
    return ASIDE_PREFIX + hashlib.sha1(db.encode()).hexdigest()[:16]


def _schema_exists(cur: Any, db: str) -> bool:
    cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (db,))
    return bool(cur.fetchone()[0])


def _set_aside(cur: Any, db: str) -> None:
    """Move `db`'s tables (and the text of its triggers, views, routines and events) into aside_name(db),
    then drop `db`: nothing of the old data is dropped before the new data is verified. If an earlier
    run already set the original aside, what `db` holds now is that run's partial restore: dropped."""
    if not _schema_exists(cur, db):
        return
    aside, q = aside_name(db), dialect.quote_ident
    if _schema_exists(cur, aside):
        log.warning("force: %s already holds the old tables of %s (set aside by an earlier run); dropping the "
                    "partial restore in %s", aside, db, db)
        cur.execute(f"DROP DATABASE {q(db)}")
        return
    cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                "AND TABLE_TYPE IN ('BASE TABLE', 'SEQUENCE') ORDER BY 1", (db,))
    tables = [r[0] for r in cur.fetchall()]
    if not tables:
        cur.execute(f"DROP DATABASE {q(db)}")
        return
    cur.execute(f"CREATE DATABASE {q(aside)}")
    cur.execute(f"CREATE TABLE {q(aside)}.`__lastline_objects` (kind VARCHAR(16) NOT NULL, name VARCHAR(64) NOT NULL, "
                "definition LONGTEXT NOT NULL) ENGINE=InnoDB")
    saved = 0
    for kind, sql in (
        ("TRIGGER", "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s"),
        ("VIEW", "SELECT TABLE_NAME FROM information_schema.VIEWS WHERE TABLE_SCHEMA = %s"),
        ("PROCEDURE", "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s AND ROUTINE_TYPE = 'PROCEDURE'"),
        ("FUNCTION", "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s AND ROUTINE_TYPE = 'FUNCTION'"),
        ("EVENT", "SELECT EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA = %s"),
    ):
        cur.execute(sql, (db,))
        for (name,) in cur.fetchall():
            cur.execute(f"SHOW CREATE {kind} {dialect.qualified(db, name)}")
            row = cur.fetchone()
            definition = row[2] if kind in ("TRIGGER", "PROCEDURE", "FUNCTION") else row[3] if kind == "EVENT" else row[1]
            cur.execute(f"INSERT INTO {q(aside)}.`__lastline_objects` VALUES (%s, %s, %s)", (kind, name, definition))
            saved += 1
            if kind == "TRIGGER":  # a table moves to another database only without its triggers
                cur.execute(f"DROP TRIGGER {dialect.qualified(db, name)}")
    cur.execute("RENAME TABLE " + ", ".join(f"{dialect.qualified(db, t)} TO {dialect.qualified(aside, t)}" for t in tables))
    cur.execute(f"DROP DATABASE {q(db)}")
    log.warning("force: the %d old table(s) of %s are kept in %s (and the text of %d trigger(s), view(s), routine(s) "
                "and event(s) in its __lastline_objects) until the restore is verified", len(tables), db, aside, saved)


def _drop_aside(server: Server, databases: list[str]) -> list[str]:
    """After a verified restore: the old tables that force set aside are dropped."""
    dropped = []
    conn = server.connect()
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION sql_log_bin = 0")
        for db in databases:
            if _schema_exists(cur, aside_name(db)):
                cur.execute(f"DROP DATABASE {dialect.quote_ident(aside_name(db))}")
                dropped.append(aside_name(db))
    finally:
        conn.close()
    return dropped


def _require_chunk_files(storage: Storage, manifest: LogicalManifest, databases: list[str]) -> None:
    """Every chunk file the restore will load exists with the size the manifest gives (before anything is
    touched: a truncated or missing chunk found mid-load would leave a half-restored target)."""
    t0, bad, n = time.monotonic(), [], 0
    for t in _selected(manifest, databases):
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


def preflight(conf: dict) -> dict:
    """Target not protected; manifest present; databases absent or empty (unless force or resuming);
    local_infile usable; room on disk; a server version that reads the backup. Changes nothing."""
    params = Conf(conf)
    server = connections.server(params.required("target_conn_id"))
    server.refuse_if_protected()
    storage, backup_id = resolve_backup(params.required("backup"), params.text("aws_conn_id"), "logical")
    manifest = read_manifest(storage, backup_id, "logical")
    schema = _schema(storage, manifest)  # checked against the manifest before anything is touched
    in_backup = [d["name"] for d in manifest.databases]
    named = params.names("databases")
    # lastline's own schema is never restored (it holds this restore's state); system schemas only by name
    wanted = named or [d for d in in_backup if d not in SYSTEM_SCHEMAS and d != tuning.META_DB]
    if tuning.META_DB in wanted or tuning.META_DB in [t.schema for t in _selected(manifest, wanted)]:
        raise PreflightError(f"{tuning.META_DB} is lastline's own bookkeeping on the target and is never restored; leave it out of databases.")
    skipped = sorted(set(in_backup) - set(wanted))
    if skipped and not named:
        log.warning("left out of the restore (system or lastline schemas; name them in databases to restore them): %s", ", ".join(skipped))
    missing = [d for d in wanted if d not in in_backup]
    if missing:
        raise PreflightError(f"database(s) {', '.join(missing)} are not in backup {backup_id}; it holds: {', '.join(in_backup)}.")
    restore_grants = params.flag("restore_grants")
    if restore_grants and not manifest.include_grants:
        raise PreflightError(f"restore_grants: backup {backup_id} was taken without include_grants; it holds no accounts.")
    validate_schema(schema, wanted, restore_grants)  # every statement the restore would run is the CREATE it claims to be
    _require_chunk_files(storage, manifest, wanted)
    conn = server.connect(local_infile=1)
    try:
        cur = conn.cursor()
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
        resume = _resuming(cur, backup_id, wanted)
        nonempty, kept_bytes = [], 0
        for db in wanted:
            cur.execute("SELECT COUNT(*), COALESCE(SUM(DATA_LENGTH + INDEX_LENGTH), 0) FROM information_schema.TABLES "
                        "WHERE TABLE_SCHEMA = %s", (db,))
            count, size = cur.fetchone()
            if count:
                nonempty.append(db)
                kept_bytes += int(size)  # force keeps them until verify: both must fit
        if nonempty and not (params.flag("force") or resume):
            raise PreflightError(
                f"database(s) {', '.join(nonempty)} already exist on {server.describe()} and are not empty: set force "
                "to replace them, or choose other databases."
            )
    finally:
        conn.close()
    need = sum(t.raw_bytes for t in _selected(manifest, wanted))
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
        parallel=params.integer("parallel", 2, minimum=1),
        tune=params.flag("tune", True),
        restart_allowed=params.flag("restart_allowed"),
        defer_indexes=params.flag("defer_indexes", True),
        force=params.flag("force"),
        restore_grants=restore_grants,
        resume=resume,
        redo_log_bytes=params.integer("redo_log_bytes", DEFAULT_REDO_BYTES),
        buffer_pool_bytes=params.optional_integer("buffer_pool_bytes"),
        bytes=need,
    )
    log.info(
        "preflight ok: %s/%s (%d tables, %.1f MB) into %s%s", storage.url, backup_id, len(_selected(manifest, wanted)),
        need / 1e6, server.describe(), " - resuming an unfinished restore of this backup" if resume else "",
    )
    return plan.to_dict()


def snapshot_config(plan: RestorePlan | dict, run_id: str = "") -> dict:
    """The setup: record the production values durably on the target (changes no setting)."""
    plan = RestorePlan.of(plan)
    snap = tuning.take_snapshot(_target(plan), run_id, datetime.now(timezone.utc).isoformat())
    return snap.to_dict()


def tune(plan: RestorePlan | dict) -> dict:
    """Apply the restore profile (see tuning), or nothing when tune is off."""
    plan = RestorePlan.of(plan)
    if not plan.tune:
        log.info("tune: off for this run; loading on the target's own settings")
        return {"applied": {}, "restarted": False}
    server = _target(plan)
    snap = tuning.read_snapshot(server)
    if snap is None:
        raise LastlineError("tune: no config snapshot on the target; snapshot_config must run first.")
    return tuning.apply(
        server, snap, restart_allowed=plan.restart_allowed, redo_bytes=plan.redo_log_bytes,
        buffer_pool_bytes=plan.buffer_pool_bytes,
    )


@stopping.stops_cleanly
def create_schema(plan: RestorePlan | dict) -> dict:
    """Databases and tables (secondary indexes and foreign keys held back when defer_indexes)."""
    plan = RestorePlan.of(plan)
    storage, manifest = _manifest(plan)
    schema = _schema(storage, manifest)
    server = _target(plan)
    conn = server.connect()
    t0 = time.monotonic()
    created = 0
    try:
        cur = conn.cursor()
        ensure_ledger(cur)
        _ensure_state(cur)
        resume = _resuming(cur, plan.backup_id, plan.databases)
        cur.execute(dialect.LOAD_SESSION)
        if not resume:
            for db in plan.databases:
                _set_aside(cur, db)  # force: the old tables stay until verify has passed
            _clear_state(cur, manifest, plan.databases)
            cur.execute(
                f"INSERT INTO {STATE} VALUES (%s, %s, %s, CURRENT_TIMESTAMP(6), NULL)",
                (plan.backup_id, _dbs_key(plan.databases), json.dumps(sorted(plan.databases))),
            )
            conn.commit()
        for d in schema["databases"]:
            if d["name"] in plan.databases:
                cur.execute(database_create(d))
        for kind in ("tables", "sequences"):
            for t in schema[kind]:
                if t["schema"] not in plan.databases:
                    continue
                create = checked_create(kind, t)
                if plan.defer_indexes and kind == "tables":
                    create = split_deferred(create)[0]
                cur.execute(f"USE {dialect.quote_ident(t['schema'])}")
                if kind == "sequences":
                    # a sequence holds no loaded rows (finalize sets its value): always made anew, so that a
                    # resume after a crash never keeps one that came back without its row
                    cur.execute(f"DROP SEQUENCE IF EXISTS {dialect.qualified(t['schema'], t['name'])}")
                    cur.execute(create)
                else:
                    cur.execute(create.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1))
                created += 1
        conn.commit()
        # tune relaxed log flushing: make the schema and the restore's state durable before loading, so a
        # crash of the target during the load finds them on restart and a new run resumes
        cur.execute("FLUSH ENGINE LOGS")
    finally:
        conn.close()
    log.info("create_schema: %d tables and sequences in %s (%.1f s)%s", created, ", ".join(plan.databases),
             time.monotonic() - t0, "; secondary indexes and foreign keys deferred" if plan.defer_indexes else "")
    return {"tables": created, "seconds": round(time.monotonic() - t0, 3)}


def plan_load(plan: RestorePlan | dict) -> list[dict]:
    """The work units (small dicts: they travel through XCom)."""
    plan = RestorePlan.of(plan)
    _storage, manifest = _manifest(plan)
    units = plan_units(manifest, _selected(manifest, plan.databases), plan.parallel)
    log.info("plan: %d work units for %d lanes: %s", len(units), plan.parallel,
             "; ".join(f"{u.name} ({u.bytes / 1e6:.1f} MB)" for u in units))
    return [u.to_dict() for u in units]


def plan_lanes(plan: RestorePlan | dict) -> list[str]:
    """The `parallel` lanes that load the work units (logged here; each lane derives the same units from the
    checked manifest, see plan_load)."""
    plan = RestorePlan.of(plan)
    plan_load(plan)
    return [f"lane {i + 1} of {plan.parallel}" for i in range(plan.parallel)]


@stopping.stops_cleanly
def load_lane(plan: RestorePlan | dict, lane: str) -> list[dict]:
    """One of `parallel` lanes: load the units no other lane holds, in plan order (see logical.load)."""
    plan = RestorePlan.of(plan)
    storage, manifest = _manifest(plan)
    units = plan_units(manifest, _selected(manifest, plan.databases), plan.parallel)
    return lane_loader(_target(plan), storage, manifest, units, lane, plan.parallel)


@stopping.stops_cleanly
def load(plan: RestorePlan | dict, unit: dict) -> dict:
    """Load one work unit (see logical_load)."""
    plan = RestorePlan.of(plan)
    storage, manifest = _manifest(plan)
    return load_unit(_target(plan), storage, manifest, WorkUnit.from_dict(unit), plan.parallel)


def _execute_in_context(server: Server, obj: dict, statement: str) -> None:
    """Run a trigger/view/routine/event statement under the sql_mode and character set it was created with
    (values from schema.json go in as parameters or checked names, never as SQL text)."""
    conn = server.connect(charset=session_name(obj.get("character_set_client"), "character_set_client") or "utf8mb4")
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"USE {dialect.quote_ident(obj['schema'])}")
        collation = session_name(obj.get("collation_connection"), "collation_connection")
        if collation:
            cur.execute("SET SESSION collation_connection = %s", (collation,))
        cur.execute("SET SESSION sql_mode = %s", (obj.get("sql_mode", ""),))
        if obj.get("time_zone"):
            cur.execute("SET SESSION time_zone = %s", (obj["time_zone"],))
        cur.execute(statement)
    finally:
        conn.close()


@stopping.stops_cleanly
def finalize(plan: RestorePlan | dict) -> dict:
    """Deferred indexes and foreign keys, AUTO_INCREMENT counters, then triggers (after the data),
    views in dependency order, routines, events, sequence states, ANALYZE TABLE; drop the ledger."""
    plan = RestorePlan.of(plan)
    storage, manifest = _manifest(plan)
    schema = _schema(storage, manifest)
    server = _target(plan)
    dbs = plan.databases
    t0 = time.monotonic()
    steps: dict[str, float] = {}
    s = time.monotonic()
    if plan.defer_indexes:  # index builds: one table per connection, `parallel` at once; then the foreign keys
        in_scope = [t for t in schema["tables"] if t["schema"] in dbs]
        session = (dialect.LOAD_SESSION, "SET SESSION sql_log_bin = 0")
        _in_parallel(server, plan.parallel, in_scope, _add_indexes, setup=session)
        _in_parallel(server, 1, in_scope, _add_foreign_keys, setup=session)
    steps["indexes"] = time.monotonic() - s
    s = time.monotonic()
    conn = server.connect()
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION sql_log_bin = 0")
        for t in manifest.tables:
            if t.schema in dbs and t.auto_increment:
                cur.execute(f"ALTER TABLE {dialect.qualified(t.schema, t.name)} AUTO_INCREMENT = {int(t.auto_increment)}")
        steps["auto_increment"] = time.monotonic() - s
    finally:
        conn.close()
    s = time.monotonic()
    for kind, drop in (("triggers", "TRIGGER"), ("views", "VIEW"), ("routines", None), ("events", "EVENT")):
        for obj in schema[kind]:
            if obj["schema"] not in dbs:
                continue
            create = checked_create(kind, obj)  # a routine's type is checked there too
            what = drop or str(obj["type"]).upper()
            _execute_in_context(server, {"schema": obj["schema"]}, f"DROP {what} IF EXISTS {dialect.qualified(obj['schema'], obj['name'])}")
            _execute_in_context(server, obj, create)
    steps["objects"] = time.monotonic() - s
    if plan.restore_grants:
        s = time.monotonic()
        _restore_grants(server, schema)
        steps["grants"] = time.monotonic() - s
    conn = server.connect()
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION sql_log_bin = 0")
        for seq in schema["sequences"]:
            if seq["schema"] in dbs:
                cur.execute(f"SELECT SETVAL({dialect.qualified(seq['schema'], seq['name'])}, {int(seq['next_value'])}, 0)")
                cur.fetchall()
        s = time.monotonic()
        for t in manifest.tables:
            if t.schema in dbs:
                cur.execute(f"ANALYZE TABLE {dialect.qualified(t.schema, t.name)}")
                cur.fetchall()
        steps["analyze"] = time.monotonic() - s
        _clear_state(cur, manifest, dbs)  # this run's state and ledger rows: the restore is complete
        cur.execute(f"SELECT COUNT(*) FROM {tuning.META_DB}.ledger")
        if not cur.fetchone()[0]:
            cur.execute(f"DROP TABLE {tuning.META_DB}.ledger")
        conn.commit()
    finally:
        conn.close()
    seconds = time.monotonic() - t0
    log.info("finalize: %s in %.1f s; ledger dropped", ", ".join(f"{k} {v:.1f} s" for k, v in steps.items()), seconds)
    return {"seconds": round(seconds, 3), "steps": {k: round(v, 3) for k, v in steps.items()}}


def _restore_grants(server: Server, schema: dict) -> None:
    """Accounts and their grants from the backup (asked for by restore_grants). An account that already
    exists on the target (its administrators, the restoring user) is left exactly as it is."""
    conn = server.connect()
    created, kept = [], []
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION sql_log_bin = 0")
        for g in schema.get("grants", []):
            statements = checked_grants(g)
            cur.execute("SELECT COUNT(*) FROM mysql.user WHERE User = %s AND Host = %s", (g["user"], g["host"]))
            if cur.fetchone()[0]:
                kept.append(f"{g['user']}@{g['host']}")
                continue
            for statement in statements:
                cur.execute(statement)
            created.append(f"{g['user']}@{g['host']}")
        conn.commit()
    finally:
        conn.close()
    log.info("grants: created %d account(s) with their grants: %s; left alone (they exist on the target): %s",
             len(created), ", ".join(created) or "none", ", ".join(kept) or "none")


def _in_parallel(server: Server, n: int, items: list, work: Any, setup: tuple[str, ...] = ()) -> list:
    """Run `work(cursor, item)` over items on `n` connections at once; the first error is raised."""
    import queue
    import threading

    todo: queue.Queue = queue.Queue()
    for i, item in enumerate(items):
        todo.put((i, item))
    results: list = [None] * len(items)
    errors: list[BaseException] = []

    def worker() -> None:
        conn = server.connect()
        token = stopping.add("KILL QUERY on a finalize/verify connection", stopping.kill_query(server, conn.thread_id()))
        try:
            cur = conn.cursor()
            for sql in setup:
                cur.execute(sql)
            while not errors:
                try:
                    i, item = todo.get_nowait()
                except queue.Empty:
                    return
                results[i] = work(cur, item)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
        finally:
            stopping.remove(token)
            conn.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(n, len(items))))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return results


def _names(cur: Any, sql: str, t: dict) -> set[str]:
    cur.execute(sql, (t["schema"], t["name"]))
    return {r[0] for r in cur.fetchall()}


def _name_of(definition: str) -> str:
    """The backquoted name in `KEY `name` (...)` / `CONSTRAINT `name` ...`."""
    return definition.split("`")[1].replace("``", "`") if "`" in definition else ""


def _add_indexes(cur: Any, t: dict) -> None:
    """Add the table's held-back indexes that are not there yet (idempotent: finalize can be re-run)."""
    indexes = split_deferred(t["create"])[1]
    if not indexes:
        return
    have = _names(cur, "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", t)
    table = dialect.qualified(t["schema"], t["name"])
    plain = [d for d in indexes if _name_of(d) not in have and not d.startswith("FULLTEXT")]
    if plain:
        cur.execute(f"ALTER TABLE {table} " + ", ".join(f"ADD {d}" for d in plain))
    for d in indexes:  # InnoDB builds one FULLTEXT index per statement
        if d.startswith("FULLTEXT") and _name_of(d) not in have:
            cur.execute(f"ALTER TABLE {table} ADD {d}")


def _add_foreign_keys(cur: Any, t: dict) -> None:
    """Add the table's held-back foreign keys that are not there yet (no check: the data came consistent)."""
    fks = split_deferred(t["create"])[2]
    if not fks:
        return
    have = _names(cur, "SELECT CONSTRAINT_NAME FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_SCHEMA = %s "
                       "AND TABLE_NAME = %s AND CONSTRAINT_TYPE = 'FOREIGN KEY'", t)
    missing = [d for d in fks if _name_of(d) not in have]
    if missing:
        cur.execute(f"ALTER TABLE {dialect.qualified(t['schema'], t['name'])} " + ", ".join(f"ADD {d}" for d in missing))


def revert(plan: RestorePlan | dict) -> dict:
    """The teardown: put the production configuration back and read it back (fails loudly on a difference)."""
    plan = RestorePlan.of(plan)
    return tuning.revert(_target(plan))


@stopping.stops_cleanly
def verify(plan: RestorePlan | dict, snapshot: dict) -> dict:
    """Per table rows and checksum equal to the manifest; every object present; configuration back."""
    plan = RestorePlan.of(plan)
    storage, manifest = _manifest(plan)
    schema = _schema(storage, manifest)
    server = _target(plan)
    t0 = time.monotonic()
    bad: list[str] = []

    legacy = manifest.checksum != dialect.CHECKSUM
    if legacy:
        log.warning(
            "verify: backup %s predates row-hash checksums (%s): its checksums are over the dump's own text and "
            "cannot catch a value the dump got wrong; take a new backup", manifest.backup_id, manifest.format,
        )
    checksum_sql = dialect.legacy_checksum_sql if legacy else dialect.checksum_sql

    def check(cur: Any, t: Any) -> str | None:
        cur.execute(checksum_sql(t.schema, t.name, [dialect.Column(**c) for c in t.columns]))
        rows, checksum = cur.fetchone()
        if (int(rows), str(checksum)) != (t.rows, t.checksum):
            return f"{t.schema}.{t.name}: {rows} rows, checksum {checksum}; backup: {t.rows} rows, checksum {t.checksum}"
        return None

    tables = sorted(_selected(manifest, plan.databases), key=lambda t: -t.raw_bytes)
    bad += [r for r in _in_parallel(server, plan.parallel, tables, check, setup=("SET SESSION time_zone = '+00:00'",)) if r]
    conn = server.connect()
    try:
        cur = conn.cursor()
        for kind, sql in (
            ("views", "SELECT COUNT(*) FROM information_schema.VIEWS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"),
            ("triggers", "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s AND TRIGGER_NAME = %s"),
            ("routines", "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s AND ROUTINE_NAME = %s"),
            ("events", "SELECT COUNT(*) FROM information_schema.EVENTS WHERE EVENT_SCHEMA = %s AND EVENT_NAME = %s"),
            ("sequences", "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND TABLE_TYPE = 'SEQUENCE'"),
        ):
            for obj in schema[kind]:
                if obj["schema"] in plan.databases:
                    cur.execute(sql, (obj["schema"], obj["name"]))
                    if not cur.fetchone()[0]:
                        bad.append(f"{kind[:-1]} {obj['schema']}.{obj['name']} is missing")
    finally:
        conn.close()
    differ = tuning.config_differs(server, snapshot.get("variables", {})) if snapshot else {}
    bad += [f"configuration: {k} is {a!r}, was {b!r} before the restore" for k, (a, b) in sorted(differ.items())]
    if bad:
        kept = [f"{db} in {aside_name(db)}" for db in plan.databases]
        raise IntegrityError("verify failed:\n  " + "\n  ".join(bad) + "\nThe old tables that force replaced, if any, are "
                             "kept (" + ", ".join(kept) + "); a re-run that verifies drops them.")
    dropped = _drop_aside(server, plan.databases)
    if dropped:
        log.info("verify: dropped the old tables force had kept: %s", ", ".join(dropped))
    log.info("verify ok: %d tables with rows and checksums equal to the backup's, every object present, configuration back (%.1f s)",
             len(tables), time.monotonic() - t0)
    return {"tables": len(tables), "seconds": round(time.monotonic() - t0, 3)}
