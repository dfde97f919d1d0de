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

from lastline.core.errors import ConfigError, IntegrityError, Refusal, StorageError
from lastline.pitr import events
from lastline.pitr.archive import PREFIX, branches, read_branch
from lastline.pitr.catalog import segment_key
from lastline.pitr.chain import Branch, Entry
from lastline.pitr.sealed import Seals
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
    seals: Seals = field(default_factory=Seals, repr=False, compare=False)  # what opens its branches' sealed segments

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
        return Line(bid, own, branch.covered, Seals().with_branch(bid, branch.envelope))
    parent = lineage(storage, branch.parent, _depth + 1)
    names = [e.name for _, e in parent.files]
    shared = parent.files[:names.index(branch.fork_after) + 1] if branch.fork_after in names else []
    return Line(bid, shared + own, branch.covered, parent.seals.with_branch(bid, branch.envelope))


def line_window(line: Line) -> dict[str, Any]:
    """The line's recoverable window: from the first file after its last hole to its end; the holes named."""
    holes = [e.name for _, e in line.files if e.hole]
    last_hole = max((i for i, (_, e) in enumerate(line.files) if e.unusable or e.tail_hole), default=-1)
    usable = [e for _, e in line.files[last_hole + 1:] if not e.missing]
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
        "proven_empty": [e.name for _, e in line.files if e.proven_empty],  # holes crossed: no transaction was lost
        "files": len(line.files),
    }


def windows(storage: Storage) -> list[dict[str, Any]]:
    """Every branch's recoverable window, oldest branch first."""
    return [line_window(lineage(storage, b["id"])) for b in branches(storage)]


def segment_chunks(storage: Storage, branch: str, name: str, segment: dict, seals: Seals | None = None) -> Iterator[bytes]:
    """One archived segment as it streams from the destination (a sealed one opened by `seals`, each chunk
    authenticated); after its last chunk, its size and sha256 are checked against its chain's (a reader acts on the
    bytes only once the whole segment has passed). A segment a compaction has since merged and deleted (a reader of
    an older chain, pitr.compaction) is read from the merged segment the chain now lists in its place."""
    key = segment_key(branch, name, segment)
    if storage.size_if_exists(key) is None:
        yield from _merged_into(storage, branch, name, segment, seals)
        return
    if segment.get("sealed"):
        yield from (seals or Seals()).opened(branch, key, segment, iter(storage.reader(key)))
        return
    digest, n = hashlib.sha256(), 0
    for chunk in storage.reader(key):
        digest.update(chunk)
        n += len(chunk)
        yield chunk
    if n != segment["size"] or digest.hexdigest() != segment["sha256"]:
        raise IntegrityError(f"{storage.location(f'{PREFIX}/{branch}/{name}')}: the segment at byte {segment['offset']} "
                             f"is {n} bytes with another sha256 than its chain records: the archive is damaged "
                             "there; a roll-forward cannot cross it.")


def _merged_into(storage: Storage, branch: str, name: str, segment: dict, seals: Seals | None) -> Iterator[bytes]:
    """The bytes of a missing segment, from the merged segment that holds them in the branch's chain as it is now (the
    whole merged segment is read and checked; its part is passed on); a retriable StorageError when none does."""
    start, size = int(segment["offset"]), int(segment["size"])
    entry = next((e for e in read_branch(storage, branch).entries if e.name == name), None)
    cover = next((s for s in (entry.segments if entry else []) if s.get("key") is not None and s != segment
                  and int(s["offset"]) <= start and start + size <= int(s["offset"]) + int(s["size"])), None)
    if cover is None:
        raise StorageError(f"{storage.location(segment_key(branch, name, segment))} is missing and no segment of the "
                           "branch's chain holds its bytes now (retention deleted the file, or the storage lost it): "
                           "run the restore again, it reads the archive anew.")
    at = int(cover["offset"])
    for chunk in segment_chunks(storage, branch, name, cover, seals):
        lo, hi = max(start - at, 0), min(start + size - at, len(chunk))
        if lo < hi:
            yield chunk[lo:hi]
        at += len(chunk)


def segment_bytes(storage: Storage, branch: str, name: str, segment: dict, seals: Seals | None = None) -> bytes:
    """One archived segment, checked against the sha256 its chain records (a sealed one opened by `seals`)."""
    return b"".join(segment_chunks(storage, branch, name, segment, seals))


def find_base(line: Line, file: str | None, gtid: str) -> int | None:
    """The index in `line` of the base's file: by name when the backup recorded one (its start state must not be
    past the base's), else the last file starting at or before the base's GTID state."""
    fits = [i for i, (_, e) in enumerate(line.files)
            if not e.unusable and not e.missing and events.includes(gtid, e.start_gtids)]
    if file:
        named = [i for i in fits if line.files[i][1].name == file]
        return named[-1] if named else None
    return fits[-1] if fits else None


def base_matches(storage: Storage, line: Line, at: int, position: int | None, gtid: str) -> bool | None:
    """Whether the archived bytes at the base's coordinates are the base's own history: the transaction that ends
    at its position is the last one its GTID state holds in that domain (names and GTIDs are reused after a
    `RESET MASTER`, a restore or a failover: only the bytes tell two histories apart). Without a position (a base
    known by its GTID state only), or at a file's start, the file's start state must agree. None: cannot tell yet
    (the position lies past what the archive holds of the line's last file, which may still grow)."""
    bid, entry = line.files[at]
    seg = next((s for s in entry.segments if position and s["offset"] < position <= s["offset"] + s["size"]), None)
    if seg is None:
        if position and position > max(entry.size, 4):  # past the archived bytes: a closed file never grows there
            return None if at == len(line.files) - 1 and events.includes(gtid, entry.start_gtids) else False
        return position is None or position <= 4 or events.includes(gtid, entry.start_gtids)
    assert position is not None  # a segment holds it
    if seg.get("sealed") and not line.seals.opens(bid):  # a check without the key (the archiver's host): the index's word
        return events.includes(gtid, entry.start_gtids)
    found = events.scan(segment_bytes(storage, bid, entry.name, seg, line.seals)[:position - seg["offset"]], entry.name,
                        seg["offset"], entry.checksum)
    last = found.ending_at(position)
    if last is None:  # no transaction ends there: the base sits after the file's header events
        return not found.transactions and events.includes(gtid, entry.start_gtids)
    return gtid_of(gtid, last.domain) == last.gtid


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
    maybe = None
    for bid in ([branch] if branch else reversed(known)):
        line = lineage(storage, bid)
        at = find_base(line, file, gtid)
        if at is None:
            continue
        matches = base_matches(storage, line, at, position, gtid)
        if matches:
            return line
        if matches is None and maybe is None:
            maybe = line
    if maybe is not None:  # the only place it can be is past a growing file's archived end (the resolve says so)
        return maybe
    where = f"binlog {file}" if file else f"GTID state {gtid}"
    raise Refusal(f"the base's {where} is in no branch of {storage.location(PREFIX)}"
                  + (f" reaching {branch}" if branch else "") + ": the archive began after this backup, or it archives "
                  "another server. Choose a newer base backup.")
