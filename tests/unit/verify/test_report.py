"""verify.report: every backup of the plan gets a verdict (one whose task left none is unread), the problems that fail
the run name the backup, the file and what differs, the page shows each backup's newest drill and coverage, and the
history the Backups page reads gives each backup's newest read-back, per destination."""
from __future__ import annotations

import json

import pytest

from lastline import drill, reports
from lastline.core.errors import IntegrityError
from lastline.verify import report
from lastline.verify.plans import DAMAGED, OK, ArchiveVerdict, BackupVerdict, Coverage, Finding, VerifyPlan

A, B, C = "20261101T000000Z-aaaaaa", "20261102T000000Z-bbbbbb", "20261103T000000Z-cccccc"
DEST = "file:///tmp/d `x`"
PLAN = VerifyPlan(DEST, None, [A, B, C], ["20261104T000000Z-dddddd"])
DIGEST = Finding("data/d/t/00000-000.tsv.zst", "digest", "sha256 ab", "sha256 cd")
OK_A = BackupVerdict(A, "physical", "ok", 1, 100)
BAD_B = BackupVerdict(B, "logical", "damaged", 3, 30, [DIGEST])
ARCHIVE = ArchiveVerdict("ok", 1, 2, 50, [], [Coverage(A, "1-000001-ab", "x.000001", "x.000002", [], "rolls forward")])


@pytest.fixture(autouse=True)
def reports_here(monkeypatch, tmp_path):
    monkeypatch.setenv("LASTLINE_REPORTS", f"file://{tmp_path / 'reports'}")


@pytest.mark.parametrize(("found", "statuses"), [
    ([OK_A.to_dict(), BAD_B.to_dict()], ["ok", "damaged", "unread"]),
    (OK_A.to_dict(), ["ok", "unread", "unread"]),  # one instance's XCom comes back alone, not in a list
    (None, ["unread", "unread", "unread"]),
    ([None, BAD_B.to_dict()], ["unread", "damaged", "unread"]),
], ids=["two-of-three", "one-alone", "none", "a-failed-one"])
def test_every_backup_gets_a_verdict(found, statuses):
    assert [v.status for v in report.verdicts_of(PLAN, found)] == statuses


def test_the_problems_name_the_backup_the_file_and_what_differs():
    found = report.problems(report.verdicts_of(PLAN, [OK_A.to_dict(), BAD_B.to_dict()]), None)
    assert found == [f"backup {B} is damaged: data/d/t/00000-000.tsv.zst: digest (expected sha256 ab, found sha256 cd)",
                     f"backup {C} is unread: its task did not end (see its log)",
                     "the binlog archive is unread: its task did not end (see its log)"]
    holed = ArchiveVerdict("missing", coverage=[Coverage(A, "b", "x.1", "x.3", ["x.2"], "stops at x.2")])
    assert report.problems([OK_A], holed) == [f"the binlog archive is missing: the newest base {A} stops at x.2"]
    assert report.problems([OK_A], ARCHIVE) == []


def test_the_newest_drill_of_each_backup_of_this_destination():
    history = [{"backup": f"{DEST}/{A}", "ok": False, "finished": "1"}, {"backup": f"file:///other/{A}", "ok": True},
               {"backup": f"{DEST}/{A}", "ok": True, "finished": "2"}, {"backup": None}]
    assert report.newest_drills(DEST, history) == {A: history[2]}


def test_the_newest_drill_in_a_sentence():
    drills = {A: {"kind": "logical", "ok": False, "finished": "2026-11-03T00:00:00Z"},
              B: {"kind": "physical", "ok": True, "finished": "2026-11-02T00:00:00Z"}}
    assert report.newest_drill(drills) == f"Newest restore drill: logical backup {A}, FAILED 2026-11-03T00:00:00Z."
    assert report.newest_drill({}).startswith("No restore drill")


def test_record_saves_the_report_and_the_history_and_fail_if_bad_refuses(tmp_path):
    reports.append_history(drill.HISTORY, {"backup": f"{DEST}/{A}", "ok": True, "finished": "2026-11-02T00:00:00Z"})
    summary = report.record(PLAN, [OK_A.to_dict(), BAD_B.to_dict()], ARCHIVE.to_dict(), "backup_verify", "r1")
    assert summary["backups"][A] == {"status": "ok", "what": ""} and summary["backups"][B]["status"] == "damaged"
    page = reports.read("backup_verify", "r1", "backup_verify.md").decode()
    assert page.startswith(f"# Backup verify of {DEST}: 3 problems")  # the folder without a manifest since November 4 too
    assert "1 backup folder without a manifest for more than 24 hours (20261104T000000Z-dddddd)" in page
    assert f"| {A} | physical | ok | 1 | 100 | - | passed 2026-11-02T00:00:00Z | x.000001 to x.000002" in page
    assert "data/d/t/00000-000.tsv.zst: digest" in page and "20261104T000000Z-dddddd" in page
    assert f"Newest restore drill: backup {A}, passed 2026-11-02T00:00:00Z." in page
    assert json.loads(reports.read("backup_verify", "r1", "backup_verify.json"))["archive"]["status"] == "ok"
    with pytest.raises(IntegrityError, match=f"backup {B} is damaged: data/d/t/00000-000.tsv.zst: digest"):
        report.fail_if_bad(summary)
    report.fail_if_bad({"destination": DEST, "problems": []})
    history = reports.history(report.HISTORY)
    assert report.read_backs(history, DEST)[B]["status"] == "damaged" and report.read_backs(history, "file:///other") == {}
    report.record(VerifyPlan(DEST, None, [B]), [BAD_B.to_dict() | {"status": "ok", "findings": []}], ARCHIVE.to_dict(),
                  "backup_verify", "r2")
    newest = report.read_backs(reports.history(report.HISTORY), DEST + "/")
    assert newest[B]["run_id"] == "r2" and newest[A]["run_id"] == "r1"  # the newest read-back of each


class _Instance:
    """What report.kept uses of a task instance: xcom_push, recorded."""

    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = value


def test_kept_passes_an_ok_verdict_and_refuses_a_damaged_one_after_keeping_it_for_the_report():
    ti, ok = _Instance(), BackupVerdict("20261101T000000Z-aaaaaa", "logical", OK, 3, 100)
    assert report.kept(ok, ti, "backup x") is ok and ti.pushed == {}
    findings = [Finding(f"data/t/{i:05d}.tsv.zst", "digest", "ab", "cd") for i in range(7)]
    bad = BackupVerdict("20261101T000000Z-bbbbbb", "logical", DAMAGED, 7, 100, findings)
    with pytest.raises(IntegrityError, match=r"^backup 20261101T000000Z-bbbbbb is damaged: data/t/00000.tsv.zst: digest "
                                             r"\(expected ab, found cd\);.* \.\.\.\. The run's report lists every finding"):
        report.kept([ok, bad], ti, "backups")  # a task's run of backups: the damaged one named
    assert [BackupVerdict.of(v) for v in ti.pushed["return_value"]] == [ok, bad]  # what the report task pulls
    assert [v.status for v in report.verdicts_of(VerifyPlan(DEST, None, [ok.backup_id, bad.backup_id]),
                                                 [ti.pushed["return_value"]])] == ["ok", "damaged"]
    archive_ti = _Instance()
    with pytest.raises(IntegrityError, match="^the binlog archive is damaged: nothing could be read"):
        report.kept(ArchiveVerdict(DAMAGED), archive_ti, "the binlog archive")
    assert ArchiveVerdict.of(archive_ti.pushed["return_value"]) == ArchiveVerdict(DAMAGED)


def test_left_behind_names_a_lost_newest_backup_and_folders_without_a_manifest_past_a_day():
    from datetime import UTC, datetime

    now = datetime(2026, 11, 5, tzinfo=UTC)
    plan = VerifyPlan(DEST, None, [A], ["20261103T000000Z-dddddd", "20261104T120000Z-eeeeee"], [f"logical backup {B}"])
    assert report.left_behind(plan, now) == [
        f"the newest logical backup {B} Airflow recorded is gone or incomplete: someone who can write the storage removed "
        "it or its manifest",
        "1 backup folder without a manifest for more than 24 hours (20261103T000000Z-dddddd): backups that never "
        "finished (prune removes those) or whose manifest was removed"]
    assert report.left_behind(VerifyPlan(DEST, None, [A], ["20261104T120000Z-eeeeee"]), now) == []  # a backup under way


def test_a_backup_gone_while_read_is_no_problem_and_its_task_passes():
    gone = BackupVerdict(B, "logical", "gone")
    assert report.problems([OK_A, gone], ARCHIVE) == []
    assert report.kept(gone, _Instance(), f"backup {B}") is gone


def test_the_page_says_which_sealed_backups_were_opened_and_which_not_and_why():
    note = "sealed, not opened: this deployment has no encryption key connection (LASTLINE_ENCRYPTION_KEY_CONN_ID); one of the keys k1 (kek) opens it"
    verdicts = [BackupVerdict(A, "physical", OK, 1, 100, sealed="opened: every sealed chunk authenticated"),
                BackupVerdict(B, "logical", OK, 3, 30, sealed=note), BackupVerdict(C, "logical", OK, 3, 30)]
    page = report.markdown(VerifyPlan(DEST, None, [A, B, C]), verdicts, ARCHIVE, {}, [])
    assert page.startswith(f"# Backup verify of {DEST}: every backup ok")  # not opened for want of a key: not damage
    assert f"**Not opened** (sizes and sha256 checked, not the sealed chunks): backup {B}: {note}." in page
    rows = {line.split(" | ")[0][2:]: line for line in page.splitlines() if line.startswith("| 2026")}
    assert rows[A].endswith("| opened: every sealed chunk authenticated |") and rows[B].endswith(f"| {note} |")
    assert rows[C].endswith("| - |") and f"backup {A}:" not in page
    assert BackupVerdict.of(verdicts[1].to_dict()) == verdicts[1]  # through XCom
