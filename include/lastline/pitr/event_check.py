"""The check every archived event of a physical base's replay passes while the span is cut, before anything is
applied (issue 42): the archive is untrusted input (who writes storage writes it), and both ways of replaying it
run what it holds with every privilege (the server's applier is a system thread; `BINLOG '...'` applies row
events to any table once an account holds BINLOG REPLAY). So an event that reaches beyond data refuses the
replay, named by file, byte, GTID and statement start.

What passes: between transactions only a Gtid_list, checkpoint, Rotate or Stop; one format description, first,
with the layout lastline parses; inside a transaction GTID, Query (a compressed one checked uncompressed), Intvar,
Rand, User_var, XID, XA PREPARE, table maps and row events (Annotate_rows, informational, too). A table map of a
system schema or lastline's own schema is refused; a row event must follow a table map of its transaction. A
statement must be a data change or data definition naming no system schema, read as the server reads it
(pitr.statement_check.statement_problem). For the pipe (`mariadb-binlog | mariadb`) the status values mariadb-binlog
prints unquoted must be plain, and a user variable's name too. The preflight runs the same check over the whole
span (check_span) before the base is restored; the replay runs it again while it cuts.
"""
from __future__ import annotations

import dataclasses
import re
import struct
import zlib
from typing import NoReturn

from lastline.core.errors import Refusal
from lastline.core.sql import never_restored
from lastline.pitr.event_names import event_name
from lastline.pitr.events import (
    GTID,
    HEADER_LEN,
    QUERY,
    QUERY_COMPRESSED,
    XA_PREPARE,
    XID,
    Cutter,
    gtid_map,
)
from lastline.pitr.span import Span
from lastline.pitr.split import ANNOTATE_ROWS, BETWEEN, ROWS, TABLE_MAP, check_format, cut
from lastline.pitr.statement_check import statement_problem
from lastline.pitr.statements import INTVAR, RAND, USER_VAR, Query, parse_query
from lastline.storage import Storage

IN_GROUP = {GTID, QUERY, QUERY_COMPRESSED, INTVAR, RAND, USER_VAR, XID, XA_PREPARE, TABLE_MAP, ANNOTATE_ROWS, *ROWS}
_PLAIN = re.compile(rb"[A-Za-z0-9_+\-:/.]*")  # a time zone name as mariadb-binlog prints it (unquoted inside '...')
_USER_VAR = re.compile(rb"[A-Za-z0-9_$]{1,64}")


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
                self._refuse(f"an event {event_name(kind)}", "lies outside any transaction (no GTID before it)")
        elif role == "begin":
            self._mapped = set()
            self._gtid = self._open[0] if self._open is not None else ""
        if role in ("in", "end") and self._keep_group or role == "begin":
            self._check(bytes(data[at:at + size]), kind)
        super()._seen(data, at, size, role)
        if role == "end":
            self._gtid = ""

    def _check(self, event: bytes, kind: int) -> None:
        """One event of a transaction the replay keeps (a GTID event: of every transaction, read before the Cutter
        decides whether it keeps it)."""
        checksum = self.out.checksum
        if kind not in IN_GROUP:
            self._refuse(f"an event {event_name(kind)}", "is not a data change lastline replays (LOAD DATA, an "
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
            db_raw = bytes(event[HEADER_LEN + 9:HEADER_LEN + 10 + db_len])  # the name and its terminator
            t_len = event[HEADER_LEN + 10 + db_len]
            t_raw = bytes(event[HEADER_LEN + 11 + db_len:HEADER_LEN + 12 + db_len + t_len])
            db, table = _map_name(db_raw), _map_name(t_raw)
            if db is None or table is None:
                # the server reads a name up to its first NUL: `mysql\0x` is `mysql` to it, whatever its length says
                self._refuse(f"a table map of {db_raw[:-1]!r}.{t_raw[:-1]!r}", "names a database or table the server "
                             "would read otherwise (a NUL inside, no terminator, or not UTF-8)")
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


def _map_name(raw: bytes) -> str | None:
    """A table map's database or table name (its bytes and their terminator) as the server reads it, or None where
    the server would read another name than its length says: a NUL inside, a missing terminator, bytes not UTF-8."""
    name, end = raw[:-1], raw[-1:]
    if end != b"\0" or b"\0" in name or not name:
        return None
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        return None


def check_span(storage: Storage, span: Span) -> int:
    """Every archived event of `span` a replay from its base would apply, read (each segment against its sha256) and
    checked, before anything is touched: the point-in-time preflight's pass for a physical base. Returns the number
    of transactions checked."""
    checked, seals = 0, span.seals()
    for f in span.files:
        cutter = CheckedCutter(f.name, f.start, f.stop, gtid_map(span.base_gtid))
        for _ in cut(storage, f, cutter, f is span.files[-1], seals):
            pass
        checked += len(cutter.kept)
    return checked
