"""Which tables to dump and how to cut them into chunks: key ranges of the primary key (or a unique
not-null key), whatever its type; tables without such a key are one stream split by row count.

Ranges are open at both ends (`k < b1`, `b1 <= k < b2`, ..., `k >= bn`), so every row falls in
exactly one chunk whatever was inserted after the boundaries were read. Boundaries are written as
literals in the key column's own character set and collation, so the server compares them in index
order. Integer keys are cut arithmetically from MIN/MAX; other keys by walking the index
(`ORDER BY key LIMIT 1 OFFSET chunk_rows`), one boundary at a time, while other workers already dump
the chunks found so far.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lastline.core.errors import IntegrityError, PipelineError
from lastline.core.sql import placeholders, qualified, quote_ident
from lastline.logical.format.dialect import Column
from lastline.manifest import LogicalTable

INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "bigint"}
STRING_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
BINARY_TYPES = {"binary", "varbinary"}
# key column types whose comparison with a literal follows index order (not ENUM, SET, FLOAT, BIT...)
ORDERED_TYPES = INTEGER_TYPES | STRING_TYPES | BINARY_TYPES | {"decimal", "date", "time", "datetime", "timestamp", "year"}
PLAIN_LITERAL = re.compile(rb"^[0-9 :.+\-eE]*$")
# the shapes KeyColumn.literal and integer_ranges write; a manifest's boundary is used in a WHERE only if it is one of them
MANIFEST_LITERAL = re.compile(r"-?[0-9]+|'[0-9 :.+\-eE]*'|X'[0-9a-f]*'|_[a-z0-9]+ X'[0-9a-f]*' COLLATE [a-z0-9_]+")
# a table this much over chunk_rows is still dumped as one chunk (no split scan for small tables)
SPLIT_SLACK = 1.5


@dataclass
class KeyColumn:
    """A column of the chunking key."""

    name: str
    data_type: str
    charset: str | None
    collation: str | None

    def literal(self, raw: bytes) -> str:
        """A SQL literal for a value read as `CAST(col AS BINARY)`, compared in the column's collation."""
        if self.data_type in BINARY_TYPES:
            return f"X'{raw.hex()}'"
        if self.data_type in STRING_TYPES:
            return f"_{self.charset} X'{raw.hex()}' COLLATE {self.collation}"
        if not PLAIN_LITERAL.match(raw):
            raise PipelineError(f"unexpected value {raw!r} of key column {self.name} ({self.data_type})")
        return "'" + raw.decode() + "'"


@dataclass
class TablePlan:
    """A table to dump: its columns, engine, key and size estimates."""

    schema: str
    name: str
    engine: str
    transactional: bool
    collation: str | None
    charset: str | None
    columns: list[Column]
    key_kind: str = "none"  # primary | unique | none
    key_name: str | None = None
    key: list[KeyColumn] = field(default_factory=list)
    est_rows: int = 0
    est_bytes: int = 0

    @property
    def full_name(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def chunking(self) -> str:
        """How the table is cut, as the manifest says it."""
        if self.key_kind == "primary":
            return "primary key ranges"
        if self.key_kind == "unique":
            return f"unique key {self.key_name} ranges"
        return "no usable key: one stream split by row count"


def base_tables(cur: Any, databases: list[str]) -> list[tuple[str, str]]:
    """(schema, table) of every base table of `databases` (a light query: it runs under the lock)."""
    if not databases:
        return []
    cur.execute(
        f"SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
        f"AND TABLE_SCHEMA IN ({placeholders(databases)}) ORDER BY 1, 2",
        databases,
    )
    return [(s, n) for s, n in cur.fetchall()]


def table_plans(cur: Any, databases: list[str]) -> list[TablePlan]:
    """Every base table of `databases` with columns (generated ones left out), engine and key."""
    if not databases:
        return []
    cur.execute("SELECT ENGINE, TRANSACTIONS FROM information_schema.ENGINES")
    transactional = {e.lower(): t == "YES" for e, t in cur.fetchall()}
    cur.execute("SELECT COLLATION_NAME, CHARACTER_SET_NAME FROM information_schema.COLLATIONS")
    charset_of = dict(cur.fetchall())
    cur.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME, ENGINE, COALESCE(TABLE_ROWS, 0), COALESCE(DATA_LENGTH, 0), TABLE_COLLATION "
        f"FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA IN ({placeholders(databases)}) "
        "ORDER BY 1, 2",
        databases,
    )
    plans = {
        (s, n): TablePlan(s, n, e or "", transactional.get((e or "").lower(), False), coll, charset_of.get(coll), [],
                          est_rows=int(r), est_bytes=int(b))
        for s, n, e, r, b, coll in cur.fetchall()
    }
    cur.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME, "
        f"COLLATION_NAME, IS_GENERATED FROM information_schema.COLUMNS WHERE TABLE_SCHEMA IN ({placeholders(databases)}) "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
        databases,
    )
    types: dict[tuple[str, str, str], KeyColumn] = {}
    for s, t, col, dtype, ctype, nullable, charset, collation, generated in cur.fetchall():
        types[(s, t, col)] = KeyColumn(col, dtype.lower(), charset, collation)
        if (s, t) in plans and generated != "ALWAYS":
            plans[(s, t)].columns.append(Column.from_row(col, dtype, ctype, nullable, charset))
    cur.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, NON_UNIQUE, COLUMN_NAME, NULLABLE, SUB_PART "
        f"FROM information_schema.STATISTICS WHERE TABLE_SCHEMA IN ({placeholders(databases)}) "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
        databases,
    )
    indexes: dict[tuple[str, str], dict[str, list]] = {}
    for s, t, idx, non_unique, col, nullable, sub_part in cur.fetchall():
        if (s, t) not in plans:
            continue
        usable = not int(non_unique) and not nullable and sub_part is None
        indexes.setdefault((s, t), {}).setdefault(idx, []).append((col, usable))
    for key, plan in plans.items():
        choose_key(plan, indexes.get(key, {}), types)
    return list(plans.values())


def choose_key(plan: TablePlan, indexes: dict[str, list], types: dict[tuple[str, str, str], KeyColumn]) -> None:
    """Pick the chunking key: PRIMARY, else the narrowest unique index on NOT NULL columns of ordered types."""
    candidates = []
    for name, cols in indexes.items():
        kcols = [types[(plan.schema, plan.name, c)] for c, _ in cols]
        if all(ok for _, ok in cols) and all(k.data_type in ORDERED_TYPES for k in kcols):
            candidates.append((name != "PRIMARY", len(kcols), name, kcols))
    if candidates:
        _, _, name, kcols = min(candidates)
        plan.key_kind = "primary" if name == "PRIMARY" else "unique"
        plan.key_name, plan.key = name, kcols


def _compare(key: list[KeyColumn], values: list[str], op: str, inclusive: bool) -> str:
    """Lexicographic (k1, k2, ...) op (v1, v2, ...), expanded so the optimizer can use the index."""
    terms = []
    for i, col in enumerate(key):
        last = i == len(key) - 1
        eqs = [f"{quote_ident(key[j].name)} = {values[j]}" for j in range(i)]
        cmp = op + ("=" if last and inclusive else "")
        terms.append("(" + " AND ".join(eqs + [f"{quote_ident(col.name)} {cmp} {values[i]}"]) + ")")
    return "(" + " OR ".join(terms) + ")"


def range_where(key: list[KeyColumn], lower: list[str] | None, upper: list[str] | None) -> str | None:
    """The WHERE of the chunk `lower <= key < upper` (either end open when None)."""
    parts = []
    if lower is not None:
        parts.append(_compare(key, lower, ">", True))
    if upper is not None:
        parts.append(_compare(key, upper, "<", False))
    return " AND ".join(parts) or None


def chunk_ranges(t: LogicalTable) -> list[str | None] | None:
    """Each chunk's WHERE on the target (None: the whole table), when the chunks' key ranges cut the table in
    disjoint pieces that cover it and the primary key (created with the table) can read each piece alone:
    one chunk, or primary key ranges, one file per range, each range starting where the one before ended.
    None otherwise (keyless or unique-key tables, ranges dumped in several parts). A boundary that is not a
    literal this module writes is refused: the manifest was altered."""
    if len(t.chunks) <= 1:
        return [None] * len(t.chunks)
    if t.chunking != "primary key ranges" or not t.key:
        return None
    edges = [(c.lower, c.upper) for c in t.chunks]
    if edges[0][0] is not None or edges[-1][1] is not None or len(set(map(repr, edges))) != len(edges):
        return None
    if any(a[1] is None or a[1] != b[0] for a, b in zip(edges, edges[1:])):
        return None
    key = [KeyColumn(name, "", None, None) for name in t.key]
    for c in t.chunks:
        for bound in (c.lower, c.upper):
            if bound is not None and (len(bound) != len(key) or not all(
                    isinstance(v, str) and MANIFEST_LITERAL.fullmatch(v) for v in bound)):
                raise IntegrityError(f"the manifest's key range of chunk {c.file} ({t.schema}.{t.name}) is not one "
                                     f"lastline writes: {bound!r}; the manifest was altered. Restore from another backup.")
    return [range_where(key, c.lower, c.upper) for c in t.chunks]


def chunk_count(est_rows: int, chunk_rows: int) -> int:
    """How many chunks a table of about `est_rows` rows gets (1 unless clearly bigger than a chunk)."""
    if est_rows <= chunk_rows * SPLIT_SLACK:
        return 1
    return math.ceil(est_rows / chunk_rows)


def integer_bounds(lo: int, hi: int, est_rows: int, chunk_rows: int) -> list[int]:
    """Inner boundaries cutting [lo, hi] into ranges of about `chunk_rows` rows (keys assumed even)."""
    n = chunk_count(min(est_rows, hi - lo + 1) if est_rows else hi - lo + 1, chunk_rows)
    step = math.ceil((hi - lo + 1) / n)
    return [lo + i * step for i in range(1, n)]


def ranges(bounds: list[list[str]]) -> list[tuple[list[str] | None, list[str] | None]]:
    """(lower, upper) pairs from inner boundaries, open at both ends."""
    edges: list[list[str] | None] = [None, *bounds, None]
    return list(zip(edges[:-1], edges[1:]))


def integer_ranges(cur: Any, plan: TablePlan, chunk_rows: int) -> list[tuple[list[str] | None, list[str] | None]]:
    """Ranges of an integer single-column key, from MIN/MAX in the caller's snapshot."""
    col = quote_ident(plan.key[0].name)
    cur.execute(f"SELECT MIN({col}), MAX({col}) FROM {qualified(plan.schema, plan.name)}")
    lo, hi = cur.fetchone()
    if lo is None:
        return [(None, None)]
    return ranges([[str(b)] for b in integer_bounds(int(lo), int(hi), plan.est_rows, chunk_rows)])


def walk_bounds(cur: Any, plan: TablePlan, chunk_rows: int) -> Iterator[list[str]]:
    """Inner boundaries of any ordered key, found by walking the index `chunk_rows` rows at a time."""
    cols = ", ".join(f"CAST({quote_ident(k.name)} AS BINARY)" for k in plan.key)
    order = ", ".join(quote_ident(k.name) for k in plan.key)
    lower: list[str] | None = None
    while True:
        where = range_where(plan.key, lower, None)
        cur.execute(
            f"SELECT {cols} FROM {qualified(plan.schema, plan.name)} FORCE INDEX ({quote_ident(plan.key_name or 'PRIMARY')})"
            f"{' WHERE ' + where if where else ''} ORDER BY {order} LIMIT 1 OFFSET {int(chunk_rows)}"
        )
        row = cur.fetchone()
        if row is None:
            return
        lower = [k.literal(v) for k, v in zip(plan.key, row)]
        yield lower
