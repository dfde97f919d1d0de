"""logical.restore.lanes on the suite's logical target, from the restore tests' small backup (small_backup): a unit is
claimed by one lane at a time within one restore's scope (never across restores); a lane loads every unit no other
lane holds, in plan order, and runs a table's completion work once, when its last chunk is in; a re-run after the
ledger says the chunks are in loads nothing twice; a lane that finds a unit of empty tables "loaded" still creates
them. Helping: a lane with no unit left loads a held unit from its end, stops at its holder's chunk in flight, and
with its holder loads every chunk once, even when both wait on a third party's chunk that rolls back."""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lastline.logical.format.dialect import qualified
from lastline.logical.restore.backup_files import RUN_SESSION
from lastline.logical.restore.lanes import claimed, load_lane
from lastline.logical.restore.load import load_unit
from lastline.logical.restore.work_units import Part, WorkUnit

from .small_backup import BIG, BLOBS, EMPTY, KEYED, KEYED_ROWS, MYISAM, MYISAM_ROWS, SMALL, Prepared, prepared

EXPECTED = {(SMALL, KEYED): KEYED_ROWS, (SMALL, MYISAM): MYISAM_ROWS, (SMALL, EMPTY): 0, (BIG, BLOBS): 2}
UNIT = WorkUnit(3, "db.t", 0, [Part("db", "t", 0, 0, 0, True)])
SCOPE = "{}/unit"


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


def _lane(p: Prepared, units: list[WorkUnit], label: str = "lane 1", done: list | None = None,
          help_others: bool = False) -> list:
    def on_table_done(cur, schema: str, name: str) -> None:  # what per_table index builds hang on
        cur.execute(f"SELECT COUNT(*) FROM {qualified(schema, name)}")
        done.append((schema, name, int(cur.fetchone()[0])))

    return load_lane(p.run, p.storage, p.manifest, units, label, p.plan.parallel,
                     on_table_done=None if done is None else on_table_done, setup=RUN_SESSION, create=p.creates,
                     scope=SCOPE.format(p.manifest.backup_id), help_others=help_others)


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


def _keyed(p: Prepared, first: int = 0, last: int | None = None) -> WorkUnit:
    """The keyed table's chunks [first, last] as unit 7 (its whole by default)."""
    t = p.table(SMALL, KEYED)
    last = len(t.chunks) - 1 if last is None else last
    raw = sum(c.raw_bytes for c in t.chunks[first:last + 1])
    return WorkUnit(7, f"{SMALL}.{KEYED}", raw, [Part(SMALL, KEYED, first, last, raw, (first, last) == (0, len(t.chunks) - 1))])


def _lock_waits(p: Prepared, n: int, timeout: float = 60) -> None:
    """Wait until `n` lanes' ledger INSERTs wait on the target (one that does not wait takes under a millisecond;
    INNODB_TRX does not list every waiting transaction here)."""
    deadline = time.monotonic() + timeout
    waiting = ("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE info LIKE 'INSERT INTO \\_lastline.ledger %%' "
               "AND time_ms > 300")
    while int(p.admin.query(waiting)[0][0]) < n:
        assert time.monotonic() < deadline, f"{n} lock wait(s) never showed"
        time.sleep(0.05)


@contextlib.contextmanager
def _in_flight(p: Prepared, chunk) -> Iterator[Any]:
    """`chunk`'s ledger row taken by a transaction not yet committed, as a lane loading it holds it: yields that
    connection (commit: the chunk is in; rollback: it is free again)."""
    conn = p.admin.connect()
    try:
        conn.cursor().execute("INSERT INTO `_lastline`.`ledger` (backup_id, file, rows_loaded) VALUES (%s, %s, %s)",
                              (p.manifest.backup_id, chunk.file, chunk.rows))
        yield conn
    finally:
        conn.close()


def test_a_lane_with_no_unit_left_loads_a_held_unit_from_its_end_and_its_holder_skips_what_it_loaded(ready: Prepared):
    t = ready.table(SMALL, KEYED)
    assert len(t.chunks) >= 3
    unit = _keyed(ready)
    with claimed(ready.admin, SCOPE.format(ready.manifest.backup_id), unit) as holding:
        assert holding is not None
        # the holding lane has loaded its first chunk, in key order
        first = load_unit(ready.run, ready.storage, ready.manifest, _keyed(ready, 0, 0), ready.plan.parallel, ready.creates)
        assert first.rows == t.chunks[0].rows
        done: list = []
        assert _lane(ready, [unit], "lane 2", done) == []  # without helping, a held unit is left to its holder
        (helped,) = _lane(ready, [unit], "lane 2", done, help_others=True)
        # from the last chunk down to the holder's: every other chunk, once
        assert helped.unit == f"{unit.name}, from its end"
        assert (helped.rows, helped.chunks, helped.skipped, helped.table_count) == (KEYED_ROWS - t.chunks[0].rows, len(t.chunks) - 1, 0, 0)
        assert done == []  # the table's completion is its holder's, which passes every chunk
        assert _lane(ready, [unit], "lane 2", done, help_others=True) == []  # nothing left to help
        # the holder goes on: each chunk is in the ledger, nothing is loaded twice
        rest = load_unit(ready.run, ready.storage, ready.manifest, unit, ready.plan.parallel, ready.creates)
        assert (rest.rows, rest.skipped) == (0, len(t.chunks))
    assert ready.rows(SMALL, KEYED) == KEYED_ROWS
    assert ready.ledger() == len(t.chunks)


def test_a_helping_lane_stops_at_the_chunk_its_holder_is_loading_once_that_commits(ready: Prepared):
    t = ready.table(SMALL, KEYED)
    unit = _keyed(ready)
    with claimed(ready.admin, SCOPE.format(ready.manifest.backup_id), unit) as holding:
        assert holding is not None
        with _in_flight(ready, t.chunks[-2]) as holder:  # the holder's chunk, below the last one
            committed = threading.Thread(target=lambda: (_lock_waits(ready, 1), holder.commit()))
            committed.start()
            (helped,) = _lane(ready, [unit], "lane 2", help_others=True)
            committed.join(60)
            assert not committed.is_alive()
    # the last chunk; then it waited on the holder's ledger row and, that chunk committed, stopped there
    assert (helped.rows, helped.chunks) == (t.chunks[-1].rows, 1)
    assert ready.rows(SMALL, KEYED) == t.chunks[-1].rows


def test_a_lane_and_its_helper_waiting_on_one_chunk_load_every_chunk_once_and_the_holder_completes_the_table(ready: Prepared):
    t = ready.table(SMALL, KEYED)
    assert len(t.chunks) == 3
    unit = _keyed(ready)
    done: list = []
    results: dict[str, list] = {}
    errors: list[BaseException] = []

    def lane(label: str, helps: bool) -> None:
        try:
            results[label] = _lane(ready, [unit], label, done, help_others=helps)
        except BaseException as exc:  # noqa: BLE001 - raised below, in the test's thread
            errors.append(exc)

    with _in_flight(ready, t.chunks[1]) as other:  # a third party's chunk (another run's lane) both come to wait on
        holder = threading.Thread(target=lane, args=("lane 1", False))
        holder.start()
        _lock_waits(ready, 1)  # the holder: chunk 0 in, waiting on chunk 1
        helper = threading.Thread(target=lane, args=("lane 2", True))
        helper.start()
        _lock_waits(ready, 2)  # the helper: chunk 2 in, waiting on chunk 1 too
        other.rollback()  # it gave up: both are granted the row, and one of them loads it (a deadlock's victim asks again)
        for th in (holder, helper):
            th.join(120)
            assert not th.is_alive()
    assert not errors, errors
    assert ready.rows(SMALL, KEYED) == KEYED_ROWS and ready.ledger() == len(t.chunks)
    assert done == [(SMALL, KEYED, KEYED_ROWS)]  # completed once, by the holder
    (helped,) = results["lane 2"]
    assert helped.unit == f"{unit.name}, from its end" and helped.chunks in (1, 2)
    assert sum(u.rows for r in results.values() for u in r) == KEYED_ROWS  # no row loaded twice, none missed
    # the report's sums: each chunk counted once, by the lane that loaded it (the holder's skip none: it began afresh)
    assert sum(u.chunks for r in results.values() for u in r) == len(t.chunks)
    assert sum(u.skipped for r in results.values() for u in r) == 0


def test_two_lanes_that_help_each_other_load_every_chunk_once(ready: Prepared):
    results: dict[str, list] = {}
    done: list = []
    errors: list[BaseException] = []

    def lane(label: str) -> None:
        try:
            results[label] = _lane(ready, ready.units, label, done, help_others=True)
        except BaseException as exc:  # noqa: BLE001 - raised below, in the test's thread
            errors.append(exc)

    lanes = [threading.Thread(target=lane, args=(f"lane {n}",)) for n in (1, 2)]
    for th in lanes:
        th.start()
    for th in lanes:
        th.join(120)
        assert not th.is_alive()
    assert not errors, errors
    assert {(db, name): ready.rows(db, name) for db, name in EXPECTED} == EXPECTED
    assert ready.ledger() == sum(len(ready.table(db, name).chunks) for db, name in EXPECTED)
    assert sorted(done) == sorted((db, name, rows) for (db, name), rows in EXPECTED.items())  # once each
    loaded = [u for r in results.values() for u in r]
    assert sum(u.rows for u in loaded) == sum(EXPECTED.values())  # no row loaded twice, none missed
