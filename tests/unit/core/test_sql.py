"""core.sql: identifier and string quoting, placeholders, which schemas a restore never writes, engine names and
driver errors (the helpers that need an open cursor are exercised end to end)."""
from __future__ import annotations

import pytest

from lastline.core.sql import (
    ASIDE_PREFIX,
    META_DB,
    as_text,
    engine_name,
    never_restored,
    placeholders,
    qualified,
    quote_ident,
    sql_error,
    string_literal,
)


@pytest.mark.parametrize(("name", "quoted"), [
    ("t1", "`t1`"),
    ("we`ird", "`we``ird`"),
    ("``", "``````"),
    ("", "``"),
    ("sp ace;DROP", "`sp ace;DROP`"),
], ids=["plain", "backquote-doubled", "only-backquotes", "empty", "spaces-and-semicolon-stay-inside"])
def test_quote_ident(name, quoted):
    assert quote_ident(name) == quoted


def test_qualified_quotes_both_parts():
    assert qualified("d`b", "t.1") == "`d``b`.`t.1`"


@pytest.mark.parametrize(("text", "quoted"), [
    ("/tmp/x", "'/tmp/x'"),
    ("it's", "'it''s'"),
    ("", "''"),
], ids=["path", "quote-doubled", "empty"])
def test_string_literal(text, quoted):
    assert string_literal(text) == quoted


@pytest.mark.parametrize("text", ["a\\b", "a\x00b"], ids=["backslash", "nul"])
def test_string_literal_refuses_what_sql_mode_changes(text):
    with pytest.raises(ValueError, match="refusing to quote"):
        string_literal(text)


@pytest.mark.parametrize(("items", "text"), [([], ""), ([1], "%s"), (["a", "b", "c"], "%s, %s, %s")],
                         ids=["none", "one", "three"])
def test_placeholders(items, text):
    assert placeholders(items) == text


@pytest.mark.parametrize(("database", "never"), [
    ("mysql", True),
    ("MYSQL", True),
    ("information_schema", True),
    ("performance_schema", True),
    ("sys", True),
    (META_DB, True),
    (META_DB.upper(), True),
    (ASIDE_PREFIX + "shop_1", True),
    ("shop", False),
    ("mysql_app", False),
    ("lastline", False),
], ids=["mysql", "mysql-upper-case", "information_schema", "performance_schema", "sys", "lastline-meta",
        "lastline-meta-upper-case", "set-aside", "user-db", "prefix-of-system-is-user", "lastline-without-underscore"])
def test_never_restored(database, never):
    assert never_restored(database) is never


@pytest.mark.parametrize(("name", "engine"), [
    ("InnoDB", "INNODB"), ("heap", "MEMORY"), ("HEAP", "MEMORY"), ("memory", "MEMORY"), (None, ""), ("", "")],
    ids=["innodb", "heap-lower", "heap-upper", "memory", "none", "empty"])
def test_engine_name(name, engine):
    assert engine_name(name) == engine


@pytest.mark.parametrize(("value", "text"), [(b"caf\xc3\xa9", "café"), ("x", "x"), (12, "12")],
                         ids=["bytes-utf8", "str", "int"])
def test_as_text(value, text):
    assert as_text(value) == text


@pytest.mark.parametrize(("exc", "result"), [
    (Exception(2013, "Lost connection"), (2013, "Lost connection")),
    (Exception("no code"), (None, "no code")),
    (Exception(), (None, "")),
], ids=["driver-error", "message-only", "no-args"])
def test_sql_error(exc, result):
    assert sql_error(exc) == result
