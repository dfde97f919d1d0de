"""The binlog archive's chain: what to ship next, in what order, what is missing, and where the source's history
forks. Pure logic over what the archive holds (a :class:`Branch`) and what the source shows now
(:class:`SourceFile`: `SHOW BINARY LOGS` and the `Gtid_list` event at the start of each file); the shipping
itself (I/O) and the DAG build on it.

A binlog file is known by its name *and* the GTID state it starts from (its `Gtid_list` event): a restored
server, or a new primary after a failover, may reuse a name for different history, and that is a fork, never
an overwrite. A file the source purged before the archive had it is a hole, named, never skipped silently:
a roll-forward cannot cross it.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from lastline.core.errors import IntegrityError
from lastline.pitr.events import includes

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

    @property
    def seq(self) -> int:
        return split_name(self.name)[1]

    @property
    def unusable(self) -> str:
        """Why a roll-forward cannot cross this file ("" when it can)."""
        if self.missing:
            return "was purged on the source before it was archived"
        return "was deleted by retention (no base kept needs it)" if self.pruned else ""


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


def _ship_from(files: list[SourceFile], start: int, base: str, after_seq: int | None) -> list[Step]:
    """Ship files[start:], naming as holes the sequence numbers missing between them (and after `after_seq`)."""
    steps: list[Step] = []
    expected = None if after_seq is None else after_seq + 1
    for i, f in enumerate(files[start:], start):
        if expected is not None:
            for seq in range(expected, f.seq):
                steps.append(Step("hole", f"{base}.{seq:06d}", reason="purged on the source before it was archived"))
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
        steps.append(Step("hole", last.name, last.size, reason=f"purged on the source after byte {last.size} was archived"))
    if later:
        steps += _ship_from(files, files.index(later[0]), base, last.seq)
    return steps


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
