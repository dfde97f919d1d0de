"""The statements of a logical base's roll-forward, read whole before anything is applied (they run in sessions of
an account that can touch the restored databases only: :mod:`lastline.pitr.sessions`).

Each Query event is parsed whole in the replay's first pass (a status variable, a user-variable type or a
collation lastline cannot set as the server's applier would is refused there, before anything is applied; so is
an XA statement, which would let any account end another session's prepared transaction). Then it runs as the
server's applier would run it: its session context as SET statements (sql_mode, charset, time zone, timestamp,
insert ids, user variables; literals only, never text of the event spliced into SQL, with NO_DIR_IN_CREATE always
on so no table reaches outside the datadir), its default database (`USE`), then its text, byte for byte. Each
source session (the event's thread id) gets a session of its own, so temporary tables live across transactions.

The account holds no BINLOG REPLAY, no SUPER and no right to create views, routines, triggers or events: what the
server refuses it (a statement on a database not restored, a default database not restored, an account statement,
an object definition, reading `mysql.*`) is rolled back and, as the run says (`refused_statements`), fails the
replay or is skipped and named. `_lastline.pitr_statements` records each transaction applied (with it, where it is
transactional), so a retry applies none twice (a DDL that commits by itself is recorded just after it).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from lastline.core.errors import Refusal
from lastline.core.sql import quote_ident
from lastline.logical.sql_text import WORD, SqlTextError, significant, tokenize_any_mode
from lastline.pitr.events import GTID, HEADER, HEADER_LEN, QUERY, XID

INTVAR, RAND, USER_VAR = 5, 13, 14  # the context events before a statement

NO_DIR_IN_CREATE = 0x80  # sql_mode bit: DATA/INDEX DIRECTORY ignored
_FLAGS = (  # Q_FLAGS2 bits as MariaDB writes them: (variable, bit, value when the bit is set)
    ("sql_auto_is_null", 0x00004000, 1), ("check_constraint_checks", 0x00008000, 0),
    ("explicit_defaults_for_timestamp", 0x01000000, 1), ("foreign_key_checks", 0x04000000, 0),
    ("unique_checks", 0x08000000, 0), ("sql_if_exists", 0x10000000, 1), ("system_versioning_insert_history", 0x40000000, 1),
)
FLAGS2_KNOWN = 0x00080000 | sum(bit for _, bit, _ in _FLAGS)  # and NOT_AUTOCOMMIT, which a session sets itself
_CHARSETS = {8: "latin1", 33: "utf8mb3", 45: "utf8mb4", 46: "utf8mb4", 224: "utf8mb4", 83: "utf8mb3", 47: "latin1",
             48: "latin1", 11: "ascii", 65: "ascii", 63: "binary", 192: "utf8mb3", 255: "utf8mb4"}


@dataclass
class StatementGroup:
    """One transaction of statements: its GTID, time, and its events' bytes in order (each a whole event)."""

    gtid: str
    time: int
    transactional: bool
    index: int  # where it lies: bytes [start, end) of the span's file `index`, whose events carry a checksum or not
    start: int
    end: int
    checksum: bool
    events: list[bytes] = field(default_factory=list)


@dataclass
class Status:
    """A Query event's status variables, as lastline read them (nothing it did not understand)."""

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

    def settings(self) -> dict[str, str]:
        """Each session variable this event sets, as a SET clause of literals (keyed by what it sets)."""
        out: dict[str, str] = {}
        if self.flags2 is not None:
            for name, bit, value in _FLAGS:
                out[name] = f"{name}={value if self.flags2 & bit else 1 - value}"
        if self.sql_mode is not None:
            out["sql_mode"] = f"sql_mode={self.sql_mode | NO_DIR_IN_CREATE}"
        if self.auto_increment is not None:
            out["auto_increment"] = "auto_increment_increment={}, auto_increment_offset={}".format(*self.auto_increment)
        if self.charset is not None:
            out["charset"] = "character_set_client={}, collation_connection={}, collation_server={}".format(*self.charset)
        if self.time_zone is not None:
            out["time_zone"] = f"time_zone=X'{self.time_zone.hex()}'"
        if self.lc_time_names is not None:
            out["lc_time_names"] = f"lc_time_names={self.lc_time_names}"
        out["collation_database"] = f"collation_database={self.charset_database or 'DEFAULT'}"
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


def parse_query(event: bytes, checksum: bool, gtid: str) -> Query:
    """A Query event as a session runs it (refusals as parse_status)."""
    ts = HEADER.unpack_from(event, 0)[0]
    body = HEADER_LEN
    thread_id, _, db_len, error_code, status_len = struct.unpack_from("<IIBHH", event, body)
    status = parse_status(bytes(event[body + 13:body + 13 + status_len]), gtid)
    db_at = body + 13 + status_len
    end = len(event) - (4 if checksum else 0)
    if db_at + db_len + 1 > end or event[db_at + db_len] != 0:
        raise Refusal(f"transaction {gtid}: a statement's default database is not terminated where its length says: "
                      "refused.")
    db = bytes(event[db_at:db_at + db_len]).decode("utf-8", "surrogateescape")
    return Query(ts, thread_id, db, error_code, status, bytes(event[db_at + db_len + 1:end]))


# what a server writes to its binlog as a statement (the statements inside a routine or block are logged one by
# one, never CALL, EXECUTE or a compound statement): any other first keyword is refused, XA among them
LOGGED = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE", "COMMIT",
                    "ROLLBACK", "SAVEPOINT", "RELEASE", "GRANT", "REVOKE", "ANALYZE", "OPTIMIZE", "REPAIR"})


def first_word(text: bytes, gtid: str) -> str:
    """The statement's first keyword as the server's lexer reads it (comments skipped, executable comments read);
    refuses text the lexer cannot read exactly as the server would."""
    try:
        sig = significant(tokenize_any_mode(text.decode("latin-1")))
    except SqlTextError as exc:
        raise Refusal(f"transaction {gtid}: lastline cannot read its statement exactly as the server would ({exc}); "
                      "roll forward from a physical base.") from None
    return sig[0].text.upper() if sig and sig[0].kind == WORD else ""


def _context(event: bytes, kind: int, checksum: bool, gtid: str) -> str:
    """The SET clause of an Intvar, Rand or User_var event (literals only)."""
    body = event[HEADER_LEN:len(event) - (4 if checksum else 0)]
    try:
        if kind == INTVAR:
            what, value = struct.unpack_from("<BQ", body, 0)
            return f"{'last_insert_id' if what == 1 else 'insert_id'}={value}"
        if kind == RAND:
            one, two = struct.unpack_from("<QQ", body, 0)
            return f"rand_seed1={one}, rand_seed2={two}"
        n = struct.unpack_from("<I", body, 0)[0]
        name = bytes(body[4:4 + n])
        if not name or not name.isascii() or not name.decode().replace("_", "").replace("$", "").isalnum():
            raise Refusal(f"transaction {gtid}: a user variable named {name[:40]!r}: lastline replays plain names only.")
        var = "@" + quote_ident(name.decode())
        at = 4 + n
        if body[at]:  # NULL
            return f"{var}=NULL"
        type_, charset, size = struct.unpack_from("<BII", body, at + 1)
        value = bytes(body[at + 10:at + 10 + size])
        if len(value) != size:
            raise Refusal(f"transaction {gtid}: a user variable's value is cut short: refused.")
        if type_ == 0:  # a string, in its collation
            if charset not in _CHARSETS:
                raise Refusal(f"transaction {gtid}: a user variable in collation {charset}: not replayed by lastline.")
            return f"{var}=X'{value.hex()}'" if charset == 63 else f"{var}=CONVERT(X'{value.hex()}' USING {_CHARSETS[charset]})"
        if type_ == 1:
            return f"{var}={struct.unpack('<d', value)[0]!r}"
        if type_ == 2:
            unsigned = len(body) > at + 10 + size and body[at + 10 + size] & 1
            return f"{var}={struct.unpack('<Q' if unsigned else '<q', value)[0]}"
    except (IndexError, struct.error):
        raise Refusal(f"transaction {gtid}: a context event is cut short: the archive is damaged or forged there.") from None
    raise Refusal(f"transaction {gtid}: a user variable of type {type_} (DECIMAL) is not replayed by lastline's statement "
                  "sessions; roll forward from a physical base.")


@dataclass
class Prepared:
    """A statement group read and checked in the first pass: (what, payload) steps in order: `context` (a SET clause),
    `query` (a Query), `commit` (its XID)."""

    group: StatementGroup
    thread_id: int
    steps: list[tuple[str, Any]] = field(default_factory=list)


def prepare(group: StatementGroup) -> Prepared:
    """Parse a statement group whole (every refusal here, before anything is applied)."""
    steps: list[tuple[str, Any]] = []
    thread = None
    for event in group.events:
        kind = HEADER.unpack_from(event, 0)[1]
        if kind == GTID:
            continue
        if kind == XID:
            steps.append(("commit", None))
        elif kind == QUERY:
            query = parse_query(event, group.checksum, group.gtid)
            word = first_word(query.text, group.gtid)
            if query.text != b"BEGIN" and word not in LOGGED:
                raise Refusal(f"transaction {group.gtid} runs a statement of a kind a server does not log ({word or '?'}: "
                              "XA, dynamic SQL, a compound statement, ...): a logical base's replay does not run it (XA "
                              "would let any account end another session's prepared transaction). Roll forward from a "
                              "physical base.")
            thread = query.thread_id if thread is None else thread
            steps.append(("query", query))
        else:
            steps.append(("context", _context(event, kind, group.checksum, group.gtid)))
    return Prepared(group, thread or 0, steps)
