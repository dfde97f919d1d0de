"""logical.restore.finalize, with the tiny backup (conftest) loaded into the suite's logical target (index_build
after_all, so finalize does the work): the held-back indexes and foreign keys added once, AUTO_INCREMENT counters and
sequences as the backup had them, the triggers, views, routines and events made by the objects owner (events
disabled unless asked), each table's check kept for verify, the restore's state and ledger gone; add_indexes and
objects re-runnable; index_names and auto_increments on no database ask nothing."""
from __future__ import annotations

import pytest

from lastline.core import accounts
from lastline.core.sql import META_DB, table_exists
from lastline.logical.format.dialect import qualified
from lastline.logical.restore import stages as logical_restore
from lastline.logical.restore.backup_files import RUN_SESSION, run_server, target_server
from lastline.logical.restore.finalize import (
    EARLY_KINDS,
    add_indexes,
    auto_increments,
    complete_table,
    finalize,
    index_names,
    objects,
)
from lastline.logical.restore.target_state import STATE
from lastline.logical.restore.verify import recorded_checks

from .conftest import CHILD, DB, EMPTY, EVENT, PARENT, PROC, SEQ, TRIGGER, VIEW, fresh_target


@pytest.fixture(scope="module")
def loaded(restore_plan, logical_target, tiny_backup):
    """A plan (after_all) whose lanes loaded every chunk: finalize is next."""
    backup = fresh_target(logical_target, tiny_backup)
    plan = restore_plan(index_build="after_all")
    logical_restore.snapshot_config(plan, "unit finalize")
    _steps, lanes = logical_restore.prepare(plan)
    for lane in lanes:
        logical_restore.load_lane(plan, lane)
    return plan, backup


def _indexes(server, table: str) -> set[str]:
    return {r[0] for r in server.query("SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                                       "AND TABLE_NAME = %s", (DB, table))}


def _objects(server) -> dict[str, tuple]:
    return {
        "triggers": tuple(server.query("SELECT TRIGGER_NAME, DEFINER FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s", (DB,))),
        "views": tuple(server.query("SELECT TABLE_NAME, DEFINER, SECURITY_TYPE FROM information_schema.VIEWS WHERE TABLE_SCHEMA = %s", (DB,))),
        "routines": tuple(server.query("SELECT ROUTINE_NAME, DEFINER, SECURITY_TYPE FROM information_schema.ROUTINES "
                                       "WHERE ROUTINE_SCHEMA = %s", (DB,))),
        "events": tuple(server.query("SELECT EVENT_NAME, DEFINER, STATUS FROM information_schema.EVENTS WHERE EVENT_SCHEMA = %s", (DB,))),
    }


def test_on_no_database_index_names_and_auto_increments_ask_nothing(loaded):
    plan, _backup = loaded
    assert index_names(target_server(plan), []) == {} and auto_increments(target_server(plan), []) == {}


def test_finalize_completes_the_loaded_tables_and_forgets_the_restore(loaded, logical_target):
    plan, backup = loaded
    server = logical_target.server()
    manifest = backup.logical
    child = next(t for t in manifest.tables if t.name == CHILD)
    assert not server.query("SELECT COUNT(*) FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_SCHEMA = %s "
                            "AND CONSTRAINT_TYPE = 'FOREIGN KEY'", (DB,))[0][0]  # held back until now
    server.query(f"ALTER TABLE {qualified(DB, CHILD)} AUTO_INCREMENT = 1")  # as a load leaves it: right past the last row
    assert auto_increments(server, [DB])[(DB, CHILD)] == 1 + max(r for (r,) in server.query(f"SELECT id FROM {qualified(DB, CHILD)}"))
    assert _objects(server) == {"triggers": (), "views": (), "routines": (), "events": ()}

    done = finalize(plan)

    assert set(done.steps) == {"indexes", "auto_increment", "objects", "analyze"} and done.seconds >= 0
    assert server.query("SELECT CONSTRAINT_NAME FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = %s AND CONSTRAINT_TYPE = 'FOREIGN KEY'", (DB, CHILD)) == [("fk par",)]
    assert _indexes(server, PARENT) == {"PRIMARY", "k name", "ft.body"} and _indexes(server, CHILD) == {"PRIMARY", "k par"}
    assert auto_increments(server, [DB])[(DB, CHILD)] == child.auto_increment
    nextval = server.query(f"SELECT NEXTVAL({qualified(DB, SEQ)})")[0][0]
    assert nextval == next(s for s in backup.schema["sequences"] if s["name"] == SEQ)["next_value"]
    owner = accounts.owner_name([DB])
    made = _objects(server)
    assert [n for n, _d in made["triggers"]] == [TRIGGER] and [n for n, *_ in made["views"]] == [VIEW]
    assert [n for n, *_ in made["routines"]] == [PROC] and [(n, s) for n, _d, s in made["events"]] == [(EVENT, "DISABLED")]
    assert {d.split("@")[0] for kind in made.values() for _n, d, *_ in kind} == {owner}  # never the backup's root
    assert {s for kind in ("views", "routines") for *_n, s in made[kind]} == {"DEFINER"}
    checks = recorded_checks(server, manifest.backup_id)  # for verify: every table's, equal to the manifest's
    assert {k: checks.get(k) for k in checks} == {(t.schema, t.name): (t.rows, t.checksum) for t in manifest.tables}
    assert not server.query(f"SELECT COUNT(*) FROM {STATE} WHERE backup_id = %s", (manifest.backup_id,))[0][0]
    with server.session() as cur:
        assert not table_exists(cur, META_DB, "ledger") or not server.query(
            f"SELECT COUNT(*) FROM {META_DB}.ledger WHERE backup_id = %s", (manifest.backup_id,))[0][0]


def test_add_indexes_adds_only_the_missing_ones_once(loaded, logical_target):
    plan, backup = loaded
    t = next(t for t in backup.schema["tables"] if t["name"] == PARENT)
    server = logical_target.server()
    server.query(f"ALTER TABLE {qualified(DB, PARENT)} DROP INDEX `k name`, DROP INDEX `ft.body`")
    with run_server(plan).session() as cur:
        for sql in RUN_SESSION:
            cur.execute(sql)
        add_indexes(cur, t, {"PRIMARY", "k name", "ft.body"})  # the caller says they are there: nothing asked, nothing done
        assert _indexes(server, PARENT) == {"PRIMARY"}
        add_indexes(cur, t)
        assert _indexes(server, PARENT) == {"PRIMARY", "k name", "ft.body"}
        add_indexes(cur, t)  # again: each is there
        add_indexes(cur, next(t for t in backup.schema["tables"] if t["name"] == EMPTY))  # none held back
        seconds = complete_table(cur, backup.logical, t, None, index_names(server, [DB])[(DB, PARENT)])
    assert len(seconds) == 2 and all(s >= 0 for s in seconds)
    assert _indexes(server, PARENT) == {"PRIMARY", "k name", "ft.body"}


def test_objects_are_made_anew_on_a_re_run_and_events_enabled_only_when_asked(loaded, logical_target):
    plan, backup = loaded
    server = logical_target.server()
    admin = target_server(plan)
    before = _objects(server)
    assert objects(admin, backup.schema, [DB]) == accounts.owner_name([DB])
    assert _objects(server) == before  # re-runnable: each dropped and made again
    objects(admin, backup.schema, [DB], enable_events=True)
    assert [s for _n, _d, s in _objects(server)["events"]] == ["ENABLED"]
    server.query(f"DROP TRIGGER {qualified(DB, TRIGGER)}")
    server.query(f"DROP VIEW {qualified(DB, VIEW)}")
    objects(admin, backup.schema, [DB], kinds=EARLY_KINDS)  # what a staging restore makes before its masking
    now = _objects(server)
    assert now["views"] == before["views"] and now["triggers"] == ()
    objects(admin, backup.schema, [DB])
    assert _objects(server) == before
    objects(admin, backup.schema, ["another database"])  # none of its objects: nothing made, nothing dropped
    assert _objects(server) == before
    (create_user,) = server.query(f"SHOW CREATE USER {accounts.account_sql(*before['views'][0][1].split('@'))}")[0]
    assert "ACCOUNT LOCK" in create_user  # locked again after each: it stays their DEFINER and cannot log in


def test_finalize_again_after_it_completed(loaded, logical_target):
    plan, backup = loaded
    finalize(plan)
    finalize(plan)
    assert recorded_checks(logical_target.server(), backup.logical.backup_id)
