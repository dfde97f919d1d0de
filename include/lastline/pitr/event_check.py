"""The check every archived event of a physical base's replay passes while the span is cut, before anything is
applied (issue 42): the archive is untrusted input (who writes storage writes it), and both ways of replaying it
run what it holds with every privilege (the server's applier is a system thread; `BINLOG '...'` applies row
events to any table once an account holds BINLOG REPLAY). So an event that reaches beyond data refuses the
replay, named by file, byte, GTID and statement start.

What passes: between transactions only a Gtid_list, checkpoint, Rotate or Stop; one format description, first,
with the layout lastline parses; inside a transaction GTID, Query (a compressed one checked uncompressed), Intvar,
Rand, User_var, XID, XA PREPARE, table maps and row events (Annotate_rows, informational, too). A table map of a system schema or lastline's own schema
is refused; a row event must follow its table map in the same transaction. A statement is read by the server's
lexer (lastline.logical.format.sql_text) in the event's own sql_mode and must be a data change or data definition
(INSERT, REPLACE, UPDATE, DELETE, SELECT, WITH, TRUNCATE, CREATE/ALTER/DROP of tables, databases, indexes,
views, sequences and stored programs, RENAME, ANALYZE/OPTIMIZE/REPAIR, FLUSH TABLES, transaction and XA
control), naming no system schema, with no engine that reaches outside the datadir and none of the words that
reach beyond data anywhere in it (GRANT, OUTFILE, LOAD_FILE, INFILE, SONAME, DIRECTORY, GLOBAL, MASTER, ...).
Whatever the lexer cannot read exactly as the server would is refused. For the pipe (`mariadb-binlog | mariadb`)
the text also may not hold what the mariadb client reads as its own commands (DELIMITER, `\\C`, the delimiter
mariadb-binlog writes) and the status values mariadb-binlog prints unquoted must be plain.
"""
from __future__ import annotations

import dataclasses
import re
import struct
import zlib
from typing import NoReturn

from lastline.core.errors import Refusal
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
from lastline.pitr.events import GTID, HEADER_LEN, QUERY, QUERY_COMPRESSED, XA_PREPARE, XID, Cutter, gtid_map
from lastline.pitr.span import Span
from lastline.pitr.split import ANNOTATE_ROWS, BETWEEN, ROWS, TABLE_MAP, check_format, cut
from lastline.pitr.statements import INTVAR, RAND, USER_VAR, Query, parse_query
from lastline.storage import Storage

IN_GROUP = {GTID, QUERY, QUERY_COMPRESSED, INTVAR, RAND, USER_VAR, XID, XA_PREPARE, TABLE_MAP, ANNOTATE_ROWS, *ROWS}
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
_PLAIN = re.compile(rb"[A-Za-z0-9_+\-:/.]*")  # a time zone name as mariadb-binlog prints it (unquoted inside '...')
_USER_VAR = re.compile(rb"[A-Za-z0-9_$]{1,64}")


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
            "LOCAL", "NO_WRITE_TO_BINLOG", "TABLE", "TABLES", "PRIVILEGES", ""}):
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


def uncompressed(text: bytes) -> bytes | None:
    """A compressed Query event's statement as the server reads it (log_bin_compress: a header byte 0x80 with the
    length's size, the length big-endian, a zlib stream); None where the server would not read one."""
    size = text[0] & 0x07 if text else 0
    if not text or text[0] & 0xF8 != 0x80 or not 1 <= size <= 4 or len(text) < 1 + size:
        return None
    length = int.from_bytes(text[1:1 + size], "big")
    inflate = zlib.decompressobj()
    try:
        out = inflate.decompress(text[1 + size:], length + 1)
    except zlib.error:
        return None
    return out if inflate.eof and len(out) <= length else None


def _status_problem(query: Query) -> str | None:
    """A status value mariadb-binlog prints unquoted that is not plain."""
    if query.status.time_zone is not None and not _PLAIN.fullmatch(query.status.time_zone):
        return f"its time zone {query.status.time_zone[:40]!r} is not a plain name"
    return None


class CheckedCutter(Cutter):
    """A Cutter for a physical base: every event it keeps is checked as it is read (see the module); a refusal
    names the file, the byte, the transaction and the statement."""

    def __init__(self, name: str, start: int, stop: int | None, applied: dict[int, int]) -> None:
        super().__init__(name, start, stop, applied)
        self._formats = 0
        self._mapped: set[bytes] = set()
        self._gtid = ""  # the transaction being read (its end event is seen once the scanner has closed it)

    def _refuse(self, what: str, why: str) -> NoReturn:
        gtid = self._gtid or "(outside any transaction)"
        raise Refusal(f"{self.name} at byte {self.pos}, transaction {gtid}: {what} {why}. A physical base's replay "
                      "applies data changes only: accounts, grants, files, plugins, global settings, replication, "
                      "shutdown and the system schemas are beyond it (the archive is read as untrusted). Nothing was "
                      "applied. Choose an until before it, or a base taken after it; if the source ran it, do that part "
                      "by hand after the restore.")

    def _seen(self, data: bytearray, at: int, size: int, role: str) -> None:
        kind = data[at + 4]
        if role == "format":
            self._formats += 1
            if self._formats > 1 or self.pos != 4:
                self._refuse("a second format description", "would change how the server reads the events after it")
            try:
                check_format(bytes(data[at:at + size]), self.name, self.out.checksum)
            except Refusal as exc:
                self._refuse("the format description", f"is not one lastline reads ({exc})")
        elif role == "between":
            if kind not in BETWEEN:
                self._refuse(f"an event of type {kind}", "lies outside any transaction (no GTID before it)")
        elif role == "begin":
            self._mapped = set()
            self._gtid = self._open[0] if self._open is not None else ""
        if role in ("in", "end") and self._keep_group or role == "begin":
            self._check(bytes(data[at:at + size]), kind)
        super()._seen(data, at, size, role)
        if role == "end":
            self._gtid = ""

    def _check(self, event: bytes, kind: int) -> None:
        """One event of a transaction the replay keeps (the GTID event's group decided after super(): checked here
        for every group, a cheap read)."""
        checksum = self.out.checksum
        if kind not in IN_GROUP:
            self._refuse(f"an event of type {kind}", "is not a data change lastline replays (LOAD DATA, an "
                         "incident, ...)")
        if kind in (QUERY, QUERY_COMPRESSED):
            try:
                query = parse_query(event, checksum, self._gtid)
            except (Refusal, struct.error, IndexError) as exc:
                self._refuse("a statement", f"cannot be read ({exc})")
            if kind == QUERY_COMPRESSED:
                text = uncompressed(query.text)
                if text is None:
                    self._refuse("a compressed statement", "cannot be uncompressed as the server would")
                query = dataclasses.replace(query, text=text)
            why = _status_problem(query) or statement_problem(query)
            if why:
                self._refuse(repr(query.text[:200].decode("utf-8", "replace")), f"reaches beyond data: {why}")
        elif kind == TABLE_MAP:
            table_id, db_len = bytes(event[HEADER_LEN:HEADER_LEN + 6]), event[HEADER_LEN + 8]
            db = bytes(event[HEADER_LEN + 9:HEADER_LEN + 9 + db_len]).decode("utf-8", "replace")
            t_len = event[HEADER_LEN + 10 + db_len]
            table = bytes(event[HEADER_LEN + 11 + db_len:HEADER_LEN + 11 + db_len + t_len]).decode("utf-8", "replace")
            if never_restored(db):
                self._refuse(f"row events on {db}.{table}", "reach a system schema")
            self._mapped.add(table_id)
        elif kind in ROWS:
            if bytes(event[HEADER_LEN:HEADER_LEN + 6]) not in self._mapped:
                self._refuse("a row event", "names a table no table map of its transaction checked")
        elif kind == USER_VAR:
            (n,) = struct.unpack_from("<I", event, HEADER_LEN)
            if not _USER_VAR.fullmatch(bytes(event[HEADER_LEN + 4:HEADER_LEN + 4 + n])):
                self._refuse("a user variable", "has a name that is not plain")



def check_span(storage: Storage, span: Span) -> int:
    """Every archived event of `span` a replay from its base would apply, read (each segment against its sha256) and
    checked, before anything is touched: the point-in-time preflight's pass for a physical base. Returns the number
    of transactions checked."""
    checked = 0
    for f in span.files:
        cutter = CheckedCutter(f.name, f.start, f.stop, gtid_map(span.base_gtid))
        for _ in cut(storage, f, cutter, f is span.files[-1]):
            pass
        checked += len(cutter.kept)
    return checked
