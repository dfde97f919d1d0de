"""The accounts of schema.json (restore_grants): each CREATE USER and GRANT of exactly its own account, and how
far a GRANT reaches beyond the restored databases."""
from __future__ import annotations

from typing import Any

from lastline.core.errors import IntegrityError
from lastline.logical.format import sql_text
from lastline.logical.format.sql_text import (
    AT_NAME,
    EXEC_OPEN,
    Token,
    is_op,
    word_at,
    words_at,
)
from lastline.logical.restore.schema_tokens import BadStatement, kind_is, near, plain_string, token_at


def _one_account(statement: Any, first: tuple[str, ...], user: str, host: str) -> list[Token]:
    """The significant tokens of a CREATE USER / GRANT ... TO of exactly `user`@`host` (one account, one statement)."""
    raw = sql_text.tokenize_any_mode(statement if isinstance(statement, str) else "")
    sig = sql_text.significant(raw)
    to = 2 if first == ("CREATE", "USER") else next((k + 1 for k in range(len(sig)) if word_at(sig, k) == "TO"), -1)
    if not words_at(sig, 0, *first) or to < 0 or any(t.kind == EXEC_OPEN or is_op(t, ";") for t in raw):
        raise BadStatement(f"is not one {' '.join(first)}{' ... TO' if first == ('GRANT',) else ''} statement")

    def value(t: Token | None) -> str | None:
        if t is None:
            return None
        return t.text if kind_is(t, AT_NAME) else sql_text.string_value(t) if plain_string(t) else sql_text.ident_value(t)
    if not is_op(token_at(sig, to + 1), "@") or (value(token_at(sig, to)), value(token_at(sig, to + 2))) != (user, host) or any(
            is_op(t, ",") for t in sig[to + 3:]):
        raise BadStatement(f"names another account than {user}@{host}, or a second one, at {near(sig, to)}")
    return sig


def checked_grants(g: dict) -> list[str]:
    """The statements that recreate one account of schema.json (CREATE USER IF NOT EXISTS, then its GRANTs),
    refused unless each is the CREATE USER or a GRANT ... TO of that very account, and of it alone."""
    user, host, create = g.get("user"), g.get("host"), g.get("create")
    if not isinstance(user, str) or not isinstance(host, str) or not isinstance(create, str):
        raise IntegrityError(f"schema.json: a grants entry without user, host or statement: {str(g)[:200]}")
    try:
        end = _one_account(create, ("CREATE", "USER"), user, host)[1].end
    except (BadStatement, sql_text.SqlTextError) as e:
        raise IntegrityError(f"schema.json: the CREATE USER of {user}@{host} is not that account's ({e}; {create[:80]!r}); "
                             "refused, nothing was run.") from None
    for grant in g.get("grants", []):
        try:
            _one_account(grant, ("GRANT",), user, host)
        except (BadStatement, sql_text.SqlTextError) as e:
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
        sig = sql_text.significant(sql_text.tokenize_any_mode(grant))
        on = next((k for k in range(len(sig)) if word_at(sig, k) == "ON"), -1)
        to = next((k for k in range(len(sig)) if word_at(sig, k) == "TO"), -1)
    except sql_text.SqlTextError as e:
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
    name = _unescaped(sql_text.ident_value(level[0]) or "")
    if name is None:
        return f"matches several databases ({sql_text.ident_value(level[0])!r}: `_` and `%` are wildcards there)"
    if name not in databases:
        return f"reaches database {name!r}"
    return None
