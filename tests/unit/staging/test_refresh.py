"""staging.refresh: the refresh's own stages on real servers: a logical backup of a small database on logical_source
(names with a space, a dot and a backtick; a UNIQUE email, a foreign key to it, a trigger), the shared logical_target
dressed as staging. The keys and foreign keys read from CREATE statements and why a rule cannot mask a column (pure);
the preflight's refusals, each with nothing touched (a target without the staging role, a protected one, the backup's
own source, system schemas, a database not in the backup, rules that name nothing or cannot apply, personal data
without a rule, no masking key) and the plan of one that passes; then mask, late_objects, open_target and report
over the database made on the target."""
from __future__ import annotations

import json
import os

import pytest

from conftest import set_conn
from lastline.core.errors import ConfigError, PreflightError, ProtectedTargetError
from lastline.core.sql import META_DB
from lastline.logical.backup import stages as logical_backup
from lastline.logical.format.dialect import Column
from lastline.staging import refresh
from lastline.staging.plans import Masked, MaskingVerified, Opened, StagingPlan
from lastline.staging.rules import Rule

from .bookkeeping import kept

DB = "unit refresh.db"
QDB = "`unit refresh.db`"
CUSTOMERS = "`cust omers`"
EMAIL, NAME, CUST = (f"{QDB}.`cust omers`.`e``mail`", f"{QDB}.`cust omers`.full_name", f"{QDB}.orders.cust")
RULES = {EMAIL: "email", NAME: "name", CUST: "email"}
N = 20
KEY_CONN = "t_unit_refresh_key"
RUN = "unit-refresh-run"

CREATE = (
    f"CREATE TABLE {QDB}.{CUSTOMERS} (id INT PRIMARY KEY, `e``mail` VARCHAR(120) NOT NULL, full_name VARCHAR(100) NOT NULL, "
    "code CHAR(8), UNIQUE KEY `e mail` (`e``mail`)) DEFAULT CHARSET=utf8mb4",
    f"CREATE TABLE {QDB}.orders (id INT PRIMARY KEY, cust VARCHAR(120) NOT NULL, amount INT, KEY c (cust), "
    f"CONSTRAINT `fk c` FOREIGN KEY (cust) REFERENCES {CUSTOMERS} (`e``mail`)) DEFAULT CHARSET=utf8mb4",
)


def _fill(cur) -> None:
    cur.executemany(f"INSERT INTO {QDB}.{CUSTOMERS} VALUES (%s, %s, %s, %s)",
                    [(i, f"person.{i}@mail{i % 3}.example.net", f"Person Number{i}", f"C{i:07d}") for i in range(1, N + 1)])
    cur.executemany(f"INSERT INTO {QDB}.orders VALUES (%s, %s, %s)",
                    [(i, f"person.{i % N + 1}@mail{(i % N + 1) % 3}.example.net", i) for i in range(1, 2 * N + 1)])


@pytest.fixture(scope="module")
def backup(logical_source, logical_target, tmp_path_factory):
    """The database on logical_source, one logical backup of it, and the connections of the cases."""
    server = logical_source.server()
    with server.session() as cur:
        cur.execute(f"CREATE DATABASE {QDB}")
        for sql in CREATE:
            cur.execute(sql)
        cur.execute(f"CREATE TRIGGER {QDB}.`orders bi` BEFORE INSERT ON {QDB}.orders FOR EACH ROW "
                    "SET NEW.amount = IFNULL(NEW.amount, 0)")
        _fill(cur)
        cur.connection.commit()
    names = {"t_unit_refresh_staging": dict(role="staging"), "t_unit_refresh_protected": dict(role="staging", protected=True)}
    for conn_id, extra in names.items():
        set_conn(conn_id, logical_target, **extra)
    set_conn("t_unit_refresh_source", logical_source, role="staging")  # the backup's own source, dressed as staging
    os.environ[f"AIRFLOW_CONN_{KEY_CONN.upper()}"] = json.dumps({"conn_type": "generic", "password": "unit key: s3cret"})
    dest = tmp_path_factory.mktemp("refresh-backups")
    plan = logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}",
                                     "databases": [DB], "parallel": 1})
    logical_backup.dump(plan)
    try:
        yield f"file://{dest}/{plan.backup_id}"
    finally:
        server.query(f"DROP DATABASE {QDB}")
        for conn_id in [*names, "t_unit_refresh_source", KEY_CONN]:
            os.environ.pop(f"AIRFLOW_CONN_{conn_id.upper()}", None)


def _conf(backup: str, **kw) -> dict:
    return {"target_conn_id": "t_unit_refresh_staging", "backup": backup, "databases": [], "masking_rules": None,
            "open_for_writes": True, "parallel": 2, "force": True, **kw}


@pytest.fixture
def staging(logical_target, monkeypatch):
    """The shared target, read_only as it was after the test; the masking key's connection named by the deployment."""
    monkeypatch.setenv("LASTLINE_MASKING_KEY_CONN_ID", KEY_CONN)
    server = logical_target.server()
    (before,), = server.query("SELECT @@GLOBAL.read_only")
    yield server
    server.query("SET GLOBAL read_only = %s", (before,))


@pytest.mark.parametrize(("create", "unique"), [
    pytest.param("CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  PRIMARY KEY (`id`)\n)", {"id"}, id="a-primary-key"),
    pytest.param("CREATE TABLE `t` (\n  `a` int,\n  `b``c` int,\n  `d` int,\n  PRIMARY KEY (`a`,`b``c`),\n  KEY `k` (`d`)\n)",
                 {"a", "b`c"}, id="a-composite-key-a-backtick-and-a-plain-key-left-out"),
    pytest.param("CREATE TABLE `t` (\n  `x.y z` int,\n  UNIQUE KEY `u 1` (`x.y z`)\n)", {"x.y z"}, id="a-unique-key-dots-and-spaces"),
    pytest.param("CREATE TABLE `t` (\n  `a` int,\n  UNIQUE KEY (`a`(10))\n)", {"a"}, id="an-unnamed-unique-prefix"),
    pytest.param("CREATE TABLE `t` (\n  `a` int\n)", set(), id="no-key"),
])
def test_unique_columns(create, unique):
    assert refresh.unique_columns(create) == unique


@pytest.mark.parametrize(("create", "fks"), [
    pytest.param("CREATE TABLE `o` (\n  `c` int,\n  CONSTRAINT `f` FOREIGN KEY (`c`) REFERENCES `p` (`id`)\n)",
                 [("f", [("db", "o", "c")], [("db", "p", "id")])], id="same-database"),
    pytest.param("CREATE TABLE `o``r` (\n  `a` int,\n  `b` int,\n  CONSTRAINT `f 2` FOREIGN KEY (`a`, `b`) REFERENCES "
                 "`other.db`.`p q` (`x``1`, `y`)\n)",
                 [("f 2", [("db", "o`r", "a"), ("db", "o`r", "b")], [("other.db", "p q", "x`1"), ("other.db", "p q", "y")])],
                 id="another-database-two-columns-odd-names"),
    pytest.param("CREATE TABLE `o` (\n  `c` int,\n  KEY `k` (`c`)\n)", [], id="none"),
])
def test_foreign_keys(create, fks):
    assert refresh.foreign_keys("db", create) == fks


def _col(column_type: str, nullable: bool = True, charset: str | None = "utf8mb4") -> Column:
    return Column("c", column_type, nullable, "text" if charset else "binary", charset)


@pytest.mark.parametrize(("strategy", "col", "unique", "problem"), [
    pytest.param("null", _col("varchar(20)", nullable=False), False, "null on a NOT NULL column", id="null-on-not-null"),
    pytest.param("null", _col("varchar(20)"), True, None, id="null-on-a-nullable-unique"),
    pytest.param("fixed:x", _col("varchar(20)"), True, "fixed on a UNIQUE column would repeat one value", id="fixed-on-unique"),
    pytest.param("fixed:x", _col("varchar(20)"), False, None, id="fixed-elsewhere"),
    pytest.param("phone", _col("varchar(20)"), True, "phone keeps the length and punctuation", id="phone-on-unique"),
    pytest.param("hash", _col("int(11)", charset=None), False, "hash writes text, and this column is int(11)", id="hash-on-an-int"),
    pytest.param("email", _col("varchar(20)"), False, "email needs 21+ characters, the column holds 20", id="email-one-short"),
    pytest.param("email", _col("varchar(21)"), True, None, id="email-just-fits"),
    pytest.param("hash", _col("char(15)"), True, "hash cut to 15 characters cannot keep a UNIQUE column unique", id="hash-too-short-for-unique"),
    pytest.param("hash", _col("char(16)"), True, None, id="hash-at-16-on-unique"),
    pytest.param("hash", _col("char(15)"), False, None, id="hash-short-not-unique"),
    pytest.param("keep", _col("int(11)", nullable=False, charset=None), True, None, id="keep-fits-anything"),
])
def test_rule_problem(strategy, col, unique, problem):
    kind, _, value = strategy.partition(":")
    got = refresh._rule_problem(Rule("s", "t", "c", kind, value or None), col, unique)
    assert (got is None) if problem is None else (got is not None and got.startswith(problem)), got


@pytest.mark.parametrize(("env", "conn_id"), [
    pytest.param(None, "lastline_masking", id="unset"),
    pytest.param("", "lastline_masking", id="empty"),
    pytest.param("vault_masking", "vault_masking", id="set"),
])
def test_key_conn_id_is_the_deployments(monkeypatch, env, conn_id):
    if env is None:
        monkeypatch.delenv("LASTLINE_MASKING_KEY_CONN_ID", raising=False)
    else:
        monkeypatch.setenv("LASTLINE_MASKING_KEY_CONN_ID", env)
    assert refresh.key_conn_id() == conn_id


@pytest.mark.parametrize(("conf", "rules", "error", "message"), [
    pytest.param({"target_conn_id": "t_ltarget"}, RULES, ProtectedTargetError, r"not marked as a staging server", id="not-staging"),
    pytest.param({"target_conn_id": "t_unit_refresh_protected"}, RULES, ProtectedTargetError, "marked protected", id="protected"),
    pytest.param({"target_conn_id": "t_unit_refresh_source"}, RULES, ProtectedTargetError,
                 "is the server backup .* was taken from .*never writes into production", id="the-backups-own-source"),
    pytest.param({"databases": ["mysql", DB]}, RULES, PreflightError,
                 "mysql: system schemas and lastline's own databases are never restored", id="a-system-schema"),
    pytest.param({"databases": ["nope", DB]}, RULES, PreflightError, rf"database\(s\) nope are not in backup .* it holds: {DB}\.",
                 id="a-database-not-in-the-backup"),
    pytest.param({}, {**RULES, f"{QDB}.{CUSTOMERS}.nope": "hash"}, PreflightError,
                 r"`unit refresh.db`.`cust omers`.nope: no such column in backup", id="a-rule-naming-no-column"),
    pytest.param({}, {**RULES, f"{QDB}.`no table`.x": "hash"}, PreflightError, "no such column in backup",
                 id="a-rule-naming-no-table"),
    pytest.param({}, {**RULES, f"{QDB}.`nothing here`": "keep"}, PreflightError,
                 "no table, view, trigger, routine or event of that name in backup", id="a-kept-object-naming-nothing"),
    pytest.param({}, {**RULES, NAME: "null"}, PreflightError, "full_name: null on a NOT NULL column", id="null-on-not-null"),
    pytest.param({}, {**RULES, EMAIL: "fixed:x"}, PreflightError, "fixed on a UNIQUE column would repeat one value",
                 id="fixed-on-the-unique-email"),
    pytest.param({}, {**RULES, CUST: "hash"}, PreflightError,
                 r"foreign key fk c joins unit refresh.db.orders.cust \(hash\) to unit refresh.db.cust omers.e`mail \(email\): "
                 "mask both with the same strategy", id="a-foreign-key-masked-two-ways"),
    pytest.param({}, {EMAIL: "email", CUST: "email"}, PreflightError,
                 r"(?s)1 column\(s\) look like personal data and have no masking rule:\n  `unit refresh.db`.`cust omers`.full_name: "
                 r"its name suggests .*\"`unit refresh.db`.`cust omers`.full_name\": \"name\"\n}\nNothing was touched",
                 id="personal-data-without-a-rule"),
    pytest.param({"masking_rules": {NAME: "null"}}, {EMAIL: "email", CUST: "email"}, PreflightError,
                 "full_name: null on a NOT NULL column", id="the-runs-rule-is-checked-too"),
])
def test_preflight_refuses_with_nothing_touched(backup, staging, conf, rules, error, message):
    server_dbs = staging.query("SHOW DATABASES")
    staging.query("SET GLOBAL read_only = OFF")
    with pytest.raises(error, match=message):
        refresh.preflight(_conf(backup, **conf), rules)
    assert staging.query("SELECT @@GLOBAL.read_only") == [(0,)] and staging.query("SHOW DATABASES") == server_dbs


def test_preflight_refuses_without_the_masking_key(backup, staging, monkeypatch):
    monkeypatch.setenv("LASTLINE_MASKING_KEY_CONN_ID", "t_unit_refresh_no_key")
    staging.query("SET GLOBAL read_only = OFF")
    with pytest.raises(ConfigError, match="t_unit_refresh_no_key"):
        refresh.preflight(_conf(backup), RULES)
    assert staging.query("SELECT @@GLOBAL.read_only") == [(0,)]


def _plan(backup, **conf) -> StagingPlan:
    return refresh.preflight(_conf(backup, parallel=3, tune=True, aws_conn_id=None, **conf), RULES)


def test_preflight_passes_and_keeps_writes_out(backup, staging):
    staging.query("SET GLOBAL read_only = OFF")
    plan = _plan(backup, open_for_writes=False)
    assert staging.query("SELECT @@GLOBAL.read_only") == [(1,)]
    assert (plan.target_conn_id, plan.databases, plan.masking_key_conn_id, plan.open_for_writes, plan.kept_objects) == (
        "t_unit_refresh_staging", [DB], KEY_CONN, False, [])
    assert sorted(r.key for r in plan.rule_list()) == sorted(RULES) and plan.backup.url == backup
    assert plan.restore["databases"] == [DB] and plan.restore["target_conn_id"] == "t_unit_refresh_staging"
    assert (plan.restore["parallel"], plan.restore["tune"], plan.restore["restore_grants"], plan.restore["force"]) == (3, True, False, True)
    assert plan.restore.get("aws_conn_id") is None


def test_mask_late_objects_open_and_report(backup, staging, logical_source, monkeypatch, tmp_path):
    monkeypatch.setenv("LASTLINE_REPORT_DIR", str(tmp_path / "reports"))
    plan = _plan(backup)
    with kept(staging, QDB, RUN, ("masked", "mask_originals", "mask_audit")):
        with staging.session() as cur:  # what the restore makes, without its triggers (they come after the masking)
            cur.execute("SET SESSION sql_log_bin = 0")
            for sql in CREATE:
                cur.execute(sql)
            _fill(cur)
            cur.connection.commit()
        masked = refresh.mask(plan, RUN)
        assert (masked.tables, masked.skipped) == (2, [])
        emails = [r[0] for r in staging.query(f"SELECT `e``mail` FROM {QDB}.{CUSTOMERS}")]
        assert len(set(emails)) == N and all(e.endswith("@example.com") for e in emails)
        assert not {r[0] for r in logical_source.server().query(f"SELECT full_name FROM {QDB}.{CUSTOMERS}")} & {
            r[0] for r in staging.query(f"SELECT full_name FROM {QDB}.{CUSTOMERS}")}
        joined = f"SELECT COUNT(*) FROM {QDB}.orders o JOIN {QDB}.{CUSTOMERS} c ON c.`e``mail` = o.cust"
        assert staging.query(joined) == [(2 * N,)]  # the foreign key still joins
        again = refresh.mask(plan, RUN)  # a retry of the same run: each table masked once
        assert (again.tables, sorted(again.skipped)) == (0, sorted([f"{DB}.cust omers", f"{DB}.orders"]))

        late = refresh.late_objects(plan)
        assert late.created == 1
        assert staging.query("SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s", (DB,)) == [
            ("orders bi",)]

        assert staging.query(f"SELECT COUNT(*) FROM {META_DB}.mask_originals WHERE run_key = %s", (RUN,))[0][0] > 0
        assert refresh.open_target(plan) == Opened(True)
        assert staging.query("SELECT @@GLOBAL.read_only") == [(0,)]
        assert staging.query(f"SELECT COUNT(*) FROM {META_DB}.mask_originals") == [(0,)]  # no hash of personal data kept
        closed = StagingPlan(**{**plan.to_dict(), "open_for_writes": False, "backup": plan.backup})
        staging.query("SET GLOBAL read_only = ON")
        assert refresh.open_target(closed) == Opened(False)
        assert staging.query("SELECT @@GLOBAL.read_only") == [(1,)]

    verified = MaskingVerified(
        columns=[{"column": EMAIL, "strategy": "email", "values": N, "rows_changed": N, "survivors": 0},
                 {"column": f"{QDB}.{CUSTOMERS}.code", "strategy": "keep", "values": N, "rows_changed": 0, "survivors": N}],
        joins=[{"a": CUST, "b": EMAIL, "strategy": "email", "before": N, "after": N}])
    out = refresh.report(plan, verified, Masked(1.25, 2, []), run_id="unit run")
    saved = json.loads((tmp_path / "reports" / out["report"].split("/reports/", 1)[1]).read_text())
    assert saved["kept"] == [f"{QDB}.{CUSTOMERS}.code"] and saved["joins"] == verified.joins and saved["mask_seconds"] == 1.25
    text = (tmp_path / "reports" / out["report"].split("/reports/", 1)[1]).with_suffix(".md").read_text()
    assert text.startswith(f"# Staging refresh of t_unit_refresh_staging from {backup}: masking verified, 1 column masked")
    assert "1 join between masked columns kept; 1 column left unmasked by a keep rule" in text
    assert f"| {CUST} = {EMAIL} | email | {N} | {N} |" in text and "staging is now open for writes." in text
