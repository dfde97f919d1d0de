"""What a physical base's replay lets through (pitr.event_check): each archived statement read as the server reads
it in the event's own sql_mode, with the server's lexer (lastline.logical.format.sql_text, executable comments read
as code), and passed only when it is a data change or a data definition that reaches nothing beyond the data:
no account, grant, file, plugin, global setting, replication, shutdown, system schema or engine that leaves the
datadir (statement_problem). The MAC on the archive's control files is the first line; this is the second.
"""
from __future__ import annotations

import re

from lastline.core.sql import engine_name, never_restored
from lastline.logical.format.sql_text import (
    AT_NAME,
    IDENT,
    STRING,
    WORD,
    SqlTextError,
    Token,
    check_body,
    is_op,
    significant,
    tokenize,
    tokenize_any_mode,
    word_at,
)
from lastline.pitr.statements import Query

ANSI_QUOTES, ORACLE, MSSQL, NO_BACKSLASH_ESCAPES = 1 << 2, 1 << 9, 1 << 10, 1 << 20  # sql_mode bits
# client character sets whose multi-byte characters may end in a quote or backslash byte (big5, sjis, gbk, cp932,
# with their NO PAD collations): the server would read a string's end where a byte-wise lexer does not
_UNSAFE_CHARSETS = frozenset({1, 84, 13, 88, 28, 87, 95, 96} | {n + 1024 for n in (1, 84, 13, 88, 28, 87, 95, 96)})
SAFE_ENGINES = frozenset({"INNODB", "MYISAM", "ARIA", "MEMORY", "CSV", "ARCHIVE", "BLACKHOLE", "MERGE", "MRG_MYISAM",
                          "SEQUENCE", "ROCKSDB"})
_TRANSACTION = {"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "START", "XA"}
_DATA = {"INSERT", "REPLACE", "UPDATE", "DELETE", "SELECT", "WITH", "TRUNCATE", "RENAME", "ANALYZE", "OPTIMIZE",
         "REPAIR"}
_DEFINE = {"CREATE", "ALTER", "DROP"}
_OBJECTS = {"TABLE", "DATABASE", "SCHEMA", "INDEX", "VIEW", "SEQUENCE", "TRIGGER", "PROCEDURE", "FUNCTION", "EVENT",
            "PACKAGE"}
_PROGRAMS = {"TRIGGER", "PROCEDURE", "FUNCTION", "EVENT", "PACKAGE"}
_NOT_OBJECTS = {"USER", "ROLE", "SERVER", "TABLESPACE", "LOGFILE", "INSTANCE", "PLUGIN"}
# words that reach beyond data wherever they stand (in a stored program's body too)
_BEYOND = {"GRANT", "REVOKE", "OUTFILE", "DUMPFILE", "LOAD_FILE", "INFILE", "SONAME", "DIRECTORY", "SHUTDOWN",
           "INSTALL", "UNINSTALL", "PREPARE", "EXECUTE", "DEALLOCATE", "MASTER", "SLAVE", "REPLICA", "BINLOG", "KILL",
           "PURGE", "RESET", "GLOBAL", "DELIMITER"}
_ACCOUNTS = {"USER", "ROLE", "SERVER"}  # after CREATE, ALTER, DROP, RENAME: accounts and servers
_STARTS = {"", "BEGIN", "THEN", "ELSE", "DO", "LOOP", "REPEAT"}  # a statement of a stored program's body may follow
_CLIENT = re.compile(rb"(?i)(?:^|[\r\n])[ \t\r\n\x0b\x0c]*delimiter(?![a-z0-9_$])|\\C|/\*!\*/")


def _text(raw: bytes) -> str:
    """The statement's characters: UTF-8 when it is, else byte by byte (the lexer refuses what that misreads)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _tokens(query: Query) -> list[Token]:
    """The statement's significant tokens as the server reads them under the event's sql_mode."""
    text = _text(query.text)
    mode = query.status.sql_mode
    if mode is None:
        return significant(tokenize_any_mode(text, double_quotes=True))
    if mode & ORACLE:
        raise SqlTextError("sql_mode ORACLE (the server reads the statement by another grammar)", 0)
    return significant(tokenize(text, bool(mode & ANSI_QUOTES), not mode & NO_BACKSLASH_ESCAPES, bool(mode & MSSQL)))


def _name(tok: Token, ansi: bool) -> str | None:
    """The name a token may stand for (a double-quoted string may be a name when the sql_mode is not known)."""
    if tok.kind == WORD:
        return tok.text
    if tok.kind == IDENT:
        q = tok.text[-1]
        return tok.text[1:-1].replace(q + q, q)
    if tok.kind == STRING and tok.text[:1] == '"' and ansi:
        return tok.text[1:-1].replace('""', '"')
    return None


def _sets_account(sig: list[Token], words: list[str], i: int) -> bool:
    """Whether sig[i] is PASSWORD or ROLE set inside a stored program's body, wherever its SET stands (after a handler's
    condition, in a list after a comma: `SET @x = 1, PASSWORD FOR app = ...`). A column of that name set by an UPDATE
    in a body reads the same and is refused too (said by name: choose another `until`)."""
    if words[i] not in ("PASSWORD", "ROLE") or not i or not (words[i - 1] in ("SET", "DEFAULT") or is_op(sig[i - 1], ",")):
        return False
    after = sig[i + 1] if i + 1 < len(sig) else None
    return words[i] == "ROLE" or (after is not None and (word_at(sig, i + 1) == "FOR" or is_op(after, "=")
                                                           or is_op(after, ":=")))


def statement_problem(query: Query) -> str | None:
    """Why one archived statement reaches beyond data (None: it is a data change or definition lastline replays)."""
    if query.status.charset is not None and query.status.charset[0] in _UNSAFE_CHARSETS:
        return (f"its client character set (collation id {query.status.charset[0]}) can hide a quote or backslash "
                "inside a multi-byte character")
    if _CLIENT.search(query.text):
        return "it holds what the mariadb client reads as its own command (DELIMITER, \\C, or mariadb-binlog's delimiter)"
    if query.db and (never_restored(query.db) or any(c in query.db for c in "`\\\n\r\0")):
        return f"its default database is {query.db!r}"
    try:
        sig = _tokens(query)
    except SqlTextError as exc:
        return f"lastline cannot read it exactly as the server would ({exc})"
    if not sig:
        return "it holds no statement"
    ansi = query.status.sql_mode is None or bool(query.status.sql_mode & ANSI_QUOTES)
    head = word_at(sig, 0)
    words = [word_at(sig, i) for i in range(len(sig))]
    program = False
    if head in ("BEGIN", "COMMIT") and (len(sig) > 2 or words[1:] not in ([], ["WORK"])):
        return f"{head} followed by more than a transaction's start or end (a compound statement)"
    if head in ("ROLLBACK", "SAVEPOINT", "RELEASE") and (len(sig) > 5 or any(t.kind not in (WORD, IDENT) for t in sig)):
        return f"{head} followed by more than a savepoint's name"
    if head in _DEFINE:
        kind = next((w for w in words[1:16] if w in _OBJECTS | _NOT_OBJECTS), "")
        if kind not in _OBJECTS:
            return f"it is {head} {kind or 'of something'} other than a table, database, index, view or stored program"
        program = kind in _PROGRAMS
    elif head not in _TRANSACTION | _DATA and not (head == "FLUSH" and set(words[1:]) <= {
            "LOCAL", "NO_WRITE_TO_BINLOG", "TABLE", "TABLES", ""}):
        return f"it is {head or sig[0].text!r}, not a data change lastline replays"
    if program:
        try:  # a `;` only inside the body's compound statements, nothing after the body's end
            check_body(sig, 0)
        except SqlTextError as exc:
            return f"it holds more than one statement, or a body lastline cannot follow ({exc})"
    for i, tok in enumerate(sig):
        w = words[i]
        if w in _BEYOND and not (w == "PREPARE" and head == "XA"):
            return f"it holds {w}"
        if w in _ACCOUNTS and i and words[i - 1] in ("CREATE", "ALTER", "DROP", "RENAME"):
            return f"it holds {words[i - 1]} {w}"
        if w == "SET" and program and (i == 0 or is_op(sig[i - 1], ";") or words[i - 1] in _STARTS) and \
                {words[i + 1] if i + 1 < len(sig) else "", words[i + 2] if i + 2 < len(sig) else ""} & {"PASSWORD", "ROLE"}:
            return "it sets a password or role"
        if program and _sets_account(sig, words, i):
            return f"it sets a {w.lower()} ({words[i - 1] or sig[i - 1].text} {w} ...)"
        nxt = sig[i + 1] if i + 1 < len(sig) else None
        if tok.kind == IDENT and nxt is not None and is_op(nxt, "(") and (_name(tok, ansi) or "").upper() in _BEYOND:
            return f"it calls {tok.text} (a function named in quotes is the same function)"
        if is_op(tok, "\\"):
            return "it holds a backslash outside a string (a client command)"
        if is_op(tok, ";") and not program:
            return "it holds a second statement"
        if tok.kind == AT_NAME and i >= 2 and is_op(sig[i - 1], "@") and is_op(sig[i - 2], "@") and \
                tok.text.casefold().split(".")[0] == "global":
            return f"it names @@{tok.text}"
        name = _name(tok, ansi)
        if name is not None and never_restored(name) and (
                (i + 1 < len(sig) and is_op(sig[i + 1], ".")) or (i and words[i - 1] in ("DATABASE", "SCHEMA"))):
            return f"it names {name}"
        if w == "ENGINE":
            j = i + 2 if i + 1 < len(sig) and is_op(sig[i + 1], "=") else i + 1
            value = _name(sig[j], True) if j < len(sig) else None
            if value is None and j < len(sig) and sig[j].kind == STRING:
                value = sig[j].text[1:-1]
            if engine_name(value) not in SAFE_ENGINES:
                return f"it uses ENGINE {value}, which may reach beyond the datadir"
    return None
