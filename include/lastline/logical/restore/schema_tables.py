"""The tables and sequences of schema.json: a CREATE TABLE only as SHOW CREATE TABLE prints it (allow-lists of
definitions, engines and options, no other database but the restore's), each definition read against the grammar
of its kind; and a table's secondary indexes and foreign keys held back (split_deferred)."""
from __future__ import annotations

import functools
from collections.abc import Collection

from lastline.core.sql import engine_name
from lastline.logical.format import sql_text
from lastline.logical.format.sql_text import (
    AT_NAME,
    IDENT,
    NUMBER,
    OP,
    STRING,
    WORD,
    Token,
    is_op,
    word_at,
    words_at,
)
from lastline.logical.restore.schema_definitions import Definition, read_definition
from lastline.logical.restore.schema_tokens import (
    MARKERS,
    BadStatement,
    kind_is,
    near,
    never_run,
    object_name,
    refuse,
    token_at,
)

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


def _check_engines(sig: list[Token]) -> frozenset[str]:
    """Every ENGINE [=] name (of the table and of each partition) names an engine of the allow-list: those named,
    upper case, HEAP as MEMORY (empty: none is, and the server uses its default)."""
    named = set()
    for k, t in enumerate(sig):  # (word_at is "ENGINE" only for such a word: the cheap test first)
        if t.kind == WORD and t.text.upper() == "ENGINE" and word_at(sig, k) == "ENGINE":
            v = token_at(sig, k + 1 + is_op(token_at(sig, k + 1), "="))
            value = (sql_text.string_value(v) if v.kind == STRING else sql_text.ident_value(v)) if v else None
            if str(value).upper() not in ENGINES:
                raise BadStatement(f"uses the engine {value!r}, which lastline does not restore (it restores {', '.join(sorted(ENGINES))})")
            named.add(engine_name(value))
    return frozenset(named)


def _scan_table(sig: list[Token]) -> frozenset[str]:
    """What no table holds anywhere outside strings: a query form, another table or server, files elsewhere,
    an engine off the allow-list (partitions included), an @ name, a non-ASCII bare word. Returns the engines it names
    (_check_engines). One pass, each token's kind looked at once (10,000 tables' CREATEs are checked before a restore
    starts)."""
    depth = 0
    for k, t in enumerate(sig):
        if t.kind == OP:
            depth += (t.text == "(") - (t.text == ")")
            if t.text != "@":
                continue
        elif t.kind != WORD and t.kind != AT_NAME:
            continue
        if t.kind != WORD or not t.text.isascii():
            raise BadStatement(f"has a bare non-ASCII word or an @ name, which SHOW CREATE TABLE never prints, at {near(sig, k)}")
        w = t.text.upper()
        if w in _NEVER_IN_TABLES:
            raise BadStatement(_NEVER_IN_TABLES[w] + f" at {near(sig, k)}")
        if (w == "TABLE" and k != 1) or (w == "VALUES" and word_at(sig, k + 1) not in ("LESS", "IN")) or (depth < 2 and (
                w == "LIKE" or (w == "AS" and not (is_op(token_at(sig, k + 1), "(") or word_at(sig, k + 1) == "ROW")))):
            raise BadStatement(f"reads other tables (a query form: {t.text}) at {near(sig, k)}")  # (inside expressions: CAST(.. AS ..))
    return _check_engines(sig)


def _table_options(sig: list[Token], i: int) -> int:
    """Table options from sig[i] on, each of the allow-list with one value: the index of PARTITION BY, or the end."""
    while i < len(sig) and not words_at(sig, i, "PARTITION", "BY"):
        w = word_at(sig, i)
        if w == "DEFAULT":
            i += 1
            continue
        if words_at(sig, i, "WITH", "SYSTEM", "VERSIONING"):  # history a backup never carries (its backup refuses
            raise BadStatement(f"keeps row history (WITH SYSTEM VERSIONING), which no backup of lastline's holds, at {near(sig, i)}")
        engine_defined = kind_is(sig[i], IDENT) and (sql_text.ident_value(sig[i]) or "").upper() in ENGINE_DEFINED
        if not (w in TABLE_OPTIONS or engine_defined or words_at(sig, i, "CHARACTER", "SET")):
            raise BadStatement(f"has a table option lastline does not allow: {sig[i].text} (at character {sig[i].pos})")
        i += 2 if w == "CHARACTER" else 1
        i += is_op(token_at(sig, i), "=")
        if not kind_is(token_at(sig, i), WORD, NUMBER, STRING, IDENT):
            raise BadStatement(f"has a table option without its value at {near(sig, i)}")
        i += 1
    return i


def _load_session_tokens(create: str) -> list[Token]:
    """A table's or sequence's tokens as the restore's load session reads them (dialect.LOAD_SESSION: backslash
    escapes, no ANSI_QUOTES, as SHOW CREATE TABLE prints them); a double-quoted token, which SHOW CREATE TABLE
    never prints and another sql_mode would read as a name, is refused."""
    raw = never_run(sql_text.tokenize(create))
    quoted = next((t for t in raw if t.kind == STRING and t.text[0] == '"'), None)
    if quoted:
        raise BadStatement(f"has a double-quoted string, which SHOW CREATE TABLE never prints (at character {quoted.pos})")
    return raw


def _table(create: str) -> tuple[list[Token], list[int], int, int, frozenset[str]]:
    """A CREATE TABLE's tokens as the load session reads them, header and scan checked: (raw tokens, the raw
    index of each significant one, the indices of the opening and closing parentheses among those, the engines it
    names)."""
    raw = _load_session_tokens(create)
    idx = [k for k, t in enumerate(raw) if t.kind not in MARKERS]
    sig = [raw[k] for k in idx]
    semicolon = next((t for t in sig if is_op(t, ";")), None)
    if semicolon:
        raise BadStatement(f"holds more than one statement (a `;` at character {semicolon.pos})")
    i = 5 if is_op(token_at(sig, 3), ".") else 3
    if not words_at(sig, 0, "CREATE", "TABLE") or not kind_is(token_at(sig, 2), IDENT) or not is_op(token_at(sig, i), "(") or any(
            t.in_exec for t in sig[:i + 1]):
        raise BadStatement("is not a CREATE of that table (it is not CREATE TABLE `name` (...))")
    engines = _scan_table(sig)
    return raw, idx, i, sql_text.matching_paren(sig, i), engines


def _definitions(raw: list[Token], idx: list[int], open_: int, close: int) -> list[Definition]:
    sig, out = [raw[k] for k in idx], []
    for a, b in sql_text.split_top_level(sig, open_ + 1, close):
        if a == b or sig[b].in_exec:
            raise BadStatement(f"has an empty definition, or an executable comment around a comma, at {near(sig, a)}")
        kind, name = read_definition(sig[a:b])
        body = [x for x in raw[idx[a - 1] + 1:idx[b]] if x.kind not in (sql_text.SPACE, sql_text.COMMENT)]
        if kind in ("index", "foreign_key") and len(body) != b - a:
            raise BadStatement(f"has an executable comment in a key or foreign key at {near(sig, a)}")
        text = "".join((" " if k > a and idx[k] != idx[k - 1] + 1 else "") + sig[k].text for k in range(a, b))
        out.append(Definition(kind, body[0].pos, body[-1].end, sig[a - 1].end, text, name))
    return out


def table_definitions(create: str) -> tuple[int, list[Definition], int]:
    """The definitions of a CREATE TABLE as SHOW CREATE TABLE prints it, each checked against the grammar of its
    kind: (where the text after the opening parenthesis starts, the definitions, where the closing parenthesis
    is). Raises IntegrityError for a statement that is not such a table."""
    try:
        raw, idx, open_, close, _engines = _table(create)
        return raw[idx[open_]].end, _definitions(raw, idx, open_, close), raw[idx[close]].pos
    except (BadStatement, sql_text.SqlTextError) as e:
        raise refuse(f"the table {create[:60]!r}...", str(e)) from None


def check_table(create: str, obj: dict, databases: Collection[str]) -> frozenset[str]:
    """Checks a table's CREATE; returns the engines it names (_check_engines)."""
    raw, idx, open_, close, engines = _table(create)
    sig = [raw[k] for k in idx]
    object_name(sig, 2, obj["schema"], obj["name"], "table", exact=True)
    _definitions(raw, idx, open_, close)
    end = _table_options(sig, close + 1)
    if end < len(sig) and not words_at(sig, end, "PARTITION", "BY"):
        raise BadStatement(f"has something after its options that is not PARTITION BY at {near(sig, end)}")
    for k, t in enumerate(sig):  # `db`.: the table's own database, or (foreign keys) one this restore restores
        if t.kind == OP and t.text == "." and (not kind_is(sig[k - 1], IDENT) or (
                (db := sql_text.ident_value(sig[k - 1])) != obj["schema"] and db not in databases)):
            raise BadStatement(f"refers to database {sig[k - 1].text}, which this restore does not restore (at character {t.pos})")
    return engines


def check_sequence(create: str, obj: dict) -> frozenset[str]:
    """Checks a sequence's CREATE; returns the engines it names (_check_engines)."""
    sig = sql_text.significant(_load_session_tokens(create))
    if any(is_op(t, ";") for t in sig) or not words_at(sig, 0, "CREATE", "SEQUENCE"):
        raise BadStatement("is not a CREATE of that sequence, or holds more than one statement (a `;`)")
    i = object_name(sig, 2, obj["schema"], obj["name"], "sequence", exact=True)
    engines = _check_engines(sig)
    while i < len(sig) and (word_at(sig, i) in SEQUENCE_WORDS or sig[i].kind == NUMBER or sig[i].text in ("=", "-", "+")):
        i += 1
    if _table_options(sig, i) < len(sig):
        raise BadStatement(f"has a sequence option lastline does not allow at {near(sig, _table_options(sig, i))}")
    return engines



def definition_name(definition: str) -> str:
    """The name of a held-back index or foreign key (as split_deferred returns them), quotes undone: use it
    rather than splitting on backquotes, which misreads a name that holds a backquote."""
    sig = sql_text.significant(sql_text.tokenize(definition))
    k = 1 if word_at(sig, 0) == "CONSTRAINT" else next((k for k, t in enumerate(sig) if t.kind == IDENT), -1)
    return (sql_text.ident_value(sig[k]) or "") if kind_is(token_at(sig, k), IDENT) else ""



DEFERRED_KINDS = ("index", "foreign_key")  # held back by split_deferred (the primary key stays: chunks load in its order)


@functools.lru_cache(maxsize=1 << 14)
def split_deferred(create: str, keep_indexes: bool = False) -> tuple[str, list[str], list[str]]:
    """CREATE TABLE without its secondary indexes and foreign keys, plus those definitions, each exactly one
    `[UNIQUE|FULLTEXT|SPATIAL] KEY `name` (...)` or `CONSTRAINT `name` FOREIGN KEY ...` on one line:
    (create, index definitions, foreign keys); `keep_indexes`: the CREATE keeps its indexes (the foreign keys alone
    held back). Read on tokens as the server reads them, every definition checked against its grammar
    (table_definitions): IntegrityError for anything else. Remembered per text (a process asks for one
    table's split several times: ~1 ms each at 10,000 tables); callers only read it."""
    body_start, definitions, _close = table_definitions(create)
    held = ("foreign_key",) if keep_indexes else DEFERRED_KINDS
    kept = [d for d in definitions if d.kind not in held]
    body = ",".join(create[d.lead:d.end] for d in kept)
    indexes = [d.text for d in definitions if d.kind == "index"]
    fks = [d.text for d in definitions if d.kind == "foreign_key"]
    return create[:body_start] + body + create[definitions[-1].end:], indexes, fks
