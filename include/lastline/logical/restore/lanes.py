"""Lanes: `parallel` is the one knob of load concurrency. The DAG runs `parallel` lane tasks, each taking
the plan's units in order, every unit that no other lane holds (a named lock per unit) and that the
ledger does not already hold whole, until none is left: a lane that ends early takes the rest, a retried
lane resumes. Then, while another lane still loads a unit, it loads that unit's chunks from the last one down
until the two meet (the ledger keeps each chunk once): the lanes end within about a chunk of each other, not a
unit. With index_build=per_table, the lane that finishes a table's last unit (the one holding it, where another
helped) builds the table's held-back indexes at once, in its own slot, while the other lanes load. With defer_indexes, each table is created
by the lane that loads it, just before its first chunk (logical.restore.create.table_creates): the first rows arrive
after one CREATE, not after all of them, and the CREATEs run `parallel` at a time as the loads do."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from lastline.core.servers import Server
from lastline.logical.restore.load import Creates, TableMaker, helpable, load_unit
from lastline.logical.restore.plans import UnitLoaded
from lastline.logical.restore.target_state import loaded_count, loaded_files
from lastline.logical.restore.work_units import WorkUnit
from lastline.manifest import LogicalManifest, LogicalTable
from lastline.storage import Storage

log = logging.getLogger(__name__)


@contextlib.contextmanager
def claimed(server: Server, scope: str, unit: WorkUnit, what: str = "") -> Iterator[Any]:
    """Hold the unit's named lock for the block: yields the cursor of the connection holding it, or None if
    another lane holds it. `scope` names the restore (its backup and databases): two restores of one backup into
    other databases never hold each other's units. `what`: another lock of the unit ("help": the lane helping it)."""
    with server.session() as cur:
        cur.execute("SELECT GET_LOCK(%s, 0)", (_unit_lock(scope, unit, what),))
        yield cur if cur.fetchone()[0] == 1 else None


def _unit_lock(scope: str, unit: WorkUnit, what: str = "") -> str:
    name = hashlib.sha256(scope.encode()).hexdigest()[:24]  # a lock name is at most 64 characters
    return f"lastline-unit-{name}-{unit.index}" + (f"-{what}" if what else "")


def load_lane(server: Server, storage: Storage, manifest: LogicalManifest, units: list[WorkUnit], label: str,
              parallel: int, on_table_done: Callable[[Any, str, str], None] | None = None,
              setup: tuple[str, ...] = (), create: Creates | None = None, scope: str | None = None,
              help_others: bool = False) -> list[UnitLoaded]:
    """One lane: every unit, in plan order, that no other lane holds and that is not yet in whole; returns
    the results of the units this lane loaded. `on_table_done(cursor, schema, table)` runs in this lane once a
    table it loaded has every chunk in the ledger (once: the lane that finished the table's last unit), on one
    connection per unit (`setup` run on it first): a table costs no connection of its own. `create`: each table's
    CREATE, run before its first chunk (None: the tables exist). `scope`: see claimed (default: the backup's id).
    `help_others`: then, while another lane still loads a unit, load that unit from its end (see helping); the
    lane that holds it completes its tables."""
    results: list[UnitLoaded] = []
    tables = {(t.schema, t.name): t for t in manifest.tables}
    scope = scope or manifest.backup_id
    for unit in units:
        with claimed(server, scope, unit) as cur:
            if cur is None:
                continue
            files = unit.files(tables)
            if len(loaded_files(cur, manifest.backup_id, files)) == len(files):
                for p in unit.parts:  # an earlier try loaded it whole: said as a unit loaded in part says it
                    if p.last >= p.first:
                        log.info("%s.%s: %d chunk(s) already in the ledger, skipped (%s)", p.schema, p.table,
                                 p.last - p.first + 1, unit.name)
                if create is not None and any(p.last < p.first for p in unit.parts):
                    # no ledger row says its tables without chunks were made (a lane that helped loaded the rest
                    # of the unit while its holder had not made them yet, and the holder was killed)
                    _create_empty(server, unit, create)
                continue
            log.info("%s: loading %s", label, unit.name)
            results.append(load_unit(server, storage, manifest, unit, parallel, create, tables))
        if on_table_done is not None:
            # one connection for the unit's tables, in autocommit: each check reads the ledger as it is now
            with server.session(autocommit=True) as completing:
                for sql in setup:
                    completing.execute(sql)
                for schema, name in dict.fromkeys((p.schema, p.table) for p in unit.parts):
                    _when_complete(completing, manifest, tables[(schema, name)],
                                   functools.partial(on_table_done, completing, schema, name))
            results[-1] = dataclasses.replace(results[-1], finished_at=time.time())  # its span holds the index builds it led to
    helped: set[int] = set()
    while help_others and (held := helping(server, scope, manifest, units, tables, helped)) is not None:
        helped.add(held.index)
        with claimed(server, scope, held, "help") as cur:  # one lane helps a unit: a second would only wait
            if cur is None:
                continue
            log.info("%s: no unit left to take; loading %s from its end, beside the lane that holds it", label, held.name)
            result = load_unit(server, storage, manifest, held, parallel, create, tables, backwards=True)
        if result.chunks:  # the holding lane completes the unit's tables: it passes each chunk, this one's too
            results.append(result)
    log.info("%s: done, %d unit(s) loaded here", label, len(results))
    return results


def helping(server: Server, scope: str, manifest: LogicalManifest, units: list[WorkUnit],
            tables: dict[tuple[str, str], LogicalTable], helped: set[int]) -> WorkUnit | None:
    """The unit to help once a lane finds none left to take: of those another lane holds, the one with the most
    bytes of transactional chunks not yet in the ledger, if at least two (a lane loads a unit in key order from its
    first chunk; the helper from its last one down, until they meet: load.load_unit's `backwards`). Each unit is
    helped once by a lane (`helped`: their indexes). Without it, the lanes' units end unevenly: the last one a lane
    takes (and the index builds it leads to) runs alone while the other lanes' cores wait. If the holder is killed
    meanwhile, the helper goes on down to the holder's last chunk, and the holder's retry finds the unit whole
    (finalize completes its tables, as after any lane that failed)."""
    best, most = None, 0
    with server.session() as cur:
        for unit in units:
            if unit.index in helped:
                continue
            cur.execute("SELECT IS_USED_LOCK(%s)", (_unit_lock(scope, unit),))
            if cur.fetchone()[0] is None:
                continue  # nobody loads it: loaded, or left to a lane's retry
            chunks = [c for p in helpable(unit, tables) for c in tables[(p.schema, p.table)].chunks[p.first: p.last + 1]]
            done = loaded_files(cur, manifest.backup_id, [c.file for c in chunks])
            left = [c for c in chunks if c.file not in done]
            if len(left) >= 2 and (size := sum(c.raw_bytes for c in left)) > most:
                best, most = unit, size
    return best


def _create_empty(server: Server, unit: WorkUnit, create: Creates) -> None:
    """The tables of a unit without chunks (empty tables), which a lane finds "loaded" with nothing in the ledger to
    say they were made: created unless they exist."""
    maker = TableMaker(server, create)
    try:
        for p in unit.parts:
            if p.last < p.first:
                maker.make(p.schema, p.table)
    finally:
        maker.close()


def _when_complete(cur: Any, manifest: LogicalManifest, table: LogicalTable, work: Callable[[], None]) -> None:
    """Run `work` if every chunk of `table` is in the ledger, under the table's named lock (taken on `cur`'s
    connection and released after): of two lanes that finish its units at once, one does it and the other goes on
    loading (finalize does whatever a failed lane left undone: the work is idempotent). Reads the ledger rows of
    this table's chunks alone: the lane's cost per table does not grow with the tables before it."""
    name = "lastline-table-" + hashlib.sha1(f"{manifest.backup_id}/{table.schema}/{table.name}".encode()).hexdigest()[:40]
    cur.execute("SELECT GET_LOCK(%s, 0)", (name,))
    if cur.fetchone()[0] != 1:
        return
    try:
        if loaded_count(cur, manifest.backup_id, [c.file for c in table.chunks]) == len(table.chunks):
            work()
    finally:
        with contextlib.suppress(Exception):  # a connection lost in work() took the lock with it: its error stands
            cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
            cur.fetchall()
