"""logical.backup.dumper: where a chunk file is kept (any identifier a safe path segment), whether a waiting DDL names
a table (a chunk gives way to it), and how a job names itself in errors. The Dumper itself runs end to end in
tests/e2e/logical_backup/test_logical_backup.py."""
from __future__ import annotations

import pytest

from lastline.logical.backup.dumper import Job, TableState, _names_table, chunk_key
from lastline.logical.format.chunking import KeyColumn, TablePlan


def _plan(schema: str = "db", name: str = "t", key: list[KeyColumn] | None = None) -> TablePlan:
    return TablePlan(schema, name, "InnoDB", True, None, None, [], "primary" if key else "none", None, key or [])


@pytest.mark.parametrize(("schema", "name", "key"), [
    ("db", "t", "b1/data/db/t/00003-007.tsv.zst"),
    ("my db", "a/b", "b1/data/my%20db/a%2Fb/00003-007.tsv.zst"),
    (".", "..", "b1/data/%2E/%2E%2E/00003-007.tsv.zst"),
    ("db", "v1.2", "b1/data/db/v1%2E2/00003-007.tsv.zst"),
    ("dé", "%", "b1/data/d%C3%A9/%25/00003-007.tsv.zst"),
], ids=["plain", "space-and-slash", "dot-names-never-a-path-step", "dot-inside", "non-ascii-and-percent"])
def test_chunk_key(schema, name, key):
    assert chunk_key("b1", _plan(schema, name), 3, 7, ".zst") == key


def test_chunk_key_numbers_sort_as_they_count():
    keys = [chunk_key("b", _plan(), seq, part, "") for seq in (9, 10, 99999) for part in (0, 1, 999)]
    assert keys == sorted(keys)


@pytest.mark.parametrize(("statement", "table", "names"), [
    ("ALTER TABLE t ADD COLUMN c INT", "t", True),
    ("ALTER TABLE `db`.`t` ADD COLUMN c INT", "t", True),
    ("alter table T add c int", "t", True),
    ("ALTER TABLE t2 ADD COLUMN c INT", "t", False),
    ("ALTER TABLE my_t ADD COLUMN c INT", "t", False),
    ("ALTER TABLE t$x ADD COLUMN c INT", "t", False),
    ("RENAME TABLE a TO b", "t", False),
    ("DROP TABLE `we``ird`", "we`ird", True),
    ("TRUNCATE `a.b`", "a.b", True),
    ("TRUNCATE `axb`", "a.b", False),
], ids=["bare", "qualified-quoted", "any-case", "longer-name", "name-inside-another", "dollar-continues-a-name",
        "other-tables", "backtick-in-name", "dot-is-literal", "dot-no-wildcard"])
def test_names_table(statement, table, names):
    assert _names_table(statement, table) is names


@pytest.mark.parametrize(("job", "said"), [
    (Job((0,), "split", TableState(_plan())), "db.t (splitting)"),
    (Job((0,), "chunk", TableState(_plan())), "db.t (the whole table, no usable key)"),
    (Job((0,), "chunk", TableState(_plan(key=[KeyColumn("id", "int", None, None)])), seq=2),
     "db.t (chunk 2: (id) from the start to the end)"),
    (Job((0,), "chunk", TableState(_plan(key=[KeyColumn("a", "int", None, None), KeyColumn("b", "int", None, None)])), seq=5,
         lower=["1", "2"], upper=["3", "4"]), "db.t (chunk 5: (a, b) from (1, 2) to (3, 4))"),
], ids=["split", "no-key", "open-range", "bounded-range"])
def test_a_job_describes_itself(job, said):
    assert job.describe() == said


def test_jobs_order_by_priority_alone():
    state = TableState(_plan())
    assert sorted([Job((2,), "chunk", state), Job((1, 5), "split", state), Job((1, 2), "chunk", state)]) == [
        Job((1, 2), "chunk", state), Job((1, 5), "split", state), Job((2,), "chunk", state)]
