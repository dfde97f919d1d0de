"""The restore's plan and results cross XCom as plain dicts and come back the same (core.plans.Plan)."""
from __future__ import annotations

import pytest

from lastline.backups import BackupRef
from lastline.core.plans import Plan
from lastline.logical.restore.plans import INDEX_BUILDS, ConfigSnapshot, RestorePlan, Reverted, UnitLoaded

REF = BackupRef("file:///b", "20261128T161432Z-7c93b6", "logical", manifest_sha256="ab" * 32)


@pytest.mark.parametrize("value", [
    RestorePlan(target_conn_id="t", backup=REF, databases=["shop"], at_risk={"replaces": ["shop"]}),
    ConfigSnapshot(variables={"innodb_flush_log_at_trx_commit": "1"}, restart_profile=False, taken_at="now", run_id="r"),
    UnitLoaded(unit="u1", tables={"shop.orders": {"rows": 3}}, seconds=1.0, started_at=0.0, finished_at=1.0),
    Reverted(reverted={}, restarted=False),
], ids=["plan", "config-snapshot", "unit-loaded", "reverted"])
def test_round_trip_through_a_dict(value: Plan) -> None:
    assert type(value).of(value.to_dict()) == value


def test_the_plans_defaults() -> None:
    plan = RestorePlan(target_conn_id="t", backup=REF)
    assert (plan.index_build, plan.defer_indexes, plan.tune, plan.force) == (INDEX_BUILDS[0], True, True, False)
