"""pitr.held: what a held stream keeps between rounds, and when a listing of the source's binlogs continues the one
before (the start GTID states it knows stay valid) or is looked at anew (RESET MASTER, a restore)."""
from __future__ import annotations

import pytest

from lastline.pitr.chain import Branch
from lastline.pitr.held import Held, continues

BEFORE = {"bin.000003": 900, "bin.000004": 500}


@pytest.mark.parametrize(("now", "expected"), [
    ([("bin.000003", 900), ("bin.000004", 500)], True),
    ([("bin.000003", 900), ("bin.000004", 800)], True),  # the open file grew
    ([("bin.000003", 900), ("bin.000004", 600), ("bin.000005", 256)], True),  # rotated
    ([("bin.000004", 600)], True),  # the oldest purged
    ([("bin.000006", 256)], True),  # all purged, then rotations: the plan names the holes
    ([("bin.000003", 900), ("bin.000004", 400)], False),  # the open file shrank: written anew
    ([("bin.000001", 256)], False),  # RESET MASTER: names go back
    ([("bin.000003", 900)], False),  # the newest gone, the oldest kept
    ([("bin.000003", 900), ("bin.000004", 500), ("bin.000002", 300)], False),  # a name before the last, new
], ids=["same", "grown", "rotated", "purged", "all-purged", "shrank", "reset", "newest-gone", "older-name-new"])
def test_a_listing_continues_the_one_before_or_is_looked_at_anew(now, expected):
    assert continues(BEFORE, now) is expected


def test_nothing_seen_before_continues_nothing():
    assert continues({}, [("bin.000001", 256)]) is False


def test_drop_forgets_everything_and_closes_the_connection():
    closed: list[bool] = []

    class Conn:
        def close(self) -> None:
            closed.append(True)
            raise OSError("already lost")  # a lost connection's close fails: dropped all the same

    held = Held(conn=Conn(), binlog_dir="/d", server_id=1, gtids={"bin.000001": ""}, listed={"bin.000001": 256},
                known=[{"id": "b"}], branch=Branch("1-000001-0a1b2c3d"), chain_sha="ab" * 32)
    held.drop()
    assert closed == [True]
    assert (held.conn, held.gtids, held.listed, held.known, held.branch, held.chain_sha) == (None, {}, {}, None, None, None)
