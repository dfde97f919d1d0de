"""schema_tables and schema_definitions: a CREATE TABLE only as SHOW CREATE TABLE prints it, and a table's
secondary indexes and foreign keys held back."""
from __future__ import annotations

import pytest

from lastline.core.errors import IntegrityError
from lastline.logical.restore.schema_checks import checked_create
from lastline.logical.restore.schema_tables import definition_name, split_deferred, table_definitions

TABLE = ("CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `p` int(11) DEFAULT NULL,\n  PRIMARY KEY (`id`),\n"
         "  KEY `kp` (`p`),\n  CONSTRAINT `fk` FOREIGN KEY (`p`) REFERENCES `t` (`id`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
KEPT = "CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `p` int(11) DEFAULT NULL,\n  PRIMARY KEY (`id`)"
END = "\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"


@pytest.mark.parametrize("keep_indexes, create", [(False, KEPT + END), (True, KEPT + ",\n  KEY `kp` (`p`)" + END)],
                         ids=["indexes-held-back", "indexes-kept"])
def test_split_deferred(keep_indexes: bool, create: str) -> None:
    assert split_deferred(TABLE, keep_indexes) == (create, ["KEY `kp` (`p`)"],
                                                   ["CONSTRAINT `fk` FOREIGN KEY (`p`) REFERENCES `t` (`id`)"])


def test_table_definitions_names_each_kind() -> None:
    _start, definitions, _close = table_definitions(TABLE)
    assert [(d.kind, d.name) for d in definitions] == [("column", None), ("column", None), ("primary", None),
                                                       ("index", "kp"), ("foreign_key", "fk")]


@pytest.mark.parametrize("definition, name", [
    ("KEY `k``x` (`p`)", "k`x"), ("UNIQUE KEY `u` (`p`)", "u"),
    ("CONSTRAINT `fk` FOREIGN KEY (`p`) REFERENCES `t` (`id`)", "fk"),
], ids=["backquote-in-name", "unique", "foreign-key"])
def test_definition_name(definition: str, name: str) -> None:
    assert definition_name(definition) == name


def _table(create: str) -> dict:
    return {"schema": "s", "name": "t", "create": create}


def test_a_table_as_the_server_prints_it_passes_with_its_engines() -> None:
    engines: dict = {}
    assert checked_create("tables", _table(TABLE), ["s"], engines) == TABLE
    assert engines == {("s", "t"): frozenset({"INNODB"})}


@pytest.mark.parametrize("create", [
    "CREATE TABLE `t` (`id` int) ENGINE=FEDERATED",
    "CREATE TABLE `t` (`id` int) CONNECTION='mysql://x'",
    "CREATE TABLE `t` (`id` int) DATA DIRECTORY='/tmp'",
    "CREATE TABLE `t` (`id` int); DROP DATABASE s",
    "CREATE TABLE `u` (`id` int)",
    "CREATE TABLE `t` (`id` int REFERENCES `x` (`id`))",
    "CREATE TABLE `t` (`id` int, CONSTRAINT `f` FOREIGN KEY (`id`) REFERENCES `other`.`x` (`id`))",
    "CREATE TABLE `t` (`id` int) WITH SYSTEM VERSIONING",
    "CREATE TABLE `t` (`id` int) /*!50700 ENGINE=InnoDB */",
    "CREATE TABLE `t` (`id` int) SELECT 1",
], ids=["engine-off-the-list", "another-server", "files-elsewhere", "two-statements", "another-table",
        "column-references", "foreign-key-into-another-database", "system-versioned", "mysql-only-comment", "query-form"])
def test_a_table_the_server_would_not_print_is_refused(create: str) -> None:
    with pytest.raises(IntegrityError):
        checked_create("tables", _table(create), ["s"])
