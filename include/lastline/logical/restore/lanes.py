"""Lanes: `parallel` is the one knob of load concurrency. The DAG runs `parallel` lane tasks, each taking
the plan's units in order, every unit that no other lane holds (a named lock per unit) and that the
ledger does not already hold whole, until none is left: a lane that ends early takes the rest, a retried
lane resumes. With index_build=per_table, the lane that commits a table's last chunk builds the table's
held-back indexes at once, in its own slot, while the other lanes load. With defer_indexes, each table is created
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
from lastline.logical.restore.load import Creates, TableMaker, load_unit
from lastline.logical.restore.plans import UnitLoaded
from lastline.logical.restore.target_state import loaded_count, loaded_files
from lastline.logical.restore.work_units import WorkUnit
from lastline.manifest import LogicalManifest, LogicalTable
from lastline.storage import Storage

log = logging.getLogger(__name__)


@contextlib.contextmanager
def claimed(server: Server, scope: str, unit: WorkUnit) -> Iterator[Any]:
    """Hold the unit's named lock for the block: yields the cursor of the connection holding it, or None if
    another lane holds it. `scope` names the restore (its backup and databases): two restores of one backup into
    other databases never hold each other's units."""
    with server.session() as cur:
        name = hashlib.sha256(scope.encode()).hexdigest()[:24]  # a lock name is at most 64 characters
        cur.execute("SELECT GET_LOCK(%s, 0)", (f"lastline-unit-{name}-{unit.index}",))
        yield cur if cur.fetchone()[0] == 1 else None


def load_lane(server: Server, storage: Storage, manifest: LogicalManifest, units: list[WorkUnit], label: str,
              parallel: int, on_table_done: Callable[[Any, str, str], None] | None = None,
              setup: tuple[str, ...] = (), create: Creates | None = None, scope: str | None = None) -> list[UnitLoaded]:
    """One lane: every unit, in plan order, that no other lane holds and that is not yet in whole; returns
    the results of the units this lane loaded. `on_table_done(cursor, schema, table)` runs in this lane once a
    table it loaded has every chunk in the ledger (once: the lane that finished the table's last unit), on one
    connection per unit (`setup` run on it first): a table costs no connection of its own. `create`: each table's
    CREATE, run before its first chunk (None: the tables exist). `scope`: see claimed (default: the backup's id)."""
    results = []
    tables = {(t.schema, t.name): t for t in manifest.tables}
    for unit in units:
        with claimed(server, scope or manifest.backup_id, unit) as cur:
            if cur is None:
                continue
            files = unit.files(tables)
            if len(loaded_files(cur, manifest.backup_id, files)) == len(files):
                for p in unit.parts:  # an earlier try loaded it whole: said as a unit loaded in part says it
                    if p.last >= p.first:
                        log.info("%s.%s: %d chunk(s) already in the ledger, skipped (%s)", p.schema, p.table,
                                 p.last - p.first + 1, unit.name)
                if create is not None and all(p.last < p.first for p in unit.parts):
                    _create_empty(server, unit, create)  # no chunk at all: no ledger row says its tables were made
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
    log.info("%s: done, %d unit(s) loaded here", label, len(results))
    return results


def _create_empty(server: Server, unit: WorkUnit, create: Creates) -> None:
    """The tables of a unit that holds no chunk (only empty tables), which a lane finds "loaded" with nothing in
    the ledger to say so: created unless they exist."""
    maker = TableMaker(server, create)
    try:
        for p in unit.parts:
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
