"""staging.plans: the refresh's plan and results cross XCom as plain dicts and come back the same (its pinned
BackupRef too), and the plan gives its rules back as Rule objects."""
from __future__ import annotations

import pytest

from lastline.backups import BackupRef
from lastline.core.plans import Plan
from lastline.staging.plans import Closed, LateObjects, Locked, Masked, MaskingVerified, Opened, StagingPlan
from lastline.staging.rules import Rule

REF = BackupRef("file:///b", "20261128T161432Z-7c93b6", "logical", manifest_sha256="ab" * 32)
RULES = [Rule("shop", "users", "email", "email"), Rule("my.db", "t 1", "note", "fixed", "x")]
PLAN = StagingPlan(target_conn_id="t", backup=REF, databases=["shop", "my.db"], rules=[r.to_dict() for r in RULES],
                   masking_key_conn_id="key", open_for_writes=False, restore={"parallel": 2},
                   kept_objects=["shop.v_users"])


@pytest.mark.parametrize("value", [
    PLAN,
    StagingPlan(target_conn_id="t", backup=REF, databases=[], rules=[], masking_key_conn_id="key", open_for_writes=True),
    Masked(seconds=1.0, tables=2, skipped=["shop.users"]),
    MaskingVerified(columns=[{"column": "shop.users.email", "survivors": 0}], joins=[]),
    LateObjects(created=3, definer="`lastline`@`localhost`"),
    Opened(open_for_writes=True),
    Locked(locked=["'app'@'%'"], sessions_killed=2),
    Closed(dropped=["shop"], unlocked=["'app'@'%'"]),
], ids=["plan", "plan-without-rules", "masked", "masking-verified", "late-objects", "opened", "locked", "closed"])
def test_round_trip_through_a_dict(value: Plan) -> None:
    assert type(value).of(value.to_dict()) == value


def test_the_rules_come_back_as_rules_after_xcom() -> None:
    plan = StagingPlan.of(PLAN.to_dict())
    assert isinstance(plan.backup, BackupRef)
    assert plan.rule_list() == RULES
    assert [r.key for r in plan.rule_list()] == ["shop.users.email", "`my.db`.`t 1`.note"]


def test_the_plans_defaults() -> None:
    plan = StagingPlan(target_conn_id="t", backup=REF, databases=[], rules=[], masking_key_conn_id="k",
                       open_for_writes=False)
    assert (plan.restore, plan.kept_objects, plan.rule_list()) == ({}, [], [])
