"""logical.restore.schema_checks: schema.json is untrusted input. Every object of the restored databases is checked
before anything is touched (a CREATE of its own kind and name, an entry with its name, database and statement, a kind
lastline restores, session names that are names), objects of other databases are not read, and the engines each
table's CREATE names come back by (schema, name)."""
from __future__ import annotations

import pytest

from lastline.core.errors import IntegrityError
from lastline.logical.restore.schema_checks import checked_create, validate_schema

TABLE = "CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
VIEW = "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY INVOKER VIEW `v` AS select 1 AS `1`"


def schema(**kw) -> dict:
    base = {"databases": [{"name": "shop", "charset": "utf8mb4", "collation": "utf8mb4_general_ci"}],
            "tables": [{"schema": "shop", "name": "t", "create": TABLE}],
            "views": [{"schema": "shop", "name": "v", "create": VIEW, "character_set_client": "utf8mb4",
                       "collation_connection": "utf8mb4_general_ci"}]}
    return {**base, **kw}


def test_a_sound_schema_passes_and_names_its_tables_engines():
    assert validate_schema(schema(), ["shop"]) == {("shop", "t"): frozenset({"INNODB"})}


def test_objects_of_databases_not_restored_are_not_read():
    other = {"schema": "other", "name": "t", "create": "DROP DATABASE shop"}
    assert validate_schema(schema(tables=[other]), ["shop"]) == {}
    assert validate_schema(schema(), []) == {}


@pytest.mark.parametrize(("change", "refusal"), [
    ({"tables": [{"schema": "shop", "name": "t", "create": TABLE + "; DROP DATABASE shop"}]}, "table shop.t"),
    ({"tables": [{"schema": "shop", "name": "other", "create": TABLE}]}, "table shop.other"),
    ({"tables": [{"schema": "shop", "name": "t"}]}, "a table entry without a name, database or statement"),
    ({"tables": [{"schema": "shop", "create": TABLE}]}, "a table entry without a name"),
    ({"views": [{"schema": "shop", "name": "v", "create": TABLE}]}, "view shop.v"),
    ({"views": [{"schema": "shop", "name": "v", "create": VIEW, "character_set_client": "utf8mb4; DROP"}]},
     "character_set_client"),
    ({"databases": [{"name": "shop", "charset": "utf8mb4; DROP DATABASE x", "collation": "c"}]}, "shop"),
], ids=["a-second-statement", "another-name", "no-statement", "no-name", "another-kind", "a-session-value-not-a-name",
        "a-database-charset-not-a-name"])
def test_what_is_not_its_own_create_is_refused_by_name(change, refusal):
    with pytest.raises(IntegrityError, match=refusal):
        validate_schema(schema(**change), ["shop"])


def test_a_kind_lastline_does_not_restore_is_refused():
    with pytest.raises(IntegrityError, match="of a kind lastline does not restore"):
        checked_create("servers", {"schema": "shop", "name": "s", "create": "CREATE SERVER s"})


def test_grants_are_read_only_when_asked():
    bad = schema(grants=[{"user": "'a'@'%'", "grants": ["GRANT ALL ON *.* TO 'b'@'%'"]}])  # no host: malformed
    assert validate_schema(bad, ["shop"]) == {("shop", "t"): frozenset({"INNODB"})}
    with pytest.raises(IntegrityError, match="a grants entry without user, host or statement"):
        validate_schema(bad, ["shop"], grants=True)
