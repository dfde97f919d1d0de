"""logical.restore.backup_files: which tables a restore selects; and with the tiny backup (conftest) on the suite's
logical target: the engines checked against the manifest, schema.json and the target (a missing or enforced engine
refused, naming the tables and the remedy), every chunk file present with its size, names that differ in case both
kept on a target that tells case apart, and the target reached as the admin or the run account."""
from __future__ import annotations

import dataclasses
import re
import shutil

import pytest

from lastline.backups import BackupRef, open_backup
from lastline.core.errors import ConfigError, IntegrityError, PreflightError
from lastline.core.sql import engine_name
from lastline.logical.restore.backup_files import (
    enforced_engine,
    refuse_names_one_by_case,
    require_chunk_files,
    require_engines,
    run_server,
    selected,
    target_server,
)
from lastline.logical.restore.target_state import ensure_ledger
from lastline.logical.restore.verify import ensure_checks
from lastline.manifest import LogicalManifest, LogicalTable

from .conftest import CHILD, DB, MYISAM, PARENT, conf, root


def _table(schema: str, name: str, engine: str = "InnoDB") -> LogicalTable:
    return LogicalTable(schema, name, engine, None, None, True, "primary key ranges", ["id"], [], 0, "", 0, 0, 0.0)


def _manifest(tables: list[LogicalTable]) -> LogicalManifest:
    return LogicalManifest("b1", "src", "11.4", "", "+00:00", "tsv", "zstd", 1000, 2, [], "schema.json", "", "", "", 0.0,
                           0.0, 0, 0, 0, 0.0, tables=tables)


ODD = [_table("a.b", "t"), _table("a", "b.t"), _table("c d", "e`f"), _table("x", "y")]


@pytest.mark.parametrize(("databases", "wanted"), [
    ([], []),
    (["a.b"], [("a.b", "t")]),
    (["a", "c d"], [("a", "b.t"), ("c d", "e`f")]),
    (["A.B", "nowhere"], []),
    (["x", "a.b", "x"], [("a.b", "t"), ("x", "y")]),
], ids=["no-database", "a-dot-is-part-of-the-name", "space-and-backtick", "case-and-absent-names", "manifest-order"])
def test_selected(databases, wanted):
    assert [(t.schema, t.name) for t in selected(_manifest(ODD), databases)] == wanted


def test_run_server_refuses_a_plan_without_a_run_account(restore_plan):
    plan = restore_plan()
    with pytest.raises(ConfigError, match=r"names no run account \(a plan from an older lastline\?\): re-run from preflight"):
        run_server(dataclasses.replace(plan, restore_account=""))
    with pytest.raises(ConfigError, match=r"'someone' is not a run account's name"):
        run_server(dataclasses.replace(plan, restore_account="someone"))


def test_the_target_as_its_admin_and_as_the_run_account(restore_plan, logical_target):
    plan = restore_plan()
    admin = target_server(plan)
    assert (admin.port, admin.user) == (logical_target.server().port, logical_target.server().user)
    with admin.session() as cur:
        ensure_ledger(cur)
        ensure_checks(cur)
    run = run_server(plan)
    assert run.user == plan.restore_account != admin.user
    (user,) = run.query("SELECT CURRENT_USER()")[0]
    assert user.split("@")[0] == plan.restore_account
    assert run_server(plan).user == run.user  # again: the same account


@pytest.fixture(scope="module")
def tiny(tiny_backup):
    """The tiny backup, opened."""
    return open_backup(BackupRef.parse(conf(tiny_backup)["backup"], "logical"))


def _named(manifest: LogicalManifest, **engines: str) -> dict[tuple[str, str], frozenset[str]]:
    """The engines the CREATEs name: the manifest's, but where `engines` (by table name) says otherwise."""
    return {(t.schema, t.name): frozenset({engines.get(t.name, engine_name(t.engine))} - {""}) for t in manifest.tables}


@pytest.fixture
def admin(logical_target):
    with logical_target.server().session() as cur:
        yield cur


def test_require_engines_passes_the_backups_own_engines_and_the_default_for_a_create_naming_none(tiny, admin, logical_target):
    manifest = tiny.logical
    require_engines(admin, manifest, [DB], _named(manifest), "the target")
    named = _named(manifest) | {(DB, PARENT): frozenset()}  # no ENGINE=: the target's default, InnoDB
    require_engines(admin, manifest, [DB], named, "the target")
    require_engines(admin, manifest, [], {}, "the target")  # nothing selected: nothing to check


@pytest.mark.parametrize(("engines", "message"), [
    ({PARENT: "ARIA"}, rf"the manifest and schema\.json disagree on the engine of 1 table\(s\): {re.escape(DB)}\.pa\.rent "
                       r"\(InnoDB in the manifest, ARIA in schema\.json\)\. The backup folder was altered"),
    ({MYISAM: ""}, rf"disagree on the engine of 1 table\(s\): {re.escape(DB)}\.my isam \(MyISAM in the manifest, INNODB in "
                   r"schema\.json\)"),
    ({PARENT: "MYISAM", CHILD: "ARIA"}, r"disagree on the engine of 2 table\(s\): .*ch`ild.*; .*pa\.rent"),
], ids=["another-engine", "none-named-for-a-myisam-table", "two-tables"])
def test_require_engines_refuses_a_schema_that_names_another_engine_than_the_manifest(tiny, admin, engines, message):
    with pytest.raises(IntegrityError, match=message + r".*Nothing was touched"):
        require_engines(admin, tiny.logical, [DB], _named(tiny.logical, **engines), "the target")


def test_require_engines_names_the_engines_the_target_lacks_and_the_remedy(admin):
    tables = [_table("d b", f"t.{i}`", "NoSuch") for i in range(7)] + [_table("d b", "h", "HEAP"), _table("d b", "ok")]
    manifest = _manifest(tables)
    named = {("d b", t.name): frozenset({engine_name(t.engine)}) for t in tables}
    with pytest.raises(PreflightError) as err:
        require_engines(admin, manifest, ["d b"], named, "the target")
    message = str(err.value)
    assert message.startswith("the target lacks the storage engine(s) of these tables: NOSUCH (7: d b.t.0`, d b.t.1`, "
                              "d b.t.2`, d b.t.3`, d b.t.4`, ...). Install them there first"), message
    assert "MEMORY" not in message and "Nothing was touched" in message  # HEAP is MEMORY, which the target has


def test_an_enforced_engine_refuses_every_other_engine(tiny, admin, logical_target):
    assert enforced_engine(admin) is None
    with root(logical_target).session() as cur:
        cur.execute("SET GLOBAL enforce_storage_engine = 'InnoDB'")
    try:
        with logical_target.server().session() as cur:
            assert enforced_engine(cur) == "INNODB"
            with pytest.raises(PreflightError, match=r"the target makes every table INNODB \(enforce_storage_engine\) and so "
                                                     rf"refuses the storage engine\(s\) of these tables: MYISAM \(1: "
                                                     rf"{re.escape(DB)}\.my isam\)\. Unset enforce_storage_engine there"):
                require_engines(cur, tiny.logical, [DB], _named(tiny.logical), "the target")
            innodb_only = [t for t in tiny.logical.tables if t.engine == "InnoDB"]
            require_engines(cur, dataclasses.replace(tiny.logical, tables=innodb_only), [DB],
                            {(t.schema, t.name): frozenset({"INNODB"}) for t in innodb_only}, "the target")
    finally:
        with root(logical_target).session() as cur:
            cur.execute("SET GLOBAL enforce_storage_engine = NULL")
    assert enforced_engine(admin) is None


def test_names_one_by_case_only_where_the_server_folds_them(admin):
    """The suite's target tells case apart (lower_case_table_names=0): `Users` and `users` are two tables there, and
    `_LASTLINE` is not lastline's own. (A target that folds case: tests/test_logical_restore.py, on its own server.)"""
    schema = {"tables": [{"schema": "Shop", "name": "Users"}, {"schema": "Shop", "name": "users"},
                         {"schema": "shop", "name": "users"}],
              "views": [{"schema": "Shop", "name": "USERS"}], "sequences": []}
    keys = refuse_names_one_by_case(admin, schema, ["Shop", "shop", "_LASTLINE"], "the target")
    assert not keys.folds and keys("Shop") == "Shop" and keys("_LASTLINE") == "_LASTLINE"
    assert not refuse_names_one_by_case(admin, {"tables": [], "views": [], "sequences": []}, [], "the target").folds


@pytest.fixture
def copy(tiny_backup, tmp_path):
    """A copy of the tiny backup's folder (its manifest untouched, so it still opens)."""
    dest = tmp_path / "copy"
    shutil.copytree(tiny_backup, dest)
    opened = open_backup(BackupRef.parse(conf(dest)["backup"], "logical"))
    return dest / opened.ref.backup_id, opened


def test_require_chunk_files_passes_a_whole_backup(copy):
    _folder, backup = copy
    require_chunk_files(backup.storage, backup.logical, [DB])
    require_chunk_files(backup.storage, backup.logical, [])


def test_require_chunk_files_names_every_missing_or_truncated_chunk(copy):
    folder, backup = copy
    parent = next(t for t in backup.logical.tables if t.name == PARENT)
    child = next(t for t in backup.logical.tables if t.name == CHILD)
    (folder / parent.chunks[1].file).unlink()
    cut = folder / child.chunks[0].file
    cut.write_bytes(cut.read_bytes()[:-1])
    with pytest.raises(IntegrityError) as err:
        require_chunk_files(backup.storage, backup.logical, [DB])
    message = str(err.value)
    assert message.startswith(f"2 chunk file(s) of backup {backup.ref.backup_id} are missing or truncated:"), message
    assert f"{parent.chunks[1].file} ({DB}.{PARENT}): missing" in message
    assert f"{child.chunks[0].file} ({DB}.{CHILD}): {child.chunks[0].bytes - 1} bytes, the manifest says {child.chunks[0].bytes}" in message
    assert message.endswith("Nothing was touched on the target; restore another backup.")
    require_chunk_files(backup.storage, backup.logical, ["another database"])  # the damaged chunks are not restored
