"""logical.format.schema: the order views are created in, the AUTO_INCREMENT a CREATE carries, the readable schema.sql,
and on a real server (the suite's target sandbox, a database of its own dropped after) which databases a backup takes,
the privileges it refuses to run without, and every kind of object read back as the server prints it."""
from __future__ import annotations

import dataclasses

import pytest

from lastline.core.errors import PreflightError
from lastline.core.sql import ASIDE_PREFIX, META_DB
from lastline.logical.format.schema import (
    SKIPPED_USERS,
    auto_increment,
    read_schema,
    render_sql,
    require_object_privileges,
    resolve_databases,
    view_order,
)


def _view(name: str, *selects: str, schema: str = "s") -> dict:
    """A view of `schema` whose CREATE selects from the views `selects` (as SHOW CREATE VIEW names them)."""
    source = " JOIN ".join(f"`{schema}`.`{s}`" for s in selects) or "DUAL"
    return {"schema": schema, "name": name, "create": f"CREATE VIEW `{schema}`.`{name}` AS SELECT 1 FROM {source}"}


@pytest.mark.parametrize(("views", "order"), [
    ([], []),
    ([_view("b"), _view("a")], ["a", "b"]),
    ([_view("a", "b"), _view("b")], ["b", "a"]),
    ([_view("a", "b"), _view("b", "c"), _view("c")], ["c", "b", "a"]),
    ([_view("a", "b", "c"), _view("b"), _view("c", "b")], ["b", "c", "a"]),
    ([_view("a", "b"), _view("b", "a")], ["a", "b"]),
    ([_view("ab"), _view("a")], ["a", "ab"]),
    ([_view("v", "w", schema="x"), _view("w", schema="y")], ["v", "w"]),
], ids=["none", "independent-by-name", "dependency-first", "chain", "diamond", "cycle-still-ends",
        "name-prefix-no-dependency", "other-schema-same-name-no-dependency"])
def test_view_order(views, order):
    assert [v["name"] for v in view_order(views)] == order


@pytest.mark.parametrize(("create", "counter"), [
    ("CREATE TABLE `t` (`id` int NOT NULL AUTO_INCREMENT, PRIMARY KEY (`id`)) ENGINE=InnoDB AUTO_INCREMENT=42", 42),
    ("CREATE TABLE `t` (`id` int) ENGINE=InnoDB", None),
    ("CREATE TABLE `t` (`id` int NOT NULL AUTO_INCREMENT, PRIMARY KEY (`id`)) ENGINE=InnoDB", None),
    ("CREATE TABLE `t` (`id` bigint) ENGINE=InnoDB AUTO_INCREMENT=18446744073709551615", 18446744073709551615),
    ("CREATE TABLE `t` (`x` int) ENGINE=InnoDB MY_AUTO_INCREMENT=3", None),
], ids=["counter", "no-counter", "column-attribute-alone", "largest", "longer-word-not-it"])
def test_auto_increment(create, counter):
    assert auto_increment(create) == counter


def test_render_sql_puts_data_between_tables_and_triggers_with_each_objects_context():
    schema = {
        "databases": [{"name": "s", "create": "CREATE DATABASE `s`"}],
        "tables": [{"schema": "s", "name": "t", "create": "CREATE TABLE `t` (`id` int)"}],
        "sequences": [{"schema": "s", "name": "q", "create": "CREATE SEQUENCE `q`", "next_value": 7}],
        "triggers": [{"schema": "s", "name": "tr", "table": "t", "sql_mode": "STRICT_ALL_TABLES", "create": "CREATE TRIGGER tr",
                      "character_set_client": "utf8mb4", "collation_connection": "utf8mb4_general_ci"}],
        "views": [], "routines": [],
        "events": [{"schema": "s", "name": "e", "sql_mode": "", "time_zone": "+02:00", "create": "CREATE EVENT e",
                    "character_set_client": "latin1", "collation_connection": "latin1_swedish_ci"}],
        "grants": [{"user": "u", "host": "%", "create": "CREATE USER `u`@`%`", "grants": ["GRANT SELECT ON *.* TO `u`@`%`"]}],
    }
    sql = render_sql(schema)
    lines = sql.splitlines()
    assert lines[1] == "DELIMITER ;;" and lines[-1] == "DELIMITER ;" and sql.endswith("\n")
    where = {text: sql.index(text) for text in ("CREATE DATABASE", "CREATE TABLE", "CREATE SEQUENCE", "-- data:",
                                                "CREATE TRIGGER", "CREATE EVENT", "SETVAL", "CREATE USER", "GRANT SELECT")}
    assert list(where) == sorted(where, key=where.__getitem__)  # in the order a restore runs them
    trigger = sql[sql.index("USE `s`;;\nSET SESSION sql_mode = 'STRICT_ALL_TABLES'"):]
    assert trigger.index("SET NAMES utf8mb4 COLLATE utf8mb4_general_ci;;") < trigger.index("CREATE TRIGGER tr;;")
    assert "SET SESSION time_zone = '+02:00';;\nCREATE EVENT e;;" in sql
    assert "SELECT SETVAL(`s`.`q`, 7, 0);;" in sql


DB = "unit_schema_read"


@pytest.fixture
def server(target):
    """The target sandbox holding DB with one object of every kind (views made so their names sort against their
    order); dropped after, with the account a case makes."""
    server = target.server()
    statements = [
        f"CREATE DATABASE {DB} CHARACTER SET latin1",
        f"CREATE TABLE {DB}.t (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, v VARCHAR(8)) ENGINE=InnoDB",
        f"INSERT INTO {DB}.t (v) VALUES ('a'), ('b')",
        f"CREATE SEQUENCE {DB}.q START WITH 5",
        f"CREATE VIEW {DB}.v_b AS SELECT id FROM {DB}.t",
        f"CREATE VIEW {DB}.v_a AS SELECT id FROM {DB}.v_b",
        f"CREATE TRIGGER {DB}.tr BEFORE INSERT ON {DB}.t FOR EACH ROW SET NEW.v = UPPER(NEW.v)",
        f"CREATE PROCEDURE {DB}.p() SELECT 1",
        f"CREATE EVENT {DB}.e ON SCHEDULE EVERY 1 DAY DISABLE DO SELECT 1",
    ]
    with server.session() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        try:
            for sql in statements:
                cur.execute(sql)
            yield server
        finally:
            cur.execute(f"DROP DATABASE IF EXISTS {DB}")
            cur.execute("DROP USER IF EXISTS 'unit_schema_reader'@'%'")


def test_resolve_databases(server):
    with server.session() as cur:
        every = resolve_databases(cur, None)
        assert DB in every and "mysql" not in every and META_DB not in every
        assert not any(d.startswith(ASIDE_PREFIX) for d in every)
        assert resolve_databases(cur, [DB, DB]) == [DB]
        with pytest.raises(PreflightError, match="unknown database.*unit_schema_missing"):
            resolve_databases(cur, [DB, "unit_schema_missing"])
        with pytest.raises(PreflightError, match="system schemas"):
            resolve_databases(cur, ["mysql"])


def test_read_schema_reads_every_kind_as_the_server_prints_it(server):
    with server.session() as cur:
        schema = read_schema(cur, [DB], include_grants=True)
        assert read_schema(cur, []) == {k: [] for k in schema}
    names = {kind: [o["name"] for o in objs] for kind, objs in schema.items() if kind != "grants"}
    assert names == {"databases": [DB], "tables": ["t"], "sequences": ["q"], "views": ["v_b", "v_a"], "triggers": ["tr"],
                     "routines": ["p"], "events": ["e"]}
    assert schema["databases"][0]["charset"] == "latin1"
    assert auto_increment(schema["tables"][0]["create"]) == 3
    assert schema["sequences"][0]["next_value"] == 5
    assert schema["triggers"][0]["table"] == "t" and "UPPER(NEW.v)" in schema["triggers"][0]["create"]
    assert schema["routines"][0]["type"] == "PROCEDURE"
    assert "time_zone" in schema["events"][0] and "DISABLE" in schema["events"][0]["create"]
    accounts = {(g["user"], g["host"]) for g in schema["grants"]}
    assert accounts and not accounts & SKIPPED_USERS
    assert all(g["create"].startswith("CREATE USER") and g["grants"] for g in schema["grants"])


def test_an_account_without_trigger_and_event_is_refused(server):
    server.query("CREATE USER 'unit_schema_reader'@'%' IDENTIFIED BY 'unit-schema-pw'")
    server.query(f"GRANT SELECT ON {DB}.* TO 'unit_schema_reader'@'%'")
    with server.session() as cur:
        require_object_privileges(cur, [DB])  # the sandbox's admin holds them all
    reader = dataclasses.replace(server, user="unit_schema_reader", password="unit-schema-pw", socket=None)
    with reader.session() as cur:
        with pytest.raises(PreflightError, match=f"lacks TRIGGER on {DB}.*; EVENT on {DB}"):
            require_object_privileges(cur, [DB])
        cur.execute("SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s", (DB,))
        assert cur.fetchone()[0] == 0  # what the refusal spares a backup from: none listed, none backed up
    server.query(f"GRANT TRIGGER, EVENT ON {DB}.* TO 'unit_schema_reader'@'%'")
    with reader.session() as cur:
        require_object_privileges(cur, [DB])
