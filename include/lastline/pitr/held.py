"""What a binlog archive stream held open across rounds keeps in memory (pitr.stream, pitr.archive.ship): the source's
connection and what it showed, and the archive's branches and newest chain as the stream last wrote them."""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

from lastline.core.errors import StorageError
from lastline.pitr.catalog import PREFIX, branches, read_branch_sha
from lastline.pitr.chain import Branch, split_name
from lastline.storage import Storage, control

log = logging.getLogger(__name__)


@dataclass
class Held:
    """What a stream held open across rounds keeps in memory (pitr.stream): its connection to the source, the binlog
    directory, each file's start GTID state (the source is asked about a file once: its Gtid_list never changes while
    the file keeps its name and grows), the last listing (a listing that is not its continuation, or a new connection,
    makes every file asked about again), and the archive's branches and newest branch as last written, with the sha256
    of that chain.json (another writer, retention, is noticed by it before each write: the round is then made again)."""

    conn: Any = None
    binlog_dir: str = ""
    server_id: int = 0
    gtids: dict[str, str] = field(default_factory=dict)
    listed: dict[str, int] = field(default_factory=dict)
    known: list[dict[str, Any]] | None = None
    branch: Branch | None = None
    chain_sha: str | None = None  # of the chain.json bytes it last wrote or read
    covered_at: float = 0.0  # when a round last wrote the covered position (monotonic)
    refused: set[tuple[str, int]] = field(default_factory=set)  # (file, offset): merges the source's bytes refused

    def drop(self) -> None:
        """Forget everything (after a failed round): the next round starts as a new run does."""
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001 - a connection already lost
                pass
        self.conn, self.gtids, self.listed, self.known, self.branch, self.chain_sha = None, {}, {}, None, None, None


def continues(before: dict[str, int], now: list[tuple[str, int]]) -> bool:
    """Whether a listing continues the one before: every file still listed at least as long, files gone only from the
    front (purged), new ones only after the last (rotated). Anything else (RESET MASTER, a restore) is looked at anew."""
    if not before:
        return False
    last, listed = max(split_name(n)[1] for n in before), dict(now)
    for name, size in now:
        if size < before.get(name, 0) or (name not in before and split_name(name)[1] <= last):
            return False
    gone = [split_name(n)[1] for n in before if n not in listed]
    kept = [split_name(n)[1] for n in before if n in listed]
    return not gone or not kept or max(gone) < min(kept)


def stored_sha(storage: Storage, bid: str) -> str | None:
    """The sha256 of a branch's chain.json as stored (None: there is none)."""
    key = f"{PREFIX}/{bid}/chain.json"
    return hashlib.sha256(control.read_bytes(storage, key)).hexdigest() if storage.exists(key) else None


def still_ours(storage: Storage, held: Held) -> None:
    """Refuse to write over a chain.json another writer (retention) wrote since this stream last wrote or read it: a
    transient error (StorageError), after which the round is made again from storage."""
    assert held.branch is not None
    bid = held.branch.id
    if stored_sha(storage, bid) != held.chain_sha:
        held.known, held.branch, held.chain_sha = None, None, None
        raise StorageError(f"{storage.location(PREFIX)}/{bid}/chain.json was written by another writer (retention) "
                           "during this round: the round is made again from what is stored")


def archived(storage: Storage, held: Held | None, check: bool) -> tuple[list[dict[str, Any]], Branch | None]:
    """The archive's branches and newest branch: from `held` when it has them (`check`: and the stored chain.json is
    still, byte for byte, the one it last wrote or read: its other writer, retention, rewrites it), else read from
    storage."""
    if held is not None and held.known is not None and held.branch is not None:
        if not check or stored_sha(storage, held.branch.id) == held.chain_sha:
            return held.known, held.branch
        log.info("binlog archive: %s/%s/chain.json changed outside this stream (retention): read again",
                 storage.location(PREFIX), held.branch.id)
    known = branches(storage)
    branch, sha = read_branch_sha(storage, known[-1]["id"]) if known else (None, None)
    if held is not None:
        held.known, held.branch, held.chain_sha = known, branch, sha
    return known, branch
