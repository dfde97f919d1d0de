"""Bin-pack a logical backup's chunks into work units of similar cost, which the `parallel` lanes (one mapped load
task each, logical.restore.lanes) take in plan order, each unit no other lane holds.

What the measurements say (shared/notes/restore-speed-facts.md): one table loaded in key order by one
loader into an empty table is the fastest; parallel loaders on the same table split pages and build
the primary index by random inserts. So:

- a unit is a run of chunks in key order; a table is split across units only when it is bigger than
  a unit (so it would otherwise leave lanes idle), and then into contiguous key ranges;
- small tables are batched together into one unit; each table costs a fixed TABLE_COST on top of its bytes
  (its stream, its LOAD DATA and commit, its ledger row, its checksum: ~3.5 ms here), so that thousands of small
  tables make several units, not one unit a single lane loads alone;
- the unit cost aims at `units_per_lane` units per lane, and the batches of small tables at BATCHES_PER_LANE (many
  small ones: a lane that draws the costlier units takes fewer of them), never below `min_unit_bytes` (a unit
  costs its lane a claim and a few connections: some ms), and never more than `max_units` units;
- non-transactional tables (MyISAM, Aria) are never split: they are reloaded whole on a retry;
- biggest units first, so the long ones start early, but two units of the same table are kept
  `lanes` places apart where possible, lower key ranges first (the lanes take units in plan order), so a
  table's ranges are appended in key order instead of inserted into the middle.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from lastline.core.sql import NON_TRANSACTIONAL
from lastline.manifest import LogicalManifest, LogicalTable

MIN_UNIT_BYTES = 8 << 20
MAX_UNITS = 64
# a table's fixed cost in the load, as the bytes a lane loads in the same time: ~3.5 ms a table at ~8 MB/s a lane
# (make bench-scale, 10,000 tables: 1,775 small tables in 6.2 s, 303 MB of medium ones in 45 s); units are balanced
# by bytes + tables x TABLE_COST
TABLE_COST = 32 << 10
BATCHES_PER_LANE = 8


@dataclass
class Part:
    """Some chunks of one table: indexes into the manifest's chunk list [first, last]."""

    schema: str
    table: str
    first: int
    last: int
    bytes: int
    whole: bool


@dataclass
class WorkUnit:
    """What one load task does: parts in order."""

    index: int
    name: str
    bytes: int
    parts: list[Part] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> WorkUnit:
        return cls(data["index"], data["name"], data["bytes"], [Part(**p) for p in data["parts"]])

    def files(self, tables: dict[tuple[str, str], LogicalTable]) -> list[str]:
        """The chunk files its parts load (`tables`: the manifest's, by (schema, name))."""
        return [c.file for p in self.parts for c in tables[(p.schema, p.table)].chunks[p.first: p.last + 1]]


def _size(t: LogicalTable) -> int:
    return max(t.raw_bytes, 1)


def cost(parts: list[Part]) -> int:
    """What loading `parts` costs, in bytes: their bytes, and TABLE_COST for each table a part starts (the parts of
    a split table share one: its first)."""
    return sum(p.bytes + (TABLE_COST if p.first == 0 else 0) for p in parts)


def unit_name(parts: list[Part], totals: dict[tuple[str, str], int]) -> str:
    """A readable name: `db.table [chunks 12-23]`, `db.table`, or `db.first +N tables`."""
    p = parts[0]
    name = f"{p.schema}.{p.table}"
    if len(parts) == 1:
        return name if p.whole else f"{name} [chunks {p.first}-{p.last} of {totals[(p.schema, p.table)]}]"
    return f"{name} +{len(parts) - 1} tables"


def plan_units(
    manifest: LogicalManifest, tables: list[LogicalTable], lanes: int, *, units_per_lane: int = 3,
    min_unit_bytes: int = MIN_UNIT_BYTES, max_units: int = MAX_UNITS,
) -> list[WorkUnit]:
    """The work units for loading `tables` (of `manifest`) with `lanes` loaders at once."""
    total = sum(_size(t) + TABLE_COST for t in tables)
    target = max(min_unit_bytes, math.ceil(total / max(1, lanes * units_per_lane)))
    target = max(target, math.ceil(total / max_units))
    # the batches of small tables finer still (BATCHES_PER_LANE a lane): many of them, cheap to take, are what lets
    # the lanes end together whatever the real cost of a table against a byte
    batch = max(min_unit_bytes, math.ceil(total / max(1, lanes * BATCHES_PER_LANE)), math.ceil(total / max_units))
    groups: list[list[Part]] = []
    small: list[Part] = []
    for t in sorted(tables, key=_size, reverse=True):
        n = len(t.chunks)
        if n == 0:
            small.append(Part(t.schema, t.name, 0, -1, 0, True))
            continue
        transactional = t.engine.lower() not in NON_TRANSACTIONAL
        if _size(t) + TABLE_COST <= target or n == 1 or not transactional:
            part = Part(t.schema, t.name, 0, n - 1, _size(t), True)
            (groups.append([part]) if _size(t) + TABLE_COST > target / 2 else small.append(part))
            continue
        pieces = min(n, max(2, round(_size(t) / target)))
        per = math.ceil(n / pieces)
        for first in range(0, n, per):
            last = min(n, first + per) - 1
            size = sum(c.raw_bytes for c in t.chunks[first:last + 1])
            groups.append([Part(t.schema, t.name, first, last, size, first == 0 and last == n - 1)])
    bins: list[list[Part]] = []
    filled: list[int] = []  # each bin's cost so far: first fit stays linear in the tables (the bins are few)
    for part in sorted(small, key=lambda p: p.bytes, reverse=True):  # first fit decreasing
        size = part.bytes + TABLE_COST
        for i, used in enumerate(filled):
            if used + size <= batch:
                bins[i].append(part)
                filled[i] += size
                break
        else:
            bins.append([part])
            filled.append(size)
    totals = {(t.schema, t.name): len(t.chunks) for t in tables}
    units = in_key_order(spread(sorted(groups + bins, key=cost, reverse=True), lanes))
    return [WorkUnit(i, unit_name(ps, totals), sum(p.bytes for p in ps), ps) for i, ps in enumerate(units)]


def in_key_order(units: list[list[Part]]) -> list[list[Part]]:
    """The units of a split table take their places in key order (lower ranges first): loading a range
    below rows already in the table inserts into the middle of the index, which is slower than appending."""
    slots: dict[tuple[str, str], list[int]] = {}
    for i, ps in enumerate(units):
        if len(ps) == 1 and not ps[0].whole:
            slots.setdefault((ps[0].schema, ps[0].table), []).append(i)
    out = list(units)
    for positions in slots.values():
        for pos, ps in zip(positions, sorted((units[i] for i in positions), key=lambda ps: ps[0].first)):
            out[pos] = ps
    return out


def spread(units: list[list[Part]], lanes: int) -> list[list[Part]]:
    """Reorder (biggest first) so that no unit shares a table with the `lanes - 1` units before it,
    where some other unit allows it."""
    out: list[list[Part]] = []
    pending = list(units)
    while pending:
        recent = {(p.schema, p.table) for ps in out[-(lanes - 1):] for p in ps} if lanes > 1 else set()
        pick = next((ps for ps in pending if not recent & {(p.schema, p.table) for p in ps}), pending[0])
        pending.remove(pick)
        out.append(pick)
    return out
