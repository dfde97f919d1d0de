"""rotation.plans: an outcome names its backup, status, keys and why in one phrase; the mapped tasks' XComs (lists of
lists of dicts, a single one) are typed again; the summary counts each status, adds the bytes written by re-wraps only,
and names as problems every backup left under an older key, every one whose task left nothing, an unread archive."""
from __future__ import annotations

from lastline.rotation.plans import CURRENT, NOKEY, REWRAPPED, UNDONE, WOULD, Outcome, RotationPlan, outcomes, summary

PLAN = RotationPlan("file:///d", None, ["b1", "b2", "b3", "b4"], "k2 (kek)", True)
A = Outcome("b1", "logical", REWRAPPED, was="k1 (kek)", now="k2 (kek)", bytes=900, pinned=True)
B = Outcome("b2", "physical", CURRENT, was="k2 (kek)")
C = Outcome("b3", "physical", NOKEY, "backup 'b3' needs one of the keys k0 (kek)", was="k0 (kek)")


def test_describe_names_the_backup_its_status_and_keys():
    assert A.describe() == "b1 (logical): rewrapped, k1 (kek) -> k2 (kek)"
    assert B.describe() == "b2 (physical): current, under k2 (kek)"
    assert C.describe() == "b3 (physical): nokey, under k0 (kek): backup 'b3' needs one of the keys k0 (kek)"


def test_outcomes_types_the_mapped_tasks_xcoms_again():
    assert outcomes([[A.to_dict(), B.to_dict()], None, [C.to_dict()]]) == [A, B, C]
    assert outcomes(A.to_dict()) == [A] and outcomes(None) == []


def test_summary_counts_names_the_problems_and_adds_the_bytes_rewrapped():
    found = summary(PLAN, [A, B, C], [Outcome("binlogs/1-000001-0a1b2c3d", "binlogs", REWRAPPED, bytes=300)])
    assert found["counts"] == {REWRAPPED: 2, CURRENT: 1, NOKEY: 1, UNDONE: 1}
    assert found["bytes_written"] == 1200
    assert found["problems"] == [C.describe(), "b4 (?): undone: its task did not end (see its log)"]
    unread = summary(PLAN, [A, B, C, Outcome("b4", "logical", WOULD, bytes=0)], None)
    assert unread["problems"][-1].startswith("binlogs (binlogs): undone") and unread["counts"][WOULD] == 1
    assert summary(PLAN, [A, B, C, B.__class__("b4", "logical", CURRENT)], [])["problems"] == [C.describe()]
