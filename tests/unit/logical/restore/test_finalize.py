"""logical.restore.finalize, with the tiny backup (conftest) loaded into the suite's logical target (index_build
after_all, so finalize does the work): the held-back indexes and foreign keys added once, AUTO_INCREMENT counters and
sequences as the backup had them, the triggers, views, routines and events made by the objects owner (events
disabled unless asked), each table's check kept for verify, the restore's state and ledger gone; add_indexes and
objects re-runnable; index_names and auto_increments on no database ask nothing."""
from __future__ import annotations

import pytest

from lastline.core import accounts
from lastline.core.servers import Server
from lastline.core.sql import META_DB, table_exists
from lastline.logical.format.dialect import qualified, quote_ident
from lastline.logical.format.schema import read_schema
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

from .conftest import CHILD, DB, EMPTY, EVENT, PARENT, PROC, SEQ, TRIGGER, VIEW, drop, fresh_target, root


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


def test_objects_made_in_turn_each_keep_the_context_they_were_created_in(loaded, logical_target, monkeypatch):
    """objects() makes a run of objects on one session while their client character set stays the same, across
    databases, and ends a session after each event: each object still gets its own sql_mode, collation and time zone,
    and one whose schema.json records none gets a fresh session's, never the object's before it."""
    plan, _backup = loaded
    db, db2 = "unit ctx.d`b", "unit ctx 2"
    admin, owner = root(logical_target), target_server(plan)
    drop(logical_target, db, db2)
    made = [  # (database, name, client charset, collation, sql_mode): in the order the schema lists them
        (db, "r1", "utf8mb4", "utf8mb4_unicode_ci", "ANSI_QUOTES"),
        (db, "r2", "utf8mb4", None, ""),  # no collation recorded: a fresh session's
        (db, "r3", "latin1", "latin1_bin", "PIPES_AS_CONCAT"),
        (db, "r4", "utf8mb4", "utf8mb4_bin", "NO_BACKSLASH_ESCAPES"),
        (db2, "r5", "utf8mb4", "utf8mb4_general_ci", "ONLY_FULL_GROUP_BY"),  # the same session, another database
    ]
    try:
        for name in (db, db2):
            admin.query(f"CREATE DATABASE {quote_ident(name)}")
        for schema_name, name, charset, collation, mode in made:
            with admin.session(database=schema_name, charset=charset) as cur:
                cur.execute("SET SESSION collation_connection = %s, sql_mode = %s", (collation or "utf8mb4_general_ci", mode))
                cur.execute(f"CREATE PROCEDURE {quote_ident(name)}() SELECT 'a' || 'b'")
        for name, zone in (("e1", "+05:00"), ("e2", None)):  # e2: no time zone recorded
            with admin.session(database=db) as cur:
                cur.execute("SET SESSION time_zone = %s", (zone or "+03:00",))
                cur.execute(f"CREATE EVENT {quote_ident(name)} ON SCHEDULE EVERY 1 DAY DO SELECT 1")
        with admin.session() as cur:
            schema = read_schema(cur, [db, db2])
        for obj in schema["routines"] + schema["events"]:
            if obj["name"] == "r2":
                del obj["collation_connection"]
            if obj["name"] == "e2":
                del obj["time_zone"]
        with owner.session(charset="utf8mb4") as cur:  # what a fresh session has
            cur.execute("SELECT @@session.collation_connection, @@session.time_zone")
            fresh_collation, fresh_zone = cur.fetchone()
        for schema_name, name, *_ in made:
            admin.query(f"DROP PROCEDURE {qualified(schema_name, name)}")
        opened, session = [], Server.session

        def counted(self, *args, **kwargs):
            opened.append((self.user, kwargs.get("charset")))
            return session(self, *args, **kwargs)

        monkeypatch.setattr(Server, "session", counted)
        objects(owner, schema, [db, db2])
        monkeypatch.undo()

        routines = {r[0]: r[1:] for r in admin.query(
            "SELECT ROUTINE_NAME, ROUTINE_SCHEMA, CHARACTER_SET_CLIENT, COLLATION_CONNECTION, SQL_MODE "
            "FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA IN (%s, %s)", (db, db2))}
        assert routines == {name: (schema_name, charset, collation or fresh_collation, mode)
                            for schema_name, name, charset, collation, mode in made}
        events = dict(admin.query("SELECT EVENT_NAME, TIME_ZONE FROM information_schema.EVENTS WHERE EVENT_SCHEMA = %s", (db,)))
        assert events == {"e1": "+05:00", "e2": fresh_zone}
        # the owner's sessions: r1, r2; r3 (latin1); r4, r5 and e1; e2 (after an event, a session of its own)
        assert [c for user, c in opened if user == accounts.owner_name([db, db2])] == ["utf8mb4", "latin1", "utf8mb4", "utf8mb4"]
    finally:
        drop(logical_target, db, db2)
        accounts.drop(owner, accounts.owner_name([db, db2]))
