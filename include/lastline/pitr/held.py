"""What a binlog archive stream held open across rounds keeps in memory (pitr.stream, pitr.archive.ship): the source's
connection and what it showed, and the archive's branches and newest chain as the stream last wrote them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lastline.pitr.chain import Branch, split_name


@dataclass
class Held:
    """What a stream held open across rounds keeps in memory (pitr.stream): its connection to the source, the binlog
    directory, each file's start GTID state (the source is asked about a file once: its Gtid_list never changes while
    the file keeps its name and grows), the last listing (a listing that is not its continuation, or a new connection,
    makes every file asked about again), and the archive's branches and newest branch as last written, with the size
    of that chain.json (another writer, retention, is noticed by it: the chain is then read again)."""

    conn: Any = None
    binlog_dir: str = ""
    server_id: int = 0
    gtids: dict[str, str] = field(default_factory=dict)
    listed: dict[str, int] = field(default_factory=dict)
    known: list[dict[str, Any]] | None = None
    branch: Branch | None = None
    chain_size: int | None = None
    covered_at: float = 0.0  # when a round last wrote the covered position (monotonic)
    refused: set[tuple[str, int]] = field(default_factory=set)  # (file, offset): merges the source's bytes refused

    def drop(self) -> None:
        """Forget everything (after a failed round): the next round starts as a new run does."""
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001 - a connection already lost
                pass
        self.conn, self.gtids, self.listed, self.known, self.branch, self.chain_size = None, {}, {}, None, None, None


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
