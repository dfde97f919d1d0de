"""rotation.stages: the preflight lists the destination's backups with a manifest and what it wraps under, refuses a
destination outside the deployment's roots and a key connection with nothing to write with; batches are runs of
consecutive backups, at most so many tasks; a whole run re-wraps every encrypted backup (a second finds them current),
its report saved and its problems failing it, naming each backup left under an older key."""
from __future__ import annotations

import json

import pytest

from lastline import reports
from lastline.core.errors import ConfigError, IntegrityError
from lastline.rotation import stages
from lastline.rotation.plans import RotationPlan
from lastline.storage.encryption_keys import new_identity

from .helpers import K1, K2, backup, destination, keys, use_keys


@pytest.fixture(autouse=True)
def report_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("LASTLINE_REPORTS", f"file://{tmp_path / 'reports'}")


def test_preflight_lists_the_backups_and_what_it_wraps_under(tmp_path, monkeypatch):
    url, storage = destination(tmp_path)
    ids = [backup(storage, keys()), backup(storage, None)]
    (tmp_path / "dest" / "20260101T000000Z-abcdef").mkdir()  # incomplete: no manifest
    use_keys(monkeypatch, "k2", K2, keys={"k1": K1})
    plan = stages.preflight({"destination": url, "dry_run": True})
    assert (plan.backups, plan.wraps_to, plan.storage_key, plan.dry_run) == (sorted(ids), "k2 (kek)", True, True)
    with pytest.raises(ConfigError, match="outside the storage this deployment allows"):
        stages.preflight({"destination": "file:///etc/lastline"})
    use_keys(monkeypatch, "", "", identities={"ops": new_identity()[0]})  # a restore host's connection
    with pytest.raises(ConfigError, match="has no key to re-wrap under"):
        stages.preflight({"destination": url})


def test_batches_are_runs_of_consecutive_backups():
    plan = RotationPlan("file:///d", None, [f"b{i:03}" for i in range(250)])
    assert [len(b) for b in stages.batches(plan)] == [100, 100, 50]
    assert [len(b) for b in stages.batches(plan, size=10, most=5)] == [50] * 5
    assert stages.batches(RotationPlan("file:///d", None, [])) == []


def test_a_run_rewraps_every_encrypted_backup_and_a_second_finds_them_current(tmp_path, monkeypatch):
    url, storage = destination(tmp_path)
    ids = [backup(storage, keys()) for _ in range(3)] + [backup(storage, None)]
    use_keys(monkeypatch, "k2", K2, keys={"k1": K1})
    plan = stages.preflight({"destination": url})
    done = [stages.rotate_backups(plan, ids) for ids in stages.batches(plan, size=2)]
    found = stages.record(plan, [[o.to_dict() for o in d] for d in done], stages.rotate_branches(plan), "key_rotation", "r1")
    assert found["counts"] == {"rewrapped": 3, "unencrypted": 1} and found["problems"] == []
    assert found["bytes_written"] == sum((tmp_path / "dest" / b / "manifest.json").stat().st_size for b in ids[:3])
    stages.fail_if_bad(found)
    page = reports.read("key_rotation", "r1", "key_rotation.md").decode()
    assert page.startswith(f"# Key rotation of {plan.destination}: done") and "no data object is rewritten" in page
    assert json.loads(reports.read("key_rotation", "r1", "key_rotation.json"))["counts"]["rewrapped"] == 3
    again = stages.record(plan, stages.rotate_backups(plan, plan.backups), [], "key_rotation", "r2")
    assert again["counts"] == {"current": 3, "unencrypted": 1} and again["bytes_written"] == 0


def test_a_backup_left_under_an_older_key_fails_the_run_after_its_report(tmp_path, monkeypatch):
    url, storage = destination(tmp_path)
    lost = backup(storage, keys("k0", "0d" * 32))
    use_keys(monkeypatch, "k2", K2, keys={"k1": K1})
    plan = stages.preflight({"destination": url})
    found = stages.record(plan, stages.rotate_backups(plan, plan.backups), None, "key_rotation", "r3")
    assert found["problems"][0].startswith(f"{lost} (physical): nokey, under k0 (kek)")
    assert found["problems"][1].startswith("binlogs (binlogs): undone")  # the archive's task did not end
    assert "**Problem:**" in reports.read("key_rotation", "r3", "key_rotation.md").decode()
    with pytest.raises(IntegrityError, match=f"2 left under an older key: {lost} .* Keep the older keys"):
        stages.fail_if_bad(found)


def test_a_backup_that_completed_or_still_runs_after_the_listing_fails_the_run(tmp_path, monkeypatch):
    """A backup that started before the key changed seals under the older key: one that completes after the preflight
    listed the destination, or is still being written when the report is made, fails the run (run it again once they
    are done, before the older key is dropped); an old folder without a manifest (a failed backup) does not."""
    url, storage = destination(tmp_path)
    backup(storage, keys())
    (tmp_path / "dest" / "20260101T000000Z-abcdef").mkdir()  # a backup that failed long ago
    use_keys(monkeypatch, "k2", K2, keys={"k1": K1})
    plan = stages.preflight({"destination": url})
    done = stages.rotate_backups(plan, plan.backups)
    assert stages.record(plan, done, [], "key_rotation", "r1")["problems"] == []
    finished = backup(storage, keys())  # completed after the listing, under k1
    running = stages.late(plan)  # and one still being written, started now
    (tmp_path / "dest" / (now_id := finished[:16] + "-0000ff")).mkdir()
    found = stages.record(plan, done, [], "key_rotation", "r2")
    assert running == [f"backup {finished} completed after the rotation listed the destination: run the rotation again"]
    assert sorted(found["problems"]) == sorted(running + [f"backup {now_id} is still being written (it may seal under the "
                                                          "older key): run the rotation again once it has ended"])
    with pytest.raises(IntegrityError, match="completed after the rotation listed"):
        stages.fail_if_bad(found)
