"""The binlog archive: ship the source's binary logs to a destination, exactly once and in order (issue 29).

Layout, under `<destination>/binlogs/`: `branches.json` (every branch; the newest is the one the source writes
now) and, per branch, `<branch>/chain.json` (its files, holes and segments, see chain.Entry; both read authenticated
and written signed by pitr.catalog) and
`<branch>/<file>/<offset>` (the bytes [offset, offset + size) of one binlog file: a file still being written is
archived in segments, object stores having no append; pitr.compaction merges them, under the record's "key"). A segment is written first and the chain after it: a
run that dies in between ships the same bytes again to the same key, so nothing is doubled or lost.

The bytes are read on the source's host (where mariabackup runs too) with `dd`, up to the size `SHOW BINARY
LOGS` gives, which ends at the last complete event. `ship` brings the archive up to the source's position once
(`until_current`, and each round of the stream pitr.stream holds open, which keeps its state in memory between
rounds: pitr.held).
"""
from __future__ import annotations

import hashlib
import logging
import posixpath
import re
import time
from datetime import UTC, datetime
from typing import Any

from lastline.core.errors import IntegrityError, PreflightError, StorageError
from lastline.core.pipeline import run_pipeline
from lastline.core.servers import Server
from lastline.pitr import events
from lastline.pitr.catalog import PREFIX, branches, head, read_branch, write_branch, write_branches
from lastline.pitr.chain import Branch, Entry, SourceFile, branch_id, plan, split_name
from lastline.pitr.compaction import IN_USE_FLAG, TAIL, Compaction, compact
from lastline.pitr.compaction import dd as _dd
from lastline.pitr.compaction import masked as _masked
from lastline.pitr.held import Held, archived, continues, still_ours, stored_sha
from lastline.pitr.sealed import SegmentSealer, sealer
from lastline.storage import Storage
from lastline.storage.encryption_keys import EncryptionKeys, deployment_encryption_keys

__all__ = ["IN_USE_FLAG", "PREFIX", "Compaction", "Held", "branches", "head", "log_result", "read_branch", "ship", "source_files"]

log = logging.getLogger(__name__)

_GTID_LIST = re.compile(r"^\[(?P<list>[0-9,\- ]*)\]$")


SETTLED = ("(SELECT UNIX_TIMESTAMP(NOW(6)) - COALESCE(MAX(TIME_MS), 0) / 1000 FROM information_schema.PROCESSLIST "
           "WHERE COMMAND = 'Query' AND ID <> CONNECTION_ID())")


def _source_now(server: Server, held: Held | None = None) -> tuple[str, list[SourceFile], int]:
    """source_files, and up to when the archive is then complete (UTC seconds, the source's clock): a transaction's
    stamp is the start of the statement that commits it, so a statement still running may yet commit with an older
    stamp; the time returned is one second before the oldest running statement began (or before now). With `held`
    (a stream's state): over its connection, kept open, asking only about files it has not seen (two statements a
    round: this one and `SHOW BINARY LOGS`)."""
    if held is None:  # one look, over a connection of its own
        once = Held()
        try:
            return _source_now(server, once)
        finally:
            once.drop()
    if held.conn is None:
        held.drop()
        held.conn = server.connect(connect_timeout=10, read_timeout=60, write_timeout=60)
    cur = held.conn.cursor()
    cur.execute(f"SELECT {SETTLED}, @@GLOBAL.log_bin, @@GLOBAL.log_bin_basename, @@GLOBAL.server_id")
    settled, on, basename, server_id = cur.fetchone()
    if not int(on or 0):
        raise PreflightError(f"{server.describe()} writes no binary log: enable log-bin to archive it.")
    cur.execute("SHOW BINARY LOGS")
    listed = [(str(r[0]), int(r[1])) for r in cur.fetchall()]
    for name, _ in listed:
        split_name(name)  # a name of another shape is refused before it reaches a path
    binlog_dir = posixpath.dirname(str(basename))
    if (binlog_dir, int(server_id)) != (held.binlog_dir, held.server_id) or not continues(held.listed, listed):
        held.gtids = {}
    held.binlog_dir, held.server_id, held.listed = binlog_dir, int(server_id), dict(listed)
    files = []
    for name, size in listed:
        if name not in held.gtids:
            cur.execute(f"SHOW BINLOG EVENTS IN '{name}' LIMIT 4")
            start = next((str(r[5]) for r in cur.fetchall() if r[2] == "Gtid_list"), None)
            m = _GTID_LIST.match(start or "")
            if m is None:
                raise IntegrityError(f"{name} on {server.describe()} has no Gtid_list event at its start ({start!r}).")
            held.gtids[name] = m["list"].replace(" ", "")
        files.append(SourceFile(name, size, held.gtids[name], int(server_id)))
    held.gtids = {f.name: f.start_gtids for f in files}
    return binlog_dir, files, int(float(settled)) - 1


def source_files(server: Server) -> tuple[str, list[SourceFile]]:
    """(the binlog directory on the source's host, every binlog file with its size and the GTID state it starts
    from), as the source shows them now."""
    binlog_dir, files, _ = _source_now(server)
    return binlog_dir, files


def _segment_key(branch: Branch, name: str, offset: int) -> str:
    return f"{PREFIX}/{branch.id}/{name}/{offset:012d}"


COVER_EVERY = 5.0  # seconds between the covered position's writes in a held stream while the source writes nothing
DEPLOYMENT: Any = object()  # ship's keys: the deployment's (storage.encryption_keys)


def ship(server: Server, storage: Storage, held: Held | None = None, keys: EncryptionKeys | None = DEPLOYMENT,
         compaction: Compaction | None = None) -> dict[str, Any]:
    """Bring the archive up to the source's position now; returns what was shipped, the holes and forks. With `held`
    (a stream's state, pitr.stream): the source is asked cheaply (_source_now), the archive's branches and chain are
    kept in memory between rounds (read again when another writer changed the chain), and a round with nothing to
    ship writes nothing but, every COVER_EVERY seconds, the position it confirms. With encryption `keys` (the
    deployment's by default: a stream reads them once and passes them) each new segment is sealed (pitr.sealed): the
    archiver needs no key that opens one. With `compaction` (pitr.stream's; None: none), a branch's segments are then
    merged and what they replaced deleted, as it says (pitr.compaction)."""
    keys = deployment_encryption_keys() if keys is DEPLOYMENT else keys  # a wrong key connection: refused before a byte
    binlog_dir, files, now = _source_now(server, held)
    known, branch = archived(storage, held, check=False)
    host = server.runner()
    steps = plan(branch, files)
    if held is not None and not steps and time.monotonic() - held.covered_at < COVER_EVERY:
        return _shipped(branch, 0, [], [], [])  # idle: nothing read or written
    if held is not None:  # something to write: the chain in memory must still be the stored one
        known, branch = archived(storage, held, check=True)
        steps = plan(branch, files)
    resumed = next((e for e in reversed(branch.entries) if not e.missing), None) if branch else None
    if branch is not None and resumed is not None:  # the file the archive resumes: its bytes are compared, 4 KiB,
        # once a run, and in a held stream each round that ships (a closed file is told apart by its start state and
        # size; reading every file's tail would cost a process per archived file per run)
        files = [_with_tail(f, branch, binlog_dir, host) if f.name == resumed.name else f for f in files]
        steps = plan(branch, files)
    shipped, holes, forks, empty = 0, [], [], []

    def save(b: Branch) -> None:
        if held is not None and held.branch is not None and held.branch.id == b.id:
            still_ours(storage, held)  # retention may have written it since this round read it
        sha = write_branch(storage, b)
        if held is not None:
            held.branch, held.chain_sha = b, sha

    sealers: dict[str, SegmentSealer | None] = {}
    if branch is None and steps:
        branch = _start(storage, known, branch_id(min(files, key=lambda f: f.seq)), None, None, "the first binlog archived")
        save(branch)
    for step in steps:
        assert branch is not None
        if step.kind == "fork":
            branch = _start(storage, known, step.name, branch.id, step.shares, step.reason)
            save(branch)
            forks.append(step.reason)
            log.warning("binlog archive: the source's history forks (%s): new branch %s", step.reason, branch.id)
            continue
        if step.kind == "hole":
            entry = _entry(branch, step.name, "")
            if entry.segments:  # archived in part: what it holds stays usable, the rest is the hole
                entry.tail_missing, entry.closed = True, True
            else:
                entry.missing, entry.closed = True, True
            entry.proven_empty, entry.lost_gtids = step.proven, step.lost
            if step.proven:
                empty.append(step.name)
                log.info("binlog archive: %s is missing (%s)", step.name, step.reason)
            else:
                holes.append(step.name)
                log.warning("binlog archive: %s is missing (%s): a roll-forward cannot cross it", step.name, step.reason)
        else:
            entry = _entry(branch, step.name, step.start_gtids)
            if step.upto > step.offset:
                if branch.id not in sealers:  # a branch's first sealed segment gives it its envelope
                    sealers[branch.id] = sealer(storage, branch, keys)
                shipped += _ship_bytes(server, storage, branch, entry, posixpath.join(binlog_dir, step.name), step.offset,
                                       step.upto, host, sealers[branch.id])
            entry.size, entry.closed = step.upto, step.closes
        save(branch)
    if branch is not None and compaction is not None:
        def seal() -> SegmentSealer | None:
            assert branch is not None
            if branch.id not in sealers:
                sealers[branch.id] = sealer(storage, branch, keys)
            return sealers[branch.id]

        compact(storage, branch, files, binlog_dir, host, seal, compaction, save,
                held.refused if held is not None else set(),
                lambda: held is None or stored_sha(storage, branch.id) == held.chain_sha)
    if branch is not None and not steps and held is None:
        log.info("binlog archive: up to date (%s)", branch.id)
    if branch is not None and files:  # the branch now holds everything the source had committed at `now`
        newest = max(files, key=lambda f: f.seq)
        branch.covered = {"file": newest.name, "size": newest.size, "time": now}
        save(branch)
        if held is not None:
            held.covered_at = time.monotonic()
    if held is not None:
        held.known, held.branch = known, branch
    return _shipped(branch, shipped, holes, forks, empty)


def _shipped(branch: Branch | None, shipped: int, holes: list[str], forks: list[str], empty: list[str]) -> dict[str, Any]:
    last = next((e for e in reversed(branch.entries) if not e.missing), None) if branch else None
    return {"branch": branch.id if branch else None, "bytes": shipped, "holes": holes, "forks": forks,
            "proven_empty": empty, "position": f"{last.name}:{last.size}" if last else None}


def _start(storage: Storage, known: list[dict[str, Any]], bid: str, parent: str | None, shared: str | None,
           reason: str) -> Branch:
    """A new branch, listed in branches.json before anything is shipped into it (its id made unique: a server written
    anew may start from the very state an earlier branch did)."""
    taken, base, k = {b["id"] for b in known}, bid, 1
    while bid in taken:
        k += 1
        bid = f"{base}-{k}"
    branch = Branch(bid, [], parent, shared)
    write_branch(storage, branch)  # its chain first: branches.json never names a branch without one
    known.append({"id": bid, "parent": parent, "fork_after": shared, "started": datetime.now(UTC).isoformat(), "reason": reason})
    write_branches(storage, known)
    return branch


def _with_tail(f: SourceFile, branch: Branch, binlog_dir: str, host: Any) -> SourceFile:
    """`f`, with same_tail False when the archive holds it in part and the source's bytes just before the archived
    end differ from the archived ones."""
    known = next((e for e in branch.entries if e.name == f.name and not e.missing and e.segments), None)
    if known is None or f.size < known.size or "tail_sha256" not in known.segments[-1]:
        return f
    end = known.segments[-1]["offset"] + known.segments[-1]["size"]
    n = min(TAIL, known.segments[-1]["size"])
    got = host.run(_dd(posixpath.join(binlog_dir, f.name), end - n, n, host).argv, timeout=60).stdout  # a short
    # command: over the host's shared SSH connection, no new one each round
    if hashlib.sha256(_masked(bytes(got), end - n)).hexdigest() == known.segments[-1]["tail_sha256"]:
        return f
    return SourceFile(f.name, f.size, f.start_gtids, f.server_id, same_tail=False)


def _ship_bytes(server: Server, storage: Storage, branch: Branch, entry: Entry, path: str, offset: int, upto: int,
                host: Any, seal: SegmentSealer | None = None) -> int:
    """Bytes [offset, upto) of the binlog at `path` on the source's host into one segment (its sha256 recorded: of the
    stored bytes, sealed when `seal` is given; its tail's of the binlog's, compared with the source's by _with_tail)."""
    n, key = upto - offset, _segment_key(branch, entry.name, offset)
    result_n = [0]  # bytes passed so far (where the in-use flag byte falls)
    tail, plain = bytearray(), hashlib.sha256()
    index = events.Scanner(entry.name, offset, entry.checksum)
    fields: dict[str, Any] = {}

    def sink(data: bytes) -> None:
        out.write(data)
        plain.update(_masked(data, offset + result_n[0]))
        result_n[0] += len(data)
        index.feed(data)
        tail.extend(data)
        del tail[:-TAIL]

    with storage.writer(key) as writer:
        sealing, counted, fields = seal.writer(writer, key) if seal is not None else (None, None, {})
        out: Any = sealing or writer
        result = run_pipeline([_dd(path, offset, n, host)], sink=sink, label=f"binlog {entry.name}", progress_every=None,
                              host=host)
        if result.bytes_out != n:  # the file went (RESET MASTER, a purge) between the listing and the read: transient
            raise StorageError(f"{entry.name}: read {result.bytes_out} bytes of {n} from byte {offset} on "
                                 f"{server.describe()}; the archive keeps what it had and the next run retries.")
        if sealing is not None and counted is not None:
            sealing.close()  # the final chunk, before the storage's writer commits the object
            fields.update(stored=counted.n, sha256=counted.sha.hexdigest())
    entry.segments = [s for s in entry.segments if s["offset"] < offset] + [
        {"offset": offset, "size": n, "sha256": result.sha256_out, **fields, "plain_sha256": plain.hexdigest(),
         "tail_sha256": hashlib.sha256(_masked(bytes(tail), upto - len(tail))).hexdigest()}]
    _index(entry, index.out, offset)
    return n


def _index(entry: Entry, found: events.Scan, offset: int) -> None:
    """Add what a segment's scan found to its entry's index."""
    if offset == 0:
        entry.checksum, entry.end_gtids = found.checksum, entry.start_gtids
        entry.transactions, entry.first_time, entry.last_time = 0, 0, 0
    trx = found.transactions
    segment = entry.segments[-1]
    segment.update(transactions=len(trx), first_time=trx[0].time if trx else 0,
                   last_time=max((t.time for t in trx), default=0),
                   end_gtids=events.gtid_state(entry.end_gtids or entry.start_gtids, trx))
    if trx:
        entry.transactions += len(trx)
        entry.first_time = entry.first_time or trx[0].time
        entry.last_time = max(entry.last_time, max(t.time for t in trx))
        entry.end_gtids = events.gtid_state(entry.end_gtids or entry.start_gtids, trx)


def _entry(branch: Branch, name: str, start_gtids: str) -> Entry:
    """The branch's entry for `name` (added at the end if new)."""
    for e in branch.entries:
        if e.name == name:
            return e
    entry = Entry(name, start_gtids)
    branch.entries.append(entry)
    return entry


def log_result(storage: Storage, result: dict[str, Any]) -> None:
    log.info("binlog archive %s: %s bytes shipped, at %s; holes: %s%s; forks: %s", storage.location(PREFIX),
             f"{result['bytes']:,}", result["position"], ", ".join(result["holes"]) or "none",
             f" (proven empty, crossed: {', '.join(result['proven_empty'])})" if result["proven_empty"] else "",
             len(result["forks"]))
