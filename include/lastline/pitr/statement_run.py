"""The statements of a logical base's roll-forward that may change a restored database, run (issue 47): each in one
client session logged in as the replay's own account (pitr.interleave: its grants reach the restored databases'
rows only, no FILE, no SUPER, no LOCAL INFILE, binary logging off for its session), so a statement that reaches
further fails on the server with "denied", not on a pattern. Its session context comes from the archived events as
the server's applier would set it: default database, sql_mode, character sets, time zone, the source's timestamp,
INSERT_ID / LAST_INSERT_ID, the RAND seeds, user variables, the checks (foreign keys, unique, constraints) and the
auto-increment settings. Only what that account may set: a setting the server denies it refuses the replay, named.

The statement's transaction commits with a row of the replay's ledger naming its GTID (`record`), so a resumed
replay runs it once. What cannot commit with that row is refused by name in the first pass (`refusal`): DDL (it
commits itself), a statement on a non-transactional table (MyISAM, Aria: its change stays even when the transaction
rolls back), a statement that failed part way on the source.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from lastline.core.errors import Refusal, ServerError
from lastline.pitr import events
from lastline.pitr.events import FL_DDL, FL_STANDALONE, FL_TRANSACTIONAL, HEADER, HEADER_LEN, QUERY
from lastline.pitr.statements import INTVAR, RAND, USER_VAR, Query, parse_query, statement_head

# the Q_FLAGS2 bits the session sets, as the server's applier does: (variable, bit, value when the bit is set)
FLAGS2 = (("sql_auto_is_null", 0x00004000, 1), ("check_constraint_checks", 0x00008000, 0),
          ("foreign_key_checks", 0x04000000, 0), ("unique_checks", 0x08000000, 0))
# set only when the source had them on (they change what a statement may do): the server says if the account may
FLAGS2_ON = (("explicit_defaults_for_timestamp", 0x01000000), ("sql_if_exists", 0x10000000),
             ("system_versioning_insert_history", 0x40000000))
STRING, REAL, INT, DECIMAL = 0, 1, 2, 4  # a user variable's value types
DENIED = (1044, 1045, 1142, 1143, 1227, 1370)  # access denied, of any kind
CONFLICT = (1205, 1213)  # a lock wait timeout, a deadlock: transient


@dataclass
class Statement:
    """A statement transaction to run: its GTID, time, GTID flags, whole events, and where its empty transaction (the
    marker that moves the applier's position past it) begins in the relay logs."""

    gtid: str
    time: int
    flags2: int
    checksum: bool
    events: list[bytes] = field(default_factory=list)
    relay: str = ""  # the relay log's file name (no folder)
    offset: int = 0

    def head(self) -> str:
        texts = [q.text for q in queries(self)]
        return statement_head(next((t for t in texts if t not in (b"BEGIN", b"COMMIT")), b""))


def queries(st: Statement) -> list[Query]:
    """Its Query events parsed, status variables included (one lastline cannot set refused, named)."""
    return [parse_query(e, st.checksum, st.gtid) for e in st.events if HEADER.unpack_from(e, 0)[1] == QUERY]


def refusal(st: Statement, time_text: str) -> None:
    """Refuse, naming it, a statement transaction that cannot run exactly once under the replay's account."""
    head = f"transaction {st.gtid} ({st.head()}, stamped {time_text})"
    if st.flags2 & FL_DDL:
        why = "is DDL: it commits by itself, so it cannot commit with the replay's ledger row"
    elif st.flags2 & FL_STANDALONE or not st.flags2 & FL_TRANSACTIONAL:
        why = ("changes a non-transactional table (MyISAM, Aria, or a table the source could not roll back): its change "
               "would stay if the transaction rolled back, so it cannot commit with the replay's ledger row")
    elif any(q.error_code for q in queries(st)):
        why = "failed part way on the source (its error code is in the binlog)"
    else:
        for e in st.events:  # a user variable lastline cannot set as the applier would is refused here, first
            if HEADER.unpack_from(e, 0)[1] == USER_VAR:
                user_var(e, st.checksum, st.gtid)
        return
    raise Refusal(f"{head} may change a restored database and {why}. A logical base runs a restored database's "
                  "statements only where they commit exactly once with the replay's ledger; choose an until before it, "
                  "a base taken after it, or a physical base.")


def user_var(event: bytes, checksum: bool, gtid: str) -> tuple[bytes, Any, int]:
    """A User_var event as (name, value, collation id): a value is None, bytes (a string), an int or a float; a
    decimal is refused, named (lastline does not decode its binary form)."""
    body = event[HEADER_LEN:len(event) - (4 if checksum else 0)]
    try:
        n = struct.unpack_from("<I", body, 0)[0]
        name, at = bytes(body[4:4 + n]), 4 + n
        if body[at]:
            return name, None, 63
        kind, collation, size = struct.unpack_from("<BII", body, at + 1)
        value = bytes(body[at + 10:at + 10 + size])
        flags = body[at + 10 + size] if len(body) > at + 10 + size else 0
        if len(value) != size:
            raise IndexError
    except (IndexError, struct.error):
        raise Refusal(f"transaction {gtid}: a user variable's event is cut short: the archive is damaged or forged "
                      "there; nothing was applied.") from None
    if kind == STRING:
        return name, value, collation
    if kind == REAL and size == 8:
        return name, struct.unpack("<d", value)[0], collation
    if kind == INT and size == 8:
        return name, struct.unpack("<Q" if flags & 1 else "<q", value)[0], collation
    raise Refusal(f"transaction {gtid}: user variable @{name.decode('utf-8', 'replace')} holds a value of type {kind} "
                  "(a decimal) that lastline does not set as the server's applier would; roll forward from a physical "
                  "base, or choose an until before it.")


class Session:
    """One client session of the replay's account in which every statement transaction runs, in order (temporary
    tables live across them); `ledger`: the table its GTID rows go to (INSERT only)."""

    def __init__(self, conn: Any, ledger: str) -> None:
        self.conn, self.cur, self.ledger = conn, conn.cursor(), ledger
        self._collations: dict[int, tuple[str, str]] = {}
        self.conn.autocommit(False)

    def run(self, st: Statement) -> None:
        """The transaction and its ledger row, committed together; anything the server refuses (a "denied" above all)
        rolls it back and refuses the replay, naming the GTID and the statement's first characters."""
        pending: list[tuple[bytes, tuple]] = []
        current = b""
        try:
            self.cur.execute("START TRANSACTION")
            for e in st.events[1:]:
                kind = HEADER.unpack_from(e, 0)[1]
                if kind == INTVAR:
                    which, value = struct.unpack_from("<BQ", e, HEADER_LEN)
                    pending.append((b"SET %s = %%s" % (b"LAST_INSERT_ID" if which == 1 else b"INSERT_ID"), (value,)))
                elif kind == RAND:
                    pending.append((b"SET @@RAND_SEED1 = %s, @@RAND_SEED2 = %s", struct.unpack_from("<QQ", e, HEADER_LEN)))
                elif kind == USER_VAR:
                    pending.append(self._user_var(*user_var(e, st.checksum, st.gtid)))
                elif kind == QUERY:
                    query = parse_query(e, st.checksum, st.gtid)
                    if query.text in (b"BEGIN", b"COMMIT"):
                        continue
                    self._context(query, e, pending)
                    pending, current = [], query.text
                    self.cur.execute(query.text)
                    self._still_in_transaction(st, current)
            current = b""
            self.cur.execute(f"INSERT INTO {self.ledger} (gtid) VALUES (%s)", (st.gtid,))
            self.conn.commit()
        except Refusal:
            self.conn.rollback()
            raise
        except Exception as exc:
            self.conn.rollback()
            code = exc.args[0] if getattr(exc, "args", None) else None
            if code in CONFLICT:  # a lock wait or a deadlock on the target: nothing of it committed, the task retries
                raise ServerError(f"transaction {st.gtid} ({st.head()}) met a lock conflict on the target ({exc}); "
                                  "nothing of it was applied, and the replay resumes from it") from exc
            what = f"its statement {statement_head(current)}" if current else "setting its session (or its ledger row)"
            denied = " (denied: it reaches beyond the restored databases, or needs a privilege the replay's account " \
                     "does not hold)" if code in DENIED else ""
            raise Refusal(f"transaction {st.gtid} ({st.head()}): the target refused {what}{denied}: {exc}. Nothing of "
                          "this transaction was applied; the ones before it were. Choose an until before it, or a "
                          "physical base.") from exc

    def _still_in_transaction(self, st: Statement, text: bytes) -> None:
        """Refuse the rest of a transaction whose statement ended the one lastline runs it in (a COMMIT or ROLLBACK, a
        change of autocommit: what an archive's honest statement never does): past it, a statement would run outside
        the ledger's transaction, and an `XA COMMIT` or `XA ROLLBACK` could end another session's prepared transaction
        (any account may)."""
        self.cur.execute("SELECT @@in_transaction, @@autocommit")
        if tuple(int(v) for v in self.cur.fetchone()) != (1, 0):
            raise Refusal(f"transaction {st.gtid} ({st.head()}): its statement {statement_head(text)} ended the "
                          "transaction lastline runs it in (a COMMIT, a ROLLBACK or a change of autocommit, which an "
                          "archive's statement never holds): the rest of it was not run. The archive was changed; choose "
                          "an until before it, or a physical base.")

    def _context(self, query: Query, event: bytes, pending: list[tuple[bytes, tuple]]) -> None:
        """The session set as the source's was for this statement (user variables first, in the connection's own
        character set; the statement's character sets last)."""
        st, ts = query.status, HEADER.unpack_from(event, 0)[0]
        sets: list[tuple[bytes, tuple]] = [(b"SET NAMES utf8mb4", ())]
        sets += pending
        sets.append((b"SET TIMESTAMP = %d.%06d" % (ts, st.micro), ()))
        if st.sql_mode is not None:
            sets.append((b"SET SESSION sql_mode = %s", (st.sql_mode,)))
        if st.flags2 is not None:
            for name, bit, on in FLAGS2:
                sets.append((b"SET SESSION %s = %d" % (name.encode(), on if st.flags2 & bit else 1 - on), ()))
            for name, bit in FLAGS2_ON:
                if st.flags2 & bit:
                    sets.append((b"SET SESSION %s = 1" % name.encode(), ()))
        if st.auto_increment is not None:
            sets.append((b"SET SESSION auto_increment_increment = %s, auto_increment_offset = %s", st.auto_increment))
        if st.time_zone is not None:
            sets.append((b"SET SESSION time_zone = %s", (st.time_zone.decode("utf-8", "replace"),)))
        if st.lc_time_names is not None:
            sets.append((b"SET SESSION lc_time_names = %s", (st.lc_time_names,)))
        if st.charset_database is not None:
            sets.append((b"SET SESSION collation_database = %s", (st.charset_database,)))
        if st.charset is not None:
            sets.append((b"SET SESSION character_set_client = %s, collation_connection = %s, collation_server = %s",
                         st.charset))
        if query.db:
            self.conn.select_db(query.db)
        for sql, args in sets:
            try:
                self.cur.execute(sql, args or None)
            except Exception as exc:
                if getattr(exc, "args", (None,))[0] in DENIED:
                    raise Refusal(f"the replay's account may not set what this statement needs ({sql.decode()}: "
                                  f"{exc.args[-1]}): refused, nothing of it applied. Roll forward from a physical base, "
                                  "or choose an until before it.") from exc
                raise

    def _user_var(self, name: bytes, value: Any, collation: int) -> tuple[bytes, tuple]:
        """`SET @name := value`, a string in its own collation (its name read from the server, by id)."""
        target = b"SET @`" + name.replace(b"`", b"``") + b"` := "
        if value is None:
            return target + b"NULL", ()
        if not isinstance(value, bytes):  # an int or a float, as Python writes it (SQL reads both forms)
            return target + repr(value).encode(), ()
        if collation not in self._collations:
            self.cur.execute("SELECT CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLLATIONS WHERE ID = %s",
                             (collation,))
            row = self.cur.fetchone()
            self._collations[collation] = (str(row[0]), str(row[1])) if row else ("binary", "binary")
        charset, name_of = self._collations[collation]
        text = b"X'" + value.hex().encode() + b"'" if value else b"''"
        return target + b"CONVERT(%s USING %s) COLLATE %s" % (text, charset.encode(), name_of.encode()), ()


def empty_transaction(group: list[bytes], checksum: bool) -> bytes:
    """A statement group left out, as an empty transaction (its GTID kept: the target's position moves past it)."""
    ts, _, server_id, _, end, _ = HEADER.unpack_from(group[0], 0)
    seq, domain, _ = struct.unpack_from("<QIB", group[0], HEADER_LEN)
    status = struct.pack("<BI", 0, 0)  # flags2: nothing set
    return (events.gtid_event(ts, server_id, end, seq, domain, 0, None, checksum)
            + events.query_event(ts, server_id, end, 0, status, b"BEGIN", checksum)
            + events.query_event(ts, server_id, end, 0, status, b"COMMIT", checksum))
