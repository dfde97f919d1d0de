"""The grammar of one definition between a CREATE TABLE's parentheses as SHOW CREATE TABLE prints it: a column, a
key, a foreign key, a check, a period or a unique constraint; anything else is refused."""
from __future__ import annotations

from dataclasses import dataclass

from lastline.logical.format import sql_text
from lastline.logical.format.sql_text import IDENT, NUMBER, WORD, Token, is_op, word_at, words_at
from lastline.logical.restore.schema_tokens import BadStatement, expect, kind_is, near, plain_string, token_at


@dataclass(frozen=True)
class Definition:
    """One definition between a CREATE TABLE's parentheses: its kind (column, primary, index, foreign_key,
    check, period, unique_constraint), where it is (`lead`: just after the comma or parenthesis before it),
    its text on one line and its name (keys and constraints)."""

    kind: str
    start: int
    end: int
    lead: int
    text: str
    name: str | None


def _key_parts(d: list[Token], i: int) -> int:
    """`(part, ...)` at d[i], each `col` [(n)] [ASC|DESC] or `period` WITHOUT OVERLAPS: the index after."""
    if not is_op(token_at(d, i), "("):
        raise BadStatement(f"has a key without its parenthesised columns at {near(d, i)}")
    close = sql_text.matching_paren(d, i)
    for a, b in sql_text.split_top_level(d, i + 1, close):
        k = a + (4 if is_op(token_at(d, a + 1), "(") and kind_is(token_at(d, a + 2), NUMBER) and is_op(token_at(d, a + 3), ")") else 1)
        k += 2 if words_at(d, k, "WITHOUT", "OVERLAPS") else word_at(d, k) in ("ASC", "DESC")
        if not kind_is(token_at(d, a), IDENT) or k != b:
            raise BadStatement(f"has a key part that is not a quoted column [(length)] [ASC|DESC] at {near(d, a)}")
    return close + 1


def _index(d: list[Token]) -> str | None:
    """[UNIQUE|FULLTEXT|SPATIAL] KEY|INDEX `name` [USING ..] (parts) [options], or PRIMARY KEY ...: its name."""
    name, i = None, 2
    if word_at(d, 0) != "PRIMARY":
        prefix = int(word_at(d, 0) in ("UNIQUE", "FULLTEXT", "SPATIAL"))
        i = prefix + (word_at(d, prefix) in ("KEY", "INDEX"))
        if not kind_is(token_at(d, i), IDENT) or (i == prefix and word_at(d, 0) != "UNIQUE"):
            raise BadStatement(f"has a key that is not [UNIQUE|FULLTEXT|SPATIAL] KEY `name` (...) at {near(d, 0)}")
        name, i = sql_text.ident_value(d[i]), i + 1
    elif word_at(d, 1) != "KEY":
        raise BadStatement(f"has a PRIMARY that is not PRIMARY KEY at {near(d, 0)}")
    i += 2 if word_at(d, i) == "USING" and word_at(d, i + 1) in ("BTREE", "HASH", "RTREE") else 0
    i = _key_parts(d, i)
    while i < len(d):
        w, nxt = word_at(d, i), token_at(d, i + 1)
        if (w == "USING" and word_at(d, i + 1) in ("BTREE", "HASH", "RTREE")) or (w == "COMMENT" and plain_string(nxt)) or (
                words_at(d, i, "NOT", "IGNORED")):
            i += 2
        elif w == "KEY_BLOCK_SIZE" and kind_is(token_at(d, i + 1 + is_op(nxt, "=")), NUMBER):
            i += 2 + is_op(nxt, "=")
        elif words_at(d, i, "WITH", "PARSER") and kind_is(token_at(d, i + 2), WORD, IDENT):
            i += 3
        elif w in ("IGNORED", "VISIBLE", "INVISIBLE"):
            i += 1
        else:
            raise BadStatement(f"has something after a key that is not a key option at {near(d, i)}")
    return name


def _foreign_key(d: list[Token]) -> str:
    """CONSTRAINT `n` FOREIGN KEY [`i`] (cols) REFERENCES [`db`.]`t` (cols) [ON DELETE|UPDATE ..] [MATCH ..]:
    its name (the referenced database is checked with every other `db`. in the statement)."""
    if not kind_is(token_at(d, 1), IDENT):
        raise BadStatement(f"has a foreign key without a quoted constraint name at {near(d, 0)}")
    i = expect(d, 2, "FOREIGN", "KEY")
    i = expect(d, _key_parts(d, i + kind_is(token_at(d, i), IDENT)), "REFERENCES")
    i += 2 if is_op(token_at(d, i + 1), ".") and kind_is(token_at(d, i), IDENT) else 0
    if not kind_is(token_at(d, i), IDENT):
        raise BadStatement(f"has a foreign key that does not reference one quoted table at {near(d, i)}")
    i, seen = _key_parts(d, i + 1), set[str]()
    actions = (("RESTRICT",), ("CASCADE",), ("SET", "NULL"), ("SET", "DEFAULT"), ("NO", "ACTION"))
    while i < len(d):
        act = next((a for a in actions if words_at(d, i + 2, *a)), None)
        if word_at(d, i) == "ON" and word_at(d, i + 1) in {"DELETE", "UPDATE"} - seen and act:
            seen.add(word_at(d, i + 1))
            i += 2 + len(act)
        elif word_at(d, i) == "MATCH" and word_at(d, i + 1) in ("FULL", "PARTIAL", "SIMPLE"):
            i += 2
        else:
            raise BadStatement(f"has something after a foreign key that is not ON DELETE/UPDATE <action> or MATCH at {near(d, i)}")
    return sql_text.ident_value(d[1]) or ""


def read_definition(d: list[Token]) -> tuple[str, str | None]:
    """The kind and name of one definition, its grammar checked (a column: a quoted name, a type, no REFERENCES)."""
    first, second = word_at(d, 0), word_at(d, 2 if kind_is(token_at(d, 1), IDENT) else 1)
    if kind_is(token_at(d, 0), IDENT):
        refs = [k for k in range(len(d)) if word_at(d, k) == "REFERENCES"]
        if not kind_is(token_at(d, 1), WORD) or refs:
            raise BadStatement(f"has a column without a type, or one that REFERENCES another table, at {near(d, refs[0] if refs else 0)}")
        return "column", None
    if first in ("PRIMARY", "UNIQUE", "KEY", "INDEX", "FULLTEXT", "SPATIAL"):
        return "primary" if first == "PRIMARY" else "index", _index(d)
    if first == "CONSTRAINT" and second == "FOREIGN":
        return "foreign_key", _foreign_key(d)
    if "CHECK" in (first, second) and first in ("CHECK", "CONSTRAINT"):
        i = next(k for k in range(len(d)) if word_at(d, k) == "CHECK") + 1
        if not is_op(token_at(d, i), "(") or sql_text.matching_paren(d, i) != len(d) - 1:
            raise BadStatement(f"has a CHECK that is not one parenthesised condition at {near(d, i)}")
        return "check", sql_text.ident_value(d[1]) if first == "CONSTRAINT" and i == 3 else None
    if first == "CONSTRAINT" and second in ("UNIQUE", "PRIMARY") and kind_is(token_at(d, 1), IDENT):
        return "unique_constraint", _index(d[2:]) or sql_text.ident_value(d[1])
    if first == "PERIOD" and word_at(d, 1) == "FOR" and kind_is(token_at(d, 2), IDENT, WORD) and _key_parts(d, 3) == len(d):
        return "period", None
    raise BadStatement(f"has a definition that is not a column, key or constraint at {near(d, 0)}")
