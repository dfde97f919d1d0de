"""A logical base's replay, split by who may apply what (issue 29).

A logical base restores some databases into a server that may hold others, so its roll-forward must reach
those databases only, whatever the archive holds (anything read from a destination is untrusted). MariaDB
gives no account-limited way to apply row events: its applier runs with every privilege, and a `BINLOG '...'`
statement applies row events to any table once an account holds BINLOG REPLAY (tested). So each transaction
goes where the server itself limits it:

- **row changes** (GTID, the exact `BEGIN`/`COMMIT`, Annotate_rows, Table_map, row events, XID: nothing that
  runs a statement) go to the target's own parallel applier, with the server's filter `replicate_do_db` set to
  the restored databases on its connection: in row format the server filters each row event by the database
  its own table map names;
- **statements** (DDL, statement-format DML, with their Intvar/Rand/User_var context) run in sessions of an
  account that can touch the restored databases only, without BINLOG REPLAY (:mod:`lastline.pitr.statements`):
  a statement that reaches further is denied by the server, skipped and reported;
- anything else (a transaction mixing statements and row events, LOAD DATA events, XA) is refused: no
  account-limited way applies it.

:class:`Splitter` reads the span's files like the :class:`~lastline.pitr.events.Cutter` and keeps the same
transactions; its first pass collects the statement groups and proves every transaction is one of the two
kinds, a second pass per batch (the row transactions between two statement groups) writes relay logs.
"""
from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from lastline.core.errors import IntegrityError, Refusal
from lastline.core.hosts import Host, Stage
from lastline.core.pipeline import run_pipeline
from lastline.pitr import events
from lastline.pitr.events import HEADER, HEADER_LEN, QUERY, XID, Cutter
from lastline.pitr.span import FileSpan
from lastline.pitr.window import segment_chunks
from lastline.storage import Storage

log = logging.getLogger(__name__)

ANNOTATE_ROWS, TABLE_MAP, INTVAR, RAND, USER_VAR = 160, 19, 5, 13, 14
ROWS = {23, 24, 25, 30, 31, 32, 166, 167, 168, 169, 170, 171}  # write/update/delete rows: v1, v2, MariaDB compressed
ROW_KINDS = {events.GTID, ANNOTATE_ROWS, TABLE_MAP, XID, *ROWS}
STATEMENT_KINDS = {events.GTID, QUERY, INTVAR, RAND, USER_VAR, XID}
NAMES = {QUERY: "a statement", events.QUERY_COMPRESSED: "a compressed statement", 17: "LOAD DATA (Begin_load_query)",
         18: "LOAD DATA (Execute_load_query)", events.XA_PREPARE: "XA PREPARE", TABLE_MAP: "row events", **{k: "row events" for k in ROWS}}


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


def query_text(event: bytes | bytearray, checksum: bool) -> bytes:
    """A Query event's statement text."""
    body = HEADER_LEN
    db_len = event[body + 8]
    status_len = struct.unpack_from("<H", event, body + 11)[0]
    return bytes(event[body + 13 + status_len + db_len + 1:len(event) - (4 if checksum else 0)])


def classify(kinds: list[int], texts: list[bytes], gtid: str) -> str:
    """`rows` or `statements` for one transaction's event kinds (and its Query events' texts); refuses the rest."""
    plain = [t for t in texts if t not in (b"BEGIN", b"COMMIT")]
    if set(kinds) <= ROW_KINDS | {QUERY} and not plain:
        return "rows"
    if set(kinds) <= STATEMENT_KINDS:
        return "statements"
    found = sorted({NAMES.get(k, f"event type {k}") for k in kinds if k not in (events.GTID, XID)}
                   | ({"a statement"} if plain else set()))
    raise Refusal(f"transaction {gtid} holds {' and '.join(found)}: a logical base rolls forward through row events "
                  "(by the target's applier, filtered to the restored databases) or statements (by an account limited "
                  "to them), never both in one transaction nor anything else. Roll forward from a physical base, or "
                  "choose an until before this transaction.")


class Splitter(Cutter):
    """A Cutter for a logical base. `collect`: the first pass (emits nothing; the statement groups in
    `statements`, every kept transaction proven one of the two kinds). Otherwise: emits the row transactions kept
    (the `kept` list), leaving the statement groups out."""

    def __init__(self, name: str, start: int, stop: int | None, applied: dict[int, int], collect: bool,
                 index: int = 0) -> None:
        super().__init__(name, start, stop, applied)
        self.collect, self.index = collect, index
        self.statements: list[StatementGroup] = []
        self._events: list[bytes] = []

    def _magic_seen(self) -> None:
        if not self.collect:
            super()._magic_seen()

    def _seen(self, data: bytearray, at: int, size: int, role: str) -> None:
        if role == "format":
            if not self.collect:
                super()._seen(data, at, size, role)
            return
        if role == "begin":
            self._events = []
        if role in ("begin", "in", "end") and self._open_kept(role):
            self._events.append(bytes(data[at:at + size]))
        if role != "end" or not self._keep_group:
            if not self.collect and role not in ("begin", "in", "end") and self.pos >= self.start and (
                    self.stop is None or self.pos < self.stop):
                self.emit += data[at:at + size]
            return
        t = self.out.transactions[-1]
        kinds = [HEADER.unpack_from(e, 0)[1] for e in self._events]
        texts = [query_text(e, self.out.checksum) for e, k in zip(self._events, kinds) if k == QUERY]
        kind = classify(kinds, texts, t.gtid)
        if self.collect:
            if kind == "statements":
                self.statements.append(StatementGroup(t.gtid, t.time, t.transactional, self.index, t.start, t.end,
                                                      self.out.checksum, self._events))
            self.kept.append(t)
        elif kind == "rows":
            self.emit += b"".join(self._events)
            self.kept.append(t)
        self._events, self._keep_group = [], False

    def _open_kept(self, role: str) -> bool:
        """Whether the group being read is one this span keeps (decided at its GTID event, as the Cutter does)."""
        if role == "begin":
            t = self._open
            assert t is not None
            d, _, n = (int(x) for x in t[0].split("-"))
            self._keep_group = self.pos >= self.start and (self.stop is None or self.pos < self.stop) and \
                n > self.applied.get(d, -1)
        return self._keep_group


def cut(storage: Storage, f: FileSpan, cutter: Cutter, last: bool) -> Iterator[bytes]:
    """The bytes `cutter` keeps of one file of a span, as the archive streams them: segment 0 (the file's header) and
    those overlapping the file's part; each segment's sha256 is checked at its end (a reader acts on the bytes once the
    whole segment has passed); a damaged file, or one ending inside a transaction with files after it, fails."""
    needed = [s for i, s in enumerate(f.segments) if i == 0 or (
        s["offset"] + s["size"] > f.start and (f.stop is None or s["offset"] < f.stop))]
    for seg in needed:
        if seg["offset"]:
            cutter.jump(seg["offset"])
        for chunk in segment_chunks(storage, f.branch, f.name, seg):
            cutter.feed(chunk)
            yield cutter.take()
    if cutter.stopped:
        raise IntegrityError(f"{f.name}: the archived bytes cannot be read as binlog events from byte {cutter.pos} on: "
                             "the archive is damaged there; nothing was applied.")
    if cutter._open is not None and not last:
        raise IntegrityError(f"{f.name}: the archived bytes end inside transaction {cutter._open[0]}, and later files "
                             "follow: the archive is damaged there; nothing was applied.")


def write_relay(storage: Storage, f: FileSpan, cutter: Cutter, last: bool, host: Host, path: str) -> int:
    """Write what `cutter` keeps of one file to `path` on `host` (a relay log for the target's applier); its bytes."""
    result = run_pipeline([Stage("write", ["dd", f"of={path}", "bs=1M", "status=none"])],
                          source=cut(storage, f, cutter, last), label=f"binlog {f.name}", progress_every=None, host=host)
    log.info("%s: %d transactions to apply (%s bytes) of bytes [%d, %s)", f.name, len(cutter.kept),
             f"{result.bytes_in:,}", f.start, f.stop if f.stop is not None else "end")
    return int(result.bytes_in)
