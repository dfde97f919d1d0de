"""What the binlog archive can roll a base backup forward to: lines of history (a branch and the files it shares
with its parents), each line's recoverable window, and the resolution of a restore's `until` into exact
bytes to replay, with the refusals a restore makes before it touches anything: a base the archive does not
reach, an `until` beyond a hole, past the archive's end, or before the base.

Times are the source's clock in UTC seconds, as binlog events carry them (events.Transaction.time).
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lastline.core.errors import ConfigError, IntegrityError, Refusal
from lastline.pitr import events
from lastline.pitr.archive import PREFIX, branches, read_branch
from lastline.pitr.chain import Branch, Entry
from lastline.storage import Storage

GTID = re.compile(r"^\d+-\d+-\d+$")
TIME = "%Y-%m-%dT%H:%M:%SZ"


def utc(seconds: int | float | None) -> str | None:
    """`YYYY-MM-DDTHH:MM:SSZ` for UTC seconds (None for None or 0)."""
    return datetime.fromtimestamp(seconds, UTC).strftime(TIME) if seconds else None


@dataclass(frozen=True)
class Until:
    """A restore's stop point: `latest`, a time (UTC seconds: every transaction stamped at or before it), or a
    GTID (up to and including that transaction)."""

    kind: str  # latest | time | gtid
    time: int | None = None
    gtid: str | None = None

    @classmethod
    def parse(cls, text: str | None) -> Until:
        text = (text or "latest").strip()
        if text == "latest":
            return cls("latest")
        if GTID.match(text):
            return cls("gtid", gtid=text)
        try:
            when = datetime.strptime(text, TIME).replace(tzinfo=UTC)
        except ValueError:
            raise ConfigError(f"until {text!r}: expected a UTC time YYYY-MM-DDTHH:MM:SSZ, a GTID "
                              "(domain-server-seq), or latest.") from None
        return cls("time", time=int(when.timestamp()))

    def describe(self) -> str:
        return {"latest": "latest", "time": utc(self.time), "gtid": f"GTID {self.gtid}"}[self.kind] or "?"


@dataclass
class Line:
    """One line of history: the files of a branch preceded by those it shares with its parents, in order (each
    with the branch whose folder holds its bytes)."""

    branch: str
    files: list[tuple[str, Entry]]
    covered: dict | None  # the branch's covered position (Branch.covered)

    def covered_time(self) -> int | None:
        """Up to when the archive holds every transaction of this line: the last run that found the source at the
        line's end (None: the source has moved on to another branch, or no run recorded it)."""
        if not self.covered or not self.files:
            return None
        last = self.files[-1][1]
        if self.covered.get("file") == last.name and int(self.covered.get("size", -1)) == last.size:
            return int(self.covered["time"])
        return None


def lineage(storage: Storage, bid: str, _depth: int = 0) -> Line:
    """The line of history that ends with branch `bid`."""
    if _depth > 64:
        raise IntegrityError(f"{storage.location(PREFIX)}: branch {bid} has more than 64 ancestors (a loop?); refused.")
    branch: Branch = read_branch(storage, bid)
    own = [(bid, e) for e in branch.entries]
    if not branch.parent:
        return Line(bid, own, branch.covered)
    parent = lineage(storage, branch.parent, _depth + 1)
    names = [e.name for _, e in parent.files]
    shared = parent.files[:names.index(branch.fork_after) + 1] if branch.fork_after in names else []
    return Line(bid, shared + own, branch.covered)


def line_window(line: Line) -> dict[str, Any]:
    """The line's recoverable window: from the first file after its last hole to its end; the holes named."""
    holes = [e.name for _, e in line.files if e.missing or e.tail_missing]
    last_hole = max((i for i, (_, e) in enumerate(line.files) if e.unusable or e.tail_missing), default=-1)
    usable = [e for _, e in line.files[last_hole + 1:]]
    first = next((e for e in usable if e.transactions), None)
    end_time = line.covered_time() or max((e.last_time for e in usable), default=0)
    return {
        "branch": line.branch,
        "from_file": usable[0].name if usable else None,
        "from_time": utc(first.first_time) if first else None,
        "to_time": utc(end_time),
        "to_seconds": end_time,
        "to_gtid": usable[-1].end_gtids if usable else None,
        "to_file": f"{usable[-1].name}:{usable[-1].size}" if usable else None,
        "holes": holes,
        "files": len(line.files),
    }


def windows(storage: Storage) -> list[dict[str, Any]]:
    """Every branch's recoverable window, oldest branch first."""
    return [line_window(lineage(storage, b["id"])) for b in branches(storage)]


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

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict
        return asdict(self)

    @classmethod
    def of(cls, data: dict[str, Any] | Span) -> Span:
        if isinstance(data, Span):
            return data
        return cls(**{**data, "files": [FileSpan(**f) for f in data["files"]]})


def segment_chunks(storage: Storage, branch: str, name: str, segment: dict) -> Iterator[bytes]:
    """One archived segment as it streams from the destination; after its last chunk, its size and sha256 are
    checked against its chain's (a reader acts on the bytes only once the whole segment has passed)."""
    digest, n = hashlib.sha256(), 0
    for chunk in storage.reader(f"{PREFIX}/{branch}/{name}/{int(segment['offset']):012d}"):
        digest.update(chunk)
        n += len(chunk)
        yield chunk
    if n != segment["size"] or digest.hexdigest() != segment["sha256"]:
        raise IntegrityError(f"{storage.location(f'{PREFIX}/{branch}/{name}')}: the segment at byte {segment['offset']} "
                             f"is {n} bytes with another sha256 than its chain records: the archive is damaged "
                             "there; a roll-forward cannot cross it.")


def segment_bytes(storage: Storage, branch: str, name: str, segment: dict) -> bytes:
    """One archived segment, checked against the sha256 its chain records."""
    return b"".join(segment_chunks(storage, branch, name, segment))


def _state(text: str) -> dict[int, int]:
    """{domain: seq} of a GTID state `d-s-n,...`."""
    return {int(g.split("-")[0]): int(g.split("-")[2]) for g in (text or "").split(",") if g}


def _holds(state: str, gtid: str) -> bool:
    """Whether the GTID state `state` includes transaction `gtid` (its domain at or past its sequence number)."""
    d, _, n = (int(x) for x in gtid.split("-"))
    return _state(state).get(d, -1) >= n


def _find_base(line: Line, file: str | None, gtid: str) -> int | None:
    """The index in `line` of the base's file: by name when the backup recorded one (its start state must not be
    past the base's), else the last file starting at or before the base's GTID state."""
    base = _state(gtid)
    fits = [i for i, (_, e) in enumerate(line.files) if not e.unusable and all(
        base.get(d, -1) >= n for d, n in _state(e.start_gtids).items())]
    if file:
        named = [i for i in fits if line.files[i][1].name == file]
        return named[-1] if named else None
    return fits[-1] if fits else None


def base_matches(storage: Storage, line: Line, at: int, position: int | None, gtid: str) -> bool:
    """Whether the archived bytes at the base's coordinates are the base's own history: the transaction that ends
    at its position is the last one its GTID state holds in that domain (names and GTIDs are reused after a
    `RESET MASTER` or a restore: only the bytes tell two histories apart). Without a position (a base known by
    its GTID state only), or at a file's start, the file's start state must agree."""
    bid, entry = line.files[at]
    state = _state(gtid)
    seg = next((s for s in entry.segments if position and s["offset"] < position <= s["offset"] + s["size"]), None)
    if seg is None:
        return position is None or position <= 4 or _state(entry.start_gtids).items() <= state.items()
    found = events.scan(segment_bytes(storage, bid, entry.name, seg)[:position - seg["offset"]], entry.name,
                        seg["offset"], entry.checksum)
    last = next((t for t in reversed(found.transactions) if t.end == position), None)
    if last is None:  # no transaction ends there: the base sits after the file's header events
        return not found.transactions and all(state.get(d, -1) >= n for d, n in _state(entry.start_gtids).items())
    return state.get(last.domain) == last.seq and gtid_of(gtid, last.domain) == last.gtid


def gtid_of(state: str, domain: int) -> str | None:
    """The GTID a state `d-s-n,...` holds for `domain`."""
    return next((g for g in state.split(",") if g and int(g.split("-")[0]) == domain), None)


def choose_line(storage: Storage, file: str | None, gtid: str, branch: str | None = None,
                position: int | None = None) -> Line:
    """The line of history a base (its binlog file, position and GTID state) rolls forward on: `branch` if given,
    else the newest branch whose line holds the base's file with the base's own bytes at its position."""
    known = [b["id"] for b in branches(storage)]
    if not known:
        raise Refusal(f"{storage.location(PREFIX)} holds no binlog archive: run the binlog_archive DAG for the source "
                      "(point-in-time restore rolls a base backup forward with the archived binlogs).")
    if branch and branch not in known:
        raise ConfigError(f"branch {branch!r} is not in {storage.location(PREFIX)} (branches: {', '.join(known)}).")
    for bid in ([branch] if branch else reversed(known)):
        line = lineage(storage, bid)
        at = _find_base(line, file, gtid)
        if at is not None and base_matches(storage, line, at, position, gtid):
            return line
    where = f"binlog {file}" if file else f"GTID state {gtid}"
    raise Refusal(f"the base's {where} is in no branch of {storage.location(PREFIX)}"
                  + (f" reaching {branch}" if branch else "") + ": the archive began after this backup, or it archives "
                  "another server. Choose a newer base backup.")


def resolve(storage: Storage, line: Line, file: str | None, position: int | None, gtid: str, until: Until) -> Span:
    """The bytes that take a base (its binlog coordinates and GTID state) to `until`, read from the archive's index
    and the two segments that hold the base's position and the stop; refuses an `until` before the base, beyond a
    hole, or past the archive's end."""
    at = _find_base(line, file, gtid)
    assert at is not None
    span = Span(line.branch, gtid, until.describe())
    if until.kind == "gtid" and _holds(gtid, until.gtid or ""):
        raise Refusal(f"until GTID {until.gtid} is before the base, whose state is {gtid}: choose an older base "
                      "backup (base) or a later GTID.")
    first = True
    for bid, entry in line.files[at:]:
        if entry.unusable:
            raise Refusal(f"until {until.describe()} lies beyond a hole in the binlog archive: {entry.name} "
                          f"{entry.unusable} (branch {bid}). A roll-forward cannot cross it: the "
                          f"newest point this base reaches is {utc(span.last_time) or 'the base itself'}; take a new "
                          "base backup after the hole.")
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
        stop = _stop_in(storage, bid, entry, fspan.start, until)
        if stop is not None:
            fspan.stop, span.last_gtid, span.last_time, span.not_applied = stop
            return span
        span.last_gtid = entry.end_gtids or span.last_gtid
        span.last_time = max(entry.last_time, span.last_time or 0) or span.last_time
        if entry.tail_missing:
            raise Refusal(f"until {until.describe()} lies beyond a hole in the binlog archive: the rest of {entry.name} "
                          f"after byte {entry.size} was purged on the source before it was archived (branch {bid}). A "
                          f"roll-forward cannot cross it: the newest point this base reaches is "
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
                    found = events.scan(segment_bytes(storage, bid, entry.name, seg)[:position - seg["offset"]],
                                        entry.name, seg["offset"], entry.checksum)
                    latest = max([latest, *(t.time for t in found.transactions)])
                continue
            latest = max(latest, int(seg.get("last_time", 0)))
    if latest > (until.time or 0):
        raise Refusal(f"until {until.describe()} is before the base: the base backup already holds transactions of "
                      f"{utc(latest)}. Choose an older base backup (base) or a later time.")


def _stop_in(storage: Storage, bid: str, entry: Entry, start: int,
             until: Until) -> tuple[int, str | None, int | None, str] | None:
    """Where in `entry` (from byte `start`) the replay stops, the last transaction before it and what follows it
    unapplied; None when `until` lies beyond this file."""
    if until.kind == "latest":
        return None
    for seg in entry.segments:
        if seg["offset"] + seg["size"] <= start:
            continue
        if until.kind == "time" and int(seg.get("last_time", 0)) <= (until.time or 0):
            continue
        if until.kind == "gtid" and not _holds(seg.get("end_gtids", ""), until.gtid or ""):
            continue
        found = events.scan(segment_bytes(storage, bid, entry.name, seg), entry.name, seg["offset"], entry.checksum)
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
