"""logical.restore.work_units: a backup's chunks bin-packed into work units. Whatever the tables, every chunk is in
exactly one unit, a MyISAM or Aria table is never split, a split table's ranges come in key order, small tables are
batched, the units stay within max_units, and a unit's name says what it loads."""
from __future__ import annotations

import pytest

from lastline.logical.restore import work_units
from lastline.logical.restore.work_units import TABLE_COST, Part, WorkUnit, cost, plan_units
from lastline.manifest import ChunkInfo, LogicalManifest, LogicalTable

MB = 1 << 20
MANIFEST = LogicalManifest("b", "src", "11.4", "", "+00:00", "tsv", "zstd", 1000, 2, [], "schema.json", "", "", "", 0.0,
                           0.0, 0, 0, 0, 0.0)


def table(name: str, chunk_mb: list[float], engine: str = "InnoDB", schema: str = "db") -> LogicalTable:
    chunks = [ChunkInfo(f"{schema}/{name}/{i}", 10, int(mb * MB) // 3, int(mb * MB), "") for i, mb in enumerate(chunk_mb)]
    return LogicalTable(schema, name, engine, None, None, True, "primary key ranges", ["id"], [], 0, "",
                        sum(c.bytes for c in chunks), sum(c.raw_bytes for c in chunks), 0.0, chunks=chunks)


CASES = {
    "no-table": ([], 4),
    "one-empty-table": ([table("empty", [])], 4),
    "one-small-table": ([table("t", [1])], 4),
    "one-big-table": ([table("big", [8] * 40)], 4),
    "big-myisam-never-split": ([table("big", [8] * 40, engine="MyISAM"), table("t", [8] * 40)], 4),
    "big-aria-never-split": ([table("big", [8] * 40, engine="Aria")], 2),
    "one-lane": ([table("big", [8] * 40), table("t", [1])], 1),
    "many-small-tables": ([table(f"t{i}", [0.01]) for i in range(2000)], 4),
    "names-with-dots-spaces-backticks": ([table("a.b", [8] * 10), table("c d", [8] * 10), table("e`f", [0.5])], 3),
    "mixed": ([table("big", [8] * 30), table("mid", [20, 20]), *[table(f"s{i}", [0.2]) for i in range(50)],
               table("void", [])], 4),
}


@pytest.mark.parametrize(("tables", "lanes"), CASES.values(), ids=CASES.keys())
def test_every_chunk_is_in_exactly_one_unit(tables, lanes):
    units = plan_units(MANIFEST, tables, lanes)
    by_key = {(t.schema, t.name): t for t in tables}
    files = [f for u in units for f in u.files(by_key)]
    assert sorted(files) == sorted(c.file for t in tables for c in t.chunks)
    assert sorted((p.schema, p.table) for u in units for p in u.parts if p.first == 0) == sorted(by_key)
    assert [u.index for u in units] == list(range(len(units)))
    assert len(units) <= work_units.MAX_UNITS
    for u in units:
        assert u.bytes == sum(p.bytes for p in u.parts)
        assert WorkUnit.from_dict(u.to_dict()) == u


@pytest.mark.parametrize(("tables", "lanes"), CASES.values(), ids=CASES.keys())
def test_a_split_table_is_cut_in_contiguous_ranges_planned_in_key_order(tables, lanes):
    units = plan_units(MANIFEST, tables, lanes)
    by_table: dict[tuple[str, str], list[Part]] = {}
    for p in (p for u in units for p in u.parts):
        by_table.setdefault((p.schema, p.table), []).append(p)
    for t in tables:
        parts = by_table[(t.schema, t.name)]
        assert [p.first for p in parts] == sorted(p.first for p in parts)  # the lanes take units in plan order
        assert parts[0].first == 0 and parts[-1].last == len(t.chunks) - 1
        assert all(a.last + 1 == b.first for a, b in zip(parts, parts[1:]))
        if t.engine in ("MyISAM", "Aria"):
            assert len(parts) == 1 and parts[0].whole


def test_a_big_table_is_split_and_small_ones_batched():
    tables = [table("big", [8] * 40), *[table(f"s{i}", [0.1]) for i in range(100)]]
    units = plan_units(MANIFEST, tables, 4)
    big = [u for u in units if u.parts[0].table == "big"]
    assert len(big) > 1 and all(len(u.parts) == 1 and not u.parts[0].whole for u in big)
    batches = [u for u in units if len(u.parts) > 1]
    assert batches and sum(len(u.parts) for u in batches) == 100
    assert units[0].bytes == max(u.bytes for u in units)  # biggest first: the long ones start early


def test_two_units_of_a_table_are_kept_lanes_apart_where_others_allow():
    tables = [table("a", [8] * 24), table("b", [8] * 24), table("c", [8] * 24)]
    lanes = 3
    units = plan_units(MANIFEST, tables, lanes, min_unit_bytes=MB)
    names = [u.parts[0].table for u in units]
    assert len(names) > lanes
    assert all(len(set(names[i:i + lanes])) == len(names[i:i + lanes]) for i in range(len(names) - lanes + 1))


@pytest.mark.parametrize("max_units", [1, 2, 5], ids=["one", "two", "five"])
def test_never_more_than_max_units(max_units):
    tables = [table("big", [8] * 40), *[table(f"s{i}", [0.5]) for i in range(200)]]
    units = plan_units(MANIFEST, tables, 8, min_unit_bytes=1, max_units=max_units)
    assert len(units) <= max_units + 1  # a split table's last range may round over; never many more


@pytest.mark.parametrize(("parts", "expected"), [
    ([], 0),
    ([Part("db", "t", 0, 3, 100, True)], 100 + TABLE_COST),
    ([Part("db", "t", 4, 7, 100, False)], 100),
    ([Part("db", "a", 0, 0, 10, True), Part("db", "b", 0, -1, 0, True)], 10 + 2 * TABLE_COST),
], ids=["nothing", "a-whole-table", "a-later-range-of-a-split-table", "two-tables-one-empty"])
def test_cost(parts, expected):
    assert cost(parts) == expected


@pytest.mark.parametrize(("parts", "name"), [
    ([Part("db", "t", 0, 9, 1, True)], "db.t"),
    ([Part("db", "t", 10, 19, 1, False)], "db.t [chunks 10-19 of 30]"),
    ([Part("a.b", "c d", 0, 0, 1, True), Part("db", "u", 0, 0, 1, True), Part("db", "v", 0, 0, 1, True)],
     "a.b.c d +2 tables"),
], ids=["whole-table", "range-of-a-split-table", "a-batch"])
def test_unit_name(parts, name):
    assert work_units.unit_name(parts, {("db", "t"): 30}) == name
