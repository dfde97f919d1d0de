"""logical.restore.target_state: the keys a restore's state is found by; and on a real server (the suite's logical
target) the state and ledger a resume reads, the work units kept for the lanes, what clear_state forgets (this
restore's databases only), the force rule before anything is set aside, and set_aside / drop_aside / empty_table on
names with spaces, dots and backticks."""
from __future__ import annotations

import json
import re

import pytest

from lastline.backups import BackupRef, open_backup
from lastline.core.errors import Refusal
from lastline.core.sql import ASIDE_PREFIX, META_DB
from lastline.logical.format.dialect import qualified, quote_ident
from lastline.logical.restore.target_state import (
    STATE,
    UNITS,
    aside_name,
    clear_state,
    dbs_key,
    drop_aside,
    empty_table,
    ensure_ledger,
    ensure_state,
    loaded_count,
    loaded_files,
    record_units,
    recorded_defer_indexes,
    recorded_units,
    refuse_unapproved,
    resume_defer_indexes,
    resuming,
    schema_exists,
    set_aside,
    state_current,
    units_digest,
)
from lastline.logical.restore.work_units import Part, WorkUnit

from .conftest import DB, conf, drop, root

BACKUP = "unit-target-state"  # the backup id of the rows these tests write (deleted after each)
ODD = "unit ts.d`b"  # a database of these tests' own
OTHER = "unit ts other"


# --- the keys, without a server ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("a", "b", "same"), [
    (["x", "y"], ["y", "x"], True),
    (["x"], ["x", "y"], False),
    ([], [], True),
    (["a.b"], ["a", "b"], False),
    (["x`y"], ["x`y"], True),
], ids=["order-does-not-count", "one-more-database", "empty", "a-dot-is-no-separator", "backtick"])
def test_dbs_key(a, b, same):
    assert (dbs_key(a) == dbs_key(b)) is same
    assert re.fullmatch("[0-9a-f]{64}", dbs_key(a))


@pytest.mark.parametrize(("a", "b", "same"), [
    ([{"index": 0, "name": "u"}], [{"name": "u", "index": 0}], True),
    ([{"index": 0}], [{"index": 1}], False),
    ([{"index": 0}, {"index": 1}], [{"index": 1}, {"index": 0}], False),
    ([], [], True),
], ids=["key-order-does-not-count", "another-unit", "unit-order-counts", "no-unit"])
def test_units_digest(a, b, same):
    assert (units_digest(a) == units_digest(b)) is same
    assert re.fullmatch("[0-9a-f]{12}", units_digest(a))


@pytest.mark.parametrize("db", ["shop", "a.b", "c d", "e`f", "", "é" * 64], ids=["plain", "dot", "space", "backtick", "empty", "longest"])
def test_aside_name_is_a_plain_name_of_its_own_per_database(db):
    name = aside_name(db)
    assert re.fullmatch(re.escape(ASIDE_PREFIX) + "[0-9a-f]{16}", name) and name == aside_name(db)
    assert name != aside_name(db + "x") and len(name) <= 64


# --- on the logical target --------------------------------------------------------------------------------------------
@pytest.fixture
def admin(logical_target):
    """The target's admin cursor with lastline's bookkeeping in place; this module's rows and databases gone after.
    Autocommit: a read holds no lock that the root session's DDL of the same test would wait for."""
    server = logical_target.server()
    with server.session() as cur:
        cur.connection.autocommit(True)
        ensure_ledger(cur)
        ensure_state(cur)
        yield cur
    with server.session() as cur:
        for table in (STATE, UNITS, f"{META_DB}.ledger"):
            cur.execute(f"DELETE FROM {table} WHERE backup_id LIKE %s", (BACKUP + "%",))
        cur.connection.commit()
    drop(logical_target, ODD, OTHER, aside_name(ODD), aside_name(OTHER))


def _state(cur, backup_id: str, dbs: list[str], finished: bool = False, defer: int | None = 1) -> None:
    cur.execute(f"INSERT INTO {STATE} VALUES (%s, %s, %s, CURRENT_TIMESTAMP(6), {'CURRENT_TIMESTAMP(6)' if finished else 'NULL'}, %s)",
                (backup_id, dbs_key(dbs), json.dumps(sorted(dbs)), defer))
    cur.connection.commit()


def test_the_bookkeeping_tables_are_made_once_in_their_current_shape(admin):
    ensure_ledger(admin)
    ensure_state(admin)  # again: idempotent
    assert state_current(admin)
    admin.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'ledger'", (META_DB,))
    assert {c for (c,) in admin.fetchall()} == {"backup_id", "file", "rows_loaded", "loaded_at", "checksum_seen"}


@pytest.mark.parametrize(("finished", "defer", "asked", "resumes", "recorded"), [
    (False, 1, [ODD, OTHER], True, True),
    (False, 0, [OTHER, ODD], True, False),
    (False, None, [ODD, OTHER], True, None),
    (True, 1, [ODD, OTHER], False, None),
    (False, 1, [ODD], False, None),
], ids=["unfinished-deferred", "unfinished-not-deferred-any-order", "unfinished-by-an-older-lastline", "finished",
        "other-databases"])
def test_resuming_and_the_defer_indexes_it_keeps(admin, finished, defer, asked, resumes, recorded):
    _state(admin, BACKUP, [ODD, OTHER], finished, defer)
    assert resuming(admin, BACKUP, asked) is resumes
    assert resuming(admin, BACKUP + "-other", asked) is False
    assert recorded_defer_indexes(admin, BACKUP, asked) is recorded
    assert resume_defer_indexes(admin, BACKUP, asked) == ((True, False) if recorded is None else (recorded, True))


def _units(n: int) -> list[WorkUnit]:
    return [WorkUnit(i, f"unit {i}", 10 * i, [Part(ODD, "t.a`b c", 0, i, 10 * i, i == 0), Part(OTHER, "u", 0, 0, 1, True)])
            for i in range(n)]


def test_work_units_are_kept_in_plan_order_replaced_by_a_new_plan_and_emptied(admin):
    units = _units(12)
    record_units(admin, BACKUP, [ODD, OTHER], list(reversed(units)))
    assert recorded_units(admin, BACKUP, [OTHER, ODD]) == units  # by index, whichever order they came in
    assert recorded_units(admin, BACKUP, [ODD]) == []  # another restore's
    record_units(admin, BACKUP, [ODD, OTHER], units[:2])  # a later prepare replaces the plan
    assert recorded_units(admin, BACKUP, [ODD, OTHER]) == units[:2]
    record_units(admin, BACKUP, [ODD, OTHER], [])
    assert recorded_units(admin, BACKUP, [ODD, OTHER]) == []


def _ledger(cur, backup_id: str, files: list[str]) -> None:
    cur.executemany(f"INSERT INTO {META_DB}.ledger (backup_id, file, rows_loaded) VALUES (%s, %s, 1)",
                    [(backup_id, f) for f in files])
    cur.connection.commit()


@pytest.mark.parametrize("n", [0, 1, 999, 1000, 2345], ids=["none", "one", "just-under-a-batch", "a-batch", "batches"])
def test_loaded_count_and_files_read_the_ledger_rows_of_these_files_alone(admin, n):
    files = [f"data/x/t `{i}`.tsv" for i in range(n)]
    _ledger(admin, BACKUP, files[::2])
    _ledger(admin, BACKUP + "-other", files[1::2])  # another backup's rows for the other files
    asked = [*files, "data/x/not loaded"]
    assert loaded_count(admin, BACKUP, asked) == len(files[::2])
    assert loaded_files(admin, BACKUP, asked) == set(files[::2])
    assert loaded_files(admin, BACKUP, []) == set() and loaded_count(admin, BACKUP, []) == 0


def test_clear_state_forgets_every_state_and_ledger_row_of_these_databases_only(admin, tiny_backup):
    manifest = open_backup(BackupRef.parse(conf(tiny_backup)["backup"], "logical")).logical
    folder = manifest.tables[0].chunks[0].file.split("/")[1]  # the database's folder, `unit%20rst%2Ed%60b`
    _state(admin, BACKUP, [DB, OTHER])  # an earlier restore of another backup that named DB too
    _state(admin, BACKUP + "-kept", [OTHER])
    record_units(admin, BACKUP, [DB, OTHER], _units(2))
    record_units(admin, BACKUP + "-kept", [OTHER], _units(2))
    mine = [f"data/{folder}/t/0.tsv.zst", f"data/{folder}/u v/1.tsv.zst"]
    others = [f"data/{folder}x/t/0.tsv.zst", "data/other/t/0.tsv.zst"]  # a database whose folder starts like DB's
    _ledger(admin, BACKUP, mine + others)
    clear_state(admin, manifest, [DB])
    admin.connection.commit()
    admin.execute(f"SELECT backup_id FROM {STATE} WHERE backup_id LIKE %s", (BACKUP + "%",))
    assert [b for (b,) in admin.fetchall()] == [(BACKUP + "-kept").encode()]
    assert recorded_units(admin, BACKUP, [DB, OTHER]) == [] and len(recorded_units(admin, BACKUP + "-kept", [OTHER])) == 2
    assert loaded_files(admin, BACKUP, mine + others) == set(others)
    clear_state(admin, manifest, [])  # no database: nothing
    assert loaded_files(admin, BACKUP, others) == set(others)


def _make(inst, db: str, tables: dict[str, str], *more: str) -> None:
    with root(inst).session() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote_ident(db)}")
        for name, body in tables.items():
            cur.execute(f"CREATE TABLE {qualified(db, name)} {body}")
        for sql in more:
            cur.execute(sql)


@pytest.mark.parametrize(("force", "at_risk", "approved", "refused"), [
    (True, None, [], None),
    (False, {"force": True}, [], None),
    (False, {"replaces": [ODD]}, [ODD], None),
    (False, None, [], "hold tables now but were empty when the restore was planned: nothing"),
    (False, {"replaces": []}, [], "were empty when the restore was planned and approved: nothing was replaced"),
    (False, {"force": False, "replaces": [OTHER]}, [], "and approved"),
], ids=["forced", "forced-as-approved", "approved", "grown-since-preflight", "grown-while-approval-waited",
        "approved-another"])
def test_refuse_unapproved(admin, logical_target, force, at_risk, approved, refused):
    refuse_unapproved(admin, [ODD, OTHER], force, at_risk)  # both absent: nothing to replace
    _make(logical_target, ODD, {"t.a`b c": "(id INT)"})
    if refused:
        with pytest.raises(Refusal, match=re.escape(f"database(s) {ODD} ") + ".*" + re.escape(refused)):
            refuse_unapproved(admin, [ODD, OTHER], force, at_risk)
    else:
        refuse_unapproved(admin, [ODD, OTHER], force, at_risk)


def test_refuse_unapproved_counts_the_tables_set_aside(admin, logical_target):
    _make(logical_target, aside_name(ODD), {"t": "(id INT)"})  # a forced run set them aside; ODD itself is gone
    with pytest.raises(Refusal, match=re.escape(ODD)):
        refuse_unapproved(admin, [ODD], False, None)


def _objects_of(cur, aside: str) -> set[tuple[str, str]]:
    cur.execute(f"SELECT kind, name FROM {qualified(aside, '__lastline_objects')}")
    return {(k, n) for k, n in cur.fetchall()}


def test_set_aside_keeps_the_old_tables_and_objects_text_until_drop_aside(admin, logical_target):
    t, u = "t.a`b c", "u"
    _make(logical_target, ODD, {t: "(id INT PRIMARY KEY, v VARCHAR(9))", u: "(id INT) ENGINE=MyISAM"},
          f"INSERT INTO {qualified(ODD, t)} VALUES (1, 'one'), (2, 'two')",
          f"CREATE SEQUENCE {qualified(ODD, 's.q')}",
          f"CREATE VIEW {qualified(ODD, 'v w')} AS SELECT id FROM {qualified(ODD, t)}",
          f"CREATE TRIGGER {qualified(ODD, 'tr`g')} BEFORE INSERT ON {qualified(ODD, t)} FOR EACH ROW SET NEW.v = 'x'",
          f"CREATE PROCEDURE {qualified(ODD, 'p.r')}() SELECT 1",
          f"CREATE FUNCTION {qualified(ODD, 'f')}() RETURNS INT DETERMINISTIC RETURN 1",
          f"CREATE EVENT {qualified(ODD, 'e v')} ON SCHEDULE EVERY 1 DAY DISABLE DO SELECT 1")
    aside = aside_name(ODD)
    set_aside(admin, ODD)
    assert not schema_exists(admin, ODD) and schema_exists(admin, aside)
    admin.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME <> '__lastline_objects'",
                  (aside,))
    assert {n for (n,) in admin.fetchall()} == {t, u, "s.q"}  # the view's text is kept, not the view
    admin.execute(f"SELECT v FROM {qualified(aside, t)} ORDER BY id")
    assert admin.fetchall() == (("one",), ("two",))
    assert _objects_of(admin, aside) == {("TRIGGER", "tr`g"), ("VIEW", "v w"), ("PROCEDURE", "p.r"), ("FUNCTION", "f"),
                                         ("EVENT", "e v")}
    # a re-run finds the original aside: what ODD holds now is that run's partial restore, dropped; the aside stays
    _make(logical_target, ODD, {t: "(id INT)"})
    set_aside(admin, ODD)
    assert not schema_exists(admin, ODD) and _objects_of(admin, aside)
    set_aside(admin, ODD)  # nothing there: nothing done
    assert drop_aside(logical_target.server(), [ODD, OTHER]) == [aside]
    assert not schema_exists(admin, aside)
    assert drop_aside(logical_target.server(), [ODD]) == []


def test_set_aside_drops_a_database_without_tables(admin, logical_target):
    _make(logical_target, ODD, {}, f"CREATE VIEW {qualified(ODD, 'v')} AS SELECT 1 AS one")
    set_aside(admin, ODD)
    assert not schema_exists(admin, ODD) and not schema_exists(admin, aside_name(ODD))


@pytest.mark.parametrize("engine", ["InnoDB", "MyISAM", "Aria", "ARCHIVE"])
def test_empty_table_leaves_it_empty_and_as_it_was_made(admin, logical_target, engine):
    installed = False
    if engine == "ARCHIVE":  # ARCHIVE deletes no row: the table is swapped for an empty copy
        admin.execute("SELECT COUNT(*) FROM information_schema.ENGINES WHERE ENGINE = 'ARCHIVE' AND SUPPORT IN ('YES', 'DEFAULT')")
        if not admin.fetchone()[0]:
            with root(logical_target).session() as cur:
                cur.execute("INSTALL SONAME 'ha_archive'")
            installed = True
    name = "t.a`b c"
    try:
        _make(logical_target, ODD, {name: f"(id INT NOT NULL, v TEXT) ENGINE={engine}"},
              f"INSERT INTO {qualified(ODD, name)} SELECT seq, 'x' FROM mysql.seq_1_to_100")
        admin.execute(f"SHOW CREATE TABLE {qualified(ODD, name)}")
        made = admin.fetchone()[1]
        empty_table(admin, ODD, name, engine)
        empty_table(admin, ODD, name, engine)  # again, on an empty table
        admin.execute(f"SELECT COUNT(*) FROM {qualified(ODD, name)}")
        assert admin.fetchone()[0] == 0
        admin.execute(f"SHOW CREATE TABLE {qualified(ODD, name)}")
        assert admin.fetchone()[1] == made
        admin.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (ODD,))
        assert admin.fetchall() == ((name,),)  # no spare left behind
    finally:
        drop(logical_target, ODD)
        if installed:
            with root(logical_target).session() as cur:
                cur.execute("UNINSTALL SONAME 'ha_archive'")

