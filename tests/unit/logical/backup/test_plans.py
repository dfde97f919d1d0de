"""The backup's plan and result cross XCom as plain dicts and come back the same (core.plans.Plan)."""
from __future__ import annotations

import pytest

from lastline.core.plans import Plan
from lastline.logical.backup.plans import BackupPlan, DumpResult


@pytest.mark.parametrize("value", [
    BackupPlan(backup_id="b1", source_conn_id="s", destination="/b", databases=["shop"], compression="zstd",
               chunk_rows=250_000, parallel=4, server_version="11.4.2-MariaDB", replica={"primaries": []}),
    DumpResult(manifest="/b/b1/manifest.json", tables=2, rows=10, bytes=100, seconds=1.5, lock_method="backup_stage",
               commits_held_seconds=0.01, ddl_held_seconds=0.2, ddl_yields=0),
], ids=["plan", "dump-result"])
def test_round_trip_through_a_dict(value: Plan) -> None:
    assert type(value).of(value.to_dict()) == value
