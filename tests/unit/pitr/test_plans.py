"""pitr.plans: the point-in-time restore's plans and results through their XCom form; a replay's ledger read back
with the fields it does not name left out."""
from __future__ import annotations

import pytest

from lastline.core.errors import ConfigError
from lastline.pitr.plans import Cleaned, PitrPlan, PitrReport, Replayed, ReplayPlan


def test_plans_cross_xcom():
    replay = ReplayPlan(target_conn_id="t", destination="file:///b", span={"files": []}, databases=["shop"])
    plan = PitrPlan(kind="logical", base="b1", until="latest", branch="x", window={}, replay=replay.to_dict())
    assert ReplayPlan.of(replay.to_dict()) == replay and replay.method == "auto" and replay.threads == 4
    assert PitrPlan.of(plan.to_dict()) == plan
    assert PitrReport.of({"verdict": "v", "report": "r"}).verdict == "v" and Cleaned.of({"cleaned": True}).cleaned


def test_replayed_of_result_drops_what_it_does_not_name():
    ledger = {"method": "parallel", "transactions": 2, "bytes": 10, "seconds": 0.5, "until": "latest",
              "gtid_position": "0-1-2", "relay_folder": "/tmp/x", "attempt": 3}
    found = Replayed.of_result(ledger)
    assert found.transactions == 2 and found.left_out == [] and not found.resumed
    with pytest.raises(ConfigError, match="unknown field.*attempt"):
        Replayed.of(ledger)  # the plain form refuses them: of_result is the ledger's reader
