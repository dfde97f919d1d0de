"""The record of every pause of a replica's SQL thread (lastline.replicas.pauses): the statements it runs; no server."""
from __future__ import annotations

import pytest
from fake_cursor import FakeCursor

from lastline.replicas import pauses


@pytest.mark.parametrize("names", [[], [""], ["east", "west"]], ids=["none", "the default connection", "two named"])
def test_record_writes_a_row_per_connection_unlogged(names):
    cur = FakeCursor({})
    pauses.record(cur, names, "physical backup x" + "y" * 300)
    sql = [s for s, _ in cur.ran]
    assert sql.index("SET SESSION sql_log_bin = 0") < sql.index(next(s for s in sql if s.startswith("CREATE TABLE")))
    rows = [args for s, args in cur.ran if s.startswith("REPLACE INTO")]
    assert [r[0] for r in rows] == names and all(len(r[1]) == 255 for r in rows)  # `what` cut to its column
    assert cur.commits >= 2


def test_clear_deletes_this_sessions_rows_only():
    cur = FakeCursor({})
    pauses.clear(cur)
    assert cur.ran == [(f"DELETE FROM `{pauses.META_DB}`.`{pauses.PAUSES}` WHERE holder = CONNECTION_ID()", None)]
    assert cur.commits == 1
