"""The statements of a logical base's roll-forward, read (see :mod:`lastline.pitr.split`): a statement that may change
a restored database runs under the replay's own account (lastline.pitr.statement_run, issue 47), whose grants, not
this reading, keep it inside the restored databases; one that reaches only other databases is left out, named.

"May change a restored database": its default database is one, or the server's lexer (lastline.logical.format.sql_text,
executable comments read as code: a superset of what any server runs) finds a restored database's name among its
words or identifiers, or cannot read it exactly. What that misses on an honest archive (a statement on another
database whose trigger, view or function writes a restored one) is named in the documentation as a limit.

The one kind passed on is a savepoint inside a row transaction (`savepoint`): rebuilt from its verb and name, it
changes no data itself.

A physical base's replay (pitr.event_check) does run archived statements, each first read by
pitr.statement_check as the server reads it in the event's own sql_mode: only data changes and definitions pass.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from lastline.core.errors import Refusal
from lastline.logical.format.sql_text import (
    IDENT,
    WORD,
    SqlTextError,
    ident_value,
    significant,
    tokenize_any_mode,
)
from lastline.pitr.events import HEADER, HEADER_LEN, QUERY

INTVAR, RAND, USER_VAR = 5, 13, 14  # the context events before a statement (read past, never run)

# the Q_FLAGS2 bits a rebuilt BEGIN or COMMIT keeps (auto_is_null, no check constraints, not autocommit, explicit
# defaults for timestamp, no foreign key checks, relaxed unique checks, if exists, insert history)
FLAGS2_KNOWN = 0x00004000 | 0x00008000 | 0x00080000 | 0x01000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x40000000


@dataclass
class StatementGroup:
    """One transaction of statements: its GTID, time, and its events' bytes in order (each a whole event)."""

    gtid: str
    time: int
    checksum: bool
    events: list[bytes] = field(default_factory=list)


@dataclass
class Status:
    """A Query event's status variables, as lastline read them (nothing it did not understand): what a rebuilt BEGIN
    or COMMIT carries."""

    flags2: int | None = None
    sql_mode: int | None = None
    auto_increment: tuple[int, int] | None = None
    charset: tuple[int, int, int] | None = None
    time_zone: bytes | None = None
    lc_time_names: int | None = None
    charset_database: int | None = None
    micro: int = 0

    def encode(self) -> bytes:
        """The status block of a rebuilt BEGIN or COMMIT: the flags, sql_mode and charset read, re-encoded."""
        out = b""
        if self.flags2 is not None:
            out += b"\x00" + struct.pack("<I", self.flags2 & FLAGS2_KNOWN)
        if self.sql_mode is not None:
            out += b"\x01" + struct.pack("<Q", self.sql_mode)
        if self.charset is not None:
            out += b"\x04" + struct.pack("<HHH", *self.charset)
        return out


def parse_status(block: bytes, gtid: str) -> Status:
    """A Query event's status variables; refuses one lastline cannot set as the server's applier would."""
    st, i = Status(), 0
    try:
        while i < len(block):
            code = block[i]
            i += 1
            if code == 0:
                st.flags2 = struct.unpack_from("<I", block, i)[0]
                i += 4
            elif code == 1:
                st.sql_mode = struct.unpack_from("<Q", block, i)[0]
                i += 8
            elif code == 2:  # catalog, old form: length, text, NUL
                i += 1 + block[i] + 1
            elif code == 3:
                st.auto_increment = struct.unpack_from("<HH", block, i)
                i += 4
            elif code == 4:
                st.charset = struct.unpack_from("<HHH", block, i)
                i += 6
            elif code == 5:
                st.time_zone = bytes(block[i + 1:i + 1 + block[i]])
                i += 1 + block[i]
            elif code == 6:  # catalog
                i += 1 + block[i]
            elif code == 7:
                st.lc_time_names = struct.unpack_from("<H", block, i)[0]
                i += 2
            elif code == 8:
                st.charset_database = struct.unpack_from("<H", block, i)[0]
                i += 2
            elif code == 9:  # the tables a multi-table update changes (informational)
                i += 8
            elif code == 10:  # master data written (relay logs only)
                i += 4
            elif code == 11:  # invoker: user, host (the DEFINER clause is in the text itself)
                i += 1 + block[i]
                i += 1 + block[i]
            elif code == 128:  # Q_HRNOW: microseconds of the timestamp
                st.micro = int.from_bytes(block[i:i + 3], "little")
                i += 3
            elif code == 129:  # Q_XID
                i += 8
            else:
                raise Refusal(f"transaction {gtid}: a statement carries status variable {code}, which lastline cannot "
                              "set as the server's applier would; roll forward from a physical base.")
    except (IndexError, struct.error):
        raise Refusal(f"transaction {gtid}: a statement's status variables are cut short: the archive is damaged or "
                      "forged there; nothing was applied.") from None
    if i != len(block):
        raise Refusal(f"transaction {gtid}: a statement's status variables run past their block: refused.")
    return st


@dataclass
class Query:
    """One Query event: when, the source session, its default database, the error it ended with there, its
    status variables and its text."""

    ts: int
    thread_id: int
    db: str
    error_code: int
    status: Status
    text: bytes


def parse_query(event: bytes, checksum: bool, gtid: str, status: bool = True) -> Query:
    """A Query event (its status variables parsed only if `status`: refusals as parse_status)."""
    ts = HEADER.unpack_from(event, 0)[0]
    body = HEADER_LEN
    thread_id, _, db_len, error_code, status_len = struct.unpack_from("<IIBHH", event, body)
    read_status = parse_status(bytes(event[body + 13:body + 13 + status_len]), gtid) if status else Status()
    db_at = body + 13 + status_len
    end = len(event) - (4 if checksum else 0)
    if db_at + db_len + 1 > end or event[db_at + db_len] != 0:
        raise Refusal(f"transaction {gtid}: a statement's default database is not terminated where its length says: "
                      "refused.")
    db = bytes(event[db_at:db_at + db_len]).decode("utf-8", "surrogateescape")
    return Query(ts, thread_id, db, error_code, read_status, bytes(event[db_at + db_len + 1:end]))


def touches(query: Query, databases: frozenset[str]) -> str | None:
    """Why `query` may change one of `databases` (casefolded names), or None if it reaches only others."""
    if query.text in (b"BEGIN", b"COMMIT", b"ROLLBACK"):
        return None
    if query.db.casefold() in databases:
        return f"its default database is {query.db}"
    try:
        tokens = significant(tokenize_any_mode(query.text.decode("latin-1")))
    except SqlTextError as exc:
        return f"lastline cannot read it exactly as the server would ({exc})"
    for tok in tokens:
        name = ident_value(tok) if tok.kind == IDENT else tok.text if tok.kind == WORD else None
        if name is not None and name.casefold() in databases:
            return f"it names {name}"
    return None


def read(group: StatementGroup) -> list[Query]:
    """Every Query event of a statement group, parsed (a damaged one refused)."""
    return [parse_query(e, group.checksum, group.gtid, status=False) for e in group.events
            if HEADER.unpack_from(e, 0)[1] == QUERY]


# the savepoint statements as the server logs them inside a row transaction: the verb, one identifier
_SAVEPOINT_VERBS = (b"SAVEPOINT ", b"ROLLBACK TO ", b"RELEASE SAVEPOINT ")
_BARE = re.compile(rb"[A-Za-z0-9_$\x80-\xff]+")


def savepoint(text: bytes) -> bytes | None:
    """A savepoint statement (`SAVEPOINT sp`, `ROLLBACK TO sp`, `RELEASE SAVEPOINT sp`, the name quoted by backticks
    or double quotes, or bare, as the server logs it) rebuilt from its verb and name, the name backquoted; None for
    any other text. They change no data themselves, and in a row transaction the server runs them as a replica does:
    a `ROLLBACK TO` is logged only when the rows after the savepoint stay in the binlog (a non-transactional table
    changed), and then it undoes them on the target as on the source."""
    verb = next((v for v in _SAVEPOINT_VERBS if text.upper().startswith(v)), None)
    if verb is None:
        return None
    rest = text[len(verb):]
    name = _unquoted(rest)
    if name is None or not name or b"\0" in name:
        return None
    return verb + b"`" + name.replace(b"`", b"``") + b"`"


def _unquoted(ident: bytes) -> bytes | None:
    """The name one whole identifier stands for (quoted by backticks or double quotes, the quote doubled inside, or
    bare and not all digits); None for anything else."""
    if ident[:1] in (b"`", b'"') and len(ident) >= 2 and ident[-1:] == ident[:1]:
        q, inner = ident[:1], ident[1:-1]
        if inner.replace(q + q, b"").count(q):
            return None
        return inner.replace(q + q, q)
    return ident if _BARE.fullmatch(ident) and not ident.isdigit() else None


def without_literals(text: bytes) -> bytes:
    """`text` for a log or a message: every quoted string (`'...'`, `"..."`, the quotes of X'..' and B'..') shown as
    `'...'`, since a literal may hold a secret (a password in IDENTIFIED BY or PASSWORD(), a key); identifiers in
    backticks as written. An unterminated quote or backtick (a cut statement) ends it there."""
    out, i, n = bytearray(), 0, len(text)
    while i < n:
        c = text[i:i + 1]
        if c not in (b"'", b'"', b"`"):
            out += c
            i += 1
            continue
        j = i + 1
        while j < n and not (text[j:j + 1] == c and text[j + 1:j + 2] != c):
            j += 2 if text[j:j + 1] == c or (c != b"`" and text[j:j + 1] == b"\\") else 1
        if j >= n:
            return bytes(out + (b"'...'" if c != b"`" else b"`..."))
        out += text[i:j + 1] if c == b"`" else b"'...'"
        i = j + 1
    return bytes(out)


def statement_head(text: bytes, n: int = 80) -> str:
    """A statement's first characters, for a message, its quoted strings left out (without_literals):
    `"UPDATE t SET a = '...' ..."`."""
    shown = without_literals(text)
    head = shown[:n].decode("utf-8", "replace").replace("\n", " ")
    return f'"{head}{"..." if len(shown) > n else ""}"'
