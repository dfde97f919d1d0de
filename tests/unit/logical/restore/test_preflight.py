"""The restore's preflight, its pure parts: which databases a run restores, whether schema.json and the manifest
name the same tables, and which MEMORY tables keep a restore from restarting the target."""
from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from lastline.core.errors import IntegrityError, PreflightError
from lastline.logical.restore.preflight import chosen_databases, memory_tables_with_rows, same_tables


def _manifest(databases: list[str], tables: list[tuple[str, str, str, int]]) -> Any:
    """What these helpers read of a LogicalManifest: its id, databases and tables (schema, name, engine, rows)."""
    return SimpleNamespace(backup_id="b1", databases=[{"name": d} for d in databases],
                           tables=[SimpleNamespace(schema=s, name=n, engine=e, rows=r) for s, n, e, r in tables])


MANIFEST = _manifest(["shop", "crm", "mysql"], [("shop", "orders", "InnoDB", 5), ("shop", "cache", "MEMORY", 3),
                                                ("crm", "people", "InnoDB", 0), ("crm", "hot", "HEAP", 0)])


@pytest.mark.parametrize("named, wanted", [([], ["shop", "crm"]), (["crm"], ["crm"]), (["crm", "shop"], ["crm", "shop"])],
                         ids=["all-but-system", "one-named", "order-kept"])
def test_chosen_databases(named: list[str], wanted: list[str]) -> None:
    assert chosen_databases(MANIFEST, named) == wanted


@pytest.mark.parametrize("named, message", [
    (["mysql"], "never restored"), (["_lastline"], "never restored"), (["nowhere"], "not in backup b1"),
], ids=["system-schema", "lastlines-own", "not-in-the-backup"])
def test_chosen_databases_refuses(named: list[str], message: str) -> None:
    with pytest.raises(PreflightError, match=message):
        chosen_databases(MANIFEST, named)


def test_same_tables() -> None:
    schema = {"tables": [{"schema": "crm", "name": "people"}, {"schema": "crm", "name": "hot"}, {"schema": "x", "name": "y"}]}
    same_tables(schema, MANIFEST, ["crm"])  # a table of a database not restored is not compared
    with pytest.raises(IntegrityError, match=r"crm\.hot \(only in the manifest\)"):
        same_tables({"tables": schema["tables"][:1]}, MANIFEST, ["crm"])


@pytest.mark.parametrize("databases, volatile", [(["shop"], ["shop.cache"]), (["crm"], []), (["shop", "crm"], ["shop.cache"])],
                         ids=["memory-with-rows", "empty-memory-table", "both"])
def test_memory_tables_with_rows(databases: list[str], volatile: list[str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    assert memory_tables_with_rows(MANIFEST, databases) == volatile
    assert ("no restart profile" in caplog.text) == bool(volatile)
