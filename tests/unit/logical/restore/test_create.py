"""logical.restore.create: a table's CREATE as the restore runs it (indexes held back with defer_indexes unless the
table is small, foreign keys always), the refusal a failed CREATE becomes; and with the tiny backup (conftest) on the
suite's logical target: create_schema makes the databases and sequences (the tables too without defer_indexes), a
re-run resumes, a plan that disagrees with the run it resumes is refused, force sets the old tables aside, and a
lane's TableMaker makes a table once."""
from __future__ import annotations

import dataclasses
import re

import pytest

from lastline.backups import BackupRef, open_backup
from lastline.core.errors import IntegrityError, ProtectedTargetError, Refusal
from lastline.logical.format.dialect import qualified, quote_ident
from lastline.logical.restore.backup_files import run_server
from lastline.logical.restore.create import (
    INLINE_INDEXES_BELOW,
    TableMaker,
    create_schema,
    creates_in_lanes,
    if_not_exists,
    refused_create,
    table_create,
    table_creates,
)
from lastline.logical.restore.plans import RestorePlan
from lastline.logical.restore.target_state import STATE, aside_name, dbs_key

from .conftest import CHILD, DB, EMPTY, MYISAM, PARENT, SEQ, afresh, conf, root


@pytest.fixture(scope="module")
def tiny(tiny_backup):
    return open_backup(BackupRef.parse(conf(tiny_backup)["backup"], "logical"))


def _plan(**kw) -> RestorePlan:
    return RestorePlan("t_ltarget", BackupRef("file:///b", "b1", "logical"), [DB], **kw)


@pytest.mark.parametrize("defer", [True, False], ids=["deferred", "not-deferred"])
def test_creates_in_lanes_with_defer_indexes(defer):
    assert creates_in_lanes(_plan(defer_indexes=defer)) is defer


@pytest.mark.parametrize(("create", "made"), [
    ("CREATE TABLE `t` (a INT)", "CREATE TABLE IF NOT EXISTS `t` (a INT)"),
    ("CREATE TABLE `a``CREATE TABLE b` (a INT) COMMENT='CREATE TABLE c'",
     "CREATE TABLE IF NOT EXISTS `a``CREATE TABLE b` (a INT) COMMENT='CREATE TABLE c'"),
    ("", ""),
], ids=["plain", "only-the-first-words", "empty"])
def test_if_not_exists(create, made):
    assert if_not_exists(create) == made


def _error(code: int, message: str) -> Exception:
    import MySQLdb

    return MySQLdb.OperationalError(code, message)


@pytest.mark.parametrize(("exc", "said"), [
    (_error(1060, "Duplicate column name 'a'"), "the target refused to create d b.t`x: Duplicate column name 'a' (1060). "
     "The tables and chunks loaded so far stay, recorded in the ledger"),
    (_error(1286, "Unknown storage engine 'ARCHIVE'"), "Unknown storage engine 'ARCHIVE' (1286). The tables"),
    (_error(1118, "Row size too large"), "Row size too large (1118) (the source made this table with innodb_strict_mode off"),
    (_error(2013, "Lost connection to server during query"), None),
    (_error(1205, "Lock wait timeout exceeded"), None),
    (_error(1213, "Deadlock found"), None),
    (ProtectedTargetError("protected"), None),
    (RuntimeError("no code"), None),
], ids=["duplicate-column", "missing-engine", "row-size-names-the-setting", "lost-connection-may-pass",
        "lock-wait-may-pass", "deadlock-may-pass", "lastlines-own-error-stands", "no-server-error"])
def test_refused_create(exc, said):
    refusal = refused_create("d b", "t`x", exc)
    if said is None:
        assert refusal is None
    else:
        assert isinstance(refusal, Refusal) and said in str(refusal)
        assert str(refusal).endswith("re-run the restore of this backup without force: it resumes after them.")


def _schema_table(tiny, name: str) -> dict:
    return next(t for t in tiny.schema["tables"] if t["name"] == name)


@pytest.mark.parametrize(("defer", "raw", "keys", "fk"), [
    (False, 1 << 30, ["k par"], True),
    (True, INLINE_INDEXES_BELOW - 1, ["k par"], False),
    (True, INLINE_INDEXES_BELOW, [], False),
], ids=["not-deferred-carries-everything", "small-keeps-its-indexes", "big-waits-for-its-rows"])
def test_table_create(tiny, defer, raw, keys, fk):
    create = table_create(_plan(defer_indexes=defer), _schema_table(tiny, CHILD), raw)
    assert create.startswith("CREATE TABLE `ch``ild` (") and "PRIMARY KEY (`id`)" in create
    assert [k for k in ["k par"] if f"KEY `{k}`" in create] == keys
    assert ("FOREIGN KEY" in create) is fk


@pytest.mark.parametrize("tail", ["; DROP DATABASE mysql", " SELECT 1"], ids=["a-second-statement", "trailing-words"])
def test_table_create_refuses_a_create_that_is_not_just_the_table(tiny, tail):
    t = _schema_table(tiny, CHILD)
    with pytest.raises(IntegrityError, match=re.escape(f"table {DB}.{CHILD}")):
        table_create(_plan(), {**t, "create": t["create"] + tail}, 0)


def test_table_creates_are_checked_when_a_lane_asks_and_only_with_defer_indexes(tiny):
    assert table_creates(_plan(defer_indexes=False), tiny.logical, tiny.schema) is None
    create = table_creates(_plan(), tiny.logical, tiny.schema)
    made = create(DB, PARENT)
    assert made.startswith("CREATE TABLE IF NOT EXISTS `pa.rent`") and "FULLTEXT" in made  # 2,500 rows: a small table
    assert create(DB, PARENT) is made  # checked once
    with pytest.raises(IntegrityError, match=rf"{re.escape(DB)}\.nowhere is in backup {tiny.logical.backup_id}'s manifest but "
                                             r"not in its schema\.json"):
        create(DB, "nowhere")
    with pytest.raises(IntegrityError):
        create("other", PARENT)


# --- on the logical target --------------------------------------------------------------------------------------------

def _kinds(target) -> dict[str, str]:
    return {n: k for n, k in target.server().query(
        "SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (DB,))}


def _state(target, plan: RestorePlan) -> list[tuple]:
    return target.server().query(f"SELECT defer_indexes, finished_at FROM {STATE} WHERE backup_id = %s AND dbs_key = %s",
                                 (plan.backup.backup_id, dbs_key(plan.databases)))


def test_create_schema_makes_databases_and_sequences_and_leaves_the_tables_to_the_lanes(restore_plan, logical_target, tiny):
    afresh(logical_target, tiny)
    plan = restore_plan()
    made = create_schema(plan)
    assert (made.tables, made.in_lanes) == (1, 4)  # the sequence; the 4 tables come with their first chunk
    assert _kinds(logical_target) == {SEQ: "SEQUENCE"}
    assert _state(logical_target, plan) == [(1, None)]
    again = create_schema(plan)  # a re-run resumes: the sequence made anew, nothing set aside
    assert (again.tables, again.in_lanes) == (1, 4) and _kinds(logical_target) == {SEQ: "SEQUENCE"}
    assert not logical_target.server().query("SHOW DATABASES LIKE %s", (aside_name(DB),))
    with pytest.raises(IntegrityError, match=r"this run's plan has defer_indexes=False, but the unfinished restore of "
                                             rf"{plan.backup.backup_id} it resumes created its tables with defer_indexes=True"):
        create_schema(dataclasses.replace(plan, defer_indexes=False))
    assert _kinds(logical_target) == {SEQ: "SEQUENCE"}


def test_create_schema_records_the_setting_a_state_of_an_older_lastline_lacks(restore_plan, logical_target, tiny):
    afresh(logical_target, tiny)
    plan = restore_plan()
    create_schema(plan)
    with logical_target.server().session() as cur:
        cur.execute(f"UPDATE {STATE} SET defer_indexes = NULL WHERE backup_id = %s", (plan.backup.backup_id,))
        cur.connection.commit()
    with pytest.raises(IntegrityError, match=r"can only be resumed safely with defer_indexes=True"):
        create_schema(dataclasses.replace(plan, defer_indexes=False))
    create_schema(plan)
    assert _state(logical_target, plan) == [(1, None)]


def test_without_defer_indexes_every_table_is_made_with_its_keys(restore_plan, logical_target, tiny):
    afresh(logical_target, tiny)
    plan = restore_plan(defer_indexes=False)
    made = create_schema(plan)
    assert (made.tables, made.in_lanes) == (5, 0)
    assert _kinds(logical_target) == {PARENT: "BASE TABLE", CHILD: "BASE TABLE", MYISAM: "BASE TABLE", EMPTY: "BASE TABLE",
                                      SEQ: "SEQUENCE"}
    (fks,) = logical_target.server().query("SELECT COUNT(*) FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_SCHEMA = %s "
                                           "AND CONSTRAINT_TYPE = 'FOREIGN KEY'", (DB,))[0]
    assert fks == 1
    assert create_schema(plan).tables == 5  # resumed: IF NOT EXISTS leaves them


def test_create_schema_refuses_tables_nobody_approved_and_force_sets_them_aside(restore_plan, logical_target, tiny):
    afresh(logical_target, tiny)
    plan = restore_plan()
    with root(logical_target).session() as cur:
        cur.execute(f"CREATE DATABASE {quote_ident(DB)}")
        cur.execute(f"CREATE TABLE {qualified(DB, 'written since')} (id INT)")
    with pytest.raises(Refusal, match=rf"database\(s\) {re.escape(DB)} hold tables now but were empty when the restore was "
                                      r"planned: nothing was replaced"):
        create_schema(dataclasses.replace(plan, force=False))
    assert _kinds(logical_target) == {"written since": "BASE TABLE"} and not _state(logical_target, plan)
    create_schema(plan)  # force: kept aside until verify
    assert _kinds(logical_target) == {SEQ: "SEQUENCE"}
    assert logical_target.server().query(f"SELECT COUNT(*) FROM {qualified(aside_name(DB), 'written since')}") == [(0,)]


def test_a_lanes_table_maker_makes_a_table_once_and_names_a_refused_one(restore_plan, logical_target, tiny):
    afresh(logical_target, tiny)
    plan = restore_plan()
    create_schema(plan)
    creates = table_creates(plan, tiny.logical, tiny.schema)
    maker = TableMaker(run_server(plan), creates)
    try:
        assert maker.make(DB, CHILD) is True
        assert maker.make(DB, CHILD) is False  # there already: IF NOT EXISTS made nothing
        assert maker.make(DB, EMPTY) is True
    finally:
        maker.close()
    maker.close()  # twice: no error
    assert set(_kinds(logical_target)) == {SEQ, CHILD, EMPTY}

    def duplicated(schema: str, name: str) -> str:
        return f"CREATE TABLE IF NOT EXISTS {qualified(schema, name)} (a INT, a INT)"

    maker = TableMaker(run_server(plan), duplicated)
    try:
        with pytest.raises(Refusal, match=rf"the target refused to create {re.escape(DB)}\.bad`one: Duplicate column name 'a' \(1060\)"):
            maker.make(DB, "bad`one")
    finally:
        maker.close()
