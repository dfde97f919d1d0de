"""MariaDB binlog files read as events: where each transaction (event group) starts and ends, its GTID and
its time. Pure parsing over bytes (no server): the archive indexes what it ships with it, and the restore
finds where to start and stop with it, to the byte.

Only the 19-byte common header is read for most events (`timestamp, type, server_id, size, end, flags`);
the GTID event's body (sequence number, domain, flags) and a Query event's text (to tell `COMMIT` and
`ROLLBACK` from other statements) are the only bodies looked into. A binlog read from a destination is
untrusted: sizes are checked against the bytes there are, and anything the parser does not recognise as
whole ends the readable part (`Scan.end`), never a guess.

A transaction's time is its GTID event's timestamp: the start of the statement that committed it (the
`COMMIT`, or the statement itself when autocommit), in seconds. The binlog holds transactions in commit
order, so "every transaction up to the first one stamped after T" is always a state the source was in.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from lastline.core.errors import IntegrityError

MAGIC = b"\xfebin"
HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server_id, event size, end position, flags
HEADER_LEN = HEADER.size  # 19
FLAGS_AT = 17  # the flags' offset in the header
IN_USE = 0x1  # LOG_EVENT_BINLOG_IN_USE_F, in the format description event's flags
ARTIFICIAL = 0x20  # LOG_EVENT_ARTIFICIAL_F

QUERY, STOP, ROTATE, FORMAT_DESCRIPTION, XID = 2, 3, 4, 15, 16
BINLOG_CHECKPOINT, GTID, GTID_LIST, START_ENCRYPTION, QUERY_COMPRESSED, XA_PREPARE = 161, 162, 163, 164, 165, 38
FL_STANDALONE, FL_GROUP_COMMIT_ID, FL_TRANSACTIONAL, FL_DDL = 0x01, 0x02, 0x04, 0x20
_ENDS_GROUP = {XID, XA_PREPARE}

_QUERIES = {QUERY, QUERY_COMPRESSED}
_ENDS_TEXT = (b"COMMIT", b"ROLLBACK")  # as the server tells a group's end: the whole statement, nothing else


@dataclass(frozen=True)
class Transaction:
    """One event group: bytes [start, end) of its file, from its GTID event to its last event."""

    gtid: str  # domain-server-seq
    time: int  # the GTID event's timestamp (UTC seconds)
    start: int
    end: int
    server_id: int
    transactional: bool = True  # its changes commit with the replica's GTID position (not DDL, not MyISAM/Aria)

    @property
    def domain(self) -> int:
        return int(self.gtid.split("-")[0])

    @property
    def seq(self) -> int:
        return int(self.gtid.split("-")[2])


@dataclass
class Scan:
    """What one pass over a binlog's bytes found: its whole transactions, in order; `end`, the byte after the
    last whole transaction (or after the file's header events when it holds none), which is where a replay
    may stop; whether the file says it is still being written; the checksum it uses."""

    transactions: list[Transaction] = field(default_factory=list)
    end: int = 0
    in_use: bool = False
    checksum: bool = False
    server_ids: set[int] = field(default_factory=set)
    format_end: int = 0  # the byte after the format description event

    def ending_at(self, position: int) -> Transaction | None:
        """Of a scan of the bytes up to `position`: the transaction a coordinate there follows, when from its end
        to `position` lie only events between groups (a Binlog_checkpoint the server wrote late, a Gtid_list)."""
        return self.transactions[-1] if self.transactions and self.end == position else None


def _gtid_of(data: bytes | bytearray, at: int, body: int, server_id: int) -> tuple[str, int]:
    seq, domain, flags2 = struct.unpack_from("<QIB", data, at + body)
    return f"{domain}-{server_id}-{seq}", flags2


def _ends_group(data: bytes | bytearray, at: int, size: int, checksum: bool) -> bool:
    """Whether a Query event's statement is exactly `COMMIT` or `ROLLBACK` (the server's is_commit/is_rollback:
    `ROLLBACK TO sp` and the like stay inside their transaction)."""
    body = at + HEADER_LEN
    db_len = data[body + 8]
    status_len = struct.unpack_from("<H", data, body + 11)[0]
    text = body + 13 + status_len + db_len + 1
    stop = at + size - (4 if checksum else 0)
    return stop - text <= 8 and bytes(data[text:stop]) in _ENDS_TEXT


class Scanner:
    """Reads a binlog's bytes as they stream past (`feed`), keeping only the event not yet whole: the
    archive indexes what it ships without holding a file in memory. `offset`: where the bytes fed begin
    in their file (0: the magic first; else an event boundary, with the file's `checksum` setting)."""

    def __init__(self, name: str = "binlog", offset: int = 0, checksum: bool = False) -> None:
        self.name, self.pos = name, offset
        self.out = Scan(end=offset, checksum=checksum)
        self._buf = bytearray()
        self._magic = offset == 0
        self._open: tuple[str, int, int, int, int] | None = None  # gtid, time, start, server_id, flags2
        self.stopped = False  # something not whole or not known: nothing after it is read

    def feed(self, chunk: bytes | memoryview) -> None:
        if self.stopped:
            return
        self._buf += chunk
        at = 0
        if self._magic:
            if len(self._buf) < 4:
                return
            if bytes(self._buf[:4]) != MAGIC:
                raise IntegrityError(f"{self.name} does not start as a binlog file does (magic "
                                     f"{bytes(self._buf[:4])!r}); refused.")
            self._magic, at, self.pos, self.out.end = False, 4, 4, 4
            self._magic_seen()
        buf, n = self._buf, len(self._buf)
        while at + HEADER_LEN <= n:
            size = int.from_bytes(buf[at + 9:at + 13], "little")
            if size < HEADER_LEN or size > 1 << 32:
                self.stopped = True
                break
            if at + size > n:
                break
            self._seen(buf, at, size, self._event(buf, at, size))
            at += size
            self.pos += size
        del self._buf[:at]

    def _magic_seen(self) -> None:
        """Hook: the 4 magic bytes were read."""

    def _seen(self, data: bytearray, at: int, size: int, role: str) -> None:
        """Hook: one whole event was read, of `role` (see _event)."""

    def _event(self, data: bytearray, at: int, size: int) -> str:
        """Index one event; its role: `format` (the format description), `begin` (a GTID event), `in` (inside a
        transaction), `end` (the event that ends one), `between` (outside any transaction)."""
        ts, kind, server_id, _, _, flags = HEADER.unpack_from(data, at)
        out, pos = self.out, self.pos
        if kind == FORMAT_DESCRIPTION:
            out.in_use = bool(flags & IN_USE)
            # the checksum algorithm is the byte before the event's own 4-byte checksum (1: CRC32)
            out.checksum = size >= HEADER_LEN + 57 + 5 and data[at + size - 5] == 1
            out.format_end = pos + size
            out.end = max(out.end, pos + size)
            return "format"
        if kind == START_ENCRYPTION:
            raise IntegrityError(f"{self.name} is an encrypted binlog: lastline cannot read it to find transaction "
                                 "boundaries; archive the binlogs unencrypted (the destination can encrypt at rest).")
        if kind == GTID:
            if self._open is not None:
                raise IntegrityError(f"{self.name}: transaction {self._open[0]} (from byte {self._open[2]}) has no end "
                                     f"before the next one begins at byte {pos}; lastline does not guess where it "
                                     "ends: the binlog is damaged or of a kind it does not know.")
            gtid, flags2 = _gtid_of(data, at, HEADER_LEN, server_id)
            self._open = (gtid, ts, pos, server_id, flags2)
            out.server_ids.add(server_id)
            return "begin"
        if self._open is not None:
            if flags & ARTIFICIAL:
                return "in"
            standalone = bool(self._open[4] & FL_STANDALONE)
            ends = kind in _ENDS_GROUP or (kind in _QUERIES and standalone) or (
                kind == QUERY and _ends_group(data, at, size, out.checksum))
            if not ends:
                return "in"
            gtid, t, start, sid, flags2 = self._open
            out.transactions.append(Transaction(gtid, t, start, pos + size, sid,
                                                transactional=bool(flags2 & FL_TRANSACTIONAL) and not flags2 & FL_DDL))
            out.end = pos + size
            self._open = None
            return "end"
        if kind in (GTID_LIST, BINLOG_CHECKPOINT, ROTATE, STOP):
            out.end = pos + size  # between transactions: a replay may stop after it
        return "between"


class Cutter(Scanner):
    """Of one binlog file's bytes fed in order from byte 0 (`jump` skips to a later segment), keeps what a replay
    applies: the magic and format description (its in-use flag cleared), an artificial Rotate naming the file (what
    a relay log carries, for the server's applier), and each whole transaction in [start, stop) that `applied` (a
    GTID state, {domain: seq}) does not hold yet; a transaction is passed on only once its last event is read. The
    transactions kept are in `kept` (the stats a replay reports); `out` indexes everything read."""

    def __init__(self, name: str, start: int, stop: int | None, applied: dict[int, int], rotate: bool = True) -> None:
        super().__init__(name)
        self.start, self.stop, self.applied, self.rotate = start, stop, applied, rotate
        self.kept: list[Transaction] = []
        self.emit = bytearray()
        self._group = bytearray()
        self._keep_group = False

    def take(self) -> bytes:
        """The bytes kept since the last call."""
        out, self.emit = bytes(self.emit), bytearray()
        return out

    def jump(self, offset: int) -> None:
        """The next bytes fed begin at `offset` of the file (an event boundary past everything fed so far)."""
        if self._buf or offset < self.pos:
            raise IntegrityError(f"{self.name}: the archived segments do not meet at event boundaries (at byte "
                                 f"{self.pos}, next segment at {offset}); the archive is damaged there.")
        self.pos = offset

    def _magic_seen(self) -> None:
        self.emit += MAGIC

    def _seen(self, data: bytearray, at: int, size: int, role: str) -> None:
        pos, event = self.pos, data[at:at + size]
        if role == "format":
            event = bytearray(event)
            event[FLAGS_AT] &= ~IN_USE & 0xFF  # the checksum is computed as if it were clear
            self.emit += event
            if self.rotate:
                server_id = HEADER.unpack_from(data, at)[2]
                self.emit += rotate_event(self.name, server_id, self.out.checksum, max(self.start, 4))
            return
        inside = pos >= self.start and (self.stop is None or pos < self.stop)
        if role == "begin":
            t = self._open
            assert t is not None
            d, _, n = (int(x) for x in t[0].split("-"))
            self._keep_group = inside and n > self.applied.get(d, -1)
            self._group = bytearray(event) if self._keep_group else bytearray()
        elif role in ("in", "end"):
            if self._keep_group:
                self._group += event
            if role == "end" and self._keep_group:
                self.emit += self._group
                self.kept.append(self.out.transactions[-1])
                self._group, self._keep_group = bytearray(), False
        elif inside:
            self.emit += event


def scan(data: bytes | memoryview, name: str = "binlog", offset: int = 0, checksum: bool = False) -> Scan:
    """Every whole transaction in a binlog's bytes (from byte 0, or from the event boundary `offset`). Bytes
    cut in the middle of an event or a transaction end at the last whole one (`Scan.end`)."""
    scanner = Scanner(name, offset, checksum)
    scanner.feed(data)
    return scanner.out


def cleared_in_use(data: bytearray) -> bool:
    """Clear the in-use flag of a file archived while the source still wrote it (the server clears it when it
    closes the file; the checksum is computed as if it were clear). Returns whether it was set."""
    at = 4 + FLAGS_AT
    if len(data) > at and data[4 + 4] == FORMAT_DESCRIPTION and data[at] & IN_USE:
        data[at] &= ~IN_USE & 0xFF
        return True
    return False


def rotate_event(next_name: str, server_id: int, checksum: bool, position: int = 4) -> bytes:
    """An artificial Rotate event naming the source's file the events after it come from: what a replica's
    I/O thread writes at the top of each relay log, so that its SQL thread knows the source's coordinates."""
    body = struct.pack("<Q", position) + next_name.encode()
    size = HEADER_LEN + len(body) + (4 if checksum else 0)
    event = HEADER.pack(0, ROTATE, server_id, size, 0, ARTIFICIAL) + body
    if checksum:
        event += struct.pack("<I", zlib.crc32(event) & 0xFFFFFFFF)
    return event


def _event(ts: int, kind: int, server_id: int, end: int, body: bytes, checksum: bool, flags: int = 0) -> bytes:
    """One event with its header (and CRC32 where the file uses checksums)."""
    size = HEADER_LEN + len(body) + (4 if checksum else 0)
    event = HEADER.pack(ts, kind, server_id, size, end, flags) + body
    return event + struct.pack("<I", zlib.crc32(event) & 0xFFFFFFFF) if checksum else event


SUPPRESS_USE, THREAD_SPECIFIC = 0x8, 0x4  # the header flags a rebuilt event keeps (no others)


def gtid_event(ts: int, server_id: int, end: int, seq: int, domain: int, flags2: int, commit_id: int | None,
               checksum: bool, flags: int = SUPPRESS_USE) -> bytes:
    """A GTID event as MariaDB writes it: sequence number, domain, flags2, and the group commit id or padding."""
    tail = struct.pack("<Q", commit_id) if commit_id is not None else bytes(6)
    return _event(ts, GTID, server_id, end, struct.pack("<QIB", seq, domain, flags2) + tail, checksum, flags)


def query_event(ts: int, server_id: int, end: int, thread_id: int, status: bytes, text: bytes, checksum: bool,
                flags: int = SUPPRESS_USE) -> bytes:
    """A Query event with no default database and the status variables given (already encoded)."""
    return _event(ts, QUERY, server_id, end, struct.pack("<IIBHH", thread_id, 0, 0, 0, len(status)) + status + b"\0" + text,
                  checksum, flags)


def xid_event(ts: int, server_id: int, end: int, xid: int, checksum: bool, flags: int = 0) -> bytes:
    return _event(ts, XID, server_id, end, struct.pack("<Q", xid), checksum, flags)


def gtid_map(text: str) -> dict[int, int]:
    """{domain: seq} of a GTID state `d-s-n,...` (a single GTID is a state of one domain)."""
    return {int(g.split("-")[0]): int(g.split("-")[2]) for g in (text or "").split(",") if g}


def includes(state: str, other: str) -> bool:
    """Whether GTID state `state` holds every transaction `other` holds: each domain of `other` at or past its
    sequence number in `state`."""
    have = gtid_map(state)
    return all(have.get(d, -1) >= n for d, n in gtid_map(other).items())


def gtid_state(start: str, transactions: list[Transaction]) -> str:
    """The GTID state after `transactions`, from `start` (a Gtid_list: `domain-server-seq,...`): per domain, the
    last transaction's GTID."""
    state = {int(g.split("-")[0]): g for g in start.split(",") if g}
    for t in transactions:
        state[t.domain] = t.gtid
    return ",".join(state[d] for d in sorted(state))
