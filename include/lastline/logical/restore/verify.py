"""The restore's verify step: per table, rows and the row-hash checksum recomputed on the target equal
the manifest's; every object present; the configuration back as the snapshot recorded it.

Checksums are taken where the rows are still in the buffer pool, so no step reads the data back from disk:
- per chunk (`chunk_checks`): when a table's chunks are primary-key ranges (or it has one chunk), the lane
  computes each chunk's rows and checksum over its key range right after its LOAD DATA, inside the chunk's
  transaction; a chunk that differs from the manifest is rolled back and refused. The result is kept on the
  chunk's ledger row, and finalize sums a table's chunks into its check (`keep_chunk_sums`);
- per table otherwise: right after the table's held-back indexes are built (`record_check`), by the lane
  that completes it (index_build=per_table) or by finalize (after_all).
Both are kept in `_lastline.table_checks`; verify compares them to the manifest instead of reading the table
again, and computes the others, and every MEMORY table's (sql.VOLATILE: a restart, as revert's, empties it after its
check). A table's data does not change between the two (its chunks are all in; read_only keeps applications out).
"""
from __future__ import annotations

import logging
import time
from typing import Any

from lastline.backups import open_backup
from lastline.core import stopping
from lastline.core.errors import IntegrityError
from lastline.core.servers import Server, over_connections
from lastline.core.sql import META_DB, NON_TRANSACTIONAL, VOLATILE, NameKeys, as_text, objects_present, placeholders, table_exists
from lastline.logical.format import dialect
from lastline.logical.format.chunking import chunk_ranges
from lastline.logical.restore import tuning
from lastline.logical.restore.backup_files import selected, target_server
from lastline.logical.restore.plans import ConfigSnapshot, RestorePlan, Verified
from lastline.logical.restore.target_state import aside_name, drop_aside
from lastline.manifest import LogicalManifest, LogicalTable

log = logging.getLogger(__name__)
CHECKS = f"{META_DB}.table_checks"


def table_checksum(cur: Any, manifest: LogicalManifest, t: LogicalTable, where: str | None = None) -> tuple[int, str]:
    """A table's rows and checksum as the manifest computes them (its session's time_zone at +00:00), or those
    of the rows `where` picks (a chunk: backups with per-chunk checksums only)."""
    columns = [dialect.Column(**c) for c in t.columns]
    if manifest.checksum != dialect.CHECKSUM:
        cur.execute(dialect.legacy_checksum_sql(t.schema, t.name, columns))
    else:
        cur.execute(dialect.checksum_sql(t.schema, t.name, columns, where))
    rows, checksum = cur.fetchone()
    return int(rows), str(checksum)


def chunk_checks(manifest: LogicalManifest, t: LogicalTable) -> list[str | None] | None:
    """The WHERE of each chunk's own check (None: the whole table), or None if the table is checked whole
    (see the module doc; also backups without per-chunk checksums, and tables the ledger cannot share a
    transaction with)."""
    if manifest.checksum != dialect.CHECKSUM or t.engine.lower() in NON_TRANSACTIONAL or any(c.checksum is None for c in t.chunks):
        return None
    return chunk_ranges(t)


def ensure_checks(cur: Any) -> None:
    """The table the checks are kept in (by the admin connection: the run account may only use its rows)."""
    cur.execute(f"CREATE TABLE IF NOT EXISTS {CHECKS} (backup_id VARBINARY(64) NOT NULL, schema_name VARBINARY(256) NOT NULL, "
                "table_name VARBINARY(256) NOT NULL, rows_seen BIGINT NOT NULL, checksum_seen VARBINARY(64) NOT NULL, "
                "PRIMARY KEY (backup_id, schema_name, table_name)) ENGINE=InnoDB")


def _keep(cur: Any, backup_id: str, t: LogicalTable, rows: int, checksum: str) -> None:
    cur.execute(f"REPLACE INTO {CHECKS} VALUES (%s, %s, %s, %s, %s)", (backup_id, t.schema, t.name, rows, checksum))


def record_check(cur: Any, manifest: LogicalManifest, t: LogicalTable) -> tuple[int, str]:
    """Compute a complete table's checksum now and keep it for verify (see the module doc)."""
    cur.execute("SET SESSION time_zone = '+00:00'")
    rows, checksum = table_checksum(cur, manifest, t)
    _keep(cur, manifest.backup_id, t, rows, checksum)
    cur.connection.commit()
    return rows, checksum


def keep_chunk_sums(cur: Any, manifest: LogicalManifest, tables: list[LogicalTable]) -> set[tuple[str, str]]:
    """Keep, for verify, the check of each of `tables` whose every chunk was checked as it loaded: the sums of
    its chunks' rows and checksums on the ledger. Returns those tables' (schema, name)."""
    tables = [t for t in tables if chunk_checks(manifest, t) is not None]
    if not tables or not table_exists(cur, META_DB, "ledger"):
        return set()
    files = [c.file for t in tables for c in t.chunks]
    seen: dict[str, tuple[int, int]] = {}
    for i in range(0, len(files), 1000):  # these tables' rows only: a lane asks for one table at a time
        batch = files[i:i + 1000]
        cur.execute(f"SELECT file, rows_loaded, checksum_seen FROM {META_DB}.ledger WHERE backup_id = %s AND "
                    f"checksum_seen IS NOT NULL AND file IN ({placeholders(batch)})", (manifest.backup_id, *batch))
        seen |= {as_text(f): (int(r), int(as_text(c))) for f, r, c in cur.fetchall()}
    kept = set()
    for t in tables:
        if not all(c.file in seen for c in t.chunks):
            continue
        _keep(cur, manifest.backup_id, t, sum(seen[c.file][0] for c in t.chunks), str(sum(seen[c.file][1] for c in t.chunks)))
        kept.add((t.schema, t.name))
    cur.connection.commit()
    return kept


def forget_checks(cur: Any, backup_id: str) -> None:
    """Drop the checks kept for a backup's tables (their tables are being loaded anew, or were verified)."""
    if table_exists(cur, META_DB, "table_checks"):
        cur.execute(f"DELETE FROM {CHECKS} WHERE backup_id = %s", (backup_id,))
        cur.connection.commit()


def recorded_checks(server: Server, backup_id: str) -> dict[tuple[str, str], tuple[int, str]]:
    """The checksums kept for a backup's tables, by (schema, table)."""
    with server.session() as cur:
        if not table_exists(cur, META_DB, "table_checks"):
            return {}
        cur.execute(f"SELECT schema_name, table_name, rows_seen, checksum_seen FROM {CHECKS} WHERE backup_id = %s", (backup_id,))
        return {(as_text(a), as_text(b)): (int(r), as_text(c)) for a, b, r, c in cur.fetchall()}


@stopping.stops_cleanly
def verify(plan: RestorePlan, snapshot: ConfigSnapshot | None) -> Verified:
    """Per table rows and checksum equal to the manifest; every object present; configuration back (as `snapshot`
    recorded it, when the restore took one)."""
    backup = open_backup(plan.backup)
    manifest, schema = backup.logical, backup.schema
    server = target_server(plan)
    t0 = time.monotonic()
    bad: list[str] = []

    legacy = manifest.checksum != dialect.CHECKSUM
    if legacy:
        log.warning(
            "verify: backup %s predates row-hash checksums (%s): its checksums are over the dump's own text and "
            "cannot catch a value the dump got wrong; take a new backup", manifest.backup_id, manifest.format,
        )
    recorded = recorded_checks(server, manifest.backup_id)
    with server.session() as cur:  # what each name is on the target: the admin account reads base tables only
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA IN ("
                    + placeholders(plan.databases) + ")", plan.databases)
        found = [(as_text(a), as_text(b), as_text(c)) for a, b, c in cur.fetchall()]
        # as the server matches names: with lower_case_table_names=1, `Users` of the backup is `users` here
        fold = NameKeys(cur).learn([n for a, b, _c in found for n in (a, b)] + [n for t in manifest.tables for n in (t.schema, t.name)])
        kinds = {(fold(a), fold(b)): c for a, b, c in found}

    def check(cur: Any, t: Any) -> str | None:
        kind = kinds.get((fold(t.schema), fold(t.name)), "missing")
        if kind != "BASE TABLE":  # a view (code a backup wrote) is never read as the admin
            return f"{t.schema}.{t.name}: is {kind.lower()} on the target, not a table"
        kept = None if t.engine.lower() in VOLATILE else recorded.get((t.schema, t.name))
        rows, checksum = kept or table_checksum(cur, manifest, t)
        if (rows, checksum) != (t.rows, t.checksum):
            emptied = t.engine.lower() in VOLATILE and rows == 0 < t.rows
            return (f"{t.schema}.{t.name}: {rows} rows, checksum {checksum}; backup: {t.rows} rows, checksum {t.checksum}"
                    + (" (a MEMORY table: a restart of the target after its load emptied it; re-run the restore with "
                       "force)" if emptied else ""))
        return None

    tables = sorted(selected(manifest, plan.databases), key=lambda t: -t.raw_bytes)
    bad += [r for r in over_connections(server, plan.parallel, tables, check, setup=("SET SESSION time_zone = '+00:00'",)) if r]
    wanted = set(plan.databases)
    with server.session() as cur:
        for kind in ("views", "triggers", "routines", "events", "sequences"):
            if kind in ("triggers", "events") and server.role == "staging":
                continue  # created once the masking is verified, and checked then (staging.refresh.late_objects)
            present = objects_present(cur, kind, plan.databases)  # one query a kind, none per object
            bad += [f"{kind[:-1]} {o['schema']}.{o['name']} is missing" for o in schema[kind]
                    if o["schema"] in wanted and (o["schema"].casefold(), o["name"].casefold()) not in present]
    differ = tuning.config_differs(server, snapshot.variables) if snapshot else {}
    bad += [f"configuration: {k} is {a!r}, was {b!r} before the restore" for k, (a, b) in sorted(differ.items())]
    if bad:
        kept = [f"{db} in {aside_name(db)}" for db in plan.databases]
        raise IntegrityError("verify failed:\n  " + "\n  ".join(bad) + "\nThe old tables that force replaced, if any, are "
                             "kept (" + ", ".join(kept) + "); a re-run that verifies drops them.")
    with server.session() as cur:
        forget_checks(cur, manifest.backup_id)
    dropped = drop_aside(server, plan.databases)
    if dropped:
        log.info("verify: dropped the old tables force had kept: %s", ", ".join(dropped))
    in_lanes = sum((t.schema, t.name) in recorded and t.engine.lower() not in VOLATILE for t in tables)
    log.info("verify ok: %d tables with rows and checksums equal to the backup's (%d taken as each table "
             "completed), every object present, configuration back (%.1f s)", len(tables), in_lanes, time.monotonic() - t0)
    objects = {kind: sum(1 for o in schema[kind] if o["schema"] in wanted)
               for kind in ("views", "triggers", "routines", "events", "sequences")}
    return Verified(len(tables), sum(int(t.rows) for t in tables), objects, not legacy, round(time.monotonic() - t0, 3))
