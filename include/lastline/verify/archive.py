"""The binlog archive of one destination read back: branches.json and each branch's chain.json (bounded, their MACs
checked), every archived segment against its chain (presence, size, sha256, streamed; a sealed one also opened and
each chunk authenticated where the deployment holds its key, a damaged chunk named), the segments of each file
contiguous from byte 0 to its archived size and each file starting from the GTID state the one before it ended in
(an unrecorded gap is damage); then, for each base backup, the files from its binlog position to the newest one, with
the holes (recorded by the archiver, or found here) that stop a roll-forward named. It reads, never writes."""
from __future__ import annotations

import logging
from typing import Any

from lastline.core.errors import IntegrityError, LastlineError
from lastline.pitr import catalog, events, window
from lastline.pitr.catalog import PREFIX, segment_key
from lastline.pitr.chain import Branch, Entry, split_name
from lastline.pitr.restore import coordinates
from lastline.pitr.sealed import Seals
from lastline.storage import Storage, control, open_storage
from lastline.storage.sealing import SealError
from lastline.verify.backups import read_back_manifest
from lastline.verify.plans import MISSING, OK, ArchiveVerdict, Coverage, Finding, VerifyPlan, status_of
from lastline.verify.reading import check_object, mac_finding

log = logging.getLogger(__name__)


def _control(storage: Storage, key: str) -> Finding | None:
    """What is wrong with an archive's control file before its own reader uses it: unreadable, or its MAC."""
    try:
        return mac_finding(control.read(storage, key).auth, key)
    except IntegrityError as exc:
        return Finding(key, "unreadable", "a control file lastline wrote", str(exc)[:300])


def gaps(bid: str, entry: Entry) -> list[Finding]:
    """Bytes of a file its segments do not hold: they must follow each other from byte 0 to its archived size."""
    at, out = 0, []
    for seg in sorted(entry.segments, key=lambda s: int(s["offset"])):
        if int(seg["offset"]) != at:
            out.append(Finding(f"{PREFIX}/{bid}/{entry.name}", "gap", f"a segment at byte {at:,}",
                               f"the next one at byte {int(seg['offset']):,}"))
        at = int(seg["offset"]) + int(seg["size"])
    if entry.segments and at != entry.size:
        out.append(Finding(f"{PREFIX}/{bid}/{entry.name}", "gap", f"{entry.size:,} bytes archived", f"segments end at {at:,}"))
    return out


def sequence_gaps(bid: str, entries: list[Entry]) -> list[Finding]:
    """Files that do not follow the one before them (no hole recorded between): a number skipped, or a start GTID
    state behind the previous file's end."""
    out = []
    for before, after in zip(entries, entries[1:], strict=False):
        where = f"{PREFIX}/{bid}/{after.name}"
        if split_name(after.name)[1] != split_name(before.name)[1] + 1:
            out.append(Finding(where, "gap", f"the file after {before.name}", f"{after.name}, with no hole recorded"))
        elif not before.unusable and not after.unusable and not after.missing and not before.tail_hole and before.end_gtids \
                and not events.includes(after.start_gtids, before.end_gtids):
            out.append(Finding(where, "gap", f"a start at GTID state {before.end_gtids}", f"{after.start_gtids}"))
    return out


def check_branch(storage: Storage, branch: Branch, seals: Seals | None = None) -> tuple[list[Finding], int, int]:
    """(findings, segments read, bytes read) of one branch's own files."""
    findings, segments, total = sequence_gaps(branch.id, branch.entries), 0, 0
    seals = seals or Seals().with_branch(branch.id, branch.envelope)
    for entry in branch.entries:
        findings += gaps(branch.id, entry)
        for seg in entry.segments:
            found, n = check_segment(storage, branch.id, entry.name, seg, seals)
            segments, total = segments + 1, total + n
            findings += [found] if found else []
    return findings, segments, total


def check_segment(storage: Storage, bid: str, file: str, seg: dict, seals: Seals) -> tuple[Finding | None, int]:
    """One segment against its chain: its stored size and sha256 (without a key), and a sealed one, where the
    deployment opens its branch, read once: opened, each chunk authenticated (a damaged one named), then its stored
    size and sha256 and its binlog bytes checked at its end. (finding or None, stored bytes read)."""
    name = segment_key(bid, file, seg)
    stored = int(seg.get("stored", -1)) if seg.get("sealed") else int(seg["size"])
    if not seg.get("sealed") or not seals.opens(bid):
        return check_object(storage, name, stored, str(seg["sha256"]), name)
    found: int | None = 0
    try:
        found = storage.size_if_exists(name)
        if found is None:
            return Finding(name, "missing", f"{max(stored, 0):,} bytes", "no such file"), 0
        if found != stored:
            return Finding(name, "size", f"{stored:,} bytes", f"{found:,} bytes"), 0
        for _ in window.segment_chunks(storage, bid, file, seg, seals):
            pass
    except SealError as exc:  # a chunk changed, cut, reordered or moved, named
        where = "its header" if exc.chunk is None else f"chunk {exc.chunk}"
        reason = "changed" if exc.reason == "cut_or_changed" else exc.reason  # its size is the chain's: not cut
        return Finding(name, "sealed", "every chunk authenticated", f"{where}: {reason}"), found or 0
    except IntegrityError as exc:  # a link, or its stored bytes are not the chain's
        return Finding(name, "digest", f"sha256 {seg['sha256']}", str(exc)[:300]), found or 0
    return None, found


def _damaged(findings: list[Finding]) -> set[str]:
    """The binlog files (`<branch>/<file>`) a finding names."""
    return {"/".join(f.file.split("/")[1:3]) for f in findings if f.file.count("/") >= 2}


def coverage(backup_id: str, manifest: object, lines: list[window.Line], damaged: set[str]) -> Coverage:
    """How far the archive rolls one base forward (see the module); the newest line that holds its file first."""
    try:
        file, _, gtid = coordinates(manifest)
    except LastlineError as exc:
        return Coverage(backup_id, note=str(exc).split(":")[0])
    for line in lines:
        at = window.find_base(line, file, gtid)
        if at is None:
            continue
        after = line.files[at:]
        holes = [e.name for i, (b, e) in enumerate(after) if (i and e.unusable) or e.tail_hole
                 or f"{b}/{e.name}" in damaged]
        return Coverage(backup_id, line.branch, after[0][1].name, after[-1][1].name, holes,
                        f"stops at {holes[0]}" if holes else f"rolls forward to the end of {after[-1][1].name}")
    return Coverage(backup_id, note="the archive does not reach back to this backup")


def _read_chains(storage: Storage) -> tuple[list[Branch], list[Finding]]:
    """Every branch's chain that reads and authenticates; the control files that do not, as findings."""
    key = f"{PREFIX}/branches.json"
    found = _control(storage, key)
    if found is not None:
        return [], [found]
    chains, findings = [], []
    for bid in [str(b["id"]) for b in catalog.branches(storage)]:
        found = _control(storage, f"{PREFIX}/{bid}/chain.json")
        if found is None:
            try:
                chains.append(catalog.read_branch(storage, bid))
                continue
            except IntegrityError as exc:
                found = Finding(f"{PREFIX}/{bid}/chain.json", "unreadable", "a chain lastline wrote", str(exc)[:300])
        findings.append(found)
    return chains, findings


def rolled_back(storage: Storage, recorded: dict[str, Any] | None) -> list[Finding]:
    """The archive against the head Airflow recorded after its last run (catalog.check_head: an older, validly signed
    state put back, or files dropped), as a finding; none without a record."""
    try:
        catalog.check_head(storage, recorded, "backup_verify")
    except IntegrityError as exc:
        return [Finding(f"{PREFIX}/branches.json", "rollback", "the head Airflow recorded after the archive's last run",
                        str(exc).split(": ", 1)[-1][:300])]
    return []


def verify_archive(plan: VerifyPlan, recorded: dict[str, Any] | None = None) -> ArchiveVerdict:
    """The archive read back, and each base's coverage (see the module); no archive: ok, with nothing read, unless
    Airflow recorded a head of it (`recorded`: lastline.airflow.assets.recorded_archive_head)."""
    storage = open_storage(plan.destination, plan.aws_conn_id)
    if not storage.exists(f"{PREFIX}/branches.json"):
        log.info("verify %s: no binlog archive", plan.destination)
        gone = [Finding(f"{PREFIX}/branches.json", "missing", "the archive Airflow recorded", "no archive")] if recorded else []
        return ArchiveVerdict(status_of(gone), findings=gone)
    chains, findings = _read_chains(storage)
    findings += rolled_back(storage, recorded) if chains else []
    segments = total = 0
    for branch in chains:
        got, n, size = check_branch(storage, branch)
        findings, segments, total = findings + got, segments + n, total + size
    lines = [] if findings and not chains else _lines(storage, chains)
    covered = [coverage(b, m, lines, _damaged(findings)) for b in plan.backups
               if (m := read_back_manifest(storage, b)[0]) is not None]
    status = status_of(findings)
    newest = next((c for c in reversed(covered) if c.branch), None)
    if status == OK and newest is not None and newest.holes:
        status = MISSING  # the newest base cannot roll forward to the archive's end
    log.info("verify %s: %s, %d segments (%s bytes)%s", storage.location(PREFIX), status, segments, f"{total:,}",
             "".join(f"; {f.describe()}" for f in findings))
    return ArchiveVerdict(status, len(chains), segments, total, findings, covered)


def _lines(storage: Storage, chains: list[Branch]) -> list[window.Line]:
    """Each readable branch's line of history, newest first (a line whose parent does not read is left out)."""
    lines = []
    for branch in reversed(chains):
        try:
            lines.append(window.lineage(storage, branch.id))
        except IntegrityError:
            continue
    return lines
