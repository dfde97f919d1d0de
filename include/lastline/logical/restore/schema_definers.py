"""The views, triggers, routines and events of schema.json: each the CREATE of its own kind and name, one
statement; and the edits a restore makes to their headers (the DEFINER replaced or removed, SQL SECURITY DEFINER,
an event disabled), made only where the header reads exactly."""
from __future__ import annotations

from lastline.core.errors import ConfigError
from lastline.core.sql import quote_ident
from lastline.logical.format import sql_text
from lastline.logical.format.sql_text import (
    AT_NAME,
    EXEC_OPEN,
    IDENT,
    WORD,
    Token,
    is_op,
    word_at,
    words_at,
)
from lastline.logical.restore.schema_session import session_mode
from lastline.logical.restore.schema_tokens import (
    MARKERS,
    BadStatement,
    expect,
    kind_is,
    near,
    never_run,
    object_name,
    plain_string,
    refuse,
    token_at,
)

KIND_WORDS = {"views": ("VIEW",), "triggers": ("TRIGGER",), "routines": ("PROCEDURE", "FUNCTION"), "events": ("EVENT",)}
_TYPE_ATTRS = {"UNSIGNED", "SIGNED", "ZEROFILL", "BINARY", "ASCII", "UNICODE", "BYTE", "CHARSET", "COLLATE", "CHARACTER"}
_CHARACTERISTICS = (("COMMENT",), ("LANGUAGE", "SQL"), ("NOT", "DETERMINISTIC"), ("DETERMINISTIC",), ("CONTAINS", "SQL"),
                    ("NO", "SQL"), ("READS", "SQL", "DATA"), ("MODIFIES", "SQL", "DATA"), ("SQL", "SECURITY"))


def _definer_end(sig: list[Token], i: int) -> int:
    """The index after `DEFINER = user[@host]` (or CURRENT_USER / CURRENT_ROLE [()]) at sig[i]."""
    j = i + 2
    if not is_op(token_at(sig, i + 1), "="):
        raise BadStatement(f"has a DEFINER without `=` at {near(sig, i)}")
    if word_at(sig, j) in ("CURRENT_USER", "CURRENT_ROLE"):
        return j + (3 if is_op(token_at(sig, j + 1), "(") and is_op(token_at(sig, j + 2), ")") else 1)
    if not (kind_is(token_at(sig, j), IDENT, WORD) or plain_string(token_at(sig, j))):
        raise BadStatement(f"has a DEFINER that is not an account at {near(sig, j)}")
    if not is_op(token_at(sig, j + 1), "@"):
        return j + 1
    if not (kind_is(token_at(sig, j + 2), IDENT, AT_NAME) or plain_string(token_at(sig, j + 2))):
        raise BadStatement(f"has a DEFINER whose host is not a name at {near(sig, j)}")
    return j + 3


def _header(sig: list[Token], kind: str) -> tuple[int, tuple[int, int]]:
    """`CREATE [OR REPLACE] [ALGORITHM=..] [DEFINER=..] [SQL SECURITY ..] [AGGREGATE] <kind word>`: the index of
    the kind's word, and the (first, after-last) indices of the DEFINER clause (empty where it would go)."""
    i = 3 if words_at(sig, 0, "CREATE", "OR", "REPLACE") else 1
    if kind == "views" and word_at(sig, i) == "ALGORITHM" and is_op(token_at(sig, i + 1), "=") and word_at(sig, i + 2):
        i += 3
    definer = (i, _definer_end(sig, i) if word_at(sig, i) == "DEFINER" else i)
    i = definer[1]
    if kind == "views" and words_at(sig, i, "SQL", "SECURITY") and word_at(sig, i + 2) in ("DEFINER", "INVOKER"):
        i += 3
    i += kind == "routines" and words_at(sig, i, "AGGREGATE", "FUNCTION")
    if word_at(sig, 0) != "CREATE" or word_at(sig, i) not in KIND_WORDS.get(kind, ()):
        raise BadStatement(f"is not a CREATE of that {kind[:-1]} (no CREATE ... {' or '.join(KIND_WORDS.get(kind, ('?',)))} "
                   f"where it belongs, at {near(sig, i)})")
    return i, definer


def _body_start(kind: str, sig: list[Token], i: int, obj: dict) -> int:
    """Where the body of a trigger, routine or event whose name ends before sig[i] starts."""
    if kind == "triggers":
        if word_at(sig, i) not in ("BEFORE", "AFTER") or word_at(sig, i + 1) not in ("INSERT", "UPDATE", "DELETE"):
            raise BadStatement(f"is not a CREATE of that trigger (no BEFORE|AFTER INSERT|UPDATE|DELETE at {near(sig, i)})")
        i = object_name(sig, expect(sig, i + 2, "ON"), obj["schema"], str(obj.get("table", "")), "trigger", exact=False)
        i = expect(sig, i, "FOR", "EACH", "ROW")
        return i + 2 if word_at(sig, i) in ("FOLLOWS", "PRECEDES") else i
    if kind == "events":
        i, depth = expect(sig, i, "ON", "SCHEDULE"), 0
        while i < len(sig) and not (depth == 0 and word_at(sig, i) == "DO"):
            depth += is_op(sig[i], "(") - is_op(sig[i], ")")
            i += 1
        return i + 1
    if not is_op(token_at(sig, i), "("):
        raise BadStatement(f"is not a CREATE of that routine (no parameter list at {near(sig, i)})")
    i = sql_text.matching_paren(sig, i) + 1
    if str(obj.get("type")).upper() == "FUNCTION":  # RETURNS <type> as SHOW CREATE FUNCTION prints it
        i = expect(sig, i, "RETURNS") + 1
        i = sql_text.matching_paren(sig, i) + 1 if is_op(token_at(sig, i), "(") else i
        while word_at(sig, i) in _TYPE_ATTRS:
            i += 1 if word_at(sig, i) not in ("CHARSET", "COLLATE", "CHARACTER") else 2 + (word_at(sig, i) == "CHARACTER")
    while True:
        c = next((c for c in _CHARACTERISTICS if words_at(sig, i, *c)), None)
        if c is None:
            return i
        i += len(c) + (c[0] in ("COMMENT", "SQL"))


def check_program(kind: str, sig: list[Token], obj: dict) -> None:
    """A view, trigger, routine or event: the object's own name (a trigger: on its own table), one statement."""
    noun = kind[:-1]
    i, _definer = _header(sig, kind)
    if kind == "routines" and sig[i].text.upper() != str(obj.get("type")).upper():
        raise BadStatement(f"is not a CREATE of that {noun} (a {sig[i].text.upper()}, not a {obj.get('type')})")
    i = object_name(sig, i + 1, obj["schema"], obj["name"], noun, exact=False)
    if kind == "views":
        expect(sig, sql_text.matching_paren(sig, i) + 1 if is_op(token_at(sig, i), "(") else i, "AS")
        if any(is_op(t, ";") for t in sig):
            raise BadStatement("holds more than one statement (a `;`)")
        return
    i = _body_start(kind, sig, i, obj)
    if i >= len(sig) or any(is_op(t, ";") for t in sig[:i]):
        raise BadStatement(f"is not a CREATE of that {noun} (no body, or a `;` before it)")
    try:
        sql_text.check_body(sig, i)
    except sql_text.SqlTextError as e:
        raise BadStatement(f"holds more than one statement, or a body lastline cannot follow: {e}") from None


def _header_tokens(kind: str, create: str, until: set[str]) -> tuple[list[Token], list[int], list[Token], int,
                                                                      tuple[int, int]]:
    """A statement's header, up to the first of `until`, read the same whatever the sql_mode: (raw tokens, the
    raw index of each significant one, those, the index of the kind's word, the DEFINER clause's range)."""
    raw = sql_text.tokenize_any_mode(create, until=frozenset(until), double_quotes=True)
    idx = [k for k, t in enumerate(raw) if t.kind not in MARKERS]
    sig = [raw[k] for k in idx]
    return (raw, idx, sig, *_header(sig, kind))


def _set_definer(kind: str, create: str, clause: str) -> str:
    """The statement with its header's DEFINER clause replaced by `clause` ("": removed); refused
    (IntegrityError) when the header cannot be read exactly."""
    if kind not in KIND_WORDS:
        return create
    try:
        raw, _idx, sig, _kw, (a, b) = _header_tokens(kind, create, set(KIND_WORDS[kind]))
        if any(t.kind == EXEC_OPEN for t in raw):  # a server may skip it: the DEFINER must be plain code
            raise BadStatement("has an executable comment before the object's name")
    except (BadStatement, sql_text.SqlTextError) as e:
        raise refuse(("an " if kind == "events" else "a ") + kind[:-1], f"has a header lastline cannot place a DEFINER in ({e})") from None
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
            raise BadStatement("has no ON SCHEDULE or DO, an executable comment before DO, or two ENABLE/DISABLE")
    except (BadStatement, sql_text.SqlTextError) as e:
        raise refuse("an event", f"has a header lastline cannot set DISABLE in ({e})") from None
    if status:
        k = status[0]
        last = k + 2 if word_at(sig, k + 1) == "ON" and word_at(sig, k + 2) in ("SLAVE", "REPLICA") else k
        return create[:sig[k].pos] + "DISABLE" + create[sig[last].end:]
    at = next((k for k in range(start, len(sig)) if word_at(sig, k) == "COMMENT"), len(sig) - 1)
    return create[:sig[at].pos] + "DISABLE " + create[sig[at].pos:]


def definer_security(kind: str, obj: dict, create: str) -> str:
    """A view's or routine's statement with `SQL SECURITY INVOKER` made `DEFINER` (the default when none is
    given): restored code runs as its definer (lastline's objects owner), never as whoever calls it (an
    administrator, an application): what the backup wrote cannot borrow a caller's privileges. Other kinds
    come back unchanged; a statement that cannot be read exactly is refused."""
    if kind not in ("views", "routines"):
        return create
    try:
        sig = sql_text.significant(never_run(sql_text.tokenize(create, **sql_text.mode_options(session_mode(obj.get("sql_mode"))))))
        i, _definer = _header(sig, kind)
        end = i if kind == "views" else _body_start(kind, sig, object_name(sig, i + 1, obj["schema"], obj["name"], "routine", exact=False), obj)
    except (BadStatement, sql_text.SqlTextError) as e:
        raise refuse(f"{kind[:-1]} {obj.get('schema')}.{obj.get('name')}", f"has a header lastline cannot read ({e})") from None
    out, last = [], 0
    for k in range(end):
        if words_at(sig, k, "SQL", "SECURITY") and word_at(sig, k + 2) == "INVOKER":
            out += [create[last:sig[k + 2].pos], "DEFINER"]
            last = sig[k + 2].end
    return "".join(out) + create[last:]

