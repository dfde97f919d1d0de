"""schema_session: the sql_mode, character set and collation values of schema.json are names, never SQL."""
from __future__ import annotations

import pytest

from lastline.core.errors import IntegrityError
from lastline.logical.restore.schema_session import database_create, session_mode, session_name


@pytest.mark.parametrize("value, mode", [
    (None, ""), ("", ""), ("STRICT_TRANS_TABLES,NO_ZERO_DATE", "STRICT_TRANS_TABLES,NO_ZERO_DATE"),
    ("ansi_quotes", "ansi_quotes"),
], ids=["none", "empty", "two-modes", "lower-case"])
def test_session_mode_accepts_mode_names(value: str | None, mode: str) -> None:
    assert session_mode(value) == mode


@pytest.mark.parametrize("value", ["STRICT_TRANS_TABLES,'; DROP", "NOT_A_MODE", 1073741824],
                         ids=["sql-text", "unknown-mode", "bitmask-number"])
def test_session_mode_refuses_anything_else(value: object) -> None:
    with pytest.raises(IntegrityError):
        session_mode(value)


@pytest.mark.parametrize("value, name", [(None, None), ("", None), ("utf8mb4", "utf8mb4"), ("utf8mb4_general_ci", "utf8mb4_general_ci")],
                         ids=["none", "empty", "charset", "collation"])
def test_session_name_accepts_names(value: str | None, name: str | None) -> None:
    assert session_name(value, "collation_connection") == name


@pytest.mark.parametrize("value", ["utf8mb4; DROP", "utf8 mb4", "latin1'"], ids=["statement", "space", "quote"])
def test_session_name_refuses_anything_else(value: str) -> None:
    with pytest.raises(IntegrityError, match="collation_connection"):
        session_name(value, "collation_connection")


def test_database_create_quotes_the_name_and_checks_charset_and_collation() -> None:
    assert database_create({"name": "sh`op", "charset": "utf8mb4", "collation": "utf8mb4_general_ci"}) == (
        "CREATE DATABASE IF NOT EXISTS `sh``op` CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci")
    with pytest.raises(IntegrityError, match="collation"):
        database_create({"name": "shop", "charset": "utf8mb4", "collation": "x; DROP DATABASE y"})
