"""logical.format.chunking: how many chunks a table gets and where integer keys are cut, the literals a key value
becomes, which key a table is cut by, which manifest ranges a restore may read alone (and which boundaries it refuses),
and on a real server (the suite's target sandbox) that the ranges found by MIN/MAX or by walking any ordered key put
every row in exactly one chunk."""
from __future__ import annotations

import pytest

from lastline.core.errors import IntegrityError, PipelineError
from lastline.core.sql import qualified
from lastline.logical.format import chunking
from lastline.logical.format.chunking import KeyColumn, TablePlan
from lastline.manifest import ChunkInfo, LogicalTable


@pytest.mark.parametrize(("est_rows", "chunk_rows", "count"), [
    (0, 100, 1), (1, 100, 1), (150, 100, 1), (151, 100, 2), (1000, 100, 10), (1001, 100, 11), (10**12, 10**6, 10**6)],
    ids=["empty", "one-row", "within-the-slack", "just-past-the-slack", "exact-multiple", "one-more", "huge"])
def test_chunk_count(est_rows, chunk_rows, count):
    assert chunking.chunk_count(est_rows, chunk_rows) == count


@pytest.mark.parametrize(("lo", "hi", "est_rows", "chunk_rows", "bounds"), [
    (1, 100, 100, 100, []),
    (1, 1000, 1000, 100, [101, 201, 301, 401, 501, 601, 701, 801, 901]),
    (1, 1000, 0, 250, [251, 501, 751]),
    (1, 10**9, 300, 100, [333333335, 666666669]),
    (-500, 499, 1000, 500, [0]),
    (5, 5, 10**6, 1, []),
], ids=["one-chunk", "ten-chunks", "no-estimate-uses-the-key-span", "sparse-keys-follow-the-rows", "negative-keys",
        "one-key"])
def test_integer_bounds(lo, hi, est_rows, chunk_rows, bounds):
    got = chunking.integer_bounds(lo, hi, est_rows, chunk_rows)
    assert got == bounds
    assert all(lo < b <= hi for b in got) and got == sorted(set(got))


@pytest.mark.parametrize(("bounds", "pairs"), [
    ([], [(None, None)]),
    ([["5"]], [(None, ["5"]), (["5"], None)]),
    ([["1"], ["2"]], [(None, ["1"]), (["1"], ["2"]), (["2"], None)]),
], ids=["none", "one", "many"])
def test_ranges_are_open_at_both_ends(bounds, pairs):
    assert chunking.ranges(bounds) == pairs


@pytest.mark.parametrize(("column", "raw", "literal"), [
    (KeyColumn("k", "int", None, None), b"-42", "'-42'"),
    (KeyColumn("k", "datetime", None, None), b"2026-11-28 16:14:32.5", "'2026-11-28 16:14:32.5'"),
    (KeyColumn("k", "varbinary", None, None), b"\x00'\\", "X'00275c'"),
    (KeyColumn("k", "varchar", "utf8mb4", "utf8mb4_bin"), "é'".encode(), "_utf8mb4 X'c3a927' COLLATE utf8mb4_bin"),
    (KeyColumn("k", "char", "latin1", "latin1_swedish_ci"), b"", "_latin1 X'' COLLATE latin1_swedish_ci"),
], ids=["integer", "datetime", "binary-as-hex", "string-in-its-collation", "empty-string"])
def test_a_key_value_becomes_a_literal_the_manifest_accepts(column, raw, literal):
    assert column.literal(raw) == literal
    assert chunking.MANIFEST_LITERAL.fullmatch(literal)


@pytest.mark.parametrize("raw", [b"1'; DROP TABLE t; --", b"abc", b"1\x00"], ids=["injection", "letters", "nul"])
def test_a_plain_key_value_that_is_no_number_or_date_is_refused(raw):
    with pytest.raises(PipelineError, match="unexpected value"):
        KeyColumn("k", "decimal", None, None).literal(raw)


def _plan(**kw) -> TablePlan:
    return TablePlan("db", "t", "InnoDB", True, None, None, [], **kw)


def _key(*cols: tuple[str, str]) -> dict[tuple[str, str, str], KeyColumn]:
    return {("db", "t", name): KeyColumn(name, dtype, None, None) for name, dtype in cols}


TYPES = _key(("id", "int"), ("code", "varchar"), ("a", "int"), ("b", "int"), ("e", "enum"), ("f", "float"))


@pytest.mark.parametrize(("indexes", "kind", "name", "key"), [
    ({}, "none", None, []),
    ({"PRIMARY": [("id", True)], "u": [("code", True)]}, "primary", "PRIMARY", ["id"]),
    ({"u2": [("a", True), ("b", True)], "u1": [("code", True)]}, "unique", "u1", ["code"]),
    ({"u": [("a", True), ("b", False)]}, "none", None, []),
    ({"ue": [("e", True)], "uf": [("f", True)]}, "none", None, []),
    ({"ua": [("a", True)], "PRIMARY": [("a", True), ("b", True)]}, "primary", "PRIMARY", ["a", "b"]),
], ids=["no-index", "primary-first", "narrowest-unique", "nullable-or-prefix-unusable", "unordered-types-unusable",
        "primary-even-when-wider"])
def test_choose_key(indexes, kind, name, key):
    plan = _plan()
    chunking.choose_key(plan, indexes, TYPES)
    assert (plan.key_kind, plan.key_name, [k.name for k in plan.key]) == (kind, name, key)
    assert plan.chunking == {"primary": "primary key ranges", "unique": f"unique key {name} ranges",
                             "none": "no usable key: one stream split by row count"}[kind]
    assert plan.full_name == "db.t"


def _table(chunks: list[tuple], chunking_: str = "primary key ranges", key: tuple = ("id",)) -> LogicalTable:
    return LogicalTable("db", "t", "InnoDB", None, None, True, chunking_, list(key), [], 0, "", 0, 0, 0.0,
                        chunks=[ChunkInfo(f"c{i}", 0, 0, 0, "", lower, upper) for i, (lower, upper) in enumerate(chunks)])


A = "_utf8mb4 X'61' COLLATE utf8mb4_bin"


@pytest.mark.parametrize(("table", "wheres"), [
    (_table([]), 0),
    (_table([(None, None)]), 1),
    (_table([(None, ["10"]), (["10"], ["20"]), (["20"], None)]), 3),
    (_table([(None, [A, "5"]), ([A, "5"], None)], key=("s", "n")), 2),
    (_table([(None, ["10"]), (["10"], None)], chunking_="unique key u ranges"), None),
    (_table([(None, ["10"]), (["10"], None)], key=()), None),
    (_table([(None, ["10"]), (["11"], None)]), None),
    (_table([(["0"], ["10"]), (["10"], None)]), None),
    (_table([(None, ["10"]), (None, ["10"])]), None),
], ids=["no-chunk", "one-chunk-whole-table", "contiguous-primary-ranges", "composite-key", "unique-key", "keyless",
        "gap", "closed-first-end", "dumped-in-parts"])
def test_chunk_ranges_only_for_disjoint_covering_primary_ranges(table, wheres):
    got = chunking.chunk_ranges(table)
    if wheres is None:
        assert got is None
    else:
        assert got is not None and len(got) == wheres and (wheres != 1 or got == [None])


@pytest.mark.parametrize("bound", [
    ["1 OR 1=1"], ["'a' OR 'b'"], ["10", "20"], [10], ["X'0g'"], ["_utf8 X'00' COLLATE x; DROP"]],
    ids=["injected-or", "string-with-code", "more-values-than-the-key", "not-a-string", "bad-hex", "injected-collation"])
def test_chunk_ranges_refuse_a_boundary_lastline_never_writes(bound):
    with pytest.raises(IntegrityError, match="the manifest was altered"):
        chunking.chunk_ranges(_table([(None, bound), (bound, None)]))


# --- on a real server ------------------------------------------------------------------------------------------------
DB = "unit_chunking"


@pytest.fixture
def server(target):
    """`unit_chunking`: `ints` (an integer key with gaps), `names` (a composite key of a case-insensitive string and
    an int, whose order is the collation's, not the bytes'), `keyless`, and an empty `void`."""
    server = target.server()
    with server.session() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"USE {DB}")  # the sequence engine's seq_1_to_N tables answer in any database
        cur.execute(f"CREATE TABLE {DB}.ints (id bigint PRIMARY KEY, v int)")
        cur.execute(f"INSERT INTO {DB}.ints SELECT seq * 3, seq FROM seq_1_to_1000")
        cur.execute(f"CREATE TABLE {qualified(DB, 'na`mes')} (s varchar(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci "
                    "NOT NULL, n int NOT NULL, g int AS (n + 1) VIRTUAL, x int, UNIQUE KEY u (s, n), KEY k (x))")
        cur.execute(f"INSERT INTO {qualified(DB, 'na`mes')} (s, n, x) SELECT ELT(1 + seq % 5, 'a', 'B', 'é', 'Z', ''), seq, seq "
                    "FROM seq_1_to_500")
        cur.execute(f"CREATE TABLE {DB}.keyless (v text)")
        cur.execute(f"CREATE TABLE {DB}.void (id int PRIMARY KEY)")
        cur.connection.commit()
    yield server
    server.query(f"DROP DATABASE IF EXISTS {DB}")


def _counts(cur, plan: TablePlan, pairs) -> list[int]:
    counts = []
    for lower, upper in pairs:
        where = chunking.range_where(plan.key, lower, upper)
        cur.execute(f"SELECT COUNT(*) FROM {qualified(plan.schema, plan.name)}{' WHERE ' + where if where else ''}")
        counts.append(int(cur.fetchone()[0]))
    return counts


def test_table_plans_and_ranges_put_every_row_in_exactly_one_chunk(server):
    with server.session() as cur:
        cur.execute(f"ANALYZE TABLE {DB}.ints")
        cur.fetchall()
        assert chunking.base_tables(cur, []) == [] and chunking.table_plans(cur, []) == []
        assert chunking.base_tables(cur, [DB]) == [(DB, "ints"), (DB, "keyless"), (DB, "na`mes"), (DB, "void")]
        plans = {p.name: p for p in chunking.table_plans(cur, [DB])}
        assert [(p.name, p.key_kind, [k.name for k in p.key]) for p in plans.values()] == [
            ("ints", "primary", ["id"]), ("keyless", "none", []), ("na`mes", "unique", ["s", "n"]), ("void", "primary", ["id"])]
        assert [c.name for c in plans["na`mes"].columns] == ["s", "n", "x"]  # the generated column is not dumped
        assert all(p.transactional for p in plans.values())

        ints = chunking.integer_ranges(cur, plans["ints"], 100)
        assert len(ints) >= 9 and sum(_counts(cur, plans["ints"], ints)) == 1000
        assert chunking.integer_ranges(cur, plans["void"], 100) == [(None, None)]

        names = plans["na`mes"]
        bounds = list(chunking.walk_bounds(cur, names, 64))
        assert len(bounds) == 7 and all(len(b) == 2 for b in bounds)
        counts = _counts(cur, names, chunking.ranges(bounds))
        assert sum(counts) == 500 and counts[:-1] == [64] * 7  # the walk cut exactly chunk_rows rows each
        assert list(chunking.walk_bounds(cur, names, 500)) == []
