"""A logical base's replay, reaching the restored databases only (issue 29).

A logical base restores some databases into a server that may hold others, so its roll-forward must reach those
databases only, whatever the archive holds (anything read from a destination is untrusted). MariaDB gives no
account-limited way to apply row events (its applier runs with every privilege, and a `BINLOG '...'` statement
applies row events to any table once an account holds BINLOG REPLAY: tested). So row events are rebuilt, and an
archived statement runs only under an account whose grants reach the restored databases alone (issue 47):

- **row changes** (a GTID, table maps, row events, savepoints, an XID or `COMMIT`: no other statement) go to the
  target's own parallel applier in relay logs that lastline *rebuilds*: the format description (its server version
  and in-use flag set by lastline, its layout checked), the GTID, BEGIN, savepoint (`SAVEPOINT`, `ROLLBACK TO`,
  `RELEASE SAVEPOINT` and one name, rebuilt from those parts), XID and COMMIT events re-encoded from what lastline
  read, the table maps and row events of the restored databases copied, those of any other database left out
  (the statement-end flag moved onto the last row event kept), nothing between transactions but lastline's own
  Rotate. The server's `replicate_do_db` on the connection is a second line (and a crash that restarts the
  applier by itself, its filter gone, finds nothing of another database);
- **statements** that may change a restored database run, in span order, in one session of the replay's own account
  (pitr.statement_run, pitr.interleave): the server's privileges keep them inside the restored databases; in the
  relay logs each becomes an empty transaction (its GTID kept, so the target's position moves past it). One that
  reaches only other databases becomes an empty transaction too, and is named as left out;
- anything else is refused in the first pass, the statement named by its first characters and an event by its
  type's name: a transaction mixing both, LOAD DATA, XA, an event between transactions other than a Gtid_list,
  checkpoint, Rotate or Stop, a second format description, or one whose layout differs from what lastline parses.
"""
from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Iterator

from lastline.core.errors import IntegrityError, Refusal
from lastline.core.hosts import Host, Stage
from lastline.core.pipeline import run_pipeline
from lastline.pitr import events
from lastline.pitr.event_names import event_name
from lastline.pitr.events import (
    BINLOG_CHECKPOINT,
    FL_STANDALONE,
    GTID,
    GTID_LIST,
    HEADER,
    HEADER_LEN,
    QUERY,
    ROTATE,
    STOP,
    XID,
    Cutter,
)
from lastline.pitr.sealed import Seals
from lastline.pitr.span import FileSpan
from lastline.pitr.statement_run import Statement, empty_transaction, refusal
from lastline.pitr.statements import (
    INTVAR,
    RAND,
    USER_VAR,
    StatementGroup,
    parse_query,
    read,
    savepoint,
    statement_head,
    touches,
    without_literals,
)
from lastline.pitr.window import segment_chunks, utc
from lastline.storage import Storage

log = logging.getLogger(__name__)

ANNOTATE_ROWS, TABLE_MAP = 160, 19
ROWS_V1 = {23, 24, 25, 166, 167, 168}  # write/update/delete rows, MariaDB's compressed ones: 8-byte post-header
ROWS_V2 = {30, 31, 32, 169, 170, 171}  # their v2 forms: 10-byte post-header (extra data follows)
ROWS = ROWS_V1 | ROWS_V2
STMT_END = 0x0001  # a row event's flag: the last of its statement
STATEMENT_KINDS = {GTID, QUERY, INTVAR, RAND, USER_VAR, XID}
BETWEEN = {GTID_LIST, BINLOG_CHECKPOINT, ROTATE, STOP}
# the post-header length the server must read for each event lastline passes on, as lastline parses it
POST_HEADER = {QUERY: 13, TABLE_MAP: 8, GTID: 19, XID: 0, **{k: 8 for k in ROWS_V1}, **{k: 10 for k in ROWS_V2}}
GTID_KEPT_FLAGS = 0x02 | 0x04 | 0x08 | 0x10  # group commit id, transactional, allow parallel, waited
NAMES = {events.QUERY_COMPRESSED: "a compressed statement", 17: "LOAD DATA (Begin_load_query)",
         18: "LOAD DATA (Execute_load_query)", events.XA_PREPARE: "XA PREPARE", TABLE_MAP: "row events",
         ANNOTATE_ROWS: "row events", **{k: "row events" for k in ROWS}}
ROW_BODY = {ANNOTATE_ROWS, TABLE_MAP, *ROWS}
def query_text(event: bytes | bytearray, checksum: bool) -> bytes:
    """A Query event's statement text."""
    body = HEADER_LEN
    db_len = event[body + 8]
    status_len = struct.unpack_from("<H", event, body + 11)[0]
    return bytes(event[body + 13 + status_len + db_len + 1:len(event) - (4 if checksum else 0)])


SERVER_VERSION = b"10.11.0-MariaDB-lastline"  # what a rebuilt format description says (the server reads the
# checksum setting and event layouts by it)


def check_format(event: bytes, name: str, checksum: bool) -> None:
    """The format description must describe the layout lastline parses: a 19-byte header, for every event it passes
    on the post-header length it reads, and a checksum setting (none or CRC32) as lastline read it."""
    body = event[HEADER_LEN:len(event) - (4 if checksum else 0)]
    version, header_len = struct.unpack_from("<H", body, 0)[0], body[56] if len(body) > 56 else 0
    lengths, alg = body[57:-1], body[-1] if body else -1
    wrong = [k for k, n in POST_HEADER.items() if len(lengths) < k or lengths[k - 1] != n]
    if version != 4 or header_len != HEADER_LEN or wrong or alg != (1 if checksum else 0):
        raise Refusal(f"{name}: its format description declares a layout lastline does not read (binlog version {version}, "
                      f"header {header_len} bytes, checksum {alg}, other post-header lengths for event types {wrong}): a "
                      "logical base is not rolled forward through it; roll forward from a physical base.")


def rebuild_format(event: bytes, checksum: bool) -> bytes:
    """The format description a relay log starts with: the archived one's layout (checked), lastline's server
    version, the in-use flag clear, its CRC32 computed again."""
    data = bytearray(event)
    data[HEADER_LEN + 2:HEADER_LEN + 52] = SERVER_VERSION.ljust(50, b"\0")
    data[events.FLAGS_AT] &= ~events.IN_USE & 0xFF
    if checksum:
        struct.pack_into("<I", data, len(data) - 4, zlib.crc32(bytes(data[:-4])) & 0xFFFFFFFF)
    return bytes(data)


def classify(kinds: list[int], texts: list[bytes], flags2: int, gtid: str) -> str:
    """`rows` or `statements` for one transaction's event kinds (its Query events' texts and its GTID flags);
    refuses the rest, naming the first statement by its first characters. A row transaction is a GTID event (not
    standalone, not DDL), an optional `BEGIN`, table maps and row events (Annotate_rows among them) and savepoint
    statements, and an XID or a `COMMIT`."""
    if flags2 & 0xC0:
        raise Refusal(f"transaction {gtid} is an XA transaction: a logical base's replay never prepares or ends one; "
                      "roll forward from a physical base, or choose an until before it.")
    said = iter(texts)
    named = [(k, next(said, b"") if k == QUERY else b"") for k in kinds]
    body = named[1:-1]
    if body and body[0] == (QUERY, b"BEGIN"):
        body = body[1:]
    if (len(kinds) >= 2 and not flags2 & (FL_STANDALONE | events.FL_DDL)
            and all(k in ROW_BODY or (k == QUERY and savepoint(t) is not None) for k, t in body)
            and (kinds[-1] == XID or named[-1] == (QUERY, b"COMMIT"))):
        return "rows"
    if set(kinds) <= STATEMENT_KINDS:
        return "statements"
    statement = next((t for k, t in named if k == QUERY and t not in (b"BEGIN", b"COMMIT") and savepoint(t) is None),
                     None)
    found = sorted({NAMES.get(k) or event_name(k) for k in kinds if k not in (GTID, XID, QUERY)})
    if statement is not None:
        found.insert(0, f"a statement {statement_head(statement)}")
    raise Refusal(f"transaction {gtid} holds {' and '.join(found)}: a logical base rolls forward through row events "
                  "(rebuilt for the restored databases and run by the target's applier, savepoints among them) and "
                  "transactions of statements (run under an account limited to the restored databases); a transaction "
                  "mixing both or holding anything else is not passed on. Roll forward from a physical base, or choose an "
                  "until before this transaction.")


def rebuild_rows(group: list[bytes], checksum: bool, databases: frozenset[bytes]) -> bytes:
    """A row transaction as lastline read it: GTID, BEGIN, XID/COMMIT rebuilt; the table maps and row events of
    `databases` copied; the others left out (a statement-end flag they carried moved onto the last row event kept)."""
    ts, _, server_id, _, end, flags = HEADER.unpack_from(group[0], 0)
    seq, domain, flags2 = struct.unpack_from("<QIB", group[0], HEADER_LEN)
    commit_id = struct.unpack_from("<Q", group[0], HEADER_LEN + 13)[0] if flags2 & 0x02 else None
    out = [events.gtid_event(ts, server_id, end, seq, domain, flags2 & GTID_KEPT_FLAGS, commit_id, checksum,
                             flags & events.SUPPRESS_USE)]
    body = group[1:-1]
    gtid = f"{domain}-{server_id}-{seq}"
    if body and body[0][4] == QUERY and query_text(body[0], checksum) == b"BEGIN":  # (MariaDB's GTID event begins
        out.append(_rebuilt_query(body[0], checksum, gtid, b"BEGIN"))  # the transaction itself: rarely written)
        body = body[1:]
    mapped: set[bytes] = set()  # the table ids of this statement's kept table maps
    last_kept: int | None = None  # where in `out` the statement's last kept row event is (its end flag not yet set)
    for event in body:
        kind = event[4]
        if kind == TABLE_MAP:
            table_id, db_len = bytes(event[HEADER_LEN:HEADER_LEN + 6]), event[HEADER_LEN + 8]
            if bytes(event[HEADER_LEN + 9:HEADER_LEN + 9 + db_len]) in databases:
                mapped.add(table_id)
                out.append(bytes(event))
        elif kind == QUERY:  # a savepoint (classify let no other statement through), rebuilt from its parts
            text = savepoint(query_text(event, checksum))
            if text is None:
                raise Refusal(f"transaction {gtid}: a statement inside its row events is not a savepoint: refused.")
            out.append(_rebuilt_query(event, checksum, gtid, text))
        elif kind in ROWS:
            table_id = bytes(event[HEADER_LEN:HEADER_LEN + 6])
            ends = struct.unpack_from("<H", event, HEADER_LEN + 6)[0] & STMT_END
            if table_id in mapped:
                out.append(bytes(event))
                last_kept = None if ends else len(out) - 1
            elif ends and last_kept is not None:
                out[last_kept] = _with_stmt_end(out[last_kept], checksum)
                last_kept = None
            if ends:
                mapped = set()
    ts, kind, server_id, _, end, flags = HEADER.unpack_from(group[-1], 0)
    if kind == XID:
        out.append(events.xid_event(ts, server_id, end, struct.unpack_from("<Q", group[-1], HEADER_LEN)[0], checksum))
    else:
        out.append(_rebuilt_query(group[-1], checksum, gtid, b"COMMIT"))
    return b"".join(out)


def _rebuilt_query(event: bytes, checksum: bool, gtid: str, text: bytes) -> bytes:
    """A Query event of a row transaction (BEGIN, COMMIT, a savepoint) re-encoded with `text`: its time, server,
    session, the status variables lastline read (flags, sql_mode, charset), no default database."""
    query = parse_query(event, checksum, gtid)
    ts, _, server_id, _, end, flags = HEADER.unpack_from(event, 0)
    return events.query_event(ts, server_id, end, query.thread_id, query.status.encode(), text, checksum,
                              flags & (events.SUPPRESS_USE | events.THREAD_SPECIFIC))


def _with_stmt_end(event: bytes, checksum: bool) -> bytes:
    """A row event with its statement-end flag set (its CRC32 computed again)."""
    data = bytearray(event)
    flags = struct.unpack_from("<H", data, HEADER_LEN + 6)[0] | STMT_END
    struct.pack_into("<H", data, HEADER_LEN + 6, flags)
    if checksum:
        struct.pack_into("<I", data, len(data) - 4, zlib.crc32(bytes(data[:-4])) & 0xFFFFFFFF)
    return bytes(data)


class Splitter(Cutter):
    """A Cutter for a logical base (`databases`: the restored ones). `collect`: the first pass (emits nothing; every
    event checked, every kept transaction classified, a statement that may change a restored database refused unless
    it can run exactly once (statement_run.refusal); the statements left out in `left_out`). Otherwise: emits the kept transactions rebuilt (see the module)."""

    def __init__(self, name: str, start: int, stop: int | None, applied: dict[int, int], collect: bool,
                 databases: frozenset[str] = frozenset()) -> None:
        super().__init__(name, start, stop, applied)
        self.collect, self.databases = collect, databases
        self.names = frozenset(d.encode("utf-8") for d in databases)  # as table maps carry them
        self.folded = frozenset(d.casefold() for d in databases)
        self.left_out: list[dict[str, str]] = []
        self.statements: list[Statement] = []  # the ones that may change a restored database: run in the session
        self.written = 0  # bytes taken so far (where the next emitted byte lies in the relay log)
        self._events: list[bytes] = []
        self._formats = 0

    def _magic_seen(self) -> None:
        if not self.collect:
            super()._magic_seen()

    def take(self) -> bytes:
        out = super().take()
        self.written += len(out)
        return out

    def _seen(self, data: bytearray, at: int, size: int, role: str) -> None:
        event = bytes(data[at:at + size])
        if role == "format":
            self._formats += 1
            if self._formats > 1 or self.pos != 4:
                raise Refusal(f"{self.name}: a second format description at byte {self.pos}: it would change how the "
                              "server reads the events after it; a logical base is not rolled forward through it.")
            check_format(event, self.name, self.out.checksum)
            if not self.collect:
                self.emit += rebuild_format(event, self.out.checksum)
                self.emit += events.rotate_event(self.name, HEADER.unpack_from(data, at)[2], self.out.checksum,
                                                 max(self.start, 4))
            return
        if role == "between":
            if event[4] not in BETWEEN:
                raise Refusal(f"{self.name}: an event {event_name(event[4])} at byte {self.pos} lies outside any transaction "
                              "(no GTID before it): a logical base's replay passes nothing of the kind on; refused.")
            return  # none of these reaches the relay logs
        if role == "begin":
            self._events = []
            opened = self._open
            assert opened is not None
            d, _, n = (int(x) for x in opened[0].split("-"))
            self._keep_group = self.pos >= self.start and (self.stop is None or self.pos < self.stop) and \
                n > self.applied.get(d, -1)
        if self._keep_group:
            self._events.append(event)
        if role != "end" or not self._keep_group:
            return
        t = self.out.transactions[-1]
        kinds = [HEADER.unpack_from(e, 0)[1] for e in self._events]
        texts = [query_text(e, self.out.checksum) for e, k in zip(self._events, kinds) if k == QUERY]
        flags2 = self._events[0][HEADER_LEN + 12]
        kind = classify(kinds, texts, flags2, t.gtid)
        if kind == "statements":
            parsed = read(StatementGroup(t.gtid, t.time, self.out.checksum, self._events))
            if any(touches(query, self.folded) for query in parsed):  # it runs, under the replay's account
                st = Statement(t.gtid, t.time, flags2, self.out.checksum, self._events, offset=self.written + len(self.emit))
                if self.collect:
                    refusal(st, utc(t.time) or str(t.time))
                self.statements.append(st)
            elif self.collect:
                self.left_out.append({"gtid": t.gtid, "statement": without_literals(texts[-1])[:200].decode(
                    "utf-8", "replace") if texts else ""})
        if not self.collect:
            self.emit += (rebuild_rows(self._events, self.out.checksum, self.names) if kind == "rows"
                          else empty_transaction(self._events, self.out.checksum))
        self.kept.append(t)
        self._events, self._keep_group = [], False


def cut(storage: Storage, f: FileSpan, cutter: Cutter, last: bool, seals: Seals | None = None) -> Iterator[bytes]:
    """The bytes `cutter` keeps of one file of a span, as the archive streams them: segment 0 (the file's header) and
    those overlapping the file's part; each segment's sha256 is checked at its end (a reader acts on the bytes once the
    whole segment has passed); a damaged file, or one ending inside a transaction with files after it, fails."""
    needed = [s for i, s in enumerate(f.segments) if i == 0 or (
        s["offset"] + s["size"] > f.start and (f.stop is None or s["offset"] < f.stop))]
    for seg in needed:
        if seg["offset"]:
            cutter.jump(seg["offset"])
        for chunk in segment_chunks(storage, f.branch, f.name, seg, seals):
            cutter.feed(chunk)
            yield cutter.take()
    if cutter.stopped:
        raise IntegrityError(f"{f.name}: the archived bytes cannot be read as binlog events from byte {cutter.pos} on: "
                             "the archive is damaged there; nothing was applied.")
    if cutter._open is not None and not last:
        raise IntegrityError(f"{f.name}: the archived bytes end inside transaction {cutter._open[0]}, and later files "
                             "follow: the archive is damaged there; nothing was applied.")


def write_relay(storage: Storage, f: FileSpan, cutter: Cutter, last: bool, host: Host, path: str, seals: Seals | None = None) -> int:
    """Write what `cutter` keeps of one file to `path` on `host` (a relay log for the target's applier); its bytes."""
    result = run_pipeline([Stage("write", ["dd", f"of={path}", "bs=1M", "status=none"])],
                          source=cut(storage, f, cutter, last, seals), label=f"binlog {f.name}", progress_every=None, host=host)
    log.info("%s: %d transactions to apply (%s bytes) of bytes [%d, %s)", f.name, len(cutter.kept),
             f"{result.bytes_in:,}", f.start, f.stop if f.stop is not None else "end")
    return int(result.bytes_in)
