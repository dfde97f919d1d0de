"""The restore's finalize step: deferred indexes and foreign keys, AUTO_INCREMENT counters, triggers,
views, routines, events, grants, sequence states and ANALYZE, each re-runnable.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from lastline.core import stopping
from lastline.core.servers import Server, over_connections
from lastline.logical import dialect, tuning
from lastline.logical.backup_files import checked_schema, open_backup, target_server
from lastline.logical.plans import RestorePlan
from lastline.logical.schema import split_deferred
from lastline.logical.schema_checks import checked_create, checked_grants, session_name
from lastline.logical.target_state import clear_state
from lastline.logical.verify import keep_chunk_sums, record_check, recorded_checks
from lastline.manifest import LogicalManifest, LogicalTable

log = logging.getLogger(__name__)


def _execute_in_context(server: Server, obj: dict, statement: str) -> None:
    """Run a trigger/view/routine/event statement under the sql_mode and character set it was created with
    (values from schema.json go in as parameters or checked names, never as SQL text)."""
    with server.session(charset=session_name(obj.get("character_set_client"), "character_set_client") or "utf8mb4") as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"USE {dialect.quote_ident(obj['schema'])}")
        collation = session_name(obj.get("collation_connection"), "collation_connection")
        if collation:
            cur.execute("SET SESSION collation_connection = %s", (collation,))
        cur.execute("SET SESSION sql_mode = %s", (obj.get("sql_mode", ""),))
        if obj.get("time_zone"):
            cur.execute("SET SESSION time_zone = %s", (obj["time_zone"],))
        cur.execute(statement)


@stopping.stops_cleanly
def finalize(plan: RestorePlan | dict) -> dict:
    """Deferred indexes and foreign keys, AUTO_INCREMENT counters, then triggers (after the data),
    views in dependency order, routines, events, sequence states, ANALYZE TABLE; drop the ledger."""
    plan = RestorePlan.of(plan)
    storage, manifest = open_backup(plan)
    schema = checked_schema(storage, manifest)
    server = target_server(plan)
    dbs = plan.databases
    t0 = time.monotonic()
    steps: dict[str, float] = {}
    s = time.monotonic()
    if plan.defer_indexes:  # index builds: one table per connection, `parallel` at once; then the foreign keys
        in_manifest = {(t.schema, t.name): t for t in manifest.tables}
        in_scope = sorted((t for t in schema["tables"] if t["schema"] in dbs),  # the biggest first: the shortest tail
                          key=lambda t: -in_manifest[(t["schema"], t["name"])].raw_bytes)
        with server.session() as cur:  # the tables whose chunks were checked as they loaded
            by_chunks = keep_chunk_sums(cur, manifest, [in_manifest[(t["schema"], t["name"])] for t in in_scope])
        log.info("finalize: %d of %d tables were checked chunk by chunk as they loaded; the others are checked "
                 "right after their indexes", len(by_chunks), len(in_scope))
        checked = recorded_checks(server, manifest.backup_id)  # those, by the lanes (per_table) or an earlier try
        session = (dialect.LOAD_SESSION, "SET SESSION sql_log_bin = 0")
        over_connections(server, plan.parallel, in_scope, lambda cur, t: complete_table(
            cur, manifest, t, None if (t["schema"], t["name"]) in checked else in_manifest[(t["schema"], t["name"])]),
            setup=session)
        over_connections(server, 1, in_scope, _add_foreign_keys, setup=session)
    steps["indexes"] = time.monotonic() - s
    s = time.monotonic()
    with server.session() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for t in manifest.tables:
            if t.schema in dbs and t.auto_increment:
                cur.execute(f"ALTER TABLE {dialect.qualified(t.schema, t.name)} AUTO_INCREMENT = {int(t.auto_increment)}")
        steps["auto_increment"] = time.monotonic() - s
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
    with server.session() as cur:
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
        clear_state(cur, manifest, dbs)  # this run's state and ledger rows: the restore is complete
        cur.execute(f"SELECT COUNT(*) FROM {tuning.META_DB}.ledger")
        if not cur.fetchone()[0]:
            cur.execute(f"DROP TABLE {tuning.META_DB}.ledger")
        cur.connection.commit()
    seconds = time.monotonic() - t0
    log.info("finalize: %s in %.1f s; ledger dropped", ", ".join(f"{k} {v:.1f} s" for k, v in steps.items()), seconds)
    return {"seconds": round(seconds, 3), "steps": {k: round(v, 3) for k, v in steps.items()}}


def _restore_grants(server: Server, schema: dict) -> None:
    """Accounts and their grants from the backup (asked for by restore_grants). An account that already
    exists on the target (its administrators, the restoring user) is left exactly as it is."""
    created, kept = [], []
    with server.session() as cur:
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
        cur.connection.commit()
    log.info("grants: created %d account(s) with their grants: %s; left alone (they exist on the target): %s",
             len(created), ", ".join(created) or "none", ", ".join(kept) or "none")


def _names(cur: Any, sql: str, t: dict) -> set[str]:
    cur.execute(sql, (t["schema"], t["name"]))
    return {r[0] for r in cur.fetchall()}


def _name_of(definition: str) -> str:
    """The backquoted name in `KEY `name` (...)` / `CONSTRAINT `name` ...`."""
    return definition.split("`")[1].replace("``", "`") if "`" in definition else ""


def complete_table(cur: Any, manifest: LogicalManifest, t: dict, table: LogicalTable | None) -> tuple[float, float]:
    """A table whose rows are all in: its held-back indexes (`t`, from schema.json), then the checksum for
    verify of `table` (its manifest entry; None: already kept) on the same connection, while its pages are
    still in the buffer pool. Returns the seconds of each."""
    t0 = time.monotonic()
    add_indexes(cur, t)
    t1 = time.monotonic()
    if table is not None:
        record_check(cur, manifest, table)
    return t1 - t0, time.monotonic() - t1


def add_indexes(cur: Any, t: dict) -> None:
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
