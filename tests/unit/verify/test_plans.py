"""verify.plans: a backup's status from its findings, a finding in words, and the verdicts' XCom forms typed again."""
from __future__ import annotations

import pytest

from lastline.verify.plans import ArchiveVerdict, BackupVerdict, Coverage, Finding, VerifyPlan, status_of

MISSING = Finding("data/d/t/00000-000.tsv.zst", "missing", "10 bytes", "no such file")
DIGEST = Finding("backup.xbstream.zst", "digest", "sha256 ab", "sha256 cd")


@pytest.mark.parametrize(("findings", "status"), [
    ([], "ok"), ([MISSING], "missing"), ([MISSING, MISSING], "missing"), ([DIGEST], "damaged"), ([MISSING, DIGEST], "damaged"),
], ids=["none", "one-missing", "only-missing", "a-digest", "missing-and-digest"])
def test_status_of(findings, status):
    assert status_of(findings) == status


def test_a_finding_says_the_file_what_differs_and_both_values():
    assert DIGEST.describe() == "backup.xbstream.zst: digest (expected sha256 ab, found sha256 cd)"
    assert Finding("binlogs/b/x.000001", "gap").describe() == "binlogs/b/x.000001: gap"


def test_the_verdicts_come_back_typed_from_their_xcom_form():
    verdict = BackupVerdict("20261128T161432Z-7c93b6", "logical", "damaged", 3, 1000, [DIGEST], "authenticated")
    assert BackupVerdict.of(verdict.to_dict()) == verdict and BackupVerdict.of(verdict) is verdict
    whole = ArchiveVerdict("missing", 1, 2, 30, [MISSING], [Coverage("20261128T161432Z-7c93b6", "b", "x.1", "x.2", ["x.2"])])
    assert ArchiveVerdict.of(whole.to_dict()) == whole
    plan = VerifyPlan("file:///tmp/d", None, ["20261128T161432Z-7c93b6"])
    assert VerifyPlan.of(plan.to_dict()) == plan
