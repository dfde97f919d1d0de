"""Creating what a logical restore restores before its rows: the databases, sequences and tables (create_schema, in
prepare), or, with defer_indexes, each table by the lane that loads it just before its first chunk (table_creates):
the first rows then arrive after one CREATE instead of after all of them. Every statement from the backup is
checked (schema_checks.checked_create) and runs under the run account."""
from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from lastline.backups import OpenedBackup, open_backup
from lastline.core import accounts, stopping
from lastline.core.errors import IntegrityError, LastlineError, Refusal
from lastline.core.servers import Server, over_connections
from lastline.core.sql import LOST_CONNECTION, sql_error
from lastline.logical.format import dialect
from lastline.logical.restore.backup_files import RUN_SESSION, run_server, selected, target_server
from lastline.logical.restore.plans import RestorePlan, SchemaCreated
from lastline.logical.restore.schema_checks import checked_create
from lastline.logical.restore.schema_session import database_create
from lastline.logical.restore.schema_tables import split_deferred
from lastline.logical.restore.target_state import (
    STATE,
    clear_state,
    dbs_key,
    ensure_ledger,
    ensure_state,
    refuse_unapproved,
    resume_defer_indexes,
    resuming,
    set_aside,
)
from lastline.logical.restore.verify import ensure_checks, forget_checks
from lastline.manifest import LogicalManifest

log = logging.getLogger(__name__)
# a table's CREATE statement, as a lane runs it (table_creates), by (schema, name)
Creates = Callable[[str, str], str]
TRANSIENT = (1205, 1213, 1114, 1021)  # lock wait, deadlock, table full, disk full: not the CREATE's own fault

# with defer_indexes, a table smaller than this is created with its secondary indexes: building them afterwards costs an
# ALTER TABLE (~4 ms here even for 20 rows: half a lane's time per table at 10,000 small tables), keeping them up while
# its rows load costs nothing measurable; its foreign keys still wait for finalize
INLINE_INDEXES_BELOW = 1 << 20


def creates_in_lanes(plan: RestorePlan) -> bool:
    """With defer_indexes (the default), each table is created by the lane that loads it, just before its first chunk
    (table_creates): the first rows arrive after one CREATE instead of after every table's. Without it, prepare
    creates them all first: a CREATE that carries its foreign keys can deadlock with another naming it."""
    return plan.defer_indexes


def table_create(plan: RestorePlan, t: dict, raw_bytes: int) -> str:
    """A table's CREATE as the restore runs it: checked (schema_checks.checked_create), its secondary indexes held
    back with defer_indexes unless it is small (INLINE_INDEXES_BELOW), its foreign keys always."""
    create = checked_create("tables", t, plan.databases)
    return split_deferred(create, raw_bytes < INLINE_INDEXES_BELOW)[0] if plan.defer_indexes else create


def if_not_exists(create: str) -> str:
    """A checked CREATE TABLE that leaves a table already made (by the try before) as it is."""
    return create.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1)


def table_creates(plan: RestorePlan, manifest: LogicalManifest, schema: dict) -> Creates | None:
    """Each table's CREATE by (schema, name) from `schema` (the backup's checked schema.json), checked when a lane
    first asks for it (a lane checks only the tables it creates); None when prepare created them (creates_in_lanes)."""
    if not creates_in_lanes(plan):
        return None
    wanted = set(plan.databases)  # a set: a list would cost tables x databases
    tables = {(t["schema"], t["name"]): t for t in schema["tables"] if t["schema"] in wanted}
    raw = {(t.schema, t.name): t.raw_bytes for t in manifest.tables}

    @functools.cache
    def create(db: str, name: str) -> str:
        t = tables.get((db, name))
        if t is None:  # preflight refuses such a backup (same_tables)
            raise IntegrityError(f"{db}.{name} is in backup {manifest.backup_id}'s manifest but not in its schema.json.")
        return if_not_exists(table_create(plan, t, raw.get((db, name), 0)))

    return create


@stopping.stops_cleanly
def create_schema(plan: RestorePlan, backup: OpenedBackup | None = None) -> SchemaCreated:
    """Databases, sequences, and the tables unless the lanes create them (creates_in_lanes). lastline's own statements
    (its bookkeeping, the set-aside, the databases rebuilt from checked names) run on the admin connection; the
    tables' and sequences' statements, which come from the backup, run under the run account. `backup`: the plan's,
    when this task opened it already."""
    backup = backup or open_backup(plan.backup)
    manifest, schema = backup.logical, backup.schema
    server = target_server(plan)
    wanted = set(plan.databases)  # a set: a list would cost objects x databases
    t0 = time.monotonic()
    with server.session() as cur:
        ensure_ledger(cur)
        ensure_checks(cur)
        ensure_state(cur)
        resume = resuming(cur, plan.backup.backup_id, plan.databases)
        kept, recorded = resume_defer_indexes(cur, plan.backup.backup_id, plan.databases) if resume else (plan.defer_indexes, True)
        if kept != plan.defer_indexes:  # preflight adopts it: a plan made elsewhere did not
            raise IntegrityError(
                f"this run's plan has defer_indexes={plan.defer_indexes}, but the unfinished restore of {plan.backup.backup_id} "
                f"it resumes {'created its tables with' if recorded else 'can only be resumed safely with'} "
                f"defer_indexes={kept}: their indexes would be left unbuilt or built twice. Run the restore again from "
                "its preflight (which keeps the unfinished run's setting).")
        if not recorded:  # from now on it is
            cur.execute(f"UPDATE {STATE} SET defer_indexes = %s WHERE backup_id = %s AND dbs_key = %s AND defer_indexes IS NULL",
                        (int(kept), plan.backup.backup_id, dbs_key(plan.databases)))
            cur.connection.commit()
        if not resume:
            refuse_unapproved(cur, plan.databases, plan.force, plan.at_risk)
            for db in plan.databases:
                set_aside(cur, db)  # force: the old tables stay until verify has passed
            clear_state(cur, manifest, plan.databases)
            forget_checks(cur, plan.backup.backup_id)  # every table is loaded anew: checksums of an earlier run do not count
            cur.execute(
                f"INSERT INTO {STATE} (backup_id, dbs_key, dbs, started_at, finished_at, defer_indexes) "
                "VALUES (%s, %s, %s, CURRENT_TIMESTAMP(6), NULL, %s)",
                (plan.backup.backup_id, dbs_key(plan.databases), json.dumps(sorted(plan.databases)), int(plan.defer_indexes)),
            )
            cur.connection.commit()
        for d in schema["databases"]:
            if d["name"] in wanted:
                cur.execute(database_create(d))
    accounts.revoke_older_owners(server, plan.databases)  # before any row arrives, not only at the objects step
    lanes_create = creates_in_lanes(plan)
    in_lanes = len(selected(manifest, plan.databases)) if lanes_create else 0  # the same as schema.json's (same_tables)
    creates = []  # every statement checked before the first runs
    raw = {(t.schema, t.name): t.raw_bytes for t in manifest.tables}
    for t in [] if lanes_create else schema["tables"]:
        if t["schema"] in wanted:
            creates.append(("tables", t, table_create(plan, t, raw.get((t["schema"], t["name"]), 0))))
    for t in schema["sequences"]:
        if t["schema"] in wanted:
            creates.append(("sequences", t, checked_create("sequences", t, plan.databases)))

    def run(cur: Any, item: tuple[str, dict, str]) -> None:
        kind, t, create = item
        cur.execute(f"USE {dialect.quote_ident(t['schema'])}")
        if kind == "sequences":
            # a sequence holds no loaded rows (finalize sets its value): always made anew, so that a
            # resume after a crash never keeps one that came back without its row
            cur.execute(f"DROP SEQUENCE IF EXISTS {dialect.qualified(t['schema'], t['name'])}")
            cur.execute(create)
        else:
            try:
                cur.execute(if_not_exists(create))
            except Exception as exc:
                if (refusal := refused_create(t["schema"], t["name"], exc)) is None:
                    raise
                raise refusal from exc

    # `parallel` connections at once; one while a CREATE still carries a foreign key (defer_indexes off): two
    # tables naming each other created at once can deadlock on their dictionary locks
    keyed = not plan.defer_indexes and any(split_deferred(c)[2] for kind, _t, c in creates if kind == "tables")
    over_connections(run_server(plan), 1 if keyed else plan.parallel, creates, run, setup=RUN_SESSION)
    created = len(creates)
    with server.session() as cur:
        # tune relaxed log flushing: make the schema and the restore's state durable before loading, so a
        # crash of the target during the load finds them on restart and a new run resumes
        cur.execute("FLUSH ENGINE LOGS")
    log.info("create_schema: %d tables and sequences in %s (%.1f s), created by the run account %s%s%s", created,
             ", ".join(plan.databases), time.monotonic() - t0, plan.restore_account,
             f"; {in_lanes} tables left to the lanes, each created just before its first chunk" if in_lanes else "",
             "; secondary indexes and foreign keys deferred" if plan.defer_indexes else "")
    return SchemaCreated(created, round(time.monotonic() - t0, 3), in_lanes=in_lanes)


def refused_create(schema: str, name: str, exc: Exception) -> Refusal | None:
    """The Refusal a failed CREATE of `schema`.`name` raises, naming the table and what to do (no retry can change it);
    None when the error itself should stand (it may pass: a lost connection, a lock wait; or it is lastline's)."""
    code, msg = sql_error(exc)
    if isinstance(exc, LastlineError) or code is None or code in LOST_CONNECTION or code in TRANSIENT:
        return None
    hint = (" (the source made this table with innodb_strict_mode off, whose rows could exceed a page: SET GLOBAL "
            "innodb_strict_mode = OFF on the target for this restore, if a table like the source's is what you want)"
            if code == 1118 else "")
    return Refusal(
        f"the target refused to create {schema}.{name}: {msg} ({code}){hint}. The tables and chunks loaded so far stay, "
        "recorded in the ledger: change what the target refuses (its settings, engine or version), then re-run the "
        "restore of this backup without force: it resumes after them.")


class TableMaker:
    """Creates tables from the backup's checked CREATEs (`create`: IF NOT EXISTS, a retry finds them made) on a run
    account session of its own with the restore's session settings: never on a loader's LOCAL INFILE connection."""

    def __init__(self, server: Server, create: Creates) -> None:
        self.create, self.conn = create, server.connect()
        try:
            self.conn.autocommit(True)
            self.cur = self.conn.cursor()
            for sql in RUN_SESSION:
                self.cur.execute(sql)
        except BaseException:
            self.close()
            raise

    def make(self, schema: str, name: str) -> bool:
        """Create `schema`.`name` unless it exists; whether this call made it. A CREATE the target refuses fails
        at once (no retry can change it), naming the table and what to do."""
        try:
            self.cur.execute(f"USE {dialect.quote_ident(schema)}")
            self.cur.execute(self.create(schema, name))
        except Exception as exc:
            if (refusal := refused_create(schema, name, exc)) is None:
                raise
            raise refusal from exc
        if not self.conn.warning_count():
            return True
        self.cur.execute("SHOW WARNINGS")
        return all(int(w[1]) != 1050 for w in self.cur.fetchall())  # 1050: it exists (IF NOT EXISTS made nothing)

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001
            pass
