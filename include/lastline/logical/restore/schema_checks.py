"""schema.json is untrusted input: every statement a restore runs from it is read on tokens, as the server's
lexer reads it (logical.sql_text), and checked to be the CREATE of its kind and name: one statement, no other
object, no other database; a table only as SHOW CREATE TABLE prints it (allow-lists of definitions, engines
and options). A second line of defence: the first is the restore's account, which can touch only the
databases being restored. Over 300 lines: the table grammar and the DEFINER edits share one header reader.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from lastline.core.errors import ConfigError, IntegrityError
from lastline.core.sql import engine_name, quote_ident
from lastline.logical.format import sql_text as st
from lastline.logical.format.sql_text import (
    AT_NAME,
    EXEC_CLOSE,
    EXEC_OPEN,
    IDENT,
    NUMBER,
    STRING,
    WORD,
    Token,
    is_op,
    word_at,
    words_at,
)

NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")  # character sets and collations
ENGINES = frozenset({"INNODB", "MYISAM", "ARIA", "MEMORY", "HEAP", "ARCHIVE"})
TABLE_OPTIONS = frozenset({
    "ENGINE", "AUTO_INCREMENT", "CHARSET", "COLLATE", "COMMENT", "ROW_FORMAT", "KEY_BLOCK_SIZE", "STATS_PERSISTENT",
    "STATS_AUTO_RECALC", "STATS_SAMPLE_PAGES", "PAGE_CHECKSUM", "PAGE_COMPRESSED", "PAGE_COMPRESSION_LEVEL", "TRANSACTIONAL",
    "CHECKSUM", "TABLE_CHECKSUM", "DELAY_KEY_WRITE", "PACK_KEYS", "MAX_ROWS", "MIN_ROWS", "AVG_ROW_LENGTH", "ENCRYPTED",
    "ENCRYPTION_KEY_ID", "SEQUENCE"})
ENGINE_DEFINED = frozenset({"PAGE_COMPRESSED", "PAGE_COMPRESSION_LEVEL", "ENCRYPTED", "ENCRYPTION_KEY_ID"})  # printed `quoted`
SEQUENCE_WORDS = frozenset({"START", "WITH", "MINVALUE", "MAXVALUE", "NOMINVALUE", "NOMAXVALUE", "NO", "INCREMENT", "BY",
                            "CACHE", "NOCACHE", "CYCLE", "NOCYCLE", "RESTART", "AS", "UNSIGNED", "SIGNED", "TINYINT",
                            "SMALLINT", "MEDIUMINT", "INT", "INTEGER", "BIGINT"})
_NEVER_IN_TABLES = {
    "SELECT": "reads other tables (a query form: SELECT)", "UNION": "reaches other tables (UNION=: a MERGE table)",
    "INSERT_METHOD": "is a MERGE table (INSERT_METHOD)", "CONNECTION": "reaches another server (CONNECTION=)",
    "DIRECTORY": "places files outside the datadir (DATA/INDEX DIRECTORY)", "TABLESPACE": "names a tablespace"}
_KIND_WORDS = {"views": ("VIEW",), "triggers": ("TRIGGER",), "routines": ("PROCEDURE", "FUNCTION"), "events": ("EVENT",)}
_TYPE_ATTRS = {"UNSIGNED", "SIGNED", "ZEROFILL", "BINARY", "ASCII", "UNICODE", "BYTE", "CHARSET", "COLLATE", "CHARACTER"}
_CHARACTERISTICS = (("COMMENT",), ("LANGUAGE", "SQL"), ("NOT", "DETERMINISTIC"), ("DETERMINISTIC",), ("CONTAINS", "SQL"),
                    ("NO", "SQL"), ("READS", "SQL", "DATA"), ("MODIFIES", "SQL", "DATA"), ("SQL", "SECURITY"))
_MARKERS = (st.SPACE, st.COMMENT, EXEC_OPEN, EXEC_CLOSE)


class _Bad(Exception):
    """A statement's problem, worded as the end of `the statement of <object> ...`."""


def _refuse(what: str, problem: str) -> IntegrityError:
    return IntegrityError(f"schema.json: the statement of {what} {problem}. Nothing of it was run: the backup was "
                          "changed after it was taken (or was not written by lastline); restore another backup.")


def _at(sig: list[Token], i: int) -> Token | None:
    return sig[i] if 0 <= i < len(sig) else None


def _kind(tok: Token | None, *kinds: str) -> bool:
    return tok is not None and tok.kind in kinds


def _near(sig: list[Token], i: int) -> str:
    return f"character {sig[i].pos} ({' '.join(t.text for t in sig[i:i + 4])[:60]!r})" if i < len(sig) else "the end"


def _expect(sig: list[Token], i: int, *words: str) -> int:
    if not words_at(sig, i, *words):
        raise _Bad(f"is not as the server prints it: {' '.join(words)} expected at {_near(sig, i)}")
    return i + len(words)


def _plain_string(tok: Token | None) -> bool:
    return _kind(tok, STRING) and tok is not None and tok.text[0] in "'\""


def _name(sig: list[Token], i: int, schema: str, name: str, noun: str, exact: bool) -> int:
    """The index after `name` or `schema`.`name` at sig[i] (never another database), or refuse. Tables:
    quoted and exact; other objects: as written, names compared without case (as the server does)."""
    parts = [_at(sig, i)] + ([_at(sig, i + 2)] if is_op(_at(sig, i + 1), ".") else [])
    if not all(_kind(p, IDENT) or (_kind(p, WORD) and not exact) for p in parts):
        raise _Bad(f"is not a CREATE of that {noun} (no {noun} name where it belongs, at {_near(sig, i)})")
    values = [st.ident_value(p) or "" for p in parts]
    same = values[-1] == name if exact else values[-1].casefold() == name.casefold()
    if not same or values[:-1] not in ([], [schema]):
        raise _Bad(f"is not a CREATE of that {noun} (it names {'.'.join(p.text for p in parts if p)})")
    return i + 2 * len(parts) - 1


# --- tables ---------------------------------------------------------------------------------------
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
    if not is_op(_at(d, i), "("):
        raise _Bad(f"has a key without its parenthesised columns at {_near(d, i)}")
    close = st.matching_paren(d, i)
    for a, b in st.split_top_level(d, i + 1, close):
        k = a + (4 if is_op(_at(d, a + 1), "(") and _kind(_at(d, a + 2), NUMBER) and is_op(_at(d, a + 3), ")") else 1)
        k += 2 if words_at(d, k, "WITHOUT", "OVERLAPS") else word_at(d, k) in ("ASC", "DESC")
        if not _kind(_at(d, a), IDENT) or k != b:
            raise _Bad(f"has a key part that is not a quoted column [(length)] [ASC|DESC] at {_near(d, a)}")
    return close + 1


def _index(d: list[Token]) -> str | None:
    """[UNIQUE|FULLTEXT|SPATIAL] KEY|INDEX `name` [USING ..] (parts) [options], or PRIMARY KEY ...: its name."""
    name, i = None, 2
    if word_at(d, 0) != "PRIMARY":
        prefix = int(word_at(d, 0) in ("UNIQUE", "FULLTEXT", "SPATIAL"))
        i = prefix + (word_at(d, prefix) in ("KEY", "INDEX"))
        if not _kind(_at(d, i), IDENT) or (i == prefix and word_at(d, 0) != "UNIQUE"):
            raise _Bad(f"has a key that is not [UNIQUE|FULLTEXT|SPATIAL] KEY `name` (...) at {_near(d, 0)}")
        name, i = st.ident_value(d[i]), i + 1
    elif word_at(d, 1) != "KEY":
        raise _Bad(f"has a PRIMARY that is not PRIMARY KEY at {_near(d, 0)}")
    i += 2 if word_at(d, i) == "USING" and word_at(d, i + 1) in ("BTREE", "HASH", "RTREE") else 0
    i = _key_parts(d, i)
    while i < len(d):
        w, nxt = word_at(d, i), _at(d, i + 1)
        if (w == "USING" and word_at(d, i + 1) in ("BTREE", "HASH", "RTREE")) or (w == "COMMENT" and _plain_string(nxt)) or (
                words_at(d, i, "NOT", "IGNORED")):
            i += 2
        elif w == "KEY_BLOCK_SIZE" and _kind(_at(d, i + 1 + is_op(nxt, "=")), NUMBER):
            i += 2 + is_op(nxt, "=")
        elif words_at(d, i, "WITH", "PARSER") and _kind(_at(d, i + 2), WORD, IDENT):
            i += 3
        elif w in ("IGNORED", "VISIBLE", "INVISIBLE"):
            i += 1
        else:
            raise _Bad(f"has something after a key that is not a key option at {_near(d, i)}")
    return name


def _foreign_key(d: list[Token]) -> str:
    """CONSTRAINT `n` FOREIGN KEY [`i`] (cols) REFERENCES [`db`.]`t` (cols) [ON DELETE|UPDATE ..] [MATCH ..]:
    its name (the referenced database is checked with every other `db`. in the statement)."""
    if not _kind(_at(d, 1), IDENT):
        raise _Bad(f"has a foreign key without a quoted constraint name at {_near(d, 0)}")
    i = _expect(d, 2, "FOREIGN", "KEY")
    i = _expect(d, _key_parts(d, i + _kind(_at(d, i), IDENT)), "REFERENCES")
    i += 2 if is_op(_at(d, i + 1), ".") and _kind(_at(d, i), IDENT) else 0
    if not _kind(_at(d, i), IDENT):
        raise _Bad(f"has a foreign key that does not reference one quoted table at {_near(d, i)}")
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
            raise _Bad(f"has something after a foreign key that is not ON DELETE/UPDATE <action> or MATCH at {_near(d, i)}")
    return st.ident_value(d[1]) or ""


def _definition(d: list[Token]) -> tuple[str, str | None]:
    """The kind and name of one definition, its grammar checked (a column: a quoted name, a type, no REFERENCES)."""
    first, second = word_at(d, 0), word_at(d, 2 if _kind(_at(d, 1), IDENT) else 1)
    if _kind(_at(d, 0), IDENT):
        refs = [k for k in range(len(d)) if word_at(d, k) == "REFERENCES"]
        if not _kind(_at(d, 1), WORD) or refs:
            raise _Bad(f"has a column without a type, or one that REFERENCES another table, at {_near(d, refs[0] if refs else 0)}")
        return "column", None
    if first in ("PRIMARY", "UNIQUE", "KEY", "INDEX", "FULLTEXT", "SPATIAL"):
        return "primary" if first == "PRIMARY" else "index", _index(d)
    if first == "CONSTRAINT" and second == "FOREIGN":
        return "foreign_key", _foreign_key(d)
    if "CHECK" in (first, second) and first in ("CHECK", "CONSTRAINT"):
        i = next(k for k in range(len(d)) if word_at(d, k) == "CHECK") + 1
        if not is_op(_at(d, i), "(") or st.matching_paren(d, i) != len(d) - 1:
            raise _Bad(f"has a CHECK that is not one parenthesised condition at {_near(d, i)}")
        return "check", st.ident_value(d[1]) if first == "CONSTRAINT" and i == 3 else None
    if first == "CONSTRAINT" and second in ("UNIQUE", "PRIMARY") and _kind(_at(d, 1), IDENT):
        return "unique_constraint", _index(d[2:]) or st.ident_value(d[1])
    if first == "PERIOD" and word_at(d, 1) == "FOR" and _kind(_at(d, 2), IDENT, WORD) and _key_parts(d, 3) == len(d):
        return "period", None
    raise _Bad(f"has a definition that is not a column, key or constraint at {_near(d, 0)}")


def _check_engines(sig: list[Token]) -> frozenset[str]:
    """Every ENGINE [=] name (of the table and of each partition) names an engine of the allow-list: those named,
    upper case, HEAP as MEMORY (empty: none is, and the server uses its default)."""
    named = set()
    for k in range(len(sig)):
        if word_at(sig, k) == "ENGINE":
            v = _at(sig, k + 1 + is_op(_at(sig, k + 1), "="))
            value = (st.string_value(v) if v.kind == STRING else st.ident_value(v)) if v else None
            if str(value).upper() not in ENGINES:
                raise _Bad(f"uses the engine {value!r}, which lastline does not restore (it restores {', '.join(sorted(ENGINES))})")
            named.add(engine_name(value))
    return frozenset(named)


def _scan_table(sig: list[Token]) -> None:
    """What no table holds anywhere outside strings: a query form, another table or server, files elsewhere,
    an engine off the allow-list (partitions included), an @ name, a non-ASCII bare word."""
    depth = 0
    for k, t in enumerate(sig):
        w, nxt = (t.text.upper() if t.kind == WORD else ""), word_at(sig, k + 1)
        depth += is_op(t, "(") - is_op(t, ")")
        if (t.kind == WORD and not t.text.isascii()) or t.kind == AT_NAME or is_op(t, "@"):
            raise _Bad(f"has a bare non-ASCII word or an @ name, which SHOW CREATE TABLE never prints, at {_near(sig, k)}")
        if w in _NEVER_IN_TABLES:
            raise _Bad(_NEVER_IN_TABLES[w] + f" at {_near(sig, k)}")
        if (w == "TABLE" and k != 1) or (w == "VALUES" and nxt not in ("LESS", "IN")) or (depth < 2 and (w == "LIKE" or (
                w == "AS" and not (is_op(_at(sig, k + 1), "(") or nxt == "ROW")))):  # inside expressions: CAST(.. AS ..)
            raise _Bad(f"reads other tables (a query form: {t.text}) at {_near(sig, k)}")
    _check_engines(sig)


def _table_options(sig: list[Token], i: int) -> int:
    """Table options from sig[i] on, each of the allow-list with one value: the index of PARTITION BY, or the end."""
    while i < len(sig) and not words_at(sig, i, "PARTITION", "BY"):
        w = word_at(sig, i)
        if w == "DEFAULT":
            i += 1
            continue
        if words_at(sig, i, "WITH", "SYSTEM", "VERSIONING"):  # history a backup never carries (its backup refuses
            raise _Bad(f"keeps row history (WITH SYSTEM VERSIONING), which no backup of lastline's holds, at {_near(sig, i)}")
        engine_defined = _kind(sig[i], IDENT) and (st.ident_value(sig[i]) or "").upper() in ENGINE_DEFINED
        if not (w in TABLE_OPTIONS or engine_defined or words_at(sig, i, "CHARACTER", "SET")):
            raise _Bad(f"has a table option lastline does not allow: {sig[i].text} (at character {sig[i].pos})")
        i += 2 if w == "CHARACTER" else 1
        i += is_op(_at(sig, i), "=")
        if not _kind(_at(sig, i), WORD, NUMBER, STRING, IDENT):
            raise _Bad(f"has a table option without its value at {_near(sig, i)}")
        i += 1
    return i


def _never_run(tokens: list[Token]) -> list[Token]:
    """`tokens`, unless an executable comment among them is one MariaDB never runs (`/*!50700` to `/*!99999`:
    MySQL 5.7+ only): the server would skip what this checker reads as code."""
    bad = next((t for t in tokens if t.kind == EXEC_OPEN and "M" not in t.text and 50700 <= int(t.text[3:] or 0) <= 99999), None)
    if bad:
        raise _Bad(f"has an executable comment MariaDB never runs ({bad.text} at character {bad.pos})")
    return tokens


def _load_session_tokens(create: str) -> list[Token]:
    """A table's or sequence's tokens as the restore's load session reads them (dialect.LOAD_SESSION: backslash
    escapes, no ANSI_QUOTES, as SHOW CREATE TABLE prints them); a double-quoted token, which SHOW CREATE TABLE
    never prints and another sql_mode would read as a name, is refused."""
    raw = _never_run(st.tokenize(create))
    quoted = next((t for t in raw if t.kind == STRING and t.text[0] == '"'), None)
    if quoted:
        raise _Bad(f"has a double-quoted string, which SHOW CREATE TABLE never prints (at character {quoted.pos})")
    return raw


def _table(create: str) -> tuple[list[Token], list[int], int, int]:
    """A CREATE TABLE's tokens as the load session reads them, header and scan checked: (raw tokens, the raw
    index of each significant one, the indices of the opening and closing parentheses among those)."""
    raw = _load_session_tokens(create)
    idx = [k for k, t in enumerate(raw) if t.kind not in _MARKERS]
    sig = [raw[k] for k in idx]
    semicolon = next((t for t in sig if is_op(t, ";")), None)
    if semicolon:
        raise _Bad(f"holds more than one statement (a `;` at character {semicolon.pos})")
    i = 5 if is_op(_at(sig, 3), ".") else 3
    if not words_at(sig, 0, "CREATE", "TABLE") or not _kind(_at(sig, 2), IDENT) or not is_op(_at(sig, i), "(") or any(
            t.in_exec for t in sig[:i + 1]):
        raise _Bad("is not a CREATE of that table (it is not CREATE TABLE `name` (...))")
    _scan_table(sig)
    return raw, idx, i, st.matching_paren(sig, i)


def _definitions(raw: list[Token], idx: list[int], open_: int, close: int) -> list[Definition]:
    sig, out = [raw[k] for k in idx], []
    for a, b in st.split_top_level(sig, open_ + 1, close):
        if a == b or sig[b].in_exec:
            raise _Bad(f"has an empty definition, or an executable comment around a comma, at {_near(sig, a)}")
        kind, name = _definition(sig[a:b])
        body = [x for x in raw[idx[a - 1] + 1:idx[b]] if x.kind not in (st.SPACE, st.COMMENT)]
        if kind in ("index", "foreign_key") and len(body) != b - a:
            raise _Bad(f"has an executable comment in a key or foreign key at {_near(sig, a)}")
        text = "".join((" " if k > a and idx[k] != idx[k - 1] + 1 else "") + sig[k].text for k in range(a, b))
        out.append(Definition(kind, body[0].pos, body[-1].end, sig[a - 1].end, text, name))
    return out


def table_definitions(create: str) -> tuple[int, list[Definition], int]:
    """The definitions of a CREATE TABLE as SHOW CREATE TABLE prints it, each checked against the grammar of its
    kind: (where the text after the opening parenthesis starts, the definitions, where the closing parenthesis
    is). Raises IntegrityError for a statement that is not such a table."""
    try:
        raw, idx, open_, close = _table(create)
        return raw[idx[open_]].end, _definitions(raw, idx, open_, close), raw[idx[close]].pos
    except (_Bad, st.SqlTextError) as e:
        raise _refuse(f"the table {create[:60]!r}...", str(e)) from None


def _check_table(create: str, obj: dict, databases: Collection[str]) -> frozenset[str]:
    """Checks a table's CREATE; returns the engines it names (_check_engines)."""
    raw, idx, open_, close = _table(create)
    sig = [raw[k] for k in idx]
    _name(sig, 2, obj["schema"], obj["name"], "table", exact=True)
    _definitions(raw, idx, open_, close)
    end = _table_options(sig, close + 1)
    if end < len(sig) and not words_at(sig, end, "PARTITION", "BY"):
        raise _Bad(f"has something after its options that is not PARTITION BY at {_near(sig, end)}")
    for k, t in enumerate(sig):  # `db`.: the table's own database, or (foreign keys) one this restore restores
        if is_op(t, ".") and (not _kind(sig[k - 1], IDENT) or (
                (db := st.ident_value(sig[k - 1])) != obj["schema"] and db not in databases)):
            raise _Bad(f"refers to database {sig[k - 1].text}, which this restore does not restore (at character {t.pos})")
    return _check_engines(sig)


def _check_sequence(create: str, obj: dict) -> frozenset[str]:
    """Checks a sequence's CREATE; returns the engines it names (_check_engines)."""
    sig = st.significant(_load_session_tokens(create))
    if any(is_op(t, ";") for t in sig) or not words_at(sig, 0, "CREATE", "SEQUENCE"):
        raise _Bad("is not a CREATE of that sequence, or holds more than one statement (a `;`)")
    i = _name(sig, 2, obj["schema"], obj["name"], "sequence", exact=True)
    engines = _check_engines(sig)
    while i < len(sig) and (word_at(sig, i) in SEQUENCE_WORDS or sig[i].kind == NUMBER or sig[i].text in ("=", "-", "+")):
        i += 1
    if _table_options(sig, i) < len(sig):
        raise _Bad(f"has a sequence option lastline does not allow at {_near(sig, _table_options(sig, i))}")
    return engines


# --- views, triggers, routines, events ---------------------------------------------------------------
def _definer_end(sig: list[Token], i: int) -> int:
    """The index after `DEFINER = user[@host]` (or CURRENT_USER / CURRENT_ROLE [()]) at sig[i]."""
    j = i + 2
    if not is_op(_at(sig, i + 1), "="):
        raise _Bad(f"has a DEFINER without `=` at {_near(sig, i)}")
    if word_at(sig, j) in ("CURRENT_USER", "CURRENT_ROLE"):
        return j + (3 if is_op(_at(sig, j + 1), "(") and is_op(_at(sig, j + 2), ")") else 1)
    if not (_kind(_at(sig, j), IDENT, WORD) or _plain_string(_at(sig, j))):
        raise _Bad(f"has a DEFINER that is not an account at {_near(sig, j)}")
    if not is_op(_at(sig, j + 1), "@"):
        return j + 1
    if not (_kind(_at(sig, j + 2), IDENT, AT_NAME) or _plain_string(_at(sig, j + 2))):
        raise _Bad(f"has a DEFINER whose host is not a name at {_near(sig, j)}")
    return j + 3


def _header(sig: list[Token], kind: str) -> tuple[int, tuple[int, int]]:
    """`CREATE [OR REPLACE] [ALGORITHM=..] [DEFINER=..] [SQL SECURITY ..] [AGGREGATE] <kind word>`: the index of
    the kind's word, and the (first, after-last) indices of the DEFINER clause (empty where it would go)."""
    i = 3 if words_at(sig, 0, "CREATE", "OR", "REPLACE") else 1
    if kind == "views" and word_at(sig, i) == "ALGORITHM" and is_op(_at(sig, i + 1), "=") and word_at(sig, i + 2):
        i += 3
    definer = (i, _definer_end(sig, i) if word_at(sig, i) == "DEFINER" else i)
    i = definer[1]
    if kind == "views" and words_at(sig, i, "SQL", "SECURITY") and word_at(sig, i + 2) in ("DEFINER", "INVOKER"):
        i += 3
    i += kind == "routines" and words_at(sig, i, "AGGREGATE", "FUNCTION")
    if word_at(sig, 0) != "CREATE" or word_at(sig, i) not in _KIND_WORDS.get(kind, ()):
        raise _Bad(f"is not a CREATE of that {kind[:-1]} (no CREATE ... {' or '.join(_KIND_WORDS.get(kind, ('?',)))} "
                   f"where it belongs, at {_near(sig, i)})")
    return i, definer


def _body_start(kind: str, sig: list[Token], i: int, obj: dict) -> int:
    """Where the body of a trigger, routine or event whose name ends before sig[i] starts."""
    if kind == "triggers":
        if word_at(sig, i) not in ("BEFORE", "AFTER") or word_at(sig, i + 1) not in ("INSERT", "UPDATE", "DELETE"):
            raise _Bad(f"is not a CREATE of that trigger (no BEFORE|AFTER INSERT|UPDATE|DELETE at {_near(sig, i)})")
        i = _name(sig, _expect(sig, i + 2, "ON"), obj["schema"], str(obj.get("table", "")), "trigger", exact=False)
        i = _expect(sig, i, "FOR", "EACH", "ROW")
        return i + 2 if word_at(sig, i) in ("FOLLOWS", "PRECEDES") else i
    if kind == "events":
        i, depth = _expect(sig, i, "ON", "SCHEDULE"), 0
        while i < len(sig) and not (depth == 0 and word_at(sig, i) == "DO"):
            depth += is_op(sig[i], "(") - is_op(sig[i], ")")
            i += 1
        return i + 1
    if not is_op(_at(sig, i), "("):
        raise _Bad(f"is not a CREATE of that routine (no parameter list at {_near(sig, i)})")
    i = st.matching_paren(sig, i) + 1
    if str(obj.get("type")).upper() == "FUNCTION":  # RETURNS <type> as SHOW CREATE FUNCTION prints it
        i = _expect(sig, i, "RETURNS") + 1
        i = st.matching_paren(sig, i) + 1 if is_op(_at(sig, i), "(") else i
        while word_at(sig, i) in _TYPE_ATTRS:
            i += 1 if word_at(sig, i) not in ("CHARSET", "COLLATE", "CHARACTER") else 2 + (word_at(sig, i) == "CHARACTER")
    while True:
        c = next((c for c in _CHARACTERISTICS if words_at(sig, i, *c)), None)
        if c is None:
            return i
        i += len(c) + (c[0] in ("COMMENT", "SQL"))


def _check_program(kind: str, sig: list[Token], obj: dict) -> None:
    """A view, trigger, routine or event: the object's own name (a trigger: on its own table), one statement."""
    noun = kind[:-1]
    i, _definer = _header(sig, kind)
    if kind == "routines" and sig[i].text.upper() != str(obj.get("type")).upper():
        raise _Bad(f"is not a CREATE of that {noun} (a {sig[i].text.upper()}, not a {obj.get('type')})")
    i = _name(sig, i + 1, obj["schema"], obj["name"], noun, exact=False)
    if kind == "views":
        _expect(sig, st.matching_paren(sig, i) + 1 if is_op(_at(sig, i), "(") else i, "AS")
        if any(is_op(t, ";") for t in sig):
            raise _Bad("holds more than one statement (a `;`)")
        return
    i = _body_start(kind, sig, i, obj)
    if i >= len(sig) or any(is_op(t, ";") for t in sig[:i]):
        raise _Bad(f"is not a CREATE of that {noun} (no body, or a `;` before it)")
    try:
        st.check_body(sig, i)
    except st.SqlTextError as e:
        raise _Bad(f"holds more than one statement, or a body lastline cannot follow: {e}") from None


def checked_create(kind: str, obj: dict, databases: Collection[str] | None = None,
                   engines: dict[tuple[str, str], frozenset[str]] | None = None) -> str:
    """The CREATE statement of a schema.json object, refused (IntegrityError) unless it creates that very
    object as the server prints it: one statement, the object's own name and database (a trigger: on its own
    table); a table only with allowed definitions, engines and options, and foreign keys into its own database
    or one of `databases` (the restore's; None: its own only). Objects are read under their own sql_mode.
    `engines`: a table's or sequence's engines as its CREATE names them are put there, by (schema, name)."""
    create = obj.get("create")
    if not isinstance(create, str) or not isinstance(obj.get("name"), str) or not isinstance(obj.get("schema"), str):
        raise IntegrityError(f"schema.json: a {kind[:-1]} entry without a name, database or statement: {str(obj)[:200]}")
    try:
        if kind in ("tables", "sequences"):  # no copy of `databases` per table: read only at a `db`.
            named = _check_table(create, obj, databases or ()) if kind == "tables" else _check_sequence(create, obj)
            if engines is not None:
                engines[(obj["schema"], obj["name"])] = named
        elif kind in _KIND_WORDS:
            session_mode(obj.get("sql_mode"))
            tokens = _never_run(st.tokenize(create, **st.mode_options(obj.get("sql_mode"))))
            _check_program(kind, st.significant(tokens), obj)
        else:
            raise _Bad(f"is of a kind lastline does not restore ({kind})")
    except (_Bad, st.SqlTextError) as e:
        problem = str(e) if isinstance(e, _Bad) else f"cannot be read as the server reads it: {e}"
        raise _refuse(f"{kind[:-1]} {obj['schema']}.{obj['name']}", problem) from None
    return create


def _header_tokens(kind: str, create: str, until: set[str]) -> tuple[list[Token], list[int], list[Token], int,
                                                                      tuple[int, int]]:
    """A statement's header, up to the first of `until`, read the same whatever the sql_mode: (raw tokens, the
    raw index of each significant one, those, the index of the kind's word, the DEFINER clause's range)."""
    raw = st.tokenize_any_mode(create, until=frozenset(until), double_quotes=True)
    idx = [k for k, t in enumerate(raw) if t.kind not in _MARKERS]
    sig = [raw[k] for k in idx]
    return (raw, idx, sig, *_header(sig, kind))


def _set_definer(kind: str, create: str, clause: str) -> str:
    """The statement with its header's DEFINER clause replaced by `clause` ("": removed); refused
    (IntegrityError) when the header cannot be read exactly."""
    if kind not in _KIND_WORDS:
        return create
    try:
        raw, _idx, sig, _kw, (a, b) = _header_tokens(kind, create, set(_KIND_WORDS[kind]))
        if any(t.kind == EXEC_OPEN for t in raw):  # a server may skip it: the DEFINER must be plain code
            raise _Bad("has an executable comment before the object's name")
    except (_Bad, st.SqlTextError) as e:
        raise _refuse(("an " if kind == "events" else "a ") + kind[:-1], f"has a header lastline cannot place a DEFINER in ({e})") from None
    start, end = sig[a].pos, sig[b - 1].end if b > a else sig[a].pos
    return create[:start] + (clause + " " if clause else "") + create[end:].lstrip(" \t\r\n")


def without_definer(kind: str, create: str) -> str:
    """The statement with its header's `DEFINER = ...` clause removed, so that the server makes the restoring
    account the definer (SQL SECURITY stays as it is). Tables and sequences come back unchanged; a header
    that cannot be read exactly is refused (IntegrityError)."""
    return _set_definer(kind, create, "")


def with_definer(kind: str, create: str, definer: str) -> str:
    """The statement with `DEFINER=`user`@`host`` for `definer` ("user@host", from the deployment's
    connection) in place of the backup's (or added where the grammar puts it); see without_definer."""
    user, at, host = definer.rpartition("@")
    if not (user and at and host):
        raise ConfigError(f"definer {definer!r} is not an account: write it as user@host.")
    return _set_definer(kind, create, f"DEFINER={quote_ident(user)}@{quote_ident(host)}")


def disabled_event(create: str) -> str:
    """An event's CREATE with its status set to DISABLE (ENABLE, DISABLE ON SLAVE|REPLICA replaced; DISABLE put
    where the grammar wants it when there is none), so a restored event never runs before someone enables it.
    Refused (IntegrityError) when the header up to DO cannot be read exactly."""
    try:
        raw, _idx, sig, kw, _definer = _header_tokens("events", create, {"DO"})
        start = next((k for k in range(kw, len(sig)) if words_at(sig, k, "ON", "SCHEDULE")), -1)
        status = [k for k in range(max(start, 0), len(sig)) if word_at(sig, k) in ("ENABLE", "DISABLE")]
        if word_at(sig, len(sig) - 1) != "DO" or any(t.kind == EXEC_OPEN for t in raw) or start < 0 or len(status) > 1:
            raise _Bad("has no ON SCHEDULE or DO, an executable comment before DO, or two ENABLE/DISABLE")
    except (_Bad, st.SqlTextError) as e:
        raise _refuse("an event", f"has a header lastline cannot set DISABLE in ({e})") from None
    if status:
        k = status[0]
        last = k + 2 if word_at(sig, k + 1) == "ON" and word_at(sig, k + 2) in ("SLAVE", "REPLICA") else k
        return create[:sig[k].pos] + "DISABLE" + create[sig[last].end:]
    at = next((k for k in range(start, len(sig)) if word_at(sig, k) == "COMMENT"), len(sig) - 1)
    return create[:sig[at].pos] + "DISABLE " + create[sig[at].pos:]


def definition_name(definition: str) -> str:
    """The name of a held-back index or foreign key (as split_deferred returns them), quotes undone: use it
    rather than splitting on backquotes, which misreads a name that holds a backquote."""
    sig = st.significant(st.tokenize(definition))
    k = 1 if word_at(sig, 0) == "CONSTRAINT" else next((k for k, t in enumerate(sig) if t.kind == IDENT), -1)
    return (st.ident_value(sig[k]) or "") if _kind(_at(sig, k), IDENT) else ""


def database_create(d: dict) -> str:
    """`CREATE DATABASE IF NOT EXISTS` rebuilt from the entry's name, character set and collation."""
    for key in ("charset", "collation"):
        if not NAME_RE.match(str(d.get(key) or "")):
            raise IntegrityError(f"schema.json: database {d.get('name')!r} has a {key} {d.get(key)!r} that is not a name; refused.")
    return f"CREATE DATABASE IF NOT EXISTS {quote_ident(d['name'])} CHARACTER SET {d['charset']} COLLATE {d['collation']}"


def _one_account(statement: Any, first: tuple[str, ...], user: str, host: str) -> list[Token]:
    """The significant tokens of a CREATE USER / GRANT ... TO of exactly `user`@`host` (one account, one statement)."""
    raw = st.tokenize_any_mode(statement if isinstance(statement, str) else "")
    sig = st.significant(raw)
    to = 2 if first == ("CREATE", "USER") else next((k + 1 for k in range(len(sig)) if word_at(sig, k) == "TO"), -1)
    if not words_at(sig, 0, *first) or to < 0 or any(t.kind == EXEC_OPEN or is_op(t, ";") for t in raw):
        raise _Bad(f"is not one {' '.join(first)}{' ... TO' if first == ('GRANT',) else ''} statement")

    def value(t: Token | None) -> str | None:
        if t is None:
            return None
        return t.text if _kind(t, AT_NAME) else st.string_value(t) if _plain_string(t) else st.ident_value(t)
    if not is_op(_at(sig, to + 1), "@") or (value(_at(sig, to)), value(_at(sig, to + 2))) != (user, host) or any(
            is_op(t, ",") for t in sig[to + 3:]):
        raise _Bad(f"names another account than {user}@{host}, or a second one, at {_near(sig, to)}")
    return sig


def checked_grants(g: dict) -> list[str]:
    """The statements that recreate one account of schema.json (CREATE USER IF NOT EXISTS, then its GRANTs),
    refused unless each is the CREATE USER or a GRANT ... TO of that very account, and of it alone."""
    user, host, create = g.get("user"), g.get("host"), g.get("create")
    if not isinstance(user, str) or not isinstance(host, str) or not isinstance(create, str):
        raise IntegrityError(f"schema.json: a grants entry without user, host or statement: {str(g)[:200]}")
    try:
        end = _one_account(create, ("CREATE", "USER"), user, host)[1].end
    except (_Bad, st.SqlTextError) as e:
        raise IntegrityError(f"schema.json: the CREATE USER of {user}@{host} is not that account's ({e}; {create[:80]!r}); "
                             "refused, nothing was run.") from None
    for grant in g.get("grants", []):
        try:
            _one_account(grant, ("GRANT",), user, host)
        except (_Bad, st.SqlTextError) as e:
            raise IntegrityError(f"schema.json: a grant of {user}@{host} is not a GRANT to that account ({e}; "
                                 f"{str(grant)[:80]!r}); refused, nothing was run.") from None
    return [create[:end] + " IF NOT EXISTS" + create[end:], *g.get("grants", [])]


def _unescaped(pattern: str) -> str | None:
    """A GRANT's database pattern as the one name it matches, or None when it holds a wildcard (`_`, `%`)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(pattern[i + 1])
            i += 2
            continue
        if ch in "_%":
            return None
        out.append(ch)
        i += 1
    return "".join(out)


def grant_reach(grant: str, databases: list[str]) -> str | None:
    """What a GRANT of schema.json reaches beyond `databases` (None: nothing; `GRANT USAGE ON *.*` grants no
    access). A role, PROXY, a global or wildcard level, or another database reach beyond."""
    try:
        sig = st.significant(st.tokenize_any_mode(grant))
        on = next((k for k in range(len(sig)) if word_at(sig, k) == "ON"), -1)
        to = next((k for k in range(len(sig)) if word_at(sig, k) == "TO"), -1)
    except st.SqlTextError as e:
        return f"cannot be read ({e})"
    if on < 0 or not 0 < on < to:
        return "grants a role"
    privileges = [word_at(sig, k) for k in range(1, on)]
    if "PROXY" in privileges:
        return "grants PROXY"
    k = on + 1
    if word_at(sig, k) in ("PROCEDURE", "FUNCTION", "PACKAGE", "TABLE"):
        k += 2 if word_at(sig, k + 1) == "BODY" else 1
    level = sig[k:to]
    if len(level) == 3 and level[0].text == "*" and is_op(level[1], ".") and level[2].text == "*":
        return None if privileges == ["USAGE"] else "is global (ON *.*)"
    if len(level) != 3 or not is_op(level[1], "."):
        return f"names no database of its own ({' '.join(t.text for t in level)})"
    name = _unescaped(st.ident_value(level[0]) or "")
    if name is None:
        return f"matches several databases ({st.ident_value(level[0])!r}: `_` and `%` are wildcards there)"
    if name not in databases:
        return f"reaches database {name!r}"
    return None


def validate_schema(schema: dict, databases: list[str], grants: bool = False) -> dict[tuple[str, str], frozenset[str]]:
    """Check every statement a restore of `databases` would run from schema.json (before anything is touched).
    Returns the engines each table's and sequence's CREATE names, by (schema, name), read on the checked tokens."""
    scope = frozenset(databases)  # asked once per object: a list would cost objects x databases
    engines: dict[tuple[str, str], frozenset[str]] = {}
    for d in schema.get("databases", []):
        if d.get("name") in scope:
            database_create(d)
    for kind in ("tables", "sequences", "views", "triggers", "routines", "events"):
        for obj in schema.get(kind, []):
            if obj.get("schema") in scope:
                checked_create(kind, obj, scope, engines)
                session_name(obj.get("character_set_client"), "character_set_client")
                session_name(obj.get("collation_connection"), "collation_connection")
    if grants:
        for g in schema.get("grants", []):
            checked_grants(g)
    return engines


# every sql_mode name MariaDB and MySQL print (a schema.json value must be a comma list of these, as a string:
# a number would be taken as a bitmask, which the checks could not read the same way as the server)
SQL_MODES = frozenset("""REAL_AS_FLOAT PIPES_AS_CONCAT ANSI_QUOTES IGNORE_SPACE IGNORE_BAD_TABLE_OPTIONS ONLY_FULL_GROUP_BY
    NO_UNSIGNED_SUBTRACTION NO_DIR_IN_CREATE POSTGRESQL ORACLE MSSQL DB2 MAXDB NO_KEY_OPTIONS NO_TABLE_OPTIONS
    NO_FIELD_OPTIONS MYSQL323 MYSQL40 ANSI NO_AUTO_VALUE_ON_ZERO NO_BACKSLASH_ESCAPES STRICT_TRANS_TABLES STRICT_ALL_TABLES
    NO_ZERO_IN_DATE NO_ZERO_DATE INVALID_DATES ERROR_FOR_DIVISION_BY_ZERO TRADITIONAL NO_AUTO_CREATE_USER
    HIGH_NOT_PRECEDENCE NO_ENGINE_SUBSTITUTION PAD_CHAR_TO_FULL_LENGTH EMPTY_STRING_IS_NULL SIMULTANEOUS_ASSIGNMENT
    TIME_ROUND_FRACTIONAL TIME_TRUNCATE_FRACTIONAL""".split())


def session_mode(value: Any) -> str:
    """An object's sql_mode from schema.json: a string of known mode names (refused otherwise)."""
    if value in (None, ""):
        return ""
    if not isinstance(value, str) or any(m.strip().upper() not in SQL_MODES for m in value.split(",")):
        raise IntegrityError(f"schema.json: sql_mode {str(value)[:120]!r} is not a list of sql_mode names; refused.")
    return value


def definer_security(kind: str, obj: dict, create: str) -> str:
    """A view's or routine's statement with `SQL SECURITY INVOKER` made `DEFINER` (the default when none is
    given): restored code runs as its definer (lastline's objects owner), never as whoever calls it (an
    administrator, an application): what the backup wrote cannot borrow a caller's privileges. Other kinds
    come back unchanged; a statement that cannot be read exactly is refused."""
    if kind not in ("views", "routines"):
        return create
    try:
        sig = st.significant(_never_run(st.tokenize(create, **st.mode_options(session_mode(obj.get("sql_mode"))))))
        i, _definer = _header(sig, kind)
        end = i if kind == "views" else _body_start(kind, sig, _name(sig, i + 1, obj["schema"], obj["name"], "routine", exact=False), obj)
    except (_Bad, st.SqlTextError) as e:
        raise _refuse(f"{kind[:-1]} {obj.get('schema')}.{obj.get('name')}", f"has a header lastline cannot read ({e})") from None
    out, last = [], 0
    for k in range(end):
        if words_at(sig, k, "SQL", "SECURITY") and word_at(sig, k + 2) == "INVOKER":
            out += [create[last:sig[k + 2].pos], "DEFINER"]
            last = sig[k + 2].end
    return "".join(out) + create[last:]


def session_name(value: Any, what: str) -> str | None:
    """A character set or collation name from schema.json, checked to be one (None stays None)."""
    if value in (None, ""):
        return None
    if not NAME_RE.match(str(value)):
        raise IntegrityError(f"schema.json: {what} {value!r} is not a character set or collation name; refused.")
    return str(value)


# --- what a restore accepts from schema.json (untrusted input: a backup folder is writable by many) ----
DEFERRED_KINDS = ("index", "foreign_key")  # held back by split_deferred (the primary key stays: chunks load in its order)


@functools.lru_cache(maxsize=1 << 14)
def split_deferred(create: str, keep_indexes: bool = False) -> tuple[str, list[str], list[str]]:
    """CREATE TABLE without its secondary indexes and foreign keys, plus those definitions, each exactly one
    `[UNIQUE|FULLTEXT|SPATIAL] KEY `name` (...)` or `CONSTRAINT `name` FOREIGN KEY ...` on one line:
    (create, index definitions, foreign keys); `keep_indexes`: the CREATE keeps its indexes (the foreign keys alone
    held back). Read on tokens as the server reads them, every definition checked against its grammar
    (schema_checks.table_definitions): IntegrityError for anything else. Remembered per text (a process asks for one
    table's split several times: ~1 ms each at 10,000 tables); callers only read it."""
    body_start, definitions, _close = table_definitions(create)
    held = ("foreign_key",) if keep_indexes else DEFERRED_KINDS
    kept = [d for d in definitions if d.kind not in held]
    body = ",".join(create[d.lead:d.end] for d in kept)
    indexes = [d.text for d in definitions if d.kind == "index"]
    fks = [d.text for d in definitions if d.kind == "foreign_key"]
    return create[:body_start] + body + create[definitions[-1].end:], indexes, fks
