"""The physical backup's prune (lastline.physical.prune): what it deletes in a folder destination; no server."""
from __future__ import annotations

import pytest

from lastline.physical import prune

OLD, NEW = "20200101T000000Z-aaaaaa", "20990101T000000Z-bbbbbb"  # incomplete: no manifest


@pytest.mark.parametrize("protect, deleted", [
    ({}, [OLD]),
    ({OLD: "inside the 7-day point-in-time window"}, []),
], ids=["an old incomplete backup goes", "one the window needs stays"])
def test_prune(tmp_path, protect, deleted):
    for backup_id in (OLD, NEW, "not-a-backup"):
        (tmp_path / backup_id).mkdir()
    conf = {"destination": f"file://{tmp_path}", "keep": 1, "incomplete_grace_hours": 24}
    assert prune.prune(conf, protect=protect) == deleted
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({OLD, NEW, "not-a-backup"} - set(deleted))
