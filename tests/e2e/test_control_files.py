"""Control files read from backup storage are untrusted input of any size and shape (issue 42): a deeply nested or
oversized manifest beside good ones is passed over by `latest`, prune and the binlog archive's check, refused by name
for a restore that names it, and read within bounded memory whatever its size."""
from __future__ import annotations

import json
import os
import tracemalloc
from datetime import timedelta

import pytest

from lastline.core.errors import IntegrityError
from lastline.manifest import MANIFEST, complete_backups, prune_backups, read_manifest, resolve_backup
from lastline.pitr import check
from lastline.storage import open_storage

GOOD = ["20260101T000000Z", "20260102T000000Z", "20260103T000000Z"]
NESTED = "20260104T000000Z"  # newer than every good one: `latest` meets it first
OVERSIZED = "20260105T000000Z"
DEEP = "20260106T000000Z"  # parses without a RecursionError, but deeper than lastline ever writes


def _good(storage, backup_id: str) -> None:
    """A physical manifest as lastline writes it (signed with the tests' key), read back to prove it is whole."""
    from lastline.manifest import PhysicalManifest, write_manifest

    write_manifest(storage, PhysicalManifest(
        backup_id=backup_id, source_conn_id="t_source", server_version="11.4", tool_version="11.4", artifact="backup.xb.zst",
        compression="zstd", bytes=1, sha256="0" * 64, started_at="2026-01-01T00:00:00+00:00",
        finished_at="2026-01-01T00:00:01+00:00", seconds=1.0, mb_per_s=1.0, parallel=1, datadir_bytes=1))


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A destination of three good physical backups and three broken manifests newer than them; a 1 MB cap."""
    monkeypatch.setenv("LASTLINE_CONTROL_FILE_MAX_MB", "1")
    storage = open_storage(f"file://{tmp_path}")
    for b in GOOD:
        _good(storage, b)
    (tmp_path / NESTED).mkdir()
    (tmp_path / NESTED / MANIFEST).write_text('{"kind": "physical", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    (tmp_path / OVERSIZED).mkdir()
    with open(tmp_path / OVERSIZED / MANIFEST, "wb") as fh:  # 342 MB, as in the finding (sparse: no disk used)
        fh.write(b'{"kind": "physical", "pad": "')
        fh.truncate(342 << 20)
    (tmp_path / DEEP).mkdir()
    (tmp_path / DEEP / MANIFEST).write_text('{"kind": "physical", "x": ' + "[" * 200 + "]" * 200 + "}")
    return tmp_path


def test_latest_prune_and_the_archive_check_pass_over_nested_and_oversized_manifests(folder, caplog):
    storage = open_storage(f"file://{folder}")
    caplog.set_level("WARNING")
    assert resolve_backup(f"file://{folder}/latest", kind="physical")[1] == GOOD[-1]
    assert complete_backups(storage, "physical") == GOOD
    for bad in (NESTED, OVERSIZED, DEEP):
        assert f"{bad}/{MANIFEST}" in caplog.text  # each named in the log, so someone looks at it
    assert "nested too deep" in caplog.text and "over the 1,048,576 bytes" in caplog.text
    # prune deletes beyond keep among the good ones only: an unreadable manifest is not "incomplete"
    deleted = prune_backups(storage, "physical", keep=1, grace=timedelta(hours=1))
    assert deleted == GOOD[:-1]
    assert {NESTED, OVERSIZED, DEEP, GOOD[-1]} <= set(storage.list_backups())
    # the binlog archive's check (every physical backup's reach) still runs and lists the good base only
    result = check.check(storage, max_age=3600)
    assert [b["backup_id"] for b in result["bases"]] == [GOOD[-1]]
    assert result["problems"] == ["the binlog archive is empty: no base backup can be rolled forward"]


def test_a_restore_that_names_a_broken_manifest_is_refused_by_name(folder):
    storage = open_storage(f"file://{folder}")
    for bad, why in ((NESTED, "nested too deep"), (OVERSIZED, "over the 1,048,576 bytes"), (DEEP, "nested more than")):
        with pytest.raises(IntegrityError, match=f"{bad}/{MANIFEST} cannot be read .*{why}.*never restored"):
            read_manifest(storage, bad, "physical")
    assert read_manifest(storage, GOOD[-1], "physical").backup_id == GOOD[-1]


@pytest.mark.parametrize("size_known", [True, False])
def test_reading_a_huge_manifest_takes_bounded_memory(folder, monkeypatch, size_known):
    """342 MB read within a few MB: refused from its size, or (a backend that cannot tell it first) as soon as more
    than the cap has arrived; never the whole object."""
    storage = open_storage(f"file://{folder}")
    read = []
    if not size_known:
        monkeypatch.setattr(storage, "size_if_exists", lambda key: None)
        real = storage.reader
        monkeypatch.setattr(storage, "reader", lambda key, chunk=1 << 20: (read.append(len(c)) or c for c in real(key, chunk)))
    tracemalloc.start()
    try:
        with pytest.raises(IntegrityError, match=f"{OVERSIZED}/{MANIFEST}"):
            read_manifest(storage, OVERSIZED, "physical")
        assert resolve_backup(f"file://{folder}/latest", kind="physical")[1] == GOOD[-1]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak / 1e6:.1f} MB to refuse a 342 MB manifest"
    if not size_known:  # two reads (the named restore's, then `latest`'s), each stopped one chunk past the cap
        assert 0 < sum(read) <= 2 * (2 << 20)


def test_archive_control_files_nested_or_oversized_are_refused_not_crashed(tmp_path, monkeypatch):
    from lastline.pitr import archive

    monkeypatch.setenv("LASTLINE_CONTROL_FILE_MAX_MB", "1")
    storage = open_storage(f"file://{tmp_path}")
    os.makedirs(tmp_path / "binlogs" / "1-000001-0123abcd")
    (tmp_path / "binlogs" / "branches.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(IntegrityError, match="branches.json is unreadable"):
        archive.branches(storage)
    (tmp_path / "binlogs" / "branches.json").write_text(json.dumps({"branches": [{"id": "1-000001-0123abcd"}]}))
    (tmp_path / "binlogs" / "1-000001-0123abcd" / "chain.json").write_bytes(b'{"entries": "' + b"x" * (2 << 20) + b'"}')
    with pytest.raises(IntegrityError, match=r"chain.json is unreadable \(2,097,16. bytes, over the 1,048,576"):
        archive.read_branch(storage, "1-000001-0123abcd")


def test_an_oversized_manifest_in_s3_is_refused_without_downloading_it(s3_server, monkeypatch):
    """On S3 the size comes first (HEAD): nothing of an oversized manifest is downloaded; where no size is known, the
    download stops one chunk past the cap and the connection is closed."""
    monkeypatch.setenv("LASTLINE_CONTROL_FILE_MAX_MB", "1")
    prefix = f"s3://backups/control-{os.getpid()}"
    storage = open_storage(prefix, "t_s3")
    _good(storage, GOOD[0])
    storage.write_bytes(f"{OVERSIZED}/{MANIFEST}", b'{"kind": "physical", "pad": "' + b"x" * (5 << 20) + b'"}')
    got = []
    real = storage.client.get_object
    monkeypatch.setattr(storage.client, "get_object", lambda **kw: got.append(kw["Key"]) or real(**kw))
    with pytest.raises(IntegrityError, match=f"{OVERSIZED}/{MANIFEST} cannot be read .*5,242,9.. bytes, over the 1,048,576"):
        read_manifest(storage, OVERSIZED, "physical")
    assert resolve_backup(f"{prefix}/latest", "t_s3", "physical")[1] == GOOD[0]
    assert not [k for k in got if OVERSIZED in k]  # refused from its size alone
    monkeypatch.setattr(storage, "size_if_exists", lambda key: None)
    read = []
    real_reader = storage.reader
    monkeypatch.setattr(storage, "reader", lambda key, chunk=1 << 20: (read.append(len(c)) or c
                                                                       for c in real_reader(key, chunk)))
    with pytest.raises(IntegrityError, match="over the 1,048,576 bytes a control file may have"):
        read_manifest(storage, OVERSIZED, "physical")
    assert sum(read) <= 2 << 20
