"""The binlog archive's compaction (issue 47): a held stream ships a segment per round, so a branch's chain and its
objects would grow without bound; the archiver merges them.

A file's segments are merged, a run at a time, into new objects of at most `Compaction.most` bytes (32 MiB): when the
file is closed (the source has moved past it), and, in the file still being written, once more than `Compaction.loose`
segments follow its last merged one. The bound keeps a round short: a merge re-reads its bytes from the source, and a
merge of a whole file (up to max_binlog_size, 1 GiB) would hold the stream's next look back by seconds at every
rotation; a segment shipped as one large piece (a first run's catch-up) is left as it is. The merged bytes are read
again from the SOURCE (the archiver can never open a sealed segment: it holds the branch's public key only), compared,
part by part, with what was archived (each part's `plain_sha256`, the sha256 of its binlog bytes with the in-use flag
byte zeroed; an unsealed part written before that field, by its `sha256`): bytes that differ (a file written anew under
the same name) or a range the source no longer holds keep the small segments. The merged object (sealed like any
segment) is written under a key no record uses (`<offset>-<end>[-n]`, the record's `"key"`), listed in the chain's
`retired` first (an object a run killed before the chain names it is deleted after the grace, never left behind), then
the chain naming it; the replaced objects are listed in `retired` and deleted `Compaction.grace` seconds later, on a
later round: a reader of an older chain finds them until then, and after that reads the merged segment the chain then
lists in their place (pitr.window.segment_chunks).
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lastline.core.hosts import Stage
from lastline.core.pipeline import run_pipeline
from lastline.pitr.catalog import PREFIX, object_name
from lastline.pitr.chain import Branch, Entry, SourceFile
from lastline.pitr.sealed import SegmentSealer
from lastline.storage import Storage

log = logging.getLogger(__name__)

TAIL = 4096  # bytes before an archived end compared with the source's (a file written anew under the same name)
# the low byte of the first event's flags: LOG_EVENT_BINLOG_IN_USE_F, which the server clears when it closes the
# file. A file archived while open keeps it set (the replay clears it); comparisons leave that byte out.
IN_USE_FLAG = 21


@dataclass(frozen=True)
class Compaction:
    """When segments are merged and when the objects they replace are deleted."""

    loose: int = 120  # an open file's segments after its last merged one (a minute of 0.5 s rounds) merged beyond it
    grace: float = 3600.0  # seconds a replaced object is kept for a reader of an older chain
    enabled: bool = True
    most: int = 32 * 2**20  # the largest merged object: what one round re-reads from the source


def masked(data: bytes, start: int) -> bytes:
    """`data` (bytes from offset `start` of a binlog) with the in-use flag byte zeroed."""
    if start <= IN_USE_FLAG < start + len(data):
        i = IN_USE_FLAG - start
        return data[:i] + b"\x00" + data[i + 1:]
    return data


def dd(path: str, offset: int, n: int, host: Any) -> Stage:
    """Bytes [offset, offset + n) of the file at `path` on `host`."""
    return Stage("dd", ["dd", f"if={path}", "iflag=skip_bytes,count_bytes", f"skip={offset}", f"count={n}", "bs=1M",
                        "status=none"], host=host)


def planned(entry: Entry, source: SourceFile | None, loose: int, most: int = Compaction.most) -> tuple[int, int] | None:
    """(i, j): the entry's segments[i:j] to merge into one, or None: the first run of at least two segments that
    follow each other and hold at most `most` bytes together; in a closed file from its first segment, in an open
    one from after its last merged (or `most`-sized) segment once more than `loose` follow it. Only bytes the source
    still holds (`source`: the file as it lists it now)."""
    segs = entry.segments
    if source is None or entry.missing or entry.pruned or len(segs) < 2 or source.size < entry.size:
        return None
    i = 0
    if not entry.closed:
        i = max((k + 1 for k, s in enumerate(segs) if s.get("key") is not None or int(s["size"]) >= most), default=0)
        if len(segs) - i <= loose:
            return None
    while i < len(segs) - 1:
        j, total = i + 1, int(segs[i]["size"])
        while (j < len(segs) and int(segs[j - 1]["offset"]) + int(segs[j - 1]["size"]) == int(segs[j]["offset"])
               and total + int(segs[j]["size"]) <= most):
            total += int(segs[j]["size"])
            j += 1
        if j - i > 1:
            return i, j
        i = j
    return None


def merged_record(parts: list[dict[str, Any]], key: str, stored: dict[str, Any]) -> dict[str, Any]:
    """The record of the segment that replaces `parts` (contiguous): their range, transactions summed, the first
    transaction's time and the last's, the GTID state of the last; `stored`: its sha256 (of the stored bytes),
    plain_sha256, tail_sha256 (of its own last TAIL bytes, as archive._with_tail compares them) and, sealed,
    sealed/stored/ephemeral."""
    start, last = int(parts[0]["offset"]), parts[-1]
    return {"offset": start, "size": int(last["offset"]) + int(last["size"]) - start, "key": key, **stored,
            "tail_sha256": stored.get("tail_sha256", last.get("tail_sha256")),
            "transactions": sum(int(p.get("transactions") or 0) for p in parts),
            "first_time": next((p["first_time"] for p in parts if p.get("first_time")), 0),
            "last_time": max((int(p.get("last_time") or 0) for p in parts), default=0),
            "end_gtids": last.get("end_gtids", "")}


def free_key(branch: Branch, entry: Entry, start: int, end: int) -> str:
    """A name in the file's folder for a merged segment that no record, current or retired, uses."""
    used = {object_name(s) for s in entry.segments}
    used |= {k for r in branch.retired if r["file"] == entry.name for k in r["keys"]}
    key, n = f"{start:012d}-{end:012d}", 1
    while key in used:
        n += 1
        key = f"{start:012d}-{end:012d}-{n}"
    return key


class Differs(Exception):
    """The source's bytes for a part are not the archived ones (or it holds fewer): the small segments are kept."""


class _Parts:
    """Checks the source's bytes, as they stream, part by part against what was archived of each part."""

    def __init__(self, parts: list[dict[str, Any]]) -> None:
        self.parts, self.at, self.i = parts, int(parts[0]["offset"]), 0
        self.plain, self.tail = hashlib.sha256(), bytearray()
        self._start()

    def _start(self) -> None:
        self.raw, self.zeroed, self.flagged = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()

    def feed(self, data: bytes) -> None:
        while data:
            part = self.parts[self.i] if self.i < len(self.parts) else None
            if part is None:
                raise Differs("more bytes than the parts hold")
            end = int(part["offset"]) + int(part["size"])
            piece, data = data[:end - self.at], data[end - self.at:]
            zero, i = masked(piece, self.at), IN_USE_FLAG - self.at
            self.raw.update(piece)
            self.zeroed.update(zero)
            # as archived while the file was open: the flag set (the server clears it when it closes the file)
            self.flagged.update(zero[:i] + bytes([piece[i] | 1]) + zero[i + 1:] if 0 <= i < len(piece) else piece)
            self.plain.update(zero)
            self.tail.extend(piece)
            del self.tail[:-TAIL]
            self.at += len(piece)
            if self.at == end:
                self._check(part)
                self.i += 1
                self._start()

    def _check(self, part: dict[str, Any]) -> None:
        if part.get("plain_sha256"):
            ok = self.zeroed.hexdigest() == part["plain_sha256"]
        else:  # written before plain_sha256: an unsealed one's sha256 is of its binlog bytes, in-use flag as shipped
            ok = not part.get("sealed") and part["sha256"] in (self.raw.hexdigest(), self.flagged.hexdigest())
        if not ok:
            raise Differs(f"the source's bytes at {part['offset']} differ from the archived ones")


def merge(storage: Storage, branch: Branch, entry: Entry, span: tuple[int, int], path: str, host: Any,
          seal: SegmentSealer | None, save: Callable[[Branch], None] | None = None) -> bool:
    """Merge entry.segments[span] into one object read again from the source's `path` and replace their records by
    its own, the replaced objects retired (the caller writes the chain). False (nothing changed) when the source's bytes
    differ or fall short. `save` writes the chain with the new key retired before its object is written."""
    parts = entry.segments[span[0]:span[1]]
    start = int(parts[0]["offset"])
    end = int(parts[-1]["offset"]) + int(parts[-1]["size"])
    name = free_key(branch, entry, start, end)
    key = f"{PREFIX}/{branch.id}/{entry.name}/{name}"
    check = _Parts(parts)
    fields: dict[str, Any] = {}
    pending = {"file": entry.name, "keys": [name], "at": int(time.time())}
    if save is not None:  # a run killed once the object is stored, before the chain names it, leaves it retired
        branch.retired.append(pending)
        save(branch)

    def sink(data: bytes) -> None:
        check.feed(data)
        out.write(data)

    try:
        with storage.writer(key) as writer:
            sealing, counted, fields = seal.writer(writer, key) if seal is not None else (None, None, {})
            out: Any = sealing or writer
            got = run_pipeline([dd(path, start, end - start, host)], sink=sink, label=f"binlog {entry.name}",
                               progress_every=None, host=host)
            if got.bytes_out != end - start:
                raise Differs(f"the source holds {got.bytes_out} of its {end - start} bytes")
            if sealing is not None and counted is not None:
                sealing.close()
                fields.update(stored=counted.n, sha256=counted.sha.hexdigest())
    except Differs as exc:
        log.warning("binlog archive: %s bytes %d-%d are not merged, its %d segments kept: %s", entry.name, start, end,
                    len(parts), exc)
        return False
    finally:
        if save is not None:
            branch.retired.remove(pending)  # nothing stored under it, or named by its record below
    stored = {"sha256": got.sha256_out, **fields, "plain_sha256": check.plain.hexdigest(),
              "tail_sha256": hashlib.sha256(masked(bytes(check.tail), end - len(check.tail))).hexdigest()}
    entry.segments[span[0]:span[1]] = [merged_record(parts, name, stored)]
    branch.retired.append({"file": entry.name, "keys": [object_name(p) for p in parts], "at": int(time.time())})
    log.info("binlog archive: %s bytes %d-%d merged from %d segments into %s", entry.name, start, end, len(parts), name)
    return True


def compact(storage: Storage, branch: Branch, files: list[SourceFile], binlog_dir: str, host: Any,
            seal: Callable[[], SegmentSealer | None], settings: Compaction, save: Callable[[Branch], None],
            refused: set[tuple[str, int]], unchanged: Callable[[], bool] = lambda: True) -> None:
    """One merge at most (a round stays short) and the deletion of what was retired more than `settings.grace` ago;
    the chain written after each, unless `unchanged()` says another writer (retention) wrote it meanwhile (the next
    round reads it again; a merged object not named yet is retired). `refused`: ranges not merged before (not tried
    again by this stream)."""
    if not settings.enabled:
        return
    listed = {f.name: f for f in files}
    for entry in branch.entries:
        span = planned(entry, listed.get(entry.name), settings.loose, settings.most)
        tried = (entry.name, int(entry.segments[span[0]]["offset"])) if span else None
        if span is None or tried in refused:
            continue
        if not unchanged():  # merge writes the chain first (the new key retired): never over retention's
            return
        if merge(storage, branch, entry, span, f"{binlog_dir}/{entry.name}", host, seal(), save):
            if not unchanged():
                return
            save(branch)
        elif tried is not None:
            refused.add(tried)
        break
    if unchanged():
        sweep(storage, branch, settings.grace, save)


def sweep(storage: Storage, branch: Branch, grace: float, save: Callable[[Branch], None]) -> int:
    """Delete the objects retired more than `grace` seconds ago (then drop them from the chain); returns how many."""
    due = [r for r in branch.retired if float(r["at"]) <= time.time() - grace]
    if not due:
        return 0
    storage.delete_objects([f"{PREFIX}/{branch.id}/{r['file']}/{k}" for r in due for k in r["keys"]])
    branch.retired = [r for r in branch.retired if r not in due]
    save(branch)
    return sum(len(r["keys"]) for r in due)
