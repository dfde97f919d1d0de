"""airflow.approval: what the approver reads (the blast radius in Markdown, names from the target written so they
cannot change the page), a run with nothing at risk passing straight through, and the answer: approved goes on,
rejected or unanswered is a refusal with nothing touched."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lastline.airflow.approval import LISTED, ApproveReplacement, body, code, subject
from lastline.core.errors import Refusal


@pytest.mark.parametrize(("name", "cell", "written"), [
    ("orders", False, "`orders`"),
    ("a`b", False, "``a`b``"),
    ("x```y", False, "````x```y````"),
    ("`x", False, "`` `x ``"),
    ("x`", False, "`` x` ``"),
    ("a|b", True, "`a\\|b`"),
    ("a|b", False, "`a|b`"),
    ("line\nbreak", False, "`line break`"),
    ("", False, "``"),
], ids=["plain", "a-backtick-inside", "a-run-of-backticks", "starts-with-a-backtick", "ends-with-a-backtick",
        "pipe-in-a-cell", "pipe-outside-a-table", "a-newline", "empty"])
def test_code(name, cell, written):
    assert code(name, cell) == written


def risk(**kw) -> dict:
    return {"at_risk": {"target": "db1:3306", "backup_id": "20261128T161432Z-7c93b6", "taken_at": "2026-11-28 16:14",
                        "age_hours": 1.25, "databases": ["shop", "crm"], "table_count": 2, "rows": 1234567,
                        "bytes": 2_500_000_000, "tables": [
                            {"table": "shop.orders", "rows": 1_234_000, "bytes": 2_400_000_000, "updated": "2026-11-28"},
                            {"table": "crm.a|b", "rows": 567, "bytes": 100_000_000, "updated": None}], **kw}}


@pytest.mark.parametrize(("plan", "said"), [
    (risk(), "Replace 2 table(s) in 2 database(s) on db1:3306 with backup 20261128T161432Z-7c93b6?"),
    ({"at_risk": {"target": "r1", "source": "db1", "databases": ["shop"], "table_count": 5}},
     "Replace 5 table(s) in 1 database(s) on r1 with a fresh copy of db1?"),
    ({"at_risk": {"target": "r1"}}, "Replace 0 table(s) in 0 database(s) on r1 with a fresh copy of ??"),
], ids=["a-backup", "a-replica-rebuild", "nothing-listed"])
def test_subject(plan, said):
    assert subject(plan) == said


def test_body_shows_the_blast_radius():
    text = body(risk(force=False, datadir="/var/lib/mysql", note="the binlogs too"))
    assert text.startswith("**Backup** `20261128T161432Z-7c93b6` (taken 2026-11-28 16:14, 1.2 hours old) will replace, "
                           "on **db1:3306**:")
    for line in ["- databases: `shop`, `crm`", "- 2 table(s), about 1,234,567 rows, 2.5 GB",
                 "- the whole datadir `/var/lib/mysql` (moved aside, deleted once the restore is verified)",
                 "- the binlogs too", "| `shop.orders` | 1,234,000 | 2.4 GB | 2026-11-28 |",
                 "| `crm.a\\|b` | 567 | 100.0 MB | not since the server started |"]:
        assert line in text.splitlines()
    assert "**without force**" in text and text.endswith("**Reject** ends the run with nothing touched.")


@pytest.mark.parametrize(("extra", "absent"), [
    ({"force": True}, "without force"), ({}, "without force"), ({"tables": []}, "| table |"),
    ({"age_hours": None}, "hours old"),
], ids=["forced", "force-not-recorded", "no-tables", "age-unknown"])
def test_body_says_only_what_applies(extra, absent):
    assert absent not in body(risk(**extra))


def test_a_long_list_of_tables_is_cut_and_counted():
    tables = [{"table": f"shop.t{i}", "rows": i, "bytes": i, "updated": None} for i in range(LISTED + 5)]
    lines = body(risk(tables=tables, table_count=LISTED + 5)).splitlines()
    assert sum(line.startswith("| `shop.t") for line in lines) == LISTED
    assert "| ... and 5 more | | | |" in lines


def test_a_fresh_copy_is_named_as_such():
    assert body({"at_risk": {"target": "r1", "source": "db1"}}).startswith(
        "**A fresh copy of** db1 (streamed now, node to node) will replace, on **r1**:")


@pytest.fixture
def operator() -> ApproveReplacement:
    return ApproveReplacement(task_id="approve", plan={}, response_hours=2)


@pytest.mark.parametrize("plan", [None, {}, {"at_risk": None}, {"at_risk": {}}],
                         ids=["no-plan", "empty-plan", "nothing-at-risk", "an-empty-risk"])
def test_nothing_at_risk_passes_straight_through(operator, plan):
    operator.plan = plan
    assert operator.execute({}) == {"approved": "not needed"}


def answer(option: str) -> dict:
    return {"chosen_options": [option], "params_input": {}, "responded_at": datetime(2026, 11, 28, tzinfo=UTC),
            "responded_by_user": {"id": "1", "name": "ana"}}


def test_approved_goes_on(operator):
    assert operator.execute_complete({}, answer(operator.APPROVE))["chosen_options"] == [operator.APPROVE]


@pytest.mark.parametrize(("event", "said"), [
    (answer("Reject"), "the restore was rejected by ana: nothing on the target was touched."),
    ({"error": "timed out", "error_type": "timeout"}, "no approval within 2 hours"),
    ({"error": "gone", "error_type": "unknown"}, "no approval within 2 hours"),
], ids=["rejected", "no-answer-in-time", "the-wait-failed"])
def test_rejected_or_unanswered_is_a_refusal(operator, event, said):
    with pytest.raises(Refusal, match=said):
        operator.execute_complete({}, event)


@pytest.mark.parametrize("multiple_outputs", [False, True], ids=["the-plan-whole", "each-key-too"])
def test_a_preflight_with_nothing_at_risk_skips_its_approval_and_pushes_its_plan_as_the_task_runner_would(
        monkeypatch, multiple_outputs):
    from types import SimpleNamespace

    from airflow.sdk.exceptions import DownstreamTasksSkipped

    from lastline.airflow import approval

    pushed: list[str] = []
    approve = ApproveReplacement.__new__(ApproveReplacement)  # only its type is read
    object.__setattr__(approve, "task_id", "approve")  # past BaseOperator.__setattr__ (no __init__ ran)
    ti = SimpleNamespace(task=SimpleNamespace(downstream_list=[approve], multiple_outputs=multiple_outputs),
                         xcom_push=lambda key, value: pushed.append(key))
    monkeypatch.setattr(approval, "get_current_context", lambda: {"ti": ti})
    plan = {"backup": {"backup_id": "b"}, "at_risk": None, "bytes": 1}
    with pytest.raises(DownstreamTasksSkipped) as skipped:
        approval.deciding(lambda: plan)()
    assert skipped.value.tasks == ["approve"]
    # one XCom a key costs the task an api-server round trip: the restores' preflights push the plan whole only
    assert pushed == (["backup", "at_risk", "bytes", "return_value"] if multiple_outputs else ["return_value"])
    # at risk: no skip, the plan returned for the task runner to push
    assert approval.deciding(lambda: {**plan, "at_risk": {"tables": 1}})()["at_risk"] == {"tables": 1}
