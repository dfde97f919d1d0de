"""The binlog archive's retention: the point-in-time window (`pitr_window_days`) stays restorable. It names the
physical bases the window needs (every base newer than the window's start, and the newest one before it: the window's
first seconds roll forward from that one), which the physical backup's prune (physical.prune) keeps whatever `keep`
says; then an archived binlog file is deleted only when no kept base's line of history reaches it and it is older
than the oldest kept base. What is kept beyond `keep`, and why, is logged and returned.
"""
from __future__ import annotations

import hashlib
import logging
import time
from datetime import UTC, datetime, timedelta

from lastline.core.errors import LastlineError
from lastline.core.plans import Conf, RunParams
from lastline.manifest import backup_time, complete_backups, read_manifest
from lastline.pitr import window
from lastline.pitr.catalog import PREFIX, branches, read_branch, write_branch
from lastline.pitr.restore import coordinates
from lastline.storage import Storage, control, open_allowed

log = logging.getLogger(__name__)
# seconds between writing a chain and checking it is still the stored one, before its files' bytes are deleted: a held
# binlog stream checks the chain right before each write, so one that checked just before this write has written by then
SETTLE = 1.0


def protected_bases(storage: Storage, days: float, now: datetime | None = None) -> dict[str, str]:
    """{backup id: why} for the physical bases the window needs (none when there is no archive or no window)."""
    if days <= 0 or not branches(storage):
        return {}
    now = now or datetime.now(UTC)
    start = now - timedelta(days=days)
    bases = complete_backups(storage, "physical")
    inside = [b for b in bases if (backup_time(b) or now) >= start]
    before = [b for b in bases if (backup_time(b) or now) < start]
    out = {b: f"inside the {days:g}-day point-in-time window" for b in inside}
    if before:
        out[before[-1]] = f"the base the {days:g}-day point-in-time window's start rolls forward from"
    return out


def needed_files(storage: Storage, bases: list[str]) -> set[tuple[str, str]]:
    """(branch, file) of every archived binlog a roll-forward of one of `bases` reads."""
    out: set[tuple[str, str]] = set()
    for backup_id in bases:
        try:
            file, position, gtid = coordinates(read_manifest(storage, backup_id, "physical"))
            line = window.choose_line(storage, file, gtid, None, position)
        except LastlineError as exc:
            log.info("retention: %s does not roll forward on the archive (%s)", backup_id, exc)
            continue
        at = window.find_base(line, file, gtid) or 0
        out |= {(bid, e.name) for bid, e in line.files[at:]}
    return out


def prune_binlogs(storage: Storage, bases: list[str]) -> list[str]:
    """Delete the archived binlog files no base in `bases` needs and older than the oldest of them; the newest
    branch's newest file is never deleted (the archiver resumes from it). Returns the files deleted."""
    if not bases:
        return []  # nothing to measure against: keep everything
    needed = needed_files(storage, bases)
    oldest = min(t for t in (backup_time(b) for b in bases) if t is not None)
    known = branches(storage)
    deleted = []
    for info in known:
        branch = read_branch(storage, info["id"])
        going = []
        for entry in branch.entries:
            last = info is known[-1] and entry is branch.entries[-1]
            if entry.missing or entry.pruned or last or (branch.id, entry.name) in needed:
                continue
            if not entry.last_time or entry.last_time >= oldest.timestamp():
                continue  # as new as a kept base (or not indexed): kept
            entry.pruned, entry.segments = True, []
            going.append(entry.name)
        if going:
            branch.retired = [r for r in branch.retired if r["file"] not in going]  # their folder goes whole
            # the chain says they are gone before their bytes go: a delete refused half way leaves unused bytes behind,
            # never a chain that offers a file whose segments are missing
            sha = write_branch(storage, branch)
            time.sleep(SETTLE)  # a held stream that checked the chain just before this write has written by now
            if hashlib.sha256(control.read_bytes(storage, f"{PREFIX}/{branch.id}/chain.json")).hexdigest() != sha:
                log.warning("retention: the binlog archive wrote %s's chain over this one's: its files are deleted "
                            "by a later run", branch.id)
                continue  # the stored chain may name these files again: their bytes stay
            for name in going:
                storage.delete_backup(f"{PREFIX}/{branch.id}/{name}")
                deleted.append(f"{branch.id}/{name}")
    if deleted:
        log.info("retention: deleted %d archived binlog files no kept base needs: %s", len(deleted), ", ".join(deleted))
    return deleted


def window_bases(conf: RunParams) -> dict[str, str]:
    """{backup id: why} for the physical bases the conf's destination keeps for its point-in-time window
    (`pitr_window_days`): what the physical backup's prune must not delete."""
    params = Conf(conf)
    storage = open_allowed(params.required("destination"), params.text("aws_conn_id"))
    return protected_bases(storage, params.number("pitr_window_days", 7, minimum=0))


def prune_archive(conf: RunParams, protect: dict[str, str]) -> list[str]:
    """After the physical backup's prune kept `protect` (window_bases): the archived binlogs no kept base needs
    (measured against the kept bases the window needs, else the newest one). Nothing without a window."""
    if not protect:
        return []
    params = Conf(conf)
    storage = open_allowed(params.required("destination"), params.text("aws_conn_id"))
    kept = complete_backups(storage, "physical")
    return prune_binlogs(storage, [b for b in kept if b in protect] or kept[-1:])
