"""staging.pii: which columns look like personal data. A name's words (camelCase, digits, separators), the kinds a
name suggests for its type (an `address_id` is a key), the kinds values hold, the rule suggested for a finding, and a
sampled table's findings: by name, by value, and a binary column that cannot be read (fails closed)."""
from __future__ import annotations

import pytest

from lastline.logical.format.dialect import Column
from lastline.manifest import LogicalTable
from lastline.staging import pii
from lastline.staging.sampling import ColumnSample, TableSample


@pytest.mark.parametrize(("name", "words"), [
    ("", []), ("email", ["email"]), ("contactEmail_2", ["contact", "email"]), ("first name", ["first", "name"]),
    ("a.b`c", ["a", "b", "c"]), ("HTTPServer", ["httpserver"]), ("x-y--z", ["x", "y", "z"]),
], ids=["empty", "one-word", "camel-case-and-digits", "space", "dots-and-backticks", "upper-case-run", "dashes"])
def test_tokens(name, words):
    assert pii.tokens(name) == words


@pytest.mark.parametrize(("name", "column_type", "text", "kinds"), [
    ("email", "varchar(100)", True, ["email"]),
    ("contactEmail", "varchar(100)", True, ["email"]),
    ("billing_address", "varchar(100)", True, ["address"]),
    ("address_id", "int(11)", False, []),
    ("phone_type", "tinyint", False, []),
    ("phone", "bigint(20)", False, ["phone"]),
    ("name", "int(11)", False, []),
    ("birth_date", "date", False, ["birth"]),
    ("created_at", "datetime", False, []),
    ("last_name", "varchar(50)", True, ["name"]),
    ("client_ip", "varbinary(16)", True, ["ip"]),
    ("cardnumber", "char(19)", True, ["bank/card"]),
    ("notes", "text", True, []),
], ids=["email", "camel-case", "joined-marker", "a-key-not-an-address", "a-code-not-a-phone", "a-phone-as-a-number",
        "a-name-that-is-a-number", "a-date-of-birth", "an-ordinary-date", "last-name", "binary-ip", "card", "nothing"])
def test_kinds_by_name(name, column_type, text, kinds):
    assert pii.kinds_by_name(name, column_type, text) == kinds


@pytest.mark.parametrize(("values", "counts"), [
    ([], {}),
    (["hello", "2026-11-28", "10.0.0.1"], {}),
    (["ann@example.com"], {"email": 1}),
    (["ann@example.com, bo@example.org"], {"email": 1}),
    (["+1 (555) 010-7788", "card 4111 1111 1111 1111"], {"phone": 1, "bank/card": 1}),
    (["4111111111111112"], {}),
], ids=["nothing", "no-personal-data", "one-email", "two-in-one-value-count-once", "phone-and-card", "fails-luhn"])
def test_kinds_by_values(values, counts):
    assert pii.kinds_by_values(values) == counts


TEXT = Column("c", "varchar(50)", True, "text", "utf8mb4")


@pytest.mark.parametrize(("column", "kinds", "col", "unique", "rule"), [
    ("email", ["email"], TEXT, False, "email"),
    ("surname", ["name"], TEXT, False, "last_name"),
    ("givenName", ["name"], TEXT, False, "first_name"),
    ("full_name", ["name"], TEXT, False, "name"),
    ("addr", ["address"], TEXT, False, "hash"),
    ("photo", [pii.UNREADABLE], Column("photo", "blob", True, "text", None), False, "null"),
    ("token", [pii.UNREADABLE], Column("token", "varbinary(32)", False, "text", None), False, "fixed:"),
    ("token", [pii.UNREADABLE], Column("token", "varbinary(32)", False, "text", None), True, "keep"),
    ("account", ["bank/card"], Column("account", "bigint(20)", True, "plain", None), False, "null"),
    ("account", ["bank/card"], Column("account", "bigint(20)", False, "plain", None), False, "keep"),
], ids=["email", "last-name", "first-name", "name", "other-text-hashed", "nullable-bytes", "not-null-bytes",
        "unique-bytes-a-key", "nullable-number", "not-null-number"])
def test_suggestion(column, kinds, col, unique, rule):
    assert pii.Finding("db", "t", column, list(kinds)).suggestion(col, unique) == rule


COLUMNS = [Column("id", "int(11)", False, "plain", None), Column("email", "varchar(100)", True, "text", "utf8mb4"),
           Column("note", "text", True, "text", "utf8mb4"), Column("photo", "blob", True, "text", None),
           Column("num", "bigint(20)", True, "plain", None), Column("misc", "varchar(20)", True, "text", "utf8mb4")]


def table(rows: int = 100) -> LogicalTable:
    return LogicalTable("db", "people", "InnoDB", None, None, True, "primary key ranges", ["id"],
                        [c.to_dict() for c in COLUMNS], rows, "", 0, 0, 0.0)


def test_column_findings_by_name_by_value_and_unreadable_bytes():
    s = TableSample([ColumnSample() for _ in COLUMNS], chunks=1, bytes=1000, rows_read=100, rows_decoded=100)
    _, _, note, photo, num, misc = s.columns
    note.rows["email"] = set(range(3))
    note.example["email"] = "a***@example.com"
    photo.values, photo.not_text = 50, 6
    num.values, num.cards = 10, 6
    misc.values, misc.phones = 10, 4  # a few phone-like values: not a column of phone numbers
    found = {f.column: f for f in pii.column_findings(table(), s)}
    assert sorted(found) == ["email", "note", "num", "photo"]
    assert found["email"].kinds == ["email"] and found["email"].why == ["its name suggests email"]
    assert found["note"].why == ["3 of 100 values read look like email (e.g. a***@example.com)"]
    assert found["photo"].kinds == [pii.UNREADABLE] and "6 of 50 sampled values are not text" in found["photo"].why[0]
    assert found["num"].kinds == ["bank/card"]
    assert found["email"].key.endswith("email") and "people" in found["email"].key


def test_a_binary_column_of_a_table_no_row_of_which_could_be_read_is_flagged():
    s = TableSample([ColumnSample() for _ in COLUMNS], rows_read=0, rows_decoded=0)
    found = {f.column: f for f in pii.column_findings(table(rows=5), s)}
    assert "no row of it could be read whole" in found["photo"].why[0]
    assert pii.column_findings(table(rows=0), s) == [found["email"]]  # an empty table: only names speak
