"""The binlog archive's chain: what to ship next, in what order, what is missing, and where the source's history
forks. Pure logic over what the archive holds (a :class:`Branch`) and what the source shows now
(:class:`SourceFile`: `SHOW BINARY LOGS` and the `Gtid_list` event at the start of each file); the shipping
itself (I/O) and the DAG build on it.

A binlog file is known by its name *and* the GTID state it starts from (its `Gtid_list` event): a restored
server, or a new primary after a failover, may reuse a name for different history, and that is a fork, never
an overwrite. A file the source purged before the archive had it is a hole, named, never skipped silently:
a roll-forward cannot cross it, unless the hole is proven empty: the next file the source still has starts from
the very GTID state the archived bytes end at (every domain at the same GTID, server id included), so the bytes
lost held no transaction (a file closed by `FLUSH BINARY LOGS`, a rotation or a restart, then purged before the
archive shipped its Rotate event). A real hole names the GTIDs it lost.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from lastline.core.errors import IntegrityError
from lastline.pitr.events import gtid_state, includes

_SEQ = re.compile(r"(?P<base>[A-Za-z0-9_.-]+)\.(?P<seq>\d{6,})")
BRANCH_ID = re.compile(r"\d+-\d{6,}-[0-9a-f]{8}(-\d+)?\Z")


def split_name(name: str) -> tuple[str, int]:
    """(`mariadb-bin`, 7) for `mariadb-bin.000007`; a name of another shape is refused."""
    m = _SEQ.fullmatch(name)
    if not m:
        raise IntegrityError(f"{name!r} is not a binlog file name (<base>.<6+ digits>)")
    return m["base"], int(m["seq"])


@dataclass(frozen=True)
class SourceFile:
    """One binlog file as the source shows it now."""

    name: str
    size: int
    start_gtids: str  # the Gtid_list event at its start: the GTID state before its first transaction
    server_id: int = 0
    same_tail: bool = True  # the source's bytes before the archived end equal the archived ones (archive.tail_matches)

    @property
    def seq(self) -> int:
        return split_name(self.name)[1]


@dataclass
class Entry:
    """One file of a branch of the archive, or a hole where the source purged what was not yet archived."""

    name: str
    start_gtids: str
    size: int = 0  # bytes archived (a file still being written is archived up to here)
    segments: list[dict] = field(default_factory=list)  # {offset, size, sha256} of each piece archived, in order
    closed: bool = False  # the source has started a later file: this one will not grow
    missing: bool = False  # a hole: purged on the source before it was archived (from byte `size` on)
    server_id: int = 0
    # its index (events.Scanner over the bytes as they were shipped): the whole transactions archived, the GTID
    # state after the last of them, the first and last transaction's times (UTC seconds), the checksum setting
    transactions: int = 0
    end_gtids: str = ""
    first_time: int = 0
    last_time: int = 0
    checksum: bool = False
    pruned: bool = False  # its bytes were deleted by retention (no kept base needs them): like a hole, not crossed
    tail_missing: bool = False  # purged on the source after byte `size` was archived: usable up to there, not crossed
    # a hole (missing or tail_missing) proven empty: the name of the next file, whose Gtid_list equals the GTID state
    # the archived bytes end at; a roll-forward crosses it
    proven_empty: str = ""
    lost_gtids: str = ""  # a real hole: the GTIDs it lost, as far as the next file's Gtid_list tells

    @property
    def seq(self) -> int:
        return split_name(self.name)[1]

    @property
    def unusable(self) -> str:
        """Why a roll-forward cannot cross this file ("" when it can)."""
        if self.missing and not self.proven_empty:
            return "was purged on the source before it was archived" + self._lost()
        return "was deleted by retention (no base kept needs it)" if self.pruned else ""

    @property
    def tail_hole(self) -> bool:
        """Archived in part, the rest purged on the source, and not proven empty: usable up to `size`, not crossed."""
        return self.tail_missing and not self.proven_empty

    @property
    def hole(self) -> bool:
        """Bytes of this file the archive lacks that may have held transactions."""
        return (self.missing or self.tail_missing) and not self.proven_empty

    def _lost(self) -> str:
        return f" (the GTIDs {self.lost_gtids} are missing)" if self.lost_gtids else ""

    def tail_lost(self) -> str:
        """Why a roll-forward stops at the end of what is archived of a file whose tail is a hole, in words."""
        return (f"the rest of {self.name} after byte {self.size} was purged on the source before it was archived"
                + self._lost())


@dataclass
class Branch:
    """One line of history: files in order; a fork names its parent and the last file they share (a step's reason
    says it too)."""

    id: str
    entries: list[Entry] = field(default_factory=list)
    parent: str | None = None
    fork_after: str | None = None
    # the last run that found the source at the branch's end: {"file", "size", "time"} (the source's clock, UTC
    # seconds): every transaction the source had committed by then is archived
    covered: dict | None = None
    # sealed segments (pitr.sealed): the branch's data key's envelope (storage.envelope's JSON, bound to backup id
    # `binlogs/<id>`; a rotation re-wraps it) and the X25519 public key that key derives, which segments are sealed to
    envelope: dict | None = None
    seal_public: str | None = None
    # segment objects a compaction replaced (pitr.compaction), kept for readers of an older chain until deleted:
    # [{"file", "keys": [names in the file's folder], "at": unix time}]
    retired: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class Step:
    """What the archiver does next: `ship` bytes [offset, upto) of a file (offset > 0 resumes a file archived in
    part), record a `hole`, or start a `fork` (a new branch; the ship steps after it go there)."""

    kind: str  # ship | hole | fork
    name: str
    offset: int = 0
    upto: int = 0
    closes: bool = False
    start_gtids: str = ""
    reason: str = ""
    shares: str | None = None  # a fork: the last file the new branch shares with the old one
    proven: str = ""  # a hole proven empty: the next file, which starts where the archived bytes end
    lost: str = ""  # a real hole: the GTIDs it lost (the next file's start is ahead of the archived end)


def _last_per_domain(state: str) -> dict[int, str]:
    """{domain: its most recent GTID, `d-s-n`} of a GTID state or Gtid_list (which lists a domain's last GTID last)."""
    return {int(g.split("-")[0]): g for g in gtid_state(state, []).split(",") if g}


def gap(end_gtids: str, following: SourceFile) -> tuple[str, str]:
    """What the bytes between an archived end (the GTID state after the last transaction archived) and the start of
    the next file the source still has held: ("", the GTIDs lost) or, proven empty (the same domains, each at the
    same GTID, server id included), (that file's name, "")."""
    end, start = _last_per_domain(end_gtids), _last_per_domain(following.start_gtids)
    if end_gtids and end == start:
        return following.name, ""
    lost = []
    for d, g in sorted(start.items()):
        if d not in end:
            lost.append(f"domain {d}'s up to {g}")
            continue
        first, last = int(end[d].split("-")[2]) + 1, int(g.split("-")[2])
        if last >= first:
            lost.append(g if last == first else f"{d}-{g.split('-')[1]}-{first}..{g}")
    if not lost:  # the next file starts elsewhere (another server id, a domain gone): not proven, and no range to name
        lost.append(f"those between {end_gtids or 'the start'} and {following.start_gtids or 'the start'}")
    return "", ", ".join(lost)


def branch_id(first: SourceFile) -> str:
    """A new branch's id: the source's server_id, the first file's sequence number, and a digest of the GTID state
    it starts from (two servers reusing one name start from different states)."""
    digest = hashlib.sha256(first.start_gtids.encode()).hexdigest()[:8]
    return f"{first.server_id}-{first.seq:06d}-{digest}"


def _sorted(files: list[SourceFile]) -> list[SourceFile]:
    bases = {split_name(f.name)[0] for f in files}
    if len(bases) > 1:
        raise IntegrityError(f"the source lists binlogs of several bases ({', '.join(sorted(bases))}): one log-bin name per source.")
    return sorted(files, key=lambda f: f.seq)


def unproven(entries: list[Entry]) -> str | None:
    """The first hole of a branch's chain marked proven empty that the chain itself contradicts (the file it names is
    not the next one archived, or that file does not start from the GTID state the archived bytes before the hole
    end at), in words; None when every such mark holds. A mark whose file is not archived yet (the archiver writes
    the chain after each step: a run that ended between the hole and that file) holds nothing past the hole: no
    roll-forward crosses it until that file is written, and checked then."""
    end = ""
    for i, e in enumerate(entries):
        following = next((x for x in entries[i + 1:] if not x.missing), None) if e.proven_empty else None
        if following is not None:
            before = e.end_gtids if e.tail_missing else end
            if following.name != e.proven_empty or not before \
                    or _last_per_domain(before) != _last_per_domain(following.start_gtids):
                return f"{e.name} is marked proven empty by {e.proven_empty}, which the chain does not bear out"
        if not e.missing:
            end = e.end_gtids
    return None


def _ship_from(files: list[SourceFile], start: int, base: str, after_seq: int | None, end_gtids: str = "") -> list[Step]:
    """Ship files[start:], naming as holes the sequence numbers missing between them (and after `after_seq`, whose
    archived bytes end at GTID state `end_gtids`: the holes before files[start] are proven empty or name what they
    lost)."""
    steps: list[Step] = []
    expected = None if after_seq is None else after_seq + 1
    for i, f in enumerate(files[start:], start):
        if expected is not None:
            proven, lost = gap(end_gtids, f) if i == start and end_gtids else ("", "")
            for seq in range(expected, f.seq):
                steps.append(Step("hole", f"{base}.{seq:06d}", reason=_hole_reason(
                    "purged on the source before it was archived", proven, lost), proven=proven, lost=lost))
        steps.append(Step("ship", f.name, 0, f.size, closes=i < len(files) - 1, start_gtids=f.start_gtids))
        expected = f.seq + 1
    return steps


def plan(branch: Branch | None, files: list[SourceFile]) -> list[Step]:
    """The steps that bring `branch` (None: an empty archive) up to what the source shows, in order: exactly once
    (a file is shipped from where the archive stopped), holes named, and a fork where the source's history is no
    longer the branch's (a file of the same name starting from another GTID state, a file that shrank, or names
    that go back)."""
    if not files:
        return []
    files = _sorted(files)
    base = split_name(files[0].name)[0]
    done = [e for e in (branch.entries if branch else []) if not e.missing]
    if not done:
        return _ship_from(files, 0, base, None)
    if split_name(done[-1].name)[0] != base:
        return _fork(branch, files, base, f"the source now writes {base}.*, the archive holds {split_name(done[-1].name)[0]}.*")
    archived = {e.name: e for e in done}
    for f in files:  # every file both know must be the same file
        known = archived.get(f.name)
        if known is not None and known.start_gtids != f.start_gtids:
            return _fork(branch, files, base, f"{f.name} now starts from GTID state {f.start_gtids!r}, the archived one "
                                              f"from {known.start_gtids!r}")
    last = done[-1]
    if files[-1].seq < last.seq:
        return _fork(branch, files, base, f"the source's newest binlog is {files[-1].name}, the archive already holds "
                                          f"{last.name}: its names went back")
    steps: list[Step] = []
    current = next((f for f in files if f.name == last.name), None)
    later = [f for f in files if f.seq > last.seq]
    if later and not includes(later[0].start_gtids, last.end_gtids):  # not what follows the archive: another history
        return _fork(branch, files, base, f"{later[0].name} starts from GTID state {later[0].start_gtids!r}, behind the "
                                          f"archived {last.name}'s end {last.end_gtids!r}")
    if current is not None:
        if current.size < last.size:
            return _fork(branch, files, base, f"{last.name} is {current.size} bytes on the source, {last.size} archived")
        if not current.same_tail:  # the same name and start, other bytes: written anew (RESET MASTER, a restore)
            return _fork(branch, files, base, f"{last.name}'s bytes before byte {last.size} differ from the archived ones")
        if current.size > last.size or (later and not last.closed):
            steps.append(Step("ship", last.name, last.size, current.size, closes=bool(later), start_gtids=last.start_gtids))
    elif not last.closed:
        proven, lost = gap(last.end_gtids, later[0]) if later else ("", "")
        steps.append(Step("hole", last.name, last.size, reason=_hole_reason(
            f"purged on the source after byte {last.size} was archived", proven, lost), proven=proven, lost=lost))
    if later:
        steps += _ship_from(files, files.index(later[0]), base, last.seq, last.end_gtids)
    return steps


def _hole_reason(what: str, proven: str, lost: str) -> str:
    if proven:
        return (f"{what}; proven empty: {proven} starts from the GTID state the archived bytes end at, so no transaction "
                "was lost (a roll-forward crosses it)")
    return f"{what}; the GTIDs {lost} are missing" if lost else what


def _fork(branch: Branch | None, files: list[SourceFile], base: str, why: str) -> list[Step]:
    """A new branch from the source's files: it shares with `branch` the files both have alike, up to the first that
    differs (the ship steps after the fork step start there)."""
    archived = {e.name: e for e in (branch.entries if branch else []) if not e.missing}
    start = 0
    while start < len(files):
        known = archived.get(files[start].name)
        if known is None or known.start_gtids != files[start].start_gtids or known.size != files[start].size \
                or not files[start].same_tail:
            break
        start += 1
    if start == len(files):  # the source shows a prefix of this branch, byte for byte: nothing new until it writes
        return []
    first = files[start]
    if start == 0:
        return [Step("fork", branch_id(first), reason=why, start_gtids=first.start_gtids)] + _ship_from(files, 0, base, None)
    shared = files[start - 1]
    return [Step("fork", branch_id(first), reason=f"{why}; the new branch shares the files up to {shared.name}",
                 start_gtids=first.start_gtids, shares=shared.name)] + _ship_from(files, start, base, shared.seq)
