"""Least privilege on the target, on real servers: what a backup brings runs under an account that can touch
only the databases restored, so an attack that gets past the statement checks still gets "denied"; the
objects run as a locked owner, never as the backup's DEFINER; and a run's conf cannot widen what a run may do
(skip the approval, name a backup outside the deployment's roots).

The attacks here are written as someone who can write to backup storage would (every hash in the manifest
updated), and several run with the statement checks switched off, to prove the privilege line on its own."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import restore_steps, set_conn, tamper_schema
from lastline.core import accounts
from lastline.core.errors import ConfigError, IntegrityError, PreflightError
from lastline.logical.backup import stages as logical_backup
from lastline.logical.restore import create as restore_create  # prepare's CREATEs and the lanes'
from lastline.logical.restore import finalize as restore_finalize
from lastline.logical.restore import preflight as restore_preflight
from lastline.logical.restore import schema_checks
from lastline.logical.restore import stages as logical_restore
from lastline.logical.restore.target_state import aside_name

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def backup(logical_source, tmp_path_factory) -> Path:
    """store (triggers, views, routines with the loading account as DEFINER) and the edge corpus (MyISAM, Aria, sequences...)."""
    _commit(logical_source.server(), "CREATE DATABASE IF NOT EXISTS `lp_a_b`",  # `_` is a wildcard in GRANT: it must not reach lp_aXb
            "CREATE TABLE IF NOT EXISTS `lp_a_b`.t (id INT PRIMARY KEY, v VARCHAR(10))", "REPLACE INTO `lp_a_b`.t VALUES (1, 'one')")
    dest = tmp_path_factory.mktemp("least-privilege")
    logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["store", "edge", "lp_a_b"]}))
    return dest


@pytest.fixture
def victims(logical_target):
    """What a restore of these databases must never reach: another database's secret, and a look-alike of a
    restored database's name that a wildcard would match."""
    server = logical_target.server()
    _commit(server, "CREATE DATABASE IF NOT EXISTS lp_other", "CREATE TABLE IF NOT EXISTS lp_other.secret (id INT PRIMARY KEY, card VARCHAR(20))",
            "REPLACE INTO lp_other.secret VALUES (1, '4111111111111111')", "CREATE DATABASE IF NOT EXISTS lp_aXb",
            "CREATE TABLE IF NOT EXISTS lp_aXb.t (id INT PRIMARY KEY)", "REPLACE INTO lp_aXb.t VALUES (7)")
    yield server
    assert server.query("SELECT * FROM lp_other.secret") == [(1, "4111111111111111")]
    assert server.query("SELECT * FROM lp_aXb.t") == [(7,)]
    assert server.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA IN ('lp_other', 'lp_aXb')")[0][0] == 2
    # what the attacks left half-restored, set aside or resumable goes: the next test restores anew
    _commit(server, "DROP DATABASE IF EXISTS lp_a_b", f"DROP DATABASE IF EXISTS `{aside_name('lp_a_b')}`")
    if server.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '_lastline' AND TABLE_NAME = 'restore_state'")[0][0]:
        _commit(server, "DELETE FROM _lastline.restore_state WHERE dbs LIKE '%lp\\_a\\_b%'")


def _commit(server, *statements: str) -> None:
    conn = server.connect()
    try:
        for sql in statements:
            conn.cursor().execute(sql)
        conn.commit()
    finally:
        conn.close()


def _conf(dest: Path, **kw) -> dict:
    return {"target_conn_id": "t_ltarget", "backup": f"file://{dest}/latest", "databases": ["store", "edge", "lp_a_b"],
            "force": True, "parallel": 2, "tune": True, "redo_log_bytes": 128 << 20, **kw}


def _grants(server, user: str) -> list[str]:
    host = server.query("SELECT Host FROM mysql.user WHERE User = %s", (user,))[0][0]
    return [r[0] for r in server.query(f"SHOW GRANTS FOR {accounts.account_sql(user, host)}")]


def _general_log(server, on: bool) -> None:
    if on:
        server.query("SET GLOBAL log_output = 'TABLE'")
        server.query("TRUNCATE TABLE mysql.general_log")
    server.query(f"SET GLOBAL general_log = {'ON' if on else 'OFF'}")


def _who_ran(server, like: str) -> set[str]:
    """The accounts whose sessions ran statements LIKE `like` (from the general log), lastline's own bookkeeping
    (`_lastline`, the set-aside's `__lastline_objects`) left out."""
    rows = server.query("SELECT DISTINCT SUBSTRING_INDEX(user_host, '[', 1) FROM mysql.general_log WHERE command_type = 'Query' "
                        "AND CONVERT(argument USING utf8mb4) LIKE %s AND CONVERT(argument USING utf8mb4) NOT LIKE '%%\\_lastline%%'",
                        (like,))
    return {r[0].decode() if isinstance(r[0], bytes) else r[0] for r in rows}


def test_the_run_account_holds_only_the_restored_databases_runs_the_backup_and_is_dropped(backup, victims, logical_source):
    target = victims
    _general_log(target, True)
    try:
        plan = logical_restore.preflight(_conf(backup))
        run = plan.restore_account
        assert run.startswith("lastline_run_")
        snap = logical_restore.snapshot_config(plan, "lp-run")
        steps, lanes = logical_restore.prepare(plan)
        grants = _grants(target, run)
        text = "\n".join(grants)
        # the restored databases (their names escaped: `lp_a_b` matches no lp_aXb), lastline's two tables, the
        # session procedure, READ_ONLY ADMIN: nothing else; no FILE, SUPER, mysql.*, or another database
        assert "ON `lp\\_a\\_b`.*" in text and "ON `store`.*" in text and "ON `edge`.*" in text, text
        assert "ON `_lastline`.`ledger`" in text and "ON `_lastline`.`table_checks`" in text, text
        assert "EXECUTE ON PROCEDURE `_lastline`.`restore_session`" in text, text
        globally = [g for g in grants if " ON *.* " in g]
        assert len(globally) == 1 and globally[0].startswith("GRANT READ_ONLY ADMIN ON *.*"), globally
        for forbidden in ("FILE", "SUPER", "ALL PRIVILEGES", "`mysql`", "lp_other", "CREATE USER", "GRANT OPTION"):
            assert forbidden not in text, (forbidden, text)
        for lane in lanes:
            logical_restore.load_lane(plan, lane)
        logical_restore.finalize(plan)
        owner = accounts.owner_name(plan.databases)
        reverted = logical_restore.revert(plan)
        logical_restore.verify(plan, snap)
    finally:
        _general_log(target, False)
    assert reverted.run_account_dropped is True
    assert not target.query("SELECT User FROM mysql.user WHERE User = %s", (run,))  # gone after the run
    # every statement that came from the backup ran under the run account (its objects under their owner)
    for like in ("CREATE TABLE%", "LOAD DATA LOCAL INFILE%", "ALTER TABLE % ADD %", "ANALYZE TABLE%"):
        assert _who_ran(target, like) == {run}, (like, _who_ran(target, like))
    for like in ("CREATE TRIGGER%", "CREATE %VIEW%", "CREATE %PROCEDURE%", "CREATE %FUNCTION%"):
        assert _who_ran(target, like) == {owner}, (like, _who_ran(target, like))
    # the objects run as the owner, not as the backup's root, and it cannot log in; it reaches these databases only
    definers = {r[0] for r in target.query("SELECT DEFINER FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'store' "
                                           "UNION SELECT DEFINER FROM information_schema.VIEWS WHERE TABLE_SCHEMA = 'store' "
                                           "UNION SELECT DEFINER FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'store'")}
    assert len(definers) == 1 and next(iter(definers)).startswith(owner + "@"), definers
    assert "ACCOUNT LOCK" in target.query(f"SHOW CREATE USER {accounts.account_sql(owner, next(iter(definers)).split('@')[1])}")[0][0]
    owner_text = "\n".join(_grants(target, owner))
    assert "lp_other" not in owner_text and "SUPER" not in owner_text and "restore_session" not in owner_text
    # and the objects work: a trigger fires as its (locked) owner, a view and a routine answer
    _commit(target, "INSERT INTO store.film (film_id, title, language_id) VALUES (30000, 'LP', 1)")
    assert target.query("SELECT title FROM store.film_text WHERE film_id = 30000") == [("LP",)]  # written by ins_film
    _commit(target, "DELETE FROM store.film WHERE film_id = 30000")
    assert target.query("SELECT COUNT(*) FROM store.actor_info")[0][0] == 200
    assert target.query("SELECT store.inventory_in_stock(1)")[0][0] in (0, 1)
    assert target.query("SELECT * FROM lp_a_b.t") == [(1, "one")]


def _lines_split(create: str, keep_indexes: bool = False) -> tuple[str, list[str], list[str]]:
    """The held-back definitions cut as an earlier lastline cut them: line by line, unchecked (every index held back:
    the attacks take the ALTER path)."""
    keep, indexes, fks = [], [], []
    for line in create.split("\n"):
        m = re.match(r"^\s*(UNIQUE KEY|KEY|FULLTEXT KEY|SPATIAL KEY|CONSTRAINT\s+`(?:[^`]|``)*`\s+FOREIGN KEY)\b", line)
        if m:
            (fks if "FOREIGN KEY" in m.group(1) else indexes).append(line.strip().rstrip(","))
        else:
            keep.append(line)
    for i in range(len(keep) - 1, 0, -1):
        if keep[i].startswith(")"):
            keep[i - 1] = keep[i - 1].rstrip().rstrip(",")
            break
    return "\n".join(keep), indexes, fks


def _without_checks(monkeypatch) -> None:
    """Switch the statement checks off (as if an attack got past them): only privilege stands."""
    monkeypatch.setattr(restore_preflight, "validate_schema", lambda *a, **k: {})
    monkeypatch.setattr(restore_preflight, "require_engines", lambda *a, **k: None)  # the engines' allow-list and their agreement
    passthrough = lambda kind, obj, *a, **k: obj["create"]  # noqa: E731
    for module in (restore_create, restore_finalize, schema_checks):
        monkeypatch.setattr(module, "checked_create", passthrough)
    for module in (restore_create, restore_finalize):
        monkeypatch.setattr(module, "split_deferred", _lines_split)
    monkeypatch.setattr(restore_create, "INLINE_INDEXES_BELOW", 0)  # no table keeps its index lines in its CREATE


def _restore(plan: dict) -> None:
    restore_steps(plan, "lp-attack")


def _table(schema: dict, name: str) -> dict:
    return next(t for t in schema["tables"] if t["schema"] == "lp_a_b" and t["name"] == name)


@pytest.mark.parametrize("attack", ["select-other-databases", "merge-union", "rename-in-index-line", "view-reads-mysql"])
def test_with_the_statement_checks_off_privilege_alone_refuses_the_review_s_attacks(backup, victims, tmp_path, monkeypatch, attack):
    def change(schema: dict) -> None:
        t = _table(schema, "t")
        if attack == "select-other-databases":  # the review's hidden SELECT: account hashes and another database's cards
            t["create"] = (t["create"] + " /* ' */ SELECT CONCAT(User, Password) AS v, 1 AS id FROM mysql.user "
                           "UNION ALL SELECT card, id FROM lp_other.secret /* ' */")
        elif attack == "merge-union":
            t["create"] = "CREATE TABLE `t` (`id` int(11) NOT NULL, `card` varchar(20)) ENGINE=MRG_MyISAM UNION=(`lp_other`.`secret`)"
        elif attack == "rename-in-index-line":
            t["create"] = t["create"].replace("PRIMARY KEY (`id`)", "PRIMARY KEY (`id`),\n  KEY `k` (`v`), RENAME TO `lp_other`.`planted`")
        else:
            schema["views"].append({"schema": "lp_a_b", "name": "loot", "create": "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` "
                                    "SQL SECURITY DEFINER VIEW `loot` AS SELECT `User`, `Password` FROM `mysql`.`user`",
                                    "character_set_client": "utf8mb4", "collation_connection": "utf8mb4_general_ci"})

    copy = tamper_schema(backup, tmp_path / "copy", change)
    _without_checks(monkeypatch)
    plan = logical_restore.preflight(_conf(copy, databases=["lp_a_b"]))
    with pytest.raises(Exception) as err:
        _restore(plan)
    assert "denied" in str(err.value) or getattr(err.value, "args", (0,))[0] in (1142, 1044, 1227), repr(err.value)
    target = victims
    assert not target.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_NAME = 'planted'")[0][0]
    for db, table in (("lp_a_b", "t"), ("lp_a_b", "loot")):  # none of mysql.user's or lp_other's rows arrived anywhere
        if target.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (db, table))[0][0]:
            dump = str(target.query(f"SELECT * FROM `{db}`.`{table}`"))
            assert "4111111111111111" not in dump and "*" not in dump, dump
    assert not target.query("SELECT User FROM mysql.user WHERE User = %s", (plan.restore_account,))  # dropped by revert


def test_a_backup_s_definer_is_never_used_and_events_come_back_disabled(backup, victims, tmp_path, logical_source):
    def change(schema: dict) -> None:
        schema["triggers"].append({"schema": "lp_a_b", "name": "tr", "table": "t", "sql_mode": "", "create":
                                   "CREATE DEFINER=`root`@`localhost` TRIGGER `tr` BEFORE INSERT ON `t` FOR EACH ROW SET NEW.v = 'trig'",
                                   "character_set_client": "utf8mb4", "collation_connection": "utf8mb4_general_ci",
                                   "database_collation": "utf8mb4_general_ci"})
        schema["events"].append({"schema": "lp_a_b", "name": "ev", "sql_mode": "", "time_zone": "SYSTEM", "create":
                                 "CREATE DEFINER=`root`@`localhost` EVENT `ev` ON SCHEDULE EVERY 1 DAY ON COMPLETION PRESERVE "
                                 "ENABLE DO DELETE FROM `lp_a_b`.`t`", "character_set_client": "utf8mb4",
                                 "collation_connection": "utf8mb4_general_ci", "database_collation": "utf8mb4_general_ci"})

    copy = tamper_schema(backup, tmp_path / "copy", change)
    plan = logical_restore.preflight(_conf(copy, databases=["lp_a_b"]))
    _restore(plan)
    target = victims
    owner = accounts.owner_name(["lp_a_b"])
    trig = target.query("SELECT DEFINER FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'lp_a_b' AND TRIGGER_NAME = 'tr'")
    ev = target.query("SELECT DEFINER, STATUS FROM information_schema.EVENTS WHERE EVENT_SCHEMA = 'lp_a_b' AND EVENT_NAME = 'ev'")
    assert trig[0][0].startswith(owner + "@") and ev[0][0].startswith(owner + "@") and ev[0][1] == "DISABLED", (trig, ev)
    _commit(target, "INSERT INTO lp_a_b.t VALUES (2, 'x')")  # the trigger fires, as its (locked) owner
    assert target.query("SELECT v FROM lp_a_b.t WHERE id = 2") == [("trig",)]
    plan = logical_restore.preflight(_conf(copy, databases=["lp_a_b"], enable_events=True))  # asked for: enabled
    _restore(plan)
    assert target.query("SELECT STATUS FROM information_schema.EVENTS WHERE EVENT_NAME = 'ev'")[0][0] == "ENABLED"
    target.query("DROP DATABASE lp_a_b")


def test_a_run_s_conf_cannot_skip_the_approval(backup, victims, logical_target, monkeypatch):
    """`approval: false` in a run's conf is ignored: the deployment (LASTLINE_APPROVAL) or the target's
    connection decides; staging and drill servers are replaced by design and never ask."""
    monkeypatch.setenv("LASTLINE_APPROVAL", "true")
    if victims.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '_lastline' AND TABLE_NAME = 'restore_state'")[0][0]:
        _commit(victims, "DELETE FROM _lastline.restore_state WHERE dbs LIKE '%lp\\_a\\_b%'")  # not a resume: a new restore
    _commit(victims, "CREATE DATABASE IF NOT EXISTS lp_a_b", "CREATE TABLE IF NOT EXISTS lp_a_b.t (id INT PRIMARY KEY, v VARCHAR(10))")
    plan = logical_restore.preflight(_conf(backup, databases=["lp_a_b"], approval=False))
    assert plan.at_risk and plan.at_risk["databases"] == ["lp_a_b"]  # a person is asked all the same
    set_conn("t_lp_no_ask", logical_target, approval=False)  # the connection (a deployment setting) may say no
    assert logical_restore.preflight(_conf(backup, databases=["lp_a_b"], target_conn_id="t_lp_no_ask")).at_risk is None
    set_conn("t_lp_drill", logical_target, role="drill")
    assert logical_restore.preflight(_conf(backup, databases=["lp_a_b"], target_conn_id="t_lp_drill"), role="drill").at_risk is None
    monkeypatch.setenv("LASTLINE_APPROVAL", "false")
    set_conn("t_lp_ask", logical_target, approval=True)
    assert logical_restore.preflight(_conf(backup, databases=["lp_a_b"], target_conn_id="t_lp_ask")).at_risk


def test_a_staging_or_drill_server_takes_only_its_own_dag(backup, victims, logical_target):
    """A plain restore (no approval asked: staging is replaced by design) into a staging server would hand its
    readers production's data unmasked: refused, whatever the conf says; the staging refresh's own restore
    (role given by its DAG, not by the conf) and the plain restore of a plain server pass."""
    from lastline.core.errors import ProtectedTargetError

    set_conn("t_lp_staging", logical_target, role="staging")
    for role, conn_id in ((None, "t_lp_staging"), ("drill", "t_lp_staging"), (None, "t_lp_drill2"), ("staging", "t_lp_plain")):
        set_conn("t_lp_drill2", logical_target, role="drill")
        set_conn("t_lp_plain", logical_target)
        with pytest.raises(ProtectedTargetError, match="Nothing was touched"):
            logical_restore.preflight(_conf(backup, databases=["lp_a_b"], target_conn_id=conn_id, role="staging"), role=role)
    assert logical_restore.preflight(_conf(backup, databases=["lp_a_b"], target_conn_id="t_lp_staging", force=True), role="staging")


def test_backups_outside_the_deployment_s_roots_are_refused(backup, victims, tmp_path, monkeypatch):
    root = tmp_path / "allowed"
    (root / "backups").mkdir(parents=True)
    shutil.copytree(backup, root / "backups" / "set")
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", f"file://{root}/backups, s3://only-this-bucket/lastline")
    assert logical_restore.preflight(_conf(root / "backups" / "set", databases=["lp_a_b"])).backup.backup_id  # inside: fine
    (root / "backups" / "out").symlink_to(backup)  # inside by name, outside by what it is
    shutil.copytree(backup, tmp_path / "allowed" / "backups-old")
    for where in (backup, tmp_path / "allowed" / "backups-old", root / "backups" / "out"):
        with pytest.raises(ConfigError, match="outside the storage this deployment allows"):
            logical_restore.preflight(_conf(where, databases=["lp_a_b"]))
    with pytest.raises(ConfigError, match="with `..` in it"):
        logical_restore.preflight({**_conf(backup), "backup": f"file://{root}/backups/../../x/latest"})
    from lastline.storage import require_allowed

    require_allowed("s3://only-this-bucket/lastline/nightly", "destination")
    for url in ("s3://other-bucket/lastline", "s3://only-this-bucket/lastline-x", "ssh://host/backups"):
        with pytest.raises(ConfigError):
            require_allowed(url, "destination")
    # a backup DAG's destination is held to the same roots (nothing is written outside them)
    with pytest.raises(ConfigError, match="outside the storage"):
        logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{tmp_path}/anywhere", "databases": ["lp_a_b"]})
    monkeypatch.delenv("LASTLINE_BACKUP_ROOTS")
    monkeypatch.setenv("LASTLINE_DESTINATION", f"file://{root}/backups")  # unset roots: the one destination
    with pytest.raises(ConfigError, match="outside the storage"):
        logical_restore.preflight(_conf(backup, databases=["lp_a_b"]))


def test_restored_code_runs_as_its_owner_never_as_whoever_calls_it(backup, victims, tmp_path):
    """The second review's: an INVOKER function, evaluated by the admin account (verify read a view over it)
    ran as the admin. Restored views and routines are SQL SECURITY DEFINER (the owner), and verify reads base
    tables only."""
    def change(schema: dict) -> None:
        schema["routines"].append({"schema": "lp_a_b", "name": "f", "type": "FUNCTION", "sql_mode": "", "create":
                                   "CREATE DEFINER=`root`@`localhost` FUNCTION `f`() RETURNS int(11)\n    SQL SECURITY INVOKER\n"
                                   "RETURN (SELECT COUNT(*) FROM mysql.user)", "character_set_client": "utf8mb4",
                                   "collation_connection": "utf8mb4_general_ci", "database_collation": "utf8mb4_general_ci"})
        schema["views"].append({"schema": "lp_a_b", "name": "v", "create": "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` "
                                "SQL SECURITY INVOKER VIEW `v` AS select `t`.`id` AS `id` from `t`",
                                "character_set_client": "utf8mb4", "collation_connection": "utf8mb4_general_ci"})

    copy = tamper_schema(backup, tmp_path / "copy", change)
    plan = logical_restore.preflight(_conf(copy, databases=["lp_a_b"]))
    _restore(plan)
    target = victims
    assert target.query("SELECT SECURITY_TYPE FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'lp_a_b'") == [("DEFINER",)]
    assert target.query("SELECT SECURITY_TYPE FROM information_schema.VIEWS WHERE TABLE_SCHEMA = 'lp_a_b'") == [("DEFINER",)]
    with pytest.raises(Exception, match="denied"):  # called by the admin, it runs as the owner: mysql.user is out of reach
        target.query("SELECT lp_a_b.f()")
    # a name the manifest calls a table but that is a view on the target is never read by the admin account
    _commit(target, "RENAME TABLE lp_a_b.t TO lp_a_b.t_was", "CREATE VIEW lp_a_b.t AS SELECT * FROM lp_a_b.t_was")
    with pytest.raises(IntegrityError, match=r"lp_a_b.t: is view on the target, not a table"):
        logical_restore.verify(plan, None)


def test_a_backup_changed_after_preflight_is_not_read_again(backup, victims, tmp_path):
    """Every task re-reads the backup; one rewritten between them (the review retried finalize on another
    schema.json) is refused: the plan pins the manifest preflight checked, and the manifest pins the rest."""
    copy = tmp_path / "copy"
    shutil.copytree(backup, copy)
    plan = logical_restore.preflight(_conf(copy, databases=["lp_a_b"]))
    (folder,) = [p for p in copy.iterdir() if p.is_dir()]
    tamper_schema(copy, tmp_path / "evil", lambda s: s["views"].append({}))  # a valid-looking new manifest...
    (evil,) = [p for p in (tmp_path / "evil").iterdir() if p.is_dir()]
    for name in ("manifest.json", "schema.json"):  # ...swapped in after preflight
        shutil.copy(evil / name, folder / name)
    with pytest.raises(IntegrityError, match="changed after this run's preflight checked it"):
        logical_restore.create_schema(plan)


def test_system_lastline_and_set_aside_databases_are_never_restored(backup, victims, tmp_path, logical_source):
    for name in ("mysql", "_lastline", aside_name("lp_a_b"), "MYSQL", "_LastLine"):  # case: lower_case_table_names=1
        with pytest.raises(PreflightError, match="are never restored"):
            logical_restore.preflight(_conf(backup, databases=[name]))  # named by a run's conf
        copy = tamper_schema(backup, tmp_path / name, lambda s: None)  # or renamed in a backup
        (folder,) = [p for p in copy.iterdir() if p.is_dir()]
        manifest = json.loads((folder / "manifest.json").read_text())
        for d in manifest["databases"]:
            d["name"] = name if d["name"] == "lp_a_b" else d["name"]
        for t in manifest["tables"]:
            t["schema"] = name if t["schema"] == "lp_a_b" else t["schema"]
        (folder / "manifest.json").write_text(json.dumps(manifest))
        assert name not in logical_restore.preflight(_conf(copy, databases=[])).databases  # left out by default
        with pytest.raises(PreflightError, match="are never restored"):
            logical_restore.preflight(_conf(copy, databases=[name]))  # and refused by name
    # and a logical backup says, rather than leaving out, that it does not carry a system-versioned table
    _commit(logical_source.server(), "CREATE DATABASE IF NOT EXISTS lp_versioned",
            "CREATE TABLE IF NOT EXISTS lp_versioned.t (id INT PRIMARY KEY) WITH SYSTEM VERSIONING")
    try:
        with pytest.raises(PreflightError, match="system-versioned table.*lp_versioned.t"):
            logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{tmp_path}/b", "databases": ["lp_versioned"]})
    finally:
        _commit(logical_source.server(), "DROP DATABASE lp_versioned")


def test_the_accounts_table_holds_no_password(victims):
    """The review's: `_lastline.accounts` kept the passwords in clear, readable by any account with global SELECT
    (monitoring, analysts), which then logged in as the run account. It keeps a nonce; the password is derived
    on the worker under the admin's password."""
    admin = victims
    user = accounts.run_account_name()
    _commit(admin, "CREATE DATABASE IF NOT EXISTS lp_a_b")
    try:
        as_run = accounts.run_account(admin, user, ["lp_a_b"])
        stored = admin.query("SELECT secret FROM _lastline.accounts WHERE user = %s", (user,))[0][0]
        stored = stored.decode() if isinstance(stored, bytes) else stored
        assert stored != as_run.password and stored not in as_run.password
        assert as_run.query("SELECT CURRENT_USER()")[0][0].startswith(user)  # the derived one logs in
        with pytest.raises(Exception, match="Access denied"):
            dataclasses.replace(as_run, password=stored).query("SELECT 1")  # what the table holds does not
    finally:
        accounts.drop(admin, user)


def test_a_database_restored_anew_leaves_no_older_owner_with_a_reach_into_it(backup, victims, tmp_path):
    """The review's: a trigger restored with [edge, lp_a_b] (one owner for both) kept writing into lp_a_b
    after lp_a_b alone was restored anew, clean. The new owner takes the database; the old one loses it; and an
    owner, locked, keeps no READ_ONLY ADMIN to write past read_only."""
    def change(schema: dict) -> None:
        schema["triggers"].append({"schema": "edge", "name": "reach", "table": "empty_t", "sql_mode": "", "create":
                                   "CREATE DEFINER=`root`@`localhost` TRIGGER `reach` AFTER INSERT ON `empty_t` FOR EACH ROW "
                                   "UPDATE `lp_a_b`.`t` SET `v` = 'reached'", "character_set_client": "utf8mb4",
                                   "collation_connection": "utf8mb4_general_ci", "database_collation": "utf8mb4_general_ci"})

    copy = tamper_schema(backup, tmp_path / "copy", change)
    _restore(logical_restore.preflight(_conf(copy, databases=["edge", "lp_a_b"])))
    target = victims
    _commit(target, "INSERT INTO edge.empty_t VALUES (1)")
    assert target.query("SELECT v FROM lp_a_b.t") == [("reached",)]  # both were restored together: it may
    _restore(logical_restore.preflight(_conf(backup, databases=["lp_a_b"])))  # lp_a_b anew, alone, from a clean backup
    with pytest.raises(Exception, match="denied"):
        _commit(target, "INSERT INTO edge.empty_t VALUES (2)")
    assert target.query("SELECT v FROM lp_a_b.t") == [("one",)]
    for owner in (accounts.owner_name(["edge", "lp_a_b"]), accounts.owner_name(["lp_a_b"])):
        text = "\n".join(_grants(target, owner))
        assert "READ_ONLY ADMIN" not in text and "restore_session" not in text, text
    _commit(target, "DELETE FROM edge.empty_t", "DROP TRIGGER edge.reach")
