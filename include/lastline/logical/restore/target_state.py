"""What a logical restore keeps on its target between runs: the restore state (a resume must restore the
same backup into the same databases), the work units prepare planned (the lanes read them there: at 10,000 tables
they are about 1 MB of JSON, too much for XCom) and the databases `force` sets aside until the restore is verified.
"""
from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from lastline.core.errors import Refusal
from lastline.core.servers import Server
from lastline.core.sql import ASIDE_PREFIX, META_DB, placeholders, table_exists
from lastline.logical.format import dialect
from lastline.logical.restore import tuning
from lastline.logical.restore.backup_files import selected
from lastline.logical.restore.work_units import WorkUnit
from lastline.manifest import LogicalManifest

log = logging.getLogger(__name__)


STATE = f"{tuning.META_DB}.restore_state"
UNITS = f"{tuning.META_DB}.work_units"


def ensure_ledger(cur: Any) -> None:
    """The ledger table on the target, in lastline's own database (idempotent)."""
    cur.execute("SET SESSION sql_log_bin = 0")
    cur.execute(f"CREATE DATABASE IF NOT EXISTS {META_DB}")
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {META_DB}.ledger (backup_id VARBINARY(64) NOT NULL, file VARBINARY(700) NOT NULL, "
        "rows_loaded BIGINT NOT NULL, loaded_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
        "checksum_seen VARBINARY(64) NULL, PRIMARY KEY (backup_id, file)) ENGINE=InnoDB"
    )  # checksum_seen: the chunk's check as it loaded (logical.restore.verify); a ledger of an earlier version gains it
    cur.execute(f"ALTER TABLE {META_DB}.ledger ADD COLUMN IF NOT EXISTS checksum_seen VARBINARY(64) NULL")


def ledger_exists(cur: Any) -> bool:
    """Whether the ledger table is there (a finalize that completed drops it once no restore has rows in it)."""
    return table_exists(cur, META_DB, "ledger")


def dbs_key(databases: list[str]) -> str:
    """The restore's databases as one key (a resume must restore the very same set)."""
    return hashlib.sha256(json.dumps(sorted(databases)).encode()).hexdigest()


def state_current(cur: Any) -> bool:
    """Whether the restore-state table exists in its current shape (keyed on backup and databases)."""
    cur.execute(
        "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'restore_state' "
        "AND COLUMN_NAME = 'dbs_key'", (tuning.META_DB,),
    )
    return bool(cur.fetchone()[0])


def resuming(cur: Any, backup_id: str, databases: list[str]) -> bool:
    """Whether an unfinished restore of this backup into these same databases left its state on this
    target (a new run then resumes it; any other run follows the force rule)."""
    if not state_current(cur):
        return False
    cur.execute(f"SELECT COUNT(*) FROM {STATE} WHERE backup_id = %s AND dbs_key = %s AND finished_at IS NULL",
                (backup_id, dbs_key(databases)))
    return bool(cur.fetchone()[0])


def recorded_defer_indexes(cur: Any, backup_id: str, databases: list[str]) -> bool | None:
    """defer_indexes as the unfinished restore of this backup into these databases created its tables; None where
    none is unfinished or it was started by a lastline that did not record it."""
    if not state_current(cur):
        return None
    cur.execute("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'restore_state' "
                "AND COLUMN_NAME = 'defer_indexes'", (tuning.META_DB,))
    if not cur.fetchone()[0]:
        return None
    cur.execute(f"SELECT defer_indexes FROM {STATE} WHERE backup_id = %s AND dbs_key = %s AND finished_at IS NULL",
                (backup_id, dbs_key(databases)))
    row = cur.fetchone()
    return None if row is None or row[0] is None else bool(row[0])


def resume_defer_indexes(cur: Any, backup_id: str, databases: list[str]) -> tuple[bool, bool]:
    """(the defer_indexes a resume of this unfinished restore must use, whether its state recorded it). Unrecorded
    (a restore started by a lastline that did not keep it): True, under which the lanes create what is missing
    without held-back definitions and finalize adds every held-back index and foreign key a table lacks, by name,
    whichever way its tables were created."""
    got = recorded_defer_indexes(cur, backup_id, databases)
    return (True, False) if got is None else (got, True)


def ensure_state(cur: Any) -> None:
    """The restore-state table; one of an older shape (keyed on the backup alone) is replaced."""
    if table_exists(cur, tuning.META_DB, "restore_state") and not state_current(cur):
        log.warning("%s has an older shape (keyed on the backup alone): replaced; an unfinished restore started by "
                    "an older lastline starts afresh", STATE)
        cur.execute(f"DROP TABLE {STATE}")
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {STATE} (backup_id VARBINARY(64) NOT NULL, dbs_key CHAR(64) NOT NULL, "
        "dbs TEXT NOT NULL, started_at TIMESTAMP(6) NULL, finished_at TIMESTAMP(6) NULL, "
        "defer_indexes TINYINT NULL, PRIMARY KEY (backup_id, dbs_key)) ENGINE=InnoDB"
    )  # defer_indexes: how the run created its tables, which a resume keeps; a table of an earlier version gains it
    cur.execute(f"ALTER TABLE {STATE} ADD COLUMN IF NOT EXISTS defer_indexes TINYINT NULL")
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {UNITS} (backup_id VARBINARY(64) NOT NULL, dbs_key CHAR(64) NOT NULL, "
        "unit_index INT NOT NULL, unit LONGBLOB NOT NULL, PRIMARY KEY (backup_id, dbs_key, unit_index)) ENGINE=InnoDB"
    )  # a restore's work units, as prepare planned them (record_units)


def record_units(cur: Any, backup_id: str, databases: list[str], units: list[WorkUnit]) -> None:
    """Keep the work units prepare planned for this restore (any earlier plan of it replaced), for its lanes."""
    cur.execute("SET SESSION sql_log_bin = 0")
    key = dbs_key(databases)
    cur.execute(f"DELETE FROM {UNITS} WHERE backup_id = %s AND dbs_key = %s", (backup_id, key))
    if units:
        cur.executemany(f"INSERT INTO {UNITS} (backup_id, dbs_key, unit_index, unit) VALUES (%s, %s, %s, %s)",
                        [(backup_id, key, u.index, json.dumps(u.to_dict(), separators=(",", ":"))) for u in units])
    cur.connection.commit()


def recorded_units(cur: Any, backup_id: str, databases: list[str]) -> list[WorkUnit]:
    """The work units prepare recorded for this restore, in plan order (none once the restore completed: finalize
    clears them with its state)."""
    cur.execute(f"SELECT unit FROM {UNITS} WHERE backup_id = %s AND dbs_key = %s ORDER BY unit_index",
                (backup_id, dbs_key(databases)))
    return [WorkUnit.from_dict(json.loads(row[0])) for row in cur.fetchall()]


def units_digest(units: list[dict]) -> str:
    """A short digest of a plan of work units (their dicts): a lane holds the one prepare handed it to, so that it never
    loads from units a later prepare of the same restore planned otherwise."""
    return hashlib.sha256(json.dumps(units, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]


def clear_state(cur: Any, manifest: LogicalManifest, databases: list[str]) -> None:
    """Forget every restore state and ledger row that concerns these databases (any backup): they are being
    replaced, or were just restored."""
    cur.execute(f"SELECT backup_id, dbs_key, dbs FROM {STATE}")
    for backup_id, key, dbs in cur.fetchall():
        if set(json.loads(dbs)) & set(databases):
            cur.execute(f"DELETE FROM {STATE} WHERE backup_id = %s AND dbs_key = %s", (backup_id, key))
            cur.execute(f"DELETE FROM {UNITS} WHERE backup_id = %s AND dbs_key = %s", (backup_id, key))
    folders = {c.file.split("/")[1] for t in selected(manifest, databases) for c in t.chunks}
    for folder in sorted(folders) if ledger_exists(cur) else ():
        prefix = f"data/{folder}/"
        cur.execute(f"DELETE FROM {tuning.META_DB}.ledger WHERE LEFT(file, %s) = %s", (len(prefix), prefix))


def aside_name(db: str) -> str:
    """Where `force` keeps a database's old tables until the restore that replaces them is verified."""
    return ASIDE_PREFIX + hashlib.sha1(db.encode()).hexdigest()[:16]


def schema_exists(cur: Any, db: str) -> bool:
    cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (db,))
    return bool(cur.fetchone()[0])


def refuse_unapproved(cur: Any, databases: list[str], force: bool, at_risk: dict | None) -> None:
    """Before anything is set aside: without force as the run asked it, only the databases a person approved
    (`at_risk["replaces"]`) may be replaced. A database that was empty at preflight and holds tables now (written
    while the approval waited, or since preflight) was never shown to anyone: refused, nothing touched."""
    asked = bool(at_risk.get("force")) if at_risk else force
    if asked:
        return
    approved = set(at_risk.get("replaces", [])) if at_risk else set()
    grown = []
    for db in databases:
        if db in approved:
            continue
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA IN (%s, %s)", (db, aside_name(db)))
        if cur.fetchone()[0]:
            grown.append(db)
    if grown:
        raise Refusal(
            f"database(s) {', '.join(grown)} hold tables now but were empty when the restore was planned"
            + (" and approved" if at_risk else "") + ": nothing was replaced. Look at what wrote there, then run the "
            "restore again (its approval will list them), or set force."
        )


def set_aside(cur: Any, db: str) -> None:
    """Move `db`'s tables (and the text of its triggers, views, routines and events) into aside_name(db),
    then drop `db`: nothing of the old data is dropped before the new data is verified. If an earlier
    run already set the original aside, what `db` holds now is that run's partial restore: dropped."""
    if not schema_exists(cur, db):
        return
    aside, q = aside_name(db), dialect.quote_ident
    if schema_exists(cur, aside):
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
        # EVENT_OBJECT_SCHEMA, not TRIGGER_SCHEMA (the same database): the server then opens this database's tables alone
        ("TRIGGER", "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = %s"),
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


def drop_aside(server: Server, databases: list[str]) -> list[str]:
    """After a verified restore: the old tables that force set aside are dropped."""
    dropped = []
    with server.session() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for db in databases:
            if schema_exists(cur, aside_name(db)):
                cur.execute(f"DROP DATABASE {dialect.quote_ident(aside_name(db))}")
                dropped.append(aside_name(db))
    return dropped


def empty_table(cur: Any, schema: str, name: str, engine: str) -> None:
    """Take out the rows an earlier try left in a non-transactional table: TRUNCATE (which rebuilds a table a crash
    marked as crashed without reading it). ARCHIVE deletes no row: a table with rows is swapped for an empty copy in
    one RENAME (a crash leaves the old table or the new one under its name, and a spare this drops next time)."""
    table = dialect.qualified(schema, name)
    if engine.lower() != "archive":
        cur.execute(f"TRUNCATE TABLE {table}")
        return
    tag = hashlib.sha1(name.encode()).hexdigest()[:20]
    spare, old = dialect.qualified(schema, f"__lastline_empty_{tag}"), dialect.qualified(schema, f"__lastline_old_{tag}")
    cur.execute(f"DROP TABLE IF EXISTS {spare}, {old}")
    cur.execute(f"SELECT 1 FROM {table} LIMIT 1")
    if not cur.fetchall():  # the table was just made
        return
    cur.execute(f"CREATE TABLE {spare} LIKE {table}")
    cur.execute(f"RENAME TABLE {table} TO {old}, {spare} TO {table}")
    cur.execute(f"DROP TABLE {old}")


def loaded_count(cur: Any, backup_id: str, files: list[str]) -> int:
    """How many of `files` (chunks of `backup_id`) the ledger says are in: their rows alone, by its primary key."""
    found = 0
    for i in range(0, len(files), 1000):
        batch = files[i:i + 1000]
        cur.execute(f"SELECT COUNT(*) FROM {META_DB}.ledger WHERE backup_id = %s AND file IN ({placeholders(batch)})",
                    (backup_id, *batch))
        found += int(cur.fetchone()[0])
    return found


def loaded_files(cur: Any, backup_id: str, files: list[str]) -> set[str]:
    """Which of `files` (chunks of `backup_id`) the ledger says are in: their rows alone, by its primary key (a lane
    asks once per unit, twice: reading the backup's every row each time sent up to 64 x the chunks)."""
    found: set[str] = set()
    for i in range(0, len(files), 1000):
        batch = files[i:i + 1000]
        cur.execute(f"SELECT file FROM {META_DB}.ledger WHERE backup_id = %s AND file IN ({placeholders(batch)})",
                    (backup_id, *batch))
        found |= {(f.decode() if isinstance(f, bytes) else f) for (f,) in cur.fetchall()}
    return found
