"""The restore's finalize step: deferred indexes and foreign keys, AUTO_INCREMENT counters, triggers,
views, routines, events, grants, sequence states and ANALYZE, each re-runnable.
"""
from __future__ import annotations

import contextlib
import logging
import re
import time
from typing import Any

from lastline.backups import open_backup
from lastline.core import accounts, stopping
from lastline.core.errors import IntegrityError
from lastline.core.servers import Server, over_connections
from lastline.core.sql import as_text, global_variables, placeholders
from lastline.logical.format import dialect
from lastline.logical.restore import tuning
from lastline.logical.restore.backup_files import RUN_SESSION, run_server, target_server
from lastline.logical.restore.plans import Finalized, RestorePlan
from lastline.logical.restore.schema_checks import checked_create
from lastline.logical.restore.schema_definers import definer_security, disabled_event, with_definer, without_definer
from lastline.logical.restore.schema_grants import checked_grants
from lastline.logical.restore.schema_session import session_mode, session_name
from lastline.logical.restore.schema_tables import definition_name, split_deferred
from lastline.logical.restore.target_state import clear_state, ledger_exists
from lastline.logical.restore.verify import keep_chunk_sums, record_check, recorded_checks
from lastline.manifest import LogicalManifest, LogicalTable

log = logging.getLogger(__name__)
USAGE_ONLY = re.compile(r"^GRANT USAGE ON \*\.\* TO ")


class _InContext:
    """Statements of triggers, views, routines and events run under the character set, collation, sql_mode and
    time zone each was created with (values from schema.json go in as parameters or checked names, never as SQL
    text), on one session of `server` for as long as the objects' character_set_client stays the same (it decides how
    the statement's text is sent). A collation or time zone an object does not record is the one a fresh session
    has; a sql_mode it does not record is '' (as checked_create read the statement). A session ends after an event:
    its schedule's expressions run at CREATE and could leave user variables or a named lock behind. Was two new
    connections an object: 800 objects took 2.3 s of a restore of 10,000 tables."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.stack = contextlib.ExitStack()
        self.charset: str | None = None
        self.cur: Any = None
        self.defaults: tuple[str, str] = ("", "")
        self.schema: str | None = None

    def cursor(self, obj: dict) -> Any:
        """A cursor in `obj`'s schema and context."""
        charset = session_name(obj.get("character_set_client"), "character_set_client") or "utf8mb4"
        if charset != self.charset:
            self.close()
            self.cur = self.stack.enter_context(self.server.session(charset=charset))
            accounts.unlogged(self.cur)
            self.cur.execute("SELECT @@session.collation_connection, @@session.time_zone")
            collation, zone = self.cur.fetchone()
            self.defaults, self.charset, self.schema = (as_text(collation), as_text(zone)), charset, None
        if obj["schema"] != self.schema:
            self.cur.execute(f"USE {dialect.quote_ident(obj['schema'])}")
            self.schema = obj["schema"]
        collation = session_name(obj.get("collation_connection"), "collation_connection") or self.defaults[0]
        self.cur.execute("SET SESSION collation_connection = %s, sql_mode = %s, time_zone = %s",
                         (collation, session_mode(obj.get("sql_mode")), obj.get("time_zone") or self.defaults[1]))
        return self.cur

    def close(self) -> None:
        self.stack.close()
        self.charset = None

    def __enter__(self) -> _InContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@stopping.stops_cleanly
def finalize(plan: RestorePlan) -> Finalized:
    """Deferred indexes and foreign keys, AUTO_INCREMENT counters, then triggers (after the data),
    views in dependency order, routines, events, sequence states, ANALYZE TABLE; drop the ledger. What comes
    from the backup runs under the run account, the objects under their owner (see objects)."""
    backup = open_backup(plan.backup)
    manifest, schema = backup.logical, backup.schema
    server = target_server(plan)
    run = run_server(plan)
    dbs = plan.databases
    in_dbs = set(dbs)  # for the look-ups per table
    t0 = time.monotonic()
    steps: dict[str, float] = {}
    s = time.monotonic()
    if plan.defer_indexes:  # index builds: one table per connection, `parallel` at once; then the foreign keys
        in_manifest = {(t.schema, t.name): t for t in manifest.tables}
        in_scope = sorted((t for t in schema["tables"] if t["schema"] in in_dbs),  # the biggest first: the shortest tail
                          key=lambda t: -in_manifest[(t["schema"], t["name"])].raw_bytes)
        kept = recorded_checks(server, manifest.backup_id)  # by the lanes (per_table) or an earlier try
        with run.session() as cur:  # the others whose chunks were checked as they loaded
            by_chunks = keep_chunk_sums(cur, manifest, [in_manifest[(t["schema"], t["name"])] for t in in_scope
                                                        if (t["schema"], t["name"]) not in kept])
        log.info("finalize: %d of %d tables were checked as they loaded, %d chunk by chunk; the others are checked "
                 "right after their indexes", len(kept) + len(by_chunks), len(in_scope), len(by_chunks))
        checked = kept.keys() | by_chunks
        have = index_names(server, dbs)  # one query, not one per table
        over_connections(run, plan.parallel, in_scope, lambda cur, t: complete_table(
            cur, manifest, t, None if (t["schema"], t["name"]) in checked else in_manifest[(t["schema"], t["name"])],
            have.get((t["schema"], t["name"]))), setup=RUN_SESSION)  # a name not found as written: read per table
        over_connections(run, 1, in_scope, _add_foreign_keys, setup=RUN_SESSION)
    steps["indexes"] = time.monotonic() - s
    s = time.monotonic()
    counters = auto_increments(server, dbs)
    with run.session() as cur:
        accounts.unlogged(cur)
        for t in manifest.tables:
            # a counter the load left where the backup had it needs no ALTER (one round trip and a table lock each)
            if t.schema in in_dbs and t.auto_increment and counters.get((t.schema, t.name)) != int(t.auto_increment):
                cur.execute(f"ALTER TABLE {dialect.qualified(t.schema, t.name)} AUTO_INCREMENT = {int(t.auto_increment)}")
        steps["auto_increment"] = time.monotonic() - s
    s = time.monotonic()
    # on staging, triggers and events come after the masking is verified (staging.refresh.late_objects): a trigger
    # must not fire on the mask's UPDATEs, where it could copy the originals, or the key, somewhere unmasked
    objects(server, schema, dbs, plan.enable_events, kinds=EARLY_KINDS if server.role == "staging" else OBJECT_KINDS)
    steps["objects"] = time.monotonic() - s
    if plan.restore_grants:
        s = time.monotonic()
        _restore_grants(server, run, schema)
        steps["grants"] = time.monotonic() - s
    with run.session() as cur:
        accounts.unlogged(cur)
        for seq in schema["sequences"]:
            if seq["schema"] in in_dbs:
                cur.execute(f"SELECT SETVAL({dialect.qualified(seq['schema'], seq['name'])}, {int(seq['next_value'])}, 0)")
                cur.fetchall()
        s = time.monotonic()
        names = [dialect.qualified(t.schema, t.name) for t in manifest.tables if t.schema in in_dbs]
        # many tables a statement: no round trip per table (on two connections 10,000 tables took as long, 2.9 s)
        for i in range(0, len(names), ANALYZE_BATCH):
            cur.execute("ANALYZE TABLE " + ", ".join(names[i:i + ANALYZE_BATCH]))
            cur.fetchall()
        steps["analyze"] = time.monotonic() - s
    with server.session() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        clear_state(cur, manifest, dbs)  # this run's state and ledger rows: the restore is complete
        if ledger_exists(cur):  # a finalize run again after one that completed finds it dropped
            cur.execute(f"SELECT COUNT(*) FROM {tuning.META_DB}.ledger")
            if not cur.fetchone()[0]:
                cur.execute(f"DROP TABLE {tuning.META_DB}.ledger")
        cur.connection.commit()
    seconds = time.monotonic() - t0
    log.info("finalize: %s in %.1f s; ledger dropped", ", ".join(f"{k} {v:.1f} s" for k, v in steps.items()), seconds)
    return Finalized(round(seconds, 3), {k: round(v, 3) for k, v in steps.items()})


OBJECT_KINDS = ("triggers", "views", "routines", "events")
ANALYZE_BATCH = 100  # tables named in one ANALYZE TABLE
EARLY_KINDS = ("views", "routines")  # what a staging restore creates before its masking
DROP_WORDS = {"triggers": "TRIGGER", "views": "VIEW", "events": "EVENT"}


def objects(server: Server, schema: dict, dbs: list[str], enable_events: bool = False,
            kinds: tuple[str, ...] = OBJECT_KINDS) -> str:
    """Triggers (after the data: they never fire on restored rows), views, routines and events of `dbs`, each
    dropped and created anew (re-runnable). Who they run as, later, is their DEFINER, chosen by the target's
    connection (extra `definer`), never by the backup:

    - none (the default): lastline's objects owner of these databases (core.accounts), which creates them
      itself (so nothing it runs can reach beyond these databases) and is locked again afterwards; views and
      routines are made SQL SECURITY DEFINER, so they run as it whoever calls them;
    - `backup`: the backup's own DEFINERs, created by the admin account (it needs SET USER; the statement
      checks are then the only guard: for backups whose storage is as trusted as the target);
    - `user@host`: that account, created by the admin account (the same caveat).

    Events come back DISABLED unless `enable_events`. Returns the definer used."""
    definer = server.definer
    owner = accounts.objects_owner(server, dbs) if definer is None else server
    trusted = _trust_routine_creators(server) if definer is None else None
    in_dbs = frozenset(dbs)
    try:
        with _InContext(owner) as in_context:
            for kind in kinds:
                drop = DROP_WORDS.get(kind)
                for obj in schema[kind]:
                    if obj["schema"] not in in_dbs:
                        continue
                    create = checked_create(kind, obj, in_dbs)  # a routine's type is checked there too
                    if definer != "backup":  # the connection's choice runs it, never a caller (SQL SECURITY DEFINER)
                        create = definer_security(kind, obj, without_definer(kind, create) if definer is None
                                                  else with_definer(kind, create, definer))
                    if kind == "events" and not enable_events:
                        create = disabled_event(create)
                    what = drop or str(obj["type"]).upper()
                    cur = in_context.cursor(obj)
                    cur.execute(f"DROP {what} IF EXISTS {dialect.qualified(obj['schema'], obj['name'])}")
                    cur.execute(create)
                    if kind == "events":  # what its schedule's expressions left in the session goes with it
                        in_context.close()
    finally:
        if definer is None:
            accounts.lock(server, owner.user)
        if trusted is not None:
            with server.session() as cur:
                cur.execute(f"SET GLOBAL log_bin_trust_function_creators = {trusted}")
    used = owner.user if definer is None else definer
    log.info("objects: created with DEFINER %s%s", used, "" if enable_events else "; events disabled (enable_events to keep them on)")
    return used


def _trust_routine_creators(server: Server) -> str | None:
    """A server writing a binary log lets an account without SUPER create triggers and functions only while it
    trusts routine creators: on for the objects step if it is off (the restore's tune turns it on, recorded in
    its config snapshot; a finalize run on its own does it here). Returns the value to put back, or None."""
    with server.session() as cur:
        found = global_variables(cur, ("log_bin", "log_bin_trust_function_creators"))
        if found.get("log_bin") != "ON" or found.get("log_bin_trust_function_creators") != "OFF":
            return None
        cur.execute("SET GLOBAL log_bin_trust_function_creators = ON")
    return "OFF"


def _restore_grants(server: Server, run: Server, schema: dict) -> None:
    """Accounts and their grants from the backup (asked for by restore_grants). An account that already
    exists on the target (its administrators, the restoring user) is left exactly as it is. The account is
    created by the admin account (a checked CREATE USER of that very account); its GRANTs run under the run
    account, which holds the grant option on the restored databases only: a grant that reaches further is
    refused by the server."""
    created, kept = [], []
    with server.session() as admin, run.session() as cur:
        admin.execute("SET SESSION sql_log_bin = 0")
        accounts.unlogged(cur)
        for g in schema.get("grants", []):
            statements = checked_grants(g)
            admin.execute("SELECT COUNT(*) FROM mysql.user WHERE User = %s AND Host = %s", (g["user"], g["host"]))
            if admin.fetchone()[0]:
                kept.append(f"{g['user']}@{g['host']}")
                continue
            admin.execute(statements[0])
            for statement in statements[1:]:
                if USAGE_ONLY.match(statement):  # the account's own line (its password): CREATE USER set it
                    continue
                try:
                    cur.execute(statement)
                except Exception as exc:
                    if getattr(exc, "args", (None,))[0] in (1044, 1045, 1142, 1227, 1410):
                        raise IntegrityError(
                            f"restore_grants: {statement[:160]!r} reaches beyond the restored databases, which is all a "
                            f"restore may grant ({exc}); the account {g['user']}@{g['host']} was created without it. "
                            "Grant it by hand if it is meant.") from exc
                    raise
            created.append(f"{g['user']}@{g['host']}")
        admin.connection.commit()
    log.info("grants: created %d account(s) with their grants: %s; left alone (they exist on the target): %s",
             len(created), ", ".join(created) or "none", ", ".join(kept) or "none")


def _names(cur: Any, sql: str, t: dict) -> set[str]:
    cur.execute(sql, (t["schema"], t["name"]))
    return {r[0] for r in cur.fetchall()}


def complete_table(cur: Any, manifest: LogicalManifest, t: dict, table: LogicalTable | None,
                   have: set[str] | None = None) -> tuple[float, float]:
    """A table whose rows are all in: its held-back indexes (`t`, from schema.json; `have`: the indexes it has, when
    the caller read them already), then the checksum for verify of `table` (its manifest entry; None: already kept)
    on the same connection, while its pages are still in the buffer pool. Returns the seconds of each."""
    t0 = time.monotonic()
    add_indexes(cur, t, have)
    t1 = time.monotonic()
    if table is not None:
        record_check(cur, manifest, table)
    return t1 - t0, time.monotonic() - t1


def index_names(server: Server, dbs: list[str]) -> dict[tuple[str, str], set[str]]:
    """The indexes every table of `dbs` has now, by (schema, table): one query."""
    out: dict[tuple[str, str], set[str]] = {}
    if dbs:
        for schema, table, index in server.query(
                "SELECT DISTINCT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA IN "
                f"({placeholders(dbs)})", dbs):
            out.setdefault((as_text(schema), as_text(table)), set()).add(as_text(index))
    return out


def auto_increments(server: Server, dbs: list[str]) -> dict[tuple[str, str], int]:
    """Every table's AUTO_INCREMENT counter now, by (schema, table), for `dbs`: one query."""
    if not dbs:
        return {}
    return {(as_text(schema), as_text(table)): int(value) for schema, table, value in server.query(
        "SELECT TABLE_SCHEMA, TABLE_NAME, AUTO_INCREMENT FROM information_schema.TABLES WHERE AUTO_INCREMENT IS NOT NULL "
        f"AND TABLE_SCHEMA IN ({placeholders(dbs)})", dbs)}


def add_indexes(cur: Any, t: dict, have: set[str] | None = None) -> None:
    """Add the table's held-back indexes that are not there yet (idempotent: finalize can be re-run); `have`: the
    indexes the table has, when the caller read them (else they are read here)."""
    indexes = split_deferred(t["create"])[1]
    if not indexes:
        return
    if have is None:
        have = _names(cur, "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", t)
    table = dialect.qualified(t["schema"], t["name"])
    plain = [d for d in indexes if definition_name(d) not in have and not d.startswith("FULLTEXT")]
    if plain:
        cur.execute(f"ALTER TABLE {table} " + ", ".join(f"ADD {d}" for d in plain))
    for d in indexes:  # InnoDB builds one FULLTEXT index per statement
        if d.startswith("FULLTEXT") and definition_name(d) not in have:
            cur.execute(f"ALTER TABLE {table} ADD {d}")


def _add_foreign_keys(cur: Any, t: dict) -> None:
    """Add the table's held-back foreign keys that are not there yet (no check: the data came consistent)."""
    fks = split_deferred(t["create"])[2]
    if not fks:
        return
    have = _names(cur, "SELECT CONSTRAINT_NAME FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_SCHEMA = %s "
                       "AND TABLE_NAME = %s AND CONSTRAINT_TYPE = 'FOREIGN KEY'", t)
    missing = [d for d in fks if definition_name(d) not in have]
    if missing:
        cur.execute(f"ALTER TABLE {dialect.qualified(t['schema'], t['name'])} " + ", ".join(f"ADD {d}" for d in missing))
