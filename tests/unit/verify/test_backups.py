"""verify.backups on real backups (conftest: a physical and a logical one of the suite's source): a clean destination
reads back ok, in file, S3 (moto) and SSH storage; a flipped byte in a chunk is named by its digest, a truncated file
by its size, a deleted file as missing, a manifest whose MAC fails as damaged; the preflight lists the complete
backups only and refuses a destination outside the deployment's roots; nothing is ever written."""
from __future__ import annotations

import os
from pathlib import Path

import boto3
import pytest

from lastline.core.errors import ConfigError
from lastline.manifest import read_manifest
from lastline.storage import open_storage
from lastline.verify import backups
from lastline.verify.plans import VerifyPlan

from .destination import Made


def _plan(folder: Path) -> VerifyPlan:
    return backups.preflight({"destination": f"file://{folder}"})


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder` with its size and mtime (what a reader must leave as it was)."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def _chunk(made: Made, folder: Path) -> tuple[str, Path]:
    """A data chunk of the logical backup: its name in the manifest and its path in `folder`."""
    manifest = read_manifest(open_storage(f"file://{folder}"), made.logical, "logical")
    name = next(f.name for f in manifest.files if f.name.startswith("data/"))
    return name, folder / made.logical / name


def test_a_clean_destination_reads_back_ok_and_nothing_is_written(made, tmp_path):
    folder = made.copy(tmp_path / "d")
    (folder / "20260101T000000Z-abcdef").mkdir()  # incomplete: no manifest, never read
    before = _snapshot(folder)
    plan = _plan(folder)
    assert plan.backups == sorted([made.physical, made.logical]) and plan.incomplete == ["20260101T000000Z-abcdef"]
    for backup_id, kind in ((made.physical, "physical"), (made.logical, "logical")):
        verdict = backups.verify_backup(plan, backup_id)
        assert (verdict.status, verdict.kind, verdict.findings) == ("ok", kind, [])
        assert verdict.files >= 1 and verdict.bytes == sum(p.stat().st_size for p in (folder / backup_id).rglob("*")
                                                         if p.is_file() and p.name not in ("manifest.json", "tables.json"))
        assert "authenticated" in verdict.authenticity and "not" not in verdict.authenticity
    assert _snapshot(folder) == before


def test_a_flipped_byte_in_a_data_chunk_is_named_by_its_digest(made, tmp_path):
    folder = made.copy(tmp_path / "d")
    name, path = _chunk(made, folder)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    verdict = backups.verify_backup(_plan(folder), made.logical)
    assert verdict.status == "damaged" and [(f.file, f.problem) for f in verdict.findings] == [(name, "digest")]
    assert verdict.findings[0].expected != verdict.findings[0].found


def test_a_truncated_artifact_is_named_by_its_size_and_not_read(made, tmp_path):
    folder = made.copy(tmp_path / "d")
    manifest = read_manifest(open_storage(f"file://{folder}"), made.physical, "physical")
    path = folder / made.physical / manifest.artifact
    os.truncate(path, path.stat().st_size - 100)
    verdict = backups.verify_backup(_plan(folder), made.physical)
    assert verdict.status == "damaged" and verdict.bytes == 0
    (found,) = verdict.findings
    assert (found.file, found.problem) == (manifest.artifact, "size")
    assert found.expected == f"{manifest.bytes:,} bytes" and found.found == f"{manifest.bytes - 100:,} bytes"


def test_a_deleted_chunk_is_named_missing(made, tmp_path):
    folder = made.copy(tmp_path / "d")
    name, path = _chunk(made, folder)
    path.unlink()
    verdict = backups.verify_backup(_plan(folder), made.logical)
    assert verdict.status == "missing" and [(f.file, f.problem) for f in verdict.findings] == [(name, "missing")]


def test_a_manifest_whose_mac_fails_is_named_damaged(made, tmp_path):
    folder = made.copy(tmp_path / "d")
    path = folder / made.logical / "manifest.json"
    path.write_bytes(path.read_bytes().replace(b'"rows": ', b'"rows":  ', 1))  # still JSON, the same manifest
    verdict = backups.verify_backup(_plan(folder), made.logical)
    assert verdict.status == "damaged" and [(f.file, f.problem) for f in verdict.findings] == [("manifest.json", "mac")]
    assert "does not match" in verdict.findings[0].found and "not authenticated" in verdict.authenticity


def test_a_manifest_that_is_not_json_is_named_unreadable(made, tmp_path):
    folder = made.copy(tmp_path / "d")
    (folder / made.physical / "manifest.json").write_bytes(b"{ not json")
    verdict = backups.verify_backup(_plan(folder), made.physical)
    assert verdict.status == "damaged" and verdict.kind is None
    assert [(f.file, f.problem) for f in verdict.findings] == [("manifest.json", "unreadable")]


def test_a_chunk_replaced_by_a_link_is_unreadable_not_followed(made, tmp_path):
    folder = made.copy(tmp_path / "d")
    name, path = _chunk(made, folder)
    secret = tmp_path / "elsewhere"
    secret.write_bytes(path.read_bytes())  # the very bytes: only the link gives it away
    path.unlink()
    path.symlink_to(secret)
    verdict = backups.verify_backup(_plan(folder), made.logical)
    assert [(f.file, f.problem) for f in verdict.findings] == [(name, "unreadable")]


def test_the_preflight_refuses_a_destination_outside_the_roots():
    with pytest.raises(ConfigError, match="outside the storage this deployment allows"):
        backups.preflight({"destination": "file:///etc"})


def test_on_s3_each_backup_streams_back_and_a_flipped_byte_is_named(made, s3_server):
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing-secret")
    prefix = "verify-unit"
    for path in (p for p in made.folder.rglob("*") if p.is_file()):
        client.put_object(Bucket="backups", Key=f"{prefix}/{path.relative_to(made.folder)}", Body=path.read_bytes())
    plan = backups.preflight({"destination": f"s3://backups/{prefix}", "aws_conn_id": "t_s3"})
    assert plan.backups == sorted([made.physical, made.logical])
    assert [backups.verify_backup(plan, b).status for b in plan.backups] == ["ok", "ok"]
    name, path = _chunk(made, made.folder)
    data = bytearray(path.read_bytes())
    data[0] ^= 0x80
    client.put_object(Bucket="backups", Key=f"{prefix}/{made.logical}/{name}", Body=bytes(data))
    verdict = backups.verify_backup(plan, made.logical)
    assert [(f.file, f.problem) for f in verdict.findings] == [(name, "digest")]


def test_over_ssh_a_clean_backup_reads_back_ok_and_a_deleted_file_is_missing(made, sshd, tmp_path):
    folder = made.copy(tmp_path / "d")
    plan = backups.preflight({"destination": f"ssh://t_ssh{folder}"})
    assert backups.verify_backup(plan, made.physical).status == "ok"
    name, path = _chunk(made, folder)
    path.unlink()
    verdict = backups.verify_backup(plan, made.logical)
    assert verdict.status == "missing" and [f.file for f in verdict.findings] == [name]


def test_batches_are_one_backup_a_task_up_to_the_most_tasks_then_runs_of_consecutive_ones():
    ids = [f"20261101T{i // 60:02d}{i % 60:02d}00Z-aaaaaa" for i in range(1001)]
    assert backups.batches(VerifyPlan("file:///tmp/d", None, ids[:1000], [])) == [[b] for b in ids[:1000]]
    two = backups.batches(VerifyPlan("file:///tmp/d", None, ids, []))  # 1,001: past Airflow's 1,024 mapped instances soon
    assert len(two) == 501 and all(len(b) == 2 for b in two[:-1]) and [b for run in two for b in run] == ids
    assert backups.batches(VerifyPlan("file:///tmp/d", None, [], [])) == []


@pytest.fixture
def recorded(monkeypatch):
    """The newest backup of each kind Airflow recorded, as lastline.airflow.assets installs its reader: {kind: id}."""
    from lastline import manifest

    records: dict[str, str] = {}
    monkeypatch.setattr(manifest, "_recorded_newest", [lambda place, kind: {"backup_id": records[kind]} if kind in records else None])
    return records


def test_the_newest_backup_airflow_recorded_must_still_be_there_complete(made, tmp_path, recorded):
    folder = made.copy(tmp_path / "d")
    recorded.update(physical=made.physical, logical=made.logical)
    assert _plan(folder).lost == []
    (folder / made.logical / "manifest.json").unlink()  # a storage writer hides the newest logical backup
    plan = _plan(folder)
    assert plan.lost == [f"logical backup {made.logical}"] and made.logical in plan.incomplete
    recorded["physical"] = "20991231T235959Z-ffffff"  # recorded, and never seen by this destination since
    assert _plan(folder).lost == ["physical backup 20991231T235959Z-ffffff", f"logical backup {made.logical}"]


def test_a_backup_removed_whole_while_the_run_reads_is_gone_not_damage_and_a_file_removed_is_missing(made, tmp_path):
    import shutil

    folder = made.copy(tmp_path / "d")
    plan = _plan(folder)
    name, path = _chunk(made, folder)
    path.unlink()  # one file of a backup still there: damage
    assert [(f.file, f.problem) for f in backups.verify_backup(plan, made.logical).findings] == [(name, "missing")]
    shutil.rmtree(folder / made.logical)  # the whole folder, as prune deletes an old backup after the listing
    verdict = backups.verify_backup(plan, made.logical)
    assert (verdict.status, verdict.findings) == ("gone", [])
    (folder / made.physical / "manifest.json").unlink()  # the folder there, its manifest gone: not pruning
    assert backups.verify_backup(plan, made.physical).status == "missing"
