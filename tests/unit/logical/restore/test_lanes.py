"""logical.restore.lanes on the suite's logical target, from the restore tests' small backup (small_backup): a unit is
claimed by one lane at a time within one restore's scope (never across restores); a lane loads every unit no other
lane holds, in plan order, and runs a table's completion work once, when its last chunk is in; a re-run after the
ledger says the chunks are in loads nothing twice; a lane that finds a unit of empty tables "loaded" still creates
them."""
from __future__ import annotations

import pytest

from lastline.logical.format.dialect import qualified
from lastline.logical.restore.backup_files import RUN_SESSION
from lastline.logical.restore.lanes import claimed, load_lane
from lastline.logical.restore.work_units import Part, WorkUnit

from .small_backup import BIG, BLOBS, EMPTY, KEYED, KEYED_ROWS, MYISAM, MYISAM_ROWS, SMALL, Prepared, prepared

EXPECTED = {(SMALL, KEYED): KEYED_ROWS, (SMALL, MYISAM): MYISAM_ROWS, (SMALL, EMPTY): 0, (BIG, BLOBS): 2}
UNIT = WorkUnit(3, "db.t", 0, [Part("db", "t", 0, 0, 0, True)])


@pytest.fixture
def ready(restore_backup, logical_target):
    with prepared(restore_backup, databases=[SMALL, BIG]) as p:
        yield p


@pytest.mark.parametrize("scope", [
    pytest.param("b1/plain", id="plain"),
    pytest.param("b1/" + "unit`lr.a b" * 20, id="backticks-dots-spaces-and-longer-than-a-lock-name"),
])
def test_a_unit_is_claimed_by_one_lane_at_a_time_within_its_restore(logical_target, scope):
    server = logical_target.server()
    with claimed(server, scope, UNIT) as mine:
        assert mine is not None
        mine.execute("SELECT 1")  # the claiming connection, usable
        assert mine.fetchone() == (1,)
        with claimed(server, scope, UNIT) as other:
            assert other is None  # another lane holds it
        with claimed(server, scope + "/other databases", UNIT) as elsewhere:
            assert elsewhere is not None  # another restore of the backup never waits on this one's units
        with claimed(server, scope, WorkUnit(4, "db.u", 0, [])) as next_unit:
            assert next_unit is not None
    with claimed(server, scope, UNIT) as again:
        assert again is not None  # released with its block


def _lane(p: Prepared, units: list[WorkUnit], label: str = "lane 1", done: list | None = None) -> list:
    def on_table_done(cur, schema: str, name: str) -> None:  # what per_table index builds hang on
        cur.execute(f"SELECT COUNT(*) FROM {qualified(schema, name)}")
        done.append((schema, name, int(cur.fetchone()[0])))

    return load_lane(p.run, p.storage, p.manifest, units, label, p.plan.parallel,
                     on_table_done=None if done is None else on_table_done, setup=RUN_SESSION, create=p.creates,
                     scope=f"{p.manifest.backup_id}/unit")


def test_a_lane_loads_every_unit_and_completes_each_table_once(ready: Prepared):
    done: list = []
    results = _lane(ready, ready.units, done=done)
    assert [r.unit for r in results] == [u.name for u in ready.units]  # in plan order
    assert {(db, name): ready.rows(db, name) for db, name in EXPECTED} == EXPECTED
    assert sorted(done) == sorted((db, name, rows) for (db, name), rows in EXPECTED.items())  # once each, all rows in
    assert all(r.finished_at >= r.started_at for r in results)

    ledger = ready.ledger()
    again: list = []
    assert _lane(ready, ready.units, "lane 2", again) == []  # the ledger holds every chunk: nothing loaded twice
    assert again == [] and ready.ledger() == ledger
    assert {(db, name): ready.rows(db, name) for db, name in EXPECTED} == EXPECTED


def test_a_lane_re_run_after_part_of_a_unit_is_in_loads_only_the_rest(ready: Prepared):
    t = ready.table(SMALL, KEYED)
    assert len(t.chunks) >= 2
    first = WorkUnit(0, "first chunk", 0, [Part(SMALL, KEYED, 0, 0, 0, True)])
    (loaded,) = _lane(ready, [first])  # a lane that stopped after one chunk
    assert loaded.rows == t.chunks[0].rows
    whole = WorkUnit(0, f"{SMALL}.{KEYED}", t.bytes, [Part(SMALL, KEYED, 0, len(t.chunks) - 1, t.bytes, True)])
    done: list = []
    (rest,) = _lane(ready, [whole], done=done)  # its retry
    assert (rest.skipped, rest.rows) == (1, KEYED_ROWS - t.chunks[0].rows)
    assert ready.rows(SMALL, KEYED) == KEYED_ROWS and done == [(SMALL, KEYED, KEYED_ROWS)]


def test_a_unit_another_lane_holds_is_left_to_it(ready: Prepared):
    held, *others = ready.units
    with claimed(ready.admin, f"{ready.manifest.backup_id}/unit", held) as cur:
        assert cur is not None
        results = _lane(ready, ready.units)
    assert [r.unit for r in results] == [u.name for u in others]
    results = _lane(ready, ready.units, "lane 2")  # a lane that ends early takes the rest
    assert [r.unit for r in results] == [held.name]
    assert {(db, name): ready.rows(db, name) for db, name in EXPECTED} == EXPECTED


def test_a_unit_of_empty_tables_found_loaded_still_creates_them(ready: Prepared):
    only_empty = WorkUnit(0, "empty tables", 0, [Part(SMALL, EMPTY, 0, -1, 0, True)])
    assert _lane(ready, [only_empty]) == []  # no chunk: "loaded" with nothing to say so...
    assert ready.rows(SMALL, EMPTY) == 0  # ...and made all the same
    ready.admin.query(f"DROP TABLE {qualified(SMALL, EMPTY)}")
    assert _lane(ready, [only_empty], "lane 2") == []
    assert ready.rows(SMALL, EMPTY) == 0
