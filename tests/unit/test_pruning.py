"""The physical backup DAG's prune, whole (lastline.pruning), on a folder destination: without an archive there is
no window, so `keep` alone decides; with one, see tests/e2e/point_in_time_restore/test_pitr_restore.py (a real archive of a real source)."""
from __future__ import annotations

import json

import pytest

from lastline.pruning import prune_physical

OLD_INCOMPLETE, NEW_INCOMPLETE = "20200101T000000Z-aaaaaa", "20990101T000000Z-bbbbbb"  # no manifest


@pytest.mark.parametrize("grace_hours, deleted", [(24, [OLD_INCOMPLETE]), (10 ** 6, [])],
                         ids=["an old incomplete backup goes", "inside its grace period it stays"])
def test_without_an_archive_keep_and_the_grace_decide(tmp_path, grace_hours, deleted):
    for backup_id in (OLD_INCOMPLETE, NEW_INCOMPLETE):
        (tmp_path / backup_id).mkdir()
    result = prune_physical({"destination": f"file://{tmp_path}", "keep": 1, "incomplete_grace_hours": grace_hours})
    assert result == {"deleted": deleted, "kept_for_the_window": {}, "binlogs_deleted": []}
    assert json.dumps(result)  # the task's XCom: plain JSON
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({OLD_INCOMPLETE, NEW_INCOMPLETE} - set(deleted))
