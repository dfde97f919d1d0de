"""The statements of a logical base's roll-forward, run by an account that can touch the restored databases only.

Each Query event is rendered as the server's applier would run it: its session context (the SET statements its
status variables and the Intvar/Rand/User_var events before it carry: sql_mode, charset, time zone, timestamp,
insert ids, ...), its default database (`USE`), then its text, byte for byte. Each source session (the event's
thread id) gets a session of its own here, so temporary tables live on across transactions and files. The account
holds no BINLOG REPLAY and no SUPER: what the server refuses it (a statement on a database not restored, an account
statement, a DEFINER of someone else) is rolled back and skipped, named in the result; a statement whose default
database is not restored is skipped too (as `replicate_do_db` does). `_lastline.pitr_statements` records each
transaction applied (in the same transaction where it is transactional), so a retry applies none twice.
"""
from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from typing import Any

from lastline.core.accounts import unlogged
from lastline.core.errors import Refusal, ServerError
from lastline.core.servers import Server
from lastline.core.sql import META_DB, quote_ident
from lastline.pitr.events import GTID, HEADER, HEADER_LEN, QUERY, XID
from lastline.pitr.split import INTVAR, RAND, StatementGroup

log = logging.getLogger(__name__)

LEDGER = f"`{META_DB}`.`pitr_statements`"
# what the server answers a statement that reaches past the account's grants: skipped, not applied (1045: a GRANT
# on *.*; the account's own login happens before, outside this)
DENIED = {1044, 1045, 1142, 1143, 1227, 1370, 1410, 1211, 1449}
_FLAGS = (  # Q_FLAGS2 bits as MariaDB writes them: (variable, bit, value when the bit is set)
    ("sql_auto_is_null", 0x00004000, 1), ("check_constraint_checks", 0x00008000, 0),
    ("explicit_defaults_for_timestamp", 0x01000000, 1), ("foreign_key_checks", 0x04000000, 0),
    ("unique_checks", 0x08000000, 0), ("sql_if_exists", 0x10000000, 1), ("system_versioning_insert_history", 0x40000000, 1),
)


@dataclass
class Query:
    """One Query event: the source session, its default database, the error it ended with there, the SET
    statements of its context and its text."""

    thread_id: int
    db: str
    error_code: int
    text: bytes
    sets: list[tuple[str, Any]] = field(default_factory=list)  # (SET clause with %s, its argument or None)


def _status(block: bytes, gtid: str) -> tuple[list[tuple[str, Any]], int]:
    """The SET clauses of a Query event's status variables, and its microseconds (Q_HRNOW)."""
    sets: list[tuple[str, Any]] = []
    micro, i = 0, 0
    while i < len(block):
        code = block[i]
        i += 1
        if code == 0:
            flags = struct.unpack_from("<I", block, i)[0]
            sets += [(f"{name}={(value if flags & bit else 1 - value)}", None) for name, bit, value in _FLAGS]
            i += 4
        elif code == 1:
            sets.append((f"sql_mode={struct.unpack_from('<Q', block, i)[0]}", None))
            i += 8
        elif code == 2:  # catalog, old form: length, text, NUL
            i += 1 + block[i] + 1
        elif code == 3:
            inc, off = struct.unpack_from("<HH", block, i)
            sets.append((f"auto_increment_increment={inc}, auto_increment_offset={off}", None))
            i += 4
        elif code == 4:
            client, connection, server = struct.unpack_from("<HHH", block, i)
            sets.append((f"character_set_client={client}, collation_connection={connection}, collation_server={server}", None))
            i += 6
        elif code == 5:
            n = block[i]
            sets.append(("time_zone=%s", block[i + 1:i + 1 + n].decode("ascii")))
            i += 1 + n
        elif code == 6:  # catalog
            i += 1 + block[i]
        elif code == 7:
            sets.append((f"lc_time_names={struct.unpack_from('<H', block, i)[0]}", None))
            i += 2
        elif code == 8:
            sets.append((f"collation_database={struct.unpack_from('<H', block, i)[0]}", None))
            i += 2
        elif code == 9:  # table map for update (multi-table update, informational)
            i += 8
        elif code == 10:  # master data written (relay logs only)
            i += 4
        elif code == 11:  # invoker: user, host (the DEFINER clause is in the text itself)
            i += 1 + block[i]
            i += 1 + block[i]
        elif code == 128:  # Q_HRNOW: microseconds of the timestamp
            micro = int.from_bytes(block[i:i + 3], "little")
            i += 3
        elif code == 129:  # Q_XID
            i += 8
        else:
            raise Refusal(f"transaction {gtid}: a statement carries status variable {code}, which lastline cannot set "
                          "as the server's applier would; roll forward from a physical base.")
    return sets, micro


def parse_query(event: bytes, checksum: bool, gtid: str) -> Query:
    """A Query event as a session runs it."""
    ts = HEADER.unpack_from(event, 0)[0]
    body = HEADER_LEN
    thread_id, _, db_len, error_code, status_len = struct.unpack_from("<IIBHH", event, body)
    block = bytes(event[body + 13:body + 13 + status_len])
    sets, micro = _status(block, gtid)
    db_at = body + 13 + status_len
    db = bytes(event[db_at:db_at + db_len]).decode("utf-8", "surrogateescape")
    text = bytes(event[db_at + db_len + 1:len(event) - (4 if checksum else 0)])
    sets.insert(0, (f"timestamp={int(ts)}.{int(micro):06d}", None))
    return Query(thread_id, db, error_code, text, sets)


def _context(event: bytes, kind: int, checksum: bool, gtid: str) -> tuple[str, Any]:
    """The SET clause of an Intvar, Rand or User_var event."""
    body = event[HEADER_LEN:len(event) - (4 if checksum else 0)]
    if kind == INTVAR:
        what, value = struct.unpack_from("<BQ", body, 0)
        return (f"{'last_insert_id' if what == 1 else 'insert_id'}={value}", None)
    if kind == RAND:
        one, two = struct.unpack_from("<QQ", body, 0)
        return (f"rand_seed1={one}, rand_seed2={two}", None)
    n = struct.unpack_from("<I", body, 0)[0]
    name = bytes(body[4:4 + n]).decode("utf-8", "surrogateescape")
    at = 4 + n
    if body[at]:  # NULL
        return (f"@{quote_ident(name)}=NULL", None)
    kind_, charset, size = struct.unpack_from("<BII", body, at + 1)
    value = bytes(body[at + 10:at + 10 + size])
    if kind_ == 0:  # a string, in its charset (a collation id)
        return (f"@{quote_ident(name)}=CONVERT(%s USING binary) COLLATE binary", value) if charset == 63 else \
            (f"@{quote_ident(name)}=CAST(%s AS CHAR CHARACTER SET {_charset(charset)})", value)
    if kind_ == 1:
        return (f"@{quote_ident(name)}=%s", struct.unpack("<d", value)[0])
    if kind_ == 2:
        unsigned = len(body) > at + 10 + size and body[at + 10 + size] & 1
        return (f"@{quote_ident(name)}=%s", struct.unpack("<Q" if unsigned else "<q", value)[0])
    raise Refusal(f"transaction {gtid}: a user variable of type {kind_} (DECIMAL) is not replayed by lastline's "
                  "statement sessions; roll forward from a physical base.")


def _charset(collation: int) -> str:
    """The character set of a collation id the binlog names (the common ones; others refused)."""
    known = {8: "latin1", 33: "utf8mb3", 45: "utf8mb4", 46: "utf8mb4", 224: "utf8mb4", 83: "utf8mb3", 47: "latin1",
             48: "latin1", 11: "ascii", 65: "ascii", 63: "binary", 192: "utf8mb3", 255: "utf8mb4"}
    if collation not in known:
        raise Refusal(f"a user variable in collation {collation}: not replayed by lastline's statement sessions.")
    return known[collation]


class Sessions:
    """Sessions of the run account, one per source session; applies statement groups in order."""

    def __init__(self, account: Server, run_id: str) -> None:
        self.account, self.run_id = account, run_id
        self._conns: dict[int, Any] = {}
        self._db: dict[int, str] = {}
        self.skipped: list[dict[str, Any]] = []
        self.applied = 0

    def _cursor(self, thread_id: int) -> Any:
        if thread_id not in self._conns:
            conn = self.account.connect()
            conn.autocommit(True)  # as the source's sessions: BEGIN opens a transaction, a statement alone commits
            cur = conn.cursor()
            unlogged(cur)  # binary logging off for this session (the account's one procedure for it)
            self._conns[thread_id] = conn
        return self._conns[thread_id].cursor()

    def close(self) -> None:
        for conn in self._conns.values():
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a connection already gone
                pass
        self._conns.clear()

    def done(self) -> set[str]:
        """The GTIDs this run has applied or skipped already (a retry leaves them out)."""
        with self.account.session() as cur:
            cur.execute(f"SELECT gtid FROM {LEDGER} WHERE run_id=%s", (self.run_id,))
            return {str(r[0]) for r in cur.fetchall()}

    def apply(self, group: StatementGroup) -> bool:
        """Run one transaction of statements; False if the server refused it to the account (rolled back, skipped)."""
        import MySQLdb

        queries = [(k, e) for e in group.events if (k := HEADER.unpack_from(e, 0)[1]) != GTID]
        first = next((parse_query(e, group.checksum, group.gtid) for k, e in queries if k == QUERY), None)
        if first is None:
            return True
        thread = first.thread_id
        cur = self._cursor(thread)
        pending: list[tuple[str, Any]] = []
        ledgered = False
        try:
            for kind, event in queries:
                if kind == XID:
                    self._ledger(cur, group, "applied")
                    ledgered = True
                    cur.execute("COMMIT")
                    continue
                if kind != QUERY:
                    pending.append(_context(event, kind, group.checksum, group.gtid))
                    continue
                query = parse_query(event, group.checksum, group.gtid)
                if query.text == b"COMMIT":
                    self._ledger(cur, group, "applied")
                    ledgered = True
                for clause, arg in query.sets + pending:
                    cur.execute(f"SET SESSION {clause}" if "@" not in clause.split("=")[0] else f"SET {clause}",
                                None if arg is None else (arg,))
                pending = []
                if query.db and query.db != self._db.get(thread):
                    cur.execute(f"USE {quote_ident(query.db)}")
                    self._db[thread] = query.db
                try:
                    cur.execute(query.text)
                except MySQLdb.Error as exc:
                    if not query.error_code or exc.args[0] != query.error_code:
                        raise
        except MySQLdb.Error as exc:
            code = exc.args[0] if exc.args else 0
            try:
                cur.execute("ROLLBACK")
            except MySQLdb.Error:
                pass
            if code not in DENIED:
                raise ServerError(f"the replay's statement session failed on transaction {group.gtid} ({exc}); a retry "
                                  "resumes after the last transaction applied.") from exc
            reason = str(exc.args[-1]) if exc.args else str(exc)
            self.skipped.append({"gtid": group.gtid, "reason": reason, "statement": first.text[:200].decode("utf-8", "replace")})
            log.warning("replay: transaction %s skipped, the server refused it to the restore's account: %s", group.gtid, reason)
            self._ledger(cur, group, "skipped")
            return False
        if not ledgered:  # a statement on its own (DDL, a non-transactional write): recorded after it
            self._ledger(cur, group, "applied")
        self.applied += 1
        return True

    def _ledger(self, cur: Any, group: StatementGroup, state: str) -> None:
        cur.execute(f"INSERT INTO {LEDGER} (run_id, gtid, state) VALUES (%s, %s, %s)", (self.run_id, group.gtid, state))
        if state == "skipped" or not group.transactional:
            cur.connection.commit()
