"""A restore's span: the exact bytes of the archive that take a base (its binlog coordinates and GTID state) to
`until`, resolved before anything is touched from the archive's index and the two segments that hold the
base's position and the stop, with the refusals: an `until` before the base, beyond a hole, or past the end.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from lastline.core.errors import Refusal
from lastline.pitr import events
from lastline.pitr.chain import Entry
from lastline.pitr.sealed import Seals
from lastline.pitr.window import Line, Until, find_base, segment_bytes, utc
from lastline.storage import Storage


@dataclass
class FileSpan:
    """The part of one archived file a replay applies: bytes [start, stop) (stop None: to its archived end)."""

    branch: str
    name: str
    size: int
    checksum: bool
    segments: list[dict]
    start: int = 0
    stop: int | None = None


@dataclass
class Span:
    """Everything a replay reads, resolved before anything is touched: the files in order, the base's GTID state,
    the stop point and the last transaction that will be applied."""

    line: str
    base_gtid: str
    until: str
    files: list[FileSpan] = field(default_factory=list)
    last_gtid: str | None = None  # the last transaction applied, as far as the archive's index tells
    last_time: int | None = None
    not_applied: str = ""  # what the archive holds after the stop, in words
    # {branch: envelope} of the branches whose sealed segments it reads (pitr.sealed; wrapped keys, no secret)
    envelopes: dict[str, dict] = field(default_factory=dict)

    def seals(self) -> Seals:
        """What opens its sealed segments, with the deployment's keys."""
        return Seals(self.envelopes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: dict[str, Any] | Span) -> Span:
        if isinstance(data, Span):
            return data
        return cls(**{**data, "files": [FileSpan(**f) for f in data["files"]]})


def resolve(storage: Storage, line: Line, file: str | None, position: int | None, gtid: str, until: Until) -> Span:
    """The bytes that take a base (its binlog coordinates and GTID state) to `until`, read from the archive's index
    and the two segments that hold the base's position and the stop; refuses an `until` before the base, beyond a
    hole, or past the archive's end. A sealed archive the deployment holds no key for is refused (ConfigError, naming the
    key ids) before a segment is read."""
    at = find_base(line, file, gtid)
    assert at is not None
    span = Span(line.branch, gtid, until.describe())
    sealed = {bid for bid, e in line.files[at:] if any(s.get("sealed") for s in e.segments)}
    line.seals.require(sealed)
    span.envelopes = line.seals.only(sealed)
    if until.kind == "gtid" and events.includes(gtid, until.gtid or ""):
        raise Refusal(f"until GTID {until.gtid} is before the base, whose state is {gtid}: choose an older base "
                      "backup (base) or a later GTID.")
    first = True
    for bid, entry in line.files[at:]:
        if entry.unusable:
            raise Refusal(f"until {until.describe()} lies beyond a hole in the binlog archive: {entry.name} "
                          f"{entry.unusable} (branch {bid}). A roll-forward cannot cross it: the "
                          f"newest point this base reaches is {utc(span.last_time) or 'the base itself'}; take a new "
                          "base backup after the hole.")
        if entry.missing:  # a hole proven empty: no byte to read, no transaction lost
            continue
        fspan = FileSpan(bid, entry.name, entry.size, entry.checksum, entry.segments)
        if first and position is not None and file == entry.name:
            if position > entry.size:
                raise Refusal(f"the base's position {entry.name}:{position} is past what the archive holds of that file "
                              f"({entry.size} bytes): the archive is behind; run binlog_archive and retry.")
            fspan.start = position
            if until.kind == "time":
                _refuse_before_base(storage, line, at, position, until)
        first = False
        span.files.append(fspan)
        stop = _stop_in(storage, bid, entry, fspan.start, until, line.seals)
        if stop is not None:
            fspan.stop, span.last_gtid, span.last_time, span.not_applied = stop
            return span
        span.last_gtid = entry.end_gtids or span.last_gtid
        span.last_time = max(entry.last_time, span.last_time or 0) or span.last_time
        if entry.tail_hole:
            raise Refusal(f"until {until.describe()} lies beyond a hole in the binlog archive: {entry.tail_lost()} "
                          f"(branch {bid}). A roll-forward cannot cross it: the newest point this base reaches is "
                          f"{utc(span.last_time) or 'the base itself'}; take a new base backup after the hole.")
    # the whole line applies: fine for latest; a time must lie within what the archive covers
    if until.kind == "time":
        covered = line.covered_time() or 0
        if (until.time or 0) > covered:
            raise Refusal(f"until {until.describe()} is past the binlog archive's end: it holds the source's "
                          f"transactions up to {utc(covered) or 'an unknown time (the source writes another branch now)'}"
                          f" (branch {line.branch}). Run binlog_archive (or wait for its next run) and retry, or choose "
                          "an earlier time.")
    if until.kind == "gtid":
        raise Refusal(f"until GTID {until.gtid} is not in the binlog archive after the base (branch {line.branch}, "
                      f"which ends at {span.last_gtid}): it is past the archive's end or on another branch.")
    span.not_applied = "nothing: the replay applies every archived transaction"
    return span


def _refuse_before_base(storage: Storage, line: Line, at: int, position: int, until: Until) -> None:
    """Refuse a time before the base: a transaction the base already holds (anything before its position, in its
    file and the files before it on the line) is stamped after it. The index answers for whole segments; the one
    segment the position cuts is read."""
    latest = 0
    for i, (bid, entry) in enumerate(line.files[:at + 1]):
        for seg in entry.segments:
            if i == at and seg["offset"] + seg["size"] > position:
                if seg["offset"] < position:  # the segment the position cuts: read up to it
                    found = events.scan(segment_bytes(storage, bid, entry.name, seg, line.seals)[:position - seg["offset"]],
                                        entry.name, seg["offset"], entry.checksum)
                    latest = max([latest, *(t.time for t in found.transactions)])
                continue
            latest = max(latest, int(seg.get("last_time", 0)))
    if latest > (until.time or 0):
        raise Refusal(f"until {until.describe()} is before the base: the base backup already holds transactions of "
                      f"{utc(latest)}. Choose an older base backup (base) or a later time.")


def _stop_in(storage: Storage, bid: str, entry: Entry, start: int, until: Until,
             seals: Seals) -> tuple[int, str | None, int | None, str] | None:
    """Where in `entry` (from byte `start`) the replay stops, the last transaction before it and what follows it
    unapplied; None when `until` lies beyond this file."""
    if until.kind == "latest":
        return None
    for seg in entry.segments:
        if seg["offset"] + seg["size"] <= start:
            continue
        if until.kind == "time" and int(seg.get("last_time", 0)) <= (until.time or 0):
            continue
        if until.kind == "gtid" and not events.includes(seg.get("end_gtids", ""), until.gtid or ""):
            continue
        found = events.scan(segment_bytes(storage, bid, entry.name, seg, seals), entry.name, seg["offset"], entry.checksum)
        trx = [t for t in found.transactions if t.start >= start]
        for i, t in enumerate(trx):
            if until.kind == "time" and t.time > (until.time or 0):
                prev = trx[i - 1] if i else None
                return (t.start, prev.gtid if prev else None, prev.time if prev else None,
                        f"from GTID {t.gtid} ({utc(t.time)}) on")
            if until.kind == "gtid" and t.gtid == until.gtid:
                later = trx[i + 1] if i + 1 < len(trx) else None
                return (t.end, t.gtid, t.time, f"from GTID {later.gtid} ({utc(later.time)}) on" if later
                        else "what follows in the archive")
        if until.kind == "gtid":
            raise Refusal(f"until GTID {until.gtid} is not a transaction of the archive: {entry.name} goes past its "
                          "sequence number without it (another server id?). Name a GTID the source wrote.")
    return None
