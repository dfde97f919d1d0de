"""The binlog archive's control files, under `<destination>/binlogs/`: `branches.json` (every branch) and each branch's
`<branch>/chain.json` (its files, holes and segments), read bounded and authenticated (storage.control,
storage.auth) and written signed; a sealed branch's `<branch>/envelope.json` (its data key, wrapped: pitr.sealed),
a file of its own so that its two writers never meet: the archiver writes the chain every round and the envelope once,
when the branch's first sealed segment is written; a key rotation re-writes the envelope alone; and the archive's
head, which Airflow records after each run so that a restore refuses an archive rolled back from it (anti-rollback).
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict
from typing import Any

from lastline.core.errors import IntegrityError
from lastline.pitr.chain import BRANCH_ID, Branch, Entry, split_name, unproven
from lastline.storage import Storage, auth, control

log = logging.getLogger(__name__)

PREFIX = "binlogs"
# a segment's object in its file's folder: `<offset:012d>`, or a merged one's `<offset:012d>-<end:012d>[-<n>]`
# (pitr.compaction), named by the record's "key"; checked before it becomes a storage key
MERGED_KEY = re.compile(r"\d{12}-\d{12}(-\d{1,6})?\Z")
OBJECT_KEY = re.compile(r"\d{12}(-\d{12}(-\d{1,6})?)?\Z")


def object_name(segment: dict) -> str:
    """A segment's object name in its file's folder: its record's "key" (a merged segment), else its offset."""
    return str(segment["key"]) if segment.get("key") is not None else f"{int(segment['offset']):012d}"


def segment_key(bid: str, name: str, segment: dict) -> str:
    """The storage key of a segment of file `name` of branch `bid`."""
    return f"{PREFIX}/{bid}/{name}/{object_name(segment)}"


def _authenticated(storage: Storage, key: str, found: control.Control, use: str | None) -> None:
    """Refuse a control file of the archive that is not authenticated: always for `use` (a restore), else whenever
    the deployment has a storage key (the archiver and the check: a forged chain must never be signed anew by the
    archiver). Called once its shape is checked, before anything in it is used."""
    if use or auth.deployment_keys() is not None:
        auth.require(found.auth, storage.location(key), use or "the binlog archive")


def branches(storage: Storage, use: str | None = None) -> list[dict[str, Any]]:
    """Every branch of the archive, oldest first (empty: nothing archived yet). Read from the destination, so
    checked: authenticated (see _control), and every id of the shape branch_id makes (it becomes part of storage
    keys). branches.json is `{"branches": [...]}` (a bare list in archives written before it was signed)."""
    key = f"{PREFIX}/branches.json"
    if not storage.exists(key):
        return []
    found = control.read(storage, key)
    known = found.data.get("branches") if isinstance(found.data, dict) else found.data
    if not isinstance(known, list):
        raise IntegrityError(f"{storage.location(key)} is not a list of branches lastline wrote; refused.")
    bad = [b.get("id") if isinstance(b, dict) else b for b in known
           if not isinstance(b, dict) or not BRANCH_ID.match(str(b.get("id")))]
    if bad:
        raise IntegrityError(f"{storage.location(key)} names branches lastline never makes ({bad[:3]!r}); refused.")
    _authenticated(storage, key, found, use)
    return known


def read_branch(storage: Storage, bid: str, use: str | None = None) -> Branch:
    """One branch's chain (its id checked; authenticated, see _control; its file names checked to be binlog names)."""
    return read_branch_sha(storage, bid, use)[0]


def read_branch_sha(storage: Storage, bid: str, use: str | None = None) -> tuple[Branch, str]:
    """read_branch, and the sha256 of the chain.json bytes it was read from (a held stream writes over only those)."""
    if not BRANCH_ID.match(bid):
        raise IntegrityError(f"{bid!r} is not a branch id of the binlog archive; refused.")
    key = f"{PREFIX}/{bid}/chain.json"
    found = control.read(storage, key)
    data = found.data
    try:
        entries = [Entry(**e) for e in data["entries"]]
        for e in entries:
            split_name(e.name)
            for seg in e.segments:
                int(seg["offset"]), int(seg["size"]), str(seg["sha256"])
                if seg.get("key") is not None and not MERGED_KEY.match(str(seg["key"])):
                    raise ValueError(f"segment {e.name}@{seg['offset']}: key {seg['key']!r}")
                if seg.get("sealed", False) is not False and (seg["sealed"] is not True or int(seg["stored"]) < 0
                                                              or not isinstance(seg["ephemeral"], str)):
                    raise ValueError(f"segment {e.name}@{seg['offset']}: sealed, stored or ephemeral")
        public = data.get("seal_public")
        if "envelope" in data or not isinstance(public, str | None):
            raise ValueError("envelope or seal_public")
        retired = list(data.get("retired") or [])
        for r in retired:
            split_name(r["file"]), float(r["at"])
            if not isinstance(r["keys"], list) or not all(OBJECT_KEY.match(str(k)) for k in r["keys"]):
                raise ValueError(f"retired keys of {r['file']}")
        branch = Branch(bid, entries, data.get("parent"), data.get("fork_after"), data.get("covered"), None, public,
                        retired)
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise IntegrityError(f"{storage.location(key)} is not a chain lastline wrote ({exc!r}); refused.") from exc
    wrong = unproven(entries)
    if wrong:  # a hole is crossed only on the chain's own proof, whoever signed it
        raise IntegrityError(f"{storage.location(key)}: {wrong}; refused.")
    _authenticated(storage, key, found, use)
    if public is not None:  # a sealed branch: its envelope, which the chain's seal_public vouches is there
        branch.envelope = read_envelope(storage, bid, use)
    return branch, found.sha256


def envelope_key(bid: str) -> str:
    """Where a sealed branch's envelope is kept."""
    return f"{PREFIX}/{bid}/envelope.json"


def read_envelope(storage: Storage, bid: str, use: str | None = None) -> dict[str, Any]:
    """A sealed branch's envelope (`{"branch": <id>, "envelope": {...}}` in envelope.json), authenticated as the chain
    is; refused when it is missing (its chain says the branch is sealed) or another branch's."""
    key = envelope_key(bid)
    if storage.size_if_exists(key) is None:
        raise IntegrityError(f"{storage.location(key)} is missing, but the branch's chain says its segments are sealed: "
                             "without it no segment of the branch opens. Restore the file from a copy; refused.")
    found = control.read(storage, key)
    data = found.data
    if not isinstance(data, dict) or data.get("branch") != bid or not isinstance(data.get("envelope"), dict):
        raise IntegrityError(f"{storage.location(key)} is not the envelope lastline wrote for branch {bid}; refused.")
    _authenticated(storage, key, found, use)
    return data["envelope"]


def write_envelope(storage: Storage, bid: str, envelope: dict[str, Any], sign: bool = True) -> int:
    """Write a sealed branch's envelope.json (signed, unless `sign` is False: a rotation keeps an unsigned one
    unsigned): by the archiver once, before the branch's first sealed segment, and by a key rotation. Returns its
    size."""
    text = json.dumps({"branch": bid, "envelope": envelope}, indent=1)
    if sign:
        return control.write(storage, envelope_key(bid), text)
    storage.write_bytes(envelope_key(bid), text.encode())
    return len(text.encode())


def write_branch(storage: Storage, branch: Branch) -> str:
    """Write a branch's chain.json (signed, as every control file): the archiver and the retention write it. Returns
    the sha256 of the bytes written (each tells the other's chain from its own by it: a held stream before it writes,
    the retention before it deletes what its chain no longer names)."""
    data = asdict(branch)
    del data["envelope"]  # envelope.json's (write_envelope): a rotation's change is never written over by a round
    return control.write_hashed(storage, f"{PREFIX}/{branch.id}/chain.json", json.dumps(data, indent=1))


def write_branches(storage: Storage, known: list[dict[str, Any]]) -> None:
    """Write branches.json, the archive's list of branches (after each branch's own chain)."""
    control.write(storage, f"{PREFIX}/branches.json", json.dumps({"branches": known}, indent=1))


def head(storage: Storage) -> dict[str, Any] | None:
    """The archive's head, recorded outside the storage after each run (lastline.airflow.assets): the newest branch,
    its last archived file, the bytes archived of it, its last segment's sha256, the GTID state after it and the
    covered position; None for an empty archive."""
    known = branches(storage)
    if not known:
        return None
    branch = read_branch(storage, known[-1]["id"])
    last = next((e for e in reversed(branch.entries) if e.segments), None)
    if last is None:
        return None
    seg = last.segments[-1]
    return {"branch": branch.id, "branches": len(known), "file": last.name, "size": last.size,
            "segment": {"offset": int(seg["offset"]), "size": int(seg["size"]), "sha256": str(seg["sha256"])},
            "end_gtids": last.end_gtids, "covered": branch.covered}


def _holds(s: dict[str, Any], seg: dict[str, Any]) -> bool:
    """Whether archived segment `s` is the recorded head's segment `seg`, or a merged one (pitr.compaction) that covers
    its bytes (a file of a branch is one history: a file written anew under its name is another branch)."""
    off, size = int(seg.get("offset", -1)), int(seg.get("size", -1))
    if int(s["offset"]) == off and int(s["size"]) == size and str(s["sha256"]) == str(seg.get("sha256")):
        return True
    start, end = int(s["offset"]), int(s["offset"]) + int(s["size"])
    return s.get("key") is not None and 0 <= start <= off and off + size <= end and size >= 0


def check_head(storage: Storage, recorded: dict[str, Any] | None, use: str) -> str:
    """Refuse (IntegrityError) an archive that ends before, or differs from, the head recorded in Airflow after the
    last run (`recorded`): an older, validly signed state put back, or files dropped from a chain. Returns one
    sentence for the report (which also says when there is no record to compare with)."""
    where = storage.location(PREFIX)
    if auth.storage_trusted():
        return "anti-rollback: not checked (the deployment declares its storage trusted)"
    if not recorded:
        log.warning("%s: no head of this archive is recorded in Airflow (its first run has not ended, or the record was "
                    "removed): %s cannot tell whether the archive was rolled back", where, use)
        return "anti-rollback: no recorded head to compare with (first run?): not checked"
    known = [b["id"] for b in branches(storage, use)]
    bid, name, size = str(recorded.get("branch")), str(recorded.get("file")), int(recorded.get("size") or 0)
    seg = recorded.get("segment") or {}
    refuse = (f"{where} ends before, or differs from, the head recorded in Airflow after its last run (branch {bid}, "
              f"{name} up to byte {size:,}, GTID {recorded.get('end_gtids')}): {{}}. Someone who can write the storage "
              "put an older state back or removed files; nothing was restored. Find out who, restore the archive from a "
              "copy, or run binlog_archive again once the source's history is known to be whole.")
    if bid not in known or len(known) < int(recorded.get("branches") or 0):
        raise IntegrityError(refuse.format(f"branch {bid} is missing" if bid not in known else
                                           f"it lists {len(known)} branches, {recorded.get('branches')} were recorded"))
    branch = read_branch(storage, bid, use)
    entry = next((e for e in branch.entries if e.name == name), None)
    if entry is None:
        later = [e.name for e in branch.entries if e.seq >= split_name(name)[1]]
        raise IntegrityError(refuse.format(f"{name} is missing from its chain" + (f" (it holds {later})" if later else
                                           f", which ends at {branch.entries[-1].name if branch.entries else 'nothing'}")))
    if entry.size < size:
        raise IntegrityError(refuse.format(f"{name} is archived up to byte {entry.size:,} only: bytes "
                                           f"{entry.size:,}-{size:,} are missing"))
    if not any(_holds(s, seg) for s in entry.segments):
        raise IntegrityError(refuse.format(f"its segment of {name} at byte {seg.get('offset')} is not the one recorded"))
    was, now = recorded.get("covered") or {}, branch.covered or {}
    if was.get("time") is not None and float(now.get("time") or 0) < float(was["time"]):
        # an older chain with the same last segment: what `latest` means would end earlier, silently
        raise IntegrityError(refuse.format(f"it says the source was covered up to {now.get('time')}, the record says "
                                           f"{was['time']}"))
    return f"anti-rollback: the archive holds the head recorded in Airflow ({bid}, {name} up to byte {size:,})"
