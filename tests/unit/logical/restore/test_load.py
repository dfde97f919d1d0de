"""logical.restore.load on the suite's logical target, from the restore tests' small backup (small_backup): a unit loads
every chunk exactly once, a value of 17 MiB included, and creates its tables first; a re-run loads nothing twice, a
chunk the ledger holds is skipped and a MyISAM table not wholly recorded is reloaded from scratch; a chunk that does
not match its manifest (rows, size, sha256) is refused by name with nothing of it kept; at most `parallel` units load
at once on one target (Lane)."""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time

import pytest

from lastline.core.errors import IntegrityError, LastlineError
from lastline.core.progress import Progress
from lastline.logical.format.dialect import qualified
from lastline.logical.restore.create import TableMaker
from lastline.logical.restore.load import Lane, Loader, load_unit
from lastline.logical.restore.work_units import Part, WorkUnit
from lastline.manifest import LogicalManifest

from .small_backup import (
    BIG,
    BIG_VALUE,
    BLOBS,
    EMPTY,
    KEYED,
    KEYED_ROWS,
    MYISAM,
    MYISAM_ROWS,
    SMALL,
    Prepared,
    prepared,
)

EXPECTED = {(SMALL, KEYED): KEYED_ROWS, (SMALL, MYISAM): MYISAM_ROWS, (SMALL, EMPTY): 0, (BIG, BLOBS): 2}


@pytest.fixture
def ready(restore_backup, logical_target):
    with prepared(restore_backup, databases=[SMALL, BIG]) as p:
        yield p


def _whole(p: Prepared, db: str, name: str, index: int = 0) -> WorkUnit:
    """A unit of one whole table."""
    t = p.table(db, name)
    return WorkUnit(index, f"{db}.{name}", t.bytes, [Part(db, name, 0, len(t.chunks) - 1, t.bytes, True)])


def _loader(p: Prepared, manifest: LogicalManifest | None = None) -> Loader:
    return Loader(p.run, p.storage, manifest or p.manifest, Progress("unit load", 1))


def _changed_chunk(manifest: LogicalManifest, db: str, name: str, **change) -> LogicalManifest:
    """The manifest with the first chunk of `db`.`name` changed as `change` says (what a damaged backup would hold)."""
    tables = [dataclasses.replace(t, chunks=[dataclasses.replace(t.chunks[0], **change), *t.chunks[1:]])
              if (t.schema, t.name) == (db, name) else t for t in manifest.tables]
    return dataclasses.replace(manifest, tables=tables)


def test_every_unit_loads_exactly_and_creates_its_tables_first(ready: Prepared):
    results = [load_unit(ready.run, ready.storage, ready.manifest, u, ready.plan.parallel, ready.creates) for u in ready.units]
    assert {(db, name): ready.rows(db, name) for db, name in EXPECTED} == EXPECTED
    assert sum(r.rows for r in results) == sum(EXPECTED.values())
    assert sum(r.created for r in results) == len(EXPECTED)  # each table made by the unit that loads it
    assert sum(r.table_count for r in results) == len(EXPECTED)
    assert sum(r.chunks for r in results) == ready.ledger() == sum(len(t.chunks) for t in ready.manifest.tables)
    assert all(r.skipped == 0 and r.finished_at >= r.started_at for r in results)
    big = ready.admin.query(f"SELECT LENGTH(b), MD5(b) FROM {qualified(BIG, BLOBS)} WHERE id = 1")[0]
    assert (int(big[0]), big[1]) == (len(BIG_VALUE), hashlib.md5(BIG_VALUE).hexdigest())  # 17 MiB, past the packet, exact
    keyed = ready.admin.query(f"SELECT v FROM {qualified(SMALL, KEYED)} WHERE id = 7")[0][0]
    assert keyed == "v\t`7." + "x" * 450

    again = [load_unit(ready.run, ready.storage, ready.manifest, u, ready.plan.parallel, ready.creates) for u in ready.units]
    assert [(r.rows, r.created, r.skipped) for r in again] == [(0, 0, r.chunks) for r in results]  # nothing twice
    assert {(db, name): ready.rows(db, name) for db, name in EXPECTED} == EXPECTED


def test_a_chunk_the_ledger_holds_is_skipped_and_the_rest_load(ready: Prepared):
    t = ready.table(SMALL, KEYED)
    assert len(t.chunks) >= 2
    unit = _whole(ready, SMALL, KEYED)
    load_unit(ready.run, ready.storage, ready.manifest, WorkUnit(0, "first", 0, [Part(SMALL, KEYED, 0, 0, 0, True)]),
              ready.plan.parallel, ready.creates)  # an earlier try got the first chunk in, then stopped
    assert ready.rows(SMALL, KEYED) == t.chunks[0].rows and ready.ledger() == 1
    loader = _loader(ready)
    try:
        assert loader.load_chunk(t, t.chunks[0]) is False  # the ledger has it: not loaded again
    finally:
        loader.close()
    done = load_unit(ready.run, ready.storage, ready.manifest, unit, ready.plan.parallel, ready.creates)
    assert (done.skipped, done.chunks, done.rows) == (1, len(t.chunks), KEYED_ROWS - t.chunks[0].rows)
    assert ready.rows(SMALL, KEYED) == KEYED_ROWS


def test_a_myisam_table_not_wholly_recorded_is_reloaded_from_scratch(ready: Prepared):
    """MyISAM keeps the rows of a failed try: without every chunk in the ledger, the table is emptied first."""
    unit = _whole(ready, SMALL, MYISAM)
    maker = TableMaker(ready.run, ready.creates)  # the table, made as its unit makes it...
    try:
        assert maker.make(SMALL, MYISAM)
    finally:
        maker.close()
    with ready.admin.session(autocommit=True) as cur:  # ...holding a row a killed try left, and no ledger row
        cur.execute(f"INSERT INTO {qualified(SMALL, MYISAM)} VALUES (-1, 'left by a killed try')")
    done = load_unit(ready.run, ready.storage, ready.manifest, unit, ready.plan.parallel, ready.creates)
    assert (done.rows, done.skipped, done.created) == (MYISAM_ROWS, 0, 0)
    assert ready.rows(SMALL, MYISAM) == MYISAM_ROWS
    assert ready.admin.query(f"SELECT COUNT(*) FROM {qualified(SMALL, MYISAM)} WHERE id = -1")[0][0] == 0
    again = load_unit(ready.run, ready.storage, ready.manifest, unit, 1, ready.creates)
    assert (again.rows, again.skipped) == (0, len(ready.table(SMALL, MYISAM).chunks))  # wholly recorded now: skipped


@pytest.mark.parametrize(("change", "refusal"), [
    pytest.param({"rows": KEYED_ROWS * 10}, r"loaded \d+ rows, the manifest says 25000; nothing of it was kept",
                 id="row-count"),
    pytest.param({"sha256": "0" * 64}, r"is corrupt: its sha256 differs from the manifest.s; nothing of it was loaded",
                 id="sha256"),
    pytest.param({"bytes": 7}, r"is \d+ bytes, the manifest says 7; nothing of it was loaded", id="size"),
])
def test_a_chunk_that_does_not_match_its_manifest_is_refused_by_name_and_nothing_of_it_kept(ready: Prepared, change, refusal):
    damaged = _changed_chunk(ready.manifest, SMALL, KEYED, **change)
    with pytest.raises(IntegrityError, match=refusal) as err:
        load_unit(ready.run, ready.storage, damaged, _whole(ready, SMALL, KEYED), ready.plan.parallel, ready.creates)
    assert "unit`lr.a b.t.1 `x`" in str(err.value)  # the table, named as it is
    assert ready.rows(SMALL, KEYED) == 0 and ready.ledger() == 0  # neither the rows nor the ledger row


def test_a_table_missing_without_its_create_is_a_load_failure_naming_the_unit(ready: Prepared):
    with pytest.raises(LastlineError, match=r"loading unit`lr\.a b\.t\.1 `x` failed: .*1146") as err:
        load_unit(ready.run, ready.storage, ready.manifest, _whole(ready, SMALL, KEYED), ready.plan.parallel, None)
    assert not isinstance(err.value, IntegrityError) and ready.ledger() == 0


def test_a_unit_holds_one_of_parallel_lanes_and_waits_while_all_are_busy(logical_target, caplog):
    caplog.set_level(logging.INFO)
    server = logical_target.server()
    got: list[str | None] = []
    with Lane(server, 2, "a") as a, Lane(server, 2, "b") as b:
        assert {a.name, b.name} == {"lastline-load-lane-0", "lastline-load-lane-1"}

        def third() -> None:
            with Lane(server, 2, "c") as c:
                got.append(c.name)

        waiting = threading.Thread(target=third, daemon=True)
        waiting.start()
        time.sleep(0.6)
        assert got == []  # both lanes busy: it waits
        held = a.name
    waiting.join(timeout=10)
    assert got and got[0] in (held, b.name)
    assert "all 2 lanes busy on the target; waiting for one" in caplog.text
