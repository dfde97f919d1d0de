"""Real binlogs for the replay's unit tests: transactions written on a sandbox server into a binlog file of their own
(rotated before and after), that file archived into a local destination as the archiver lays it out (one segment,
its index), and the span a replay applies from where the writes began."""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lastline.pitr import events
from lastline.pitr.chain import Entry
from lastline.pitr.span import Span, resolve
from lastline.pitr.window import PREFIX, Line, Until
from lastline.storage.file import FileStorage

BRANCH = "unit-branch"


@dataclass
class History:
    """One closed binlog file of a real server: its name and bytes, where the writes began in it, the server's GTID
    state then, and the transactions written."""

    name: str
    data: bytes
    position: int
    base_gtid: str
    transactions: list[events.Transaction]


def written(inst: Any, write: Callable[[Any], None]) -> History:
    """Rotate `inst`'s binlog, run `write(connection)` (autocommit on; LOCAL INFILE allowed), rotate again: the file
    in between holds exactly those transactions."""
    conn = inst.server().connect(local_infile=1)
    try:
        conn.autocommit(True)
        cur = conn.cursor()
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        name, position = cur.fetchone()[:2]
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        base = str(cur.fetchone()[0])
        write(conn)
        conn.autocommit(True)
        cur = conn.cursor()
        cur.execute("FLUSH BINARY LOGS")
    finally:
        conn.close()
    data = (inst.datadir / name).read_bytes()
    return History(name, data, int(position), base, events.scan(data, name, 0, True).transactions)


def archived(root: str, history: History) -> tuple[FileStorage, Line]:
    """`history`'s file as the one archived file of a branch in a local destination at `root`, and its line."""
    store = FileStorage(root)
    data = history.data
    store.write_bytes(f"{PREFIX}/{BRANCH}/{history.name}/{0:012d}", data)
    trx = history.transactions
    end = events.gtid_state(history.base_gtid, trx)
    seg = {"offset": 0, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "last_time": trx[-1].time,
           "end_gtids": end, "transactions": len(trx), "first_time": trx[0].time}
    entry = Entry(history.name, history.base_gtid, size=len(data), segments=[seg], closed=True, checksum=True,
                  transactions=len(trx), end_gtids=end, first_time=trx[0].time, last_time=trx[-1].time)
    return store, Line(BRANCH, [(BRANCH, entry)], {"file": history.name, "size": len(data), "time": trx[-1].time + 10})


def span(store: FileStorage, line: Line, history: History, until: str = "latest") -> Span:
    """The span from where the writes began to `until` (latest, a UTC time or a GTID)."""
    return resolve(store, line, history.name, history.position, history.base_gtid, Until.parse(until))
