"""What every check of schema.json's statements shares: the refusal and its wording, the token look-ups, the
object's own name, and the executable comments MariaDB never runs. Read on tokens as the server's lexer reads
them (logical.format.sql_text)."""
from __future__ import annotations

from lastline.core.errors import IntegrityError
from lastline.logical.format import sql_text
from lastline.logical.format.sql_text import (
    EXEC_CLOSE,
    EXEC_OPEN,
    IDENT,
    STRING,
    WORD,
    Token,
    is_op,
    words_at,
)

MARKERS = (sql_text.SPACE, sql_text.COMMENT, EXEC_OPEN, EXEC_CLOSE)


class BadStatement(Exception):
    """A statement's problem, worded as the end of `the statement of <object> ...`."""


def refuse(what: str, problem: str) -> IntegrityError:
    return IntegrityError(f"schema.json: the statement of {what} {problem}. Nothing of it was run: the backup was "
                          "changed after it was taken (or was not written by lastline); restore another backup.")


def token_at(sig: list[Token], i: int) -> Token | None:
    return sig[i] if 0 <= i < len(sig) else None


def kind_is(tok: Token | None, *kinds: str) -> bool:
    return tok is not None and tok.kind in kinds


def near(sig: list[Token], i: int) -> str:
    return f"character {sig[i].pos} ({' '.join(t.text for t in sig[i:i + 4])[:60]!r})" if i < len(sig) else "the end"


def expect(sig: list[Token], i: int, *words: str) -> int:
    if not words_at(sig, i, *words):
        raise BadStatement(f"is not as the server prints it: {' '.join(words)} expected at {near(sig, i)}")
    return i + len(words)


def plain_string(tok: Token | None) -> bool:
    return kind_is(tok, STRING) and tok is not None and tok.text[0] in "'\""


def object_name(sig: list[Token], i: int, schema: str, name: str, noun: str, exact: bool) -> int:
    """The index after `name` or `schema`.`name` at sig[i] (never another database), or refuse. Tables:
    quoted and exact; other objects: as written, names compared without case (as the server does)."""
    parts = [token_at(sig, i)] + ([token_at(sig, i + 2)] if is_op(token_at(sig, i + 1), ".") else [])
    if not all(kind_is(p, IDENT) or (kind_is(p, WORD) and not exact) for p in parts):
        raise BadStatement(f"is not a CREATE of that {noun} (no {noun} name where it belongs, at {near(sig, i)})")
    values = [sql_text.ident_value(p) or "" for p in parts]
    same = values[-1] == name if exact else values[-1].casefold() == name.casefold()
    if not same or values[:-1] not in ([], [schema]):
        raise BadStatement(f"is not a CREATE of that {noun} (it names {'.'.join(p.text for p in parts if p)})")
    return i + 2 * len(parts) - 1



def never_run(tokens: list[Token]) -> list[Token]:
    """`tokens`, unless an executable comment among them is one MariaDB never runs (`/*!50700` to `/*!99999`:
    MySQL 5.7+ only): the server would skip what this checker reads as code."""
    bad = next((t for t in tokens if t.kind == EXEC_OPEN and "M" not in t.text and 50700 <= int(t.text[3:] or 0) <= 99999), None)
    if bad:
        raise BadStatement(f"has an executable comment MariaDB never runs ({bad.text} at character {bad.pos})")
    return tokens

