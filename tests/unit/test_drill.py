"""drill: a restore drill's verdict: the RTO against its budget in words, the page a drill writes (FAILED, verified,
verified but over budget), what it alerts about, and a failed drill failing its run. Recording into the reports'
history and the drill's preflight on a real server are tested in tests/e2e/restore_drill/test_drill.py."""
from __future__ import annotations

import pytest

from lastline import drill
from lastline.backups import BackupRef
from lastline.core.errors import IntegrityError


def entry(ok: bool = True, seconds: float = 42.0, budget: float = 3600.0, **kw) -> dict:
    within = ok and (not budget or seconds <= budget)
    return {"backup_id": "20261128T161432Z-7c93b6", "kind": "logical", "backup": "file:///b/20261128T161432Z-7c93b6",
            "ok": ok, "rto_seconds": seconds, "rto_budget_seconds": budget, "within_budget": within, "mb_per_s": 12.5,
            "authenticity": "authenticated", **kw}


@pytest.mark.parametrize(("seconds", "budget", "text"), [
    (42.0, 3600.0, "RTO 42.0 s, within the budget of 3,600 s (1%)"),
    (3600.0, 3600.0, "RTO 3,600.0 s, within the budget of 3,600 s (100%)"),
    (3601.0, 3600.0, "RTO 3,601.0 s, OVER the budget of 3,600 s (100%)"),
    (5.0, 2.5, "RTO 5.0 s, OVER the budget of 2.5 s (200%)"),
    (42.0, 0, "RTO 42.0 s (no budget set)"),
], ids=["within", "at-the-budget", "one-second-over", "small-budget", "no-budget"])
def test_rto(seconds, budget, text):
    assert drill.rto({"rto_seconds": seconds, "rto_budget_seconds": budget}) == text


@pytest.mark.parametrize(("the_entry", "alert"), [
    (entry(), None),
    (entry(seconds=4000.0), "took 4,000 s, over the RTO budget of 3,600 s"),
    (entry(ok=False), "FAILED after 42 s: that backup is not known to restore"),
], ids=["good", "over-budget", "failed"])
def test_verdict(the_entry, alert):
    found = drill.verdict(the_entry)
    assert found is None if alert is None else alert in found


def test_a_failed_drill_fails_its_run():
    drill.fail_if_bad(entry(seconds=4000.0))  # over budget: alerted, not failed
    with pytest.raises(IntegrityError, match="FAILED after 42 s"):
        drill.fail_if_bad(entry(ok=False))


@pytest.mark.parametrize(("the_entry", "verified", "head", "line"), [
    (entry(), {"tables": 1200, "rows": 3_000_000}, "verified, RTO 42.0 s, within the budget",
     "Restored and verified as every restore is (1,200 tables, 3,000,000 rows;"),
    (entry(seconds=4000.0), {"tables": 2}, "verified, but RTO 4,000.0 s, OVER the budget", "(2 tables, 0 rows;"),
    (entry(ok=False, authenticity=""), None, "FAILED after 42.0 s", "not checked for authenticity"),
], ids=["verified", "over-budget", "failed"])
def test_markdown_puts_the_verdict_first(the_entry, verified, head, line):
    recent = [entry(ok=False, backup_id="older"), entry(seconds=4000.0, backup_id="slow"), the_entry]
    text = drill.markdown(the_entry, verified, "drill_db", recent)
    first = text.splitlines()[0]
    assert first.startswith("# Restore drill of logical backup 20261128T161432Z-7c93b6 into drill_db: ") and head in first
    assert line in text
    rows = [r.split("|")[1:4] for r in text.splitlines() if r.startswith("| ") and "backup |" not in r]
    assert [[c.strip() for c in r] for r in rows][1:] == [["slow", "logical", "verified, over budget"],
                                                          ["older", "logical", "FAILED"]]  # newest first


def test_a_drill_plan_crosses_xcom():
    plan = drill.DrillPlan(kind="physical", backup=BackupRef("file:///b", "20261128T161432Z-7c93b6", "physical", None, "ab" * 32), bytes=10, drill_conn_id="d",
                           rto_budget_seconds=60.0, started=1.0, restore={"force": True})
    assert drill.DrillPlan.of(plan.to_dict()) == plan
