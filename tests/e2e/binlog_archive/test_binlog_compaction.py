"""The binlog archive's compaction (issue 47), on real servers: the held stream, with a small merge_after_segments,
merges the open file's segments several times and a file's whole once it closes; after the grace the replaced objects
are gone; the archive stays the source's binlogs byte for byte with few segments; backup_verify finds it ok and a
point-in-time restore to latest equals the source. The same sealed (the encryption key connection set). A binlog
written anew under an archived name (RESET MASTER) is never merged over the archived bytes."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from tests.e2e.point_in_time_restore.test_encrypted_pitr import _state

from conftest import set_conn
from lastline import connections
from lastline.physical import backup as physical_backup
from lastline.pitr import archive, catalog
from lastline.pitr.sealed import Seals
from lastline.pitr.window import segment_bytes
from lastline.storage import open_storage
from lastline.verify import archive as verify_archive
from lastline.verify import backups as verify_backups
from lastline_dev.keys import encryption_connection
from lastline_dev.sandbox import Instance

from .test_binlog_archive import _archived, _on_disk, _same
from .test_binlog_stream import Streaming

pytestmark = pytest.mark.e2e
GRACE = 3


@pytest.fixture(scope="module")
def servers(sandbox_root):
    src, tgt = Instance(sandbox_root, "bcompact_src"), Instance(sandbox_root, "bcompact_tgt")
    src.create()
    tgt.create()
    set_conn("t_bc_src", src)
    set_conn("t_bc_tgt", tgt)
    try:
        yield src, tgt
    finally:
        src.destroy()
        tgt.destroy()


def _load(src: Instance, stop: threading.Event) -> None:
    with src.server().session() as cur:
        i = 0
        while not stop.is_set():
            cur.execute("INSERT INTO shop.t (v) VALUES (%s)", (f"row {i} " + "y" * 80,))
            cur.connection.commit()
            i += 1
            time.sleep(0.05)


def _insert(server, value: str) -> None:
    with server.session() as cur:
        cur.execute("INSERT INTO shop.t (v) VALUES (%s)", (value,))
        cur.connection.commit()


def _stored(dest: Path, bid: str) -> dict[str, list[str]]:
    return {d.name: sorted(p.name for p in d.iterdir()) for d in (dest / "binlogs" / bid).iterdir() if d.is_dir()}


@pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])
def test_the_stream_merges_segments_deletes_after_the_grace_and_restores_exactly(servers, run_dag, tmp_path,
                                                                                monkeypatch, sealed):
    src, tgt = servers
    if sealed:
        encryption_connection(monkeypatch.setenv, "lastline_encryption_compact", "bc-k1", "5e" * 32)
    server = connections.server("t_bc_src")
    server.query("DROP DATABASE IF EXISTS shop")
    server.query("RESET MASTER")
    server.query("CREATE DATABASE shop")
    server.query("CREATE TABLE shop.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(120))")
    dest = tmp_path / "dest"
    storage = open_storage(f"file://{dest}")
    archive.ship(server, storage)
    plan = physical_backup.preflight({"source_conn_id": "t_bc_src", "destination": f"file://{dest}"})
    physical_backup.finish(plan, physical_backup.stream(plan))
    held = Streaming({"source_conn_id": "t_bc_src", "destination": f"file://{dest}", "ship_every_seconds": 0.25,
                      "stream_minutes": 10, "merge_after_segments": 5, "retired_grace_seconds": GRACE})
    stop = threading.Event()
    writer = threading.Thread(target=_load, args=(src, stop))
    writer.start()
    merged_at_some_point = False
    try:
        for _ in range(3):  # three files written while streaming, each closed by a rotation
            t0 = time.monotonic()
            while time.monotonic() - t0 < 5:
                time.sleep(0.5)
                chain = catalog.read_branch(storage, catalog.branches(storage)[-1]["id"])
                merged_at_some_point |= bool(chain.retired)
            server.query("FLUSH BINARY LOGS")
        time.sleep(3)
    finally:
        stop.set()
        writer.join()
    try:
        time.sleep(GRACE + 7)  # idle: a round every 5 s still merges what is due and deletes what the grace let go
    finally:
        result = held.end()
    assert result["failed"] == 0 and not result["holes"] and not result["forks"], result
    assert merged_at_some_point
    bid = catalog.branches(storage)[-1]["id"]
    chain = catalog.read_branch(storage, bid)
    closed = [e for e in chain.entries if e.closed]
    assert len(closed) >= 3 and all(len(e.segments) == 1 for e in closed), [(e.name, e.segments) for e in closed]
    assert sum(bool(e.segments[0].get("key")) for e in closed) >= 3
    assert len(chain.entries[-1].segments) <= 1 + 5 + 2
    assert sum(len(e.segments) for e in chain.entries) <= 2 * len(chain.entries) + 6
    assert sealed == all(s.get("sealed", False) for e in closed[1:] for s in e.segments)
    assert chain.retired == [] or all(time.time() - r["at"] < GRACE + 6 for r in chain.retired)
    stored = _stored(dest, bid)
    retired = {}
    for r in chain.retired:
        retired.setdefault(r["file"], []).extend(r["keys"])
    for e in chain.entries:  # every object the chain names, and none it does not (but the not yet deleted)
        assert stored[e.name] == sorted([catalog.object_name(s) for s in e.segments] + retired.get(e.name, [])), e.name
    _, now = archive.source_files(server)
    seals = Seals().with_branch(bid, chain.envelope)  # opened with the deployment's key where sealed
    files = {e.name: b"".join(segment_bytes(storage, bid, e.name, s, seals) for s in e.segments) for e in chain.entries}
    assert all(_same(files[f.name], _on_disk(src, f.name, f.size)) for f in now)
    found = verify_archive.verify_archive(verify_backups.preflight({"destination": f"file://{dest}"}))
    assert found.status == "ok", found.findings
    state, tis, logs = run_dag("point_in_time_restore", {
        "target_conn_id": "t_bc_tgt", "destination": f"file://{dest}", "until": "latest", "base": plan.backup_id,
        "base_kind": "physical", "databases": [], "branch": "", "replay_method": "auto", "parallel": 2, "force": True,
        "restore_into_source": "", "aws_conn_id": None})
    assert state == "success", (tis, logs[-3000:])
    assert _state(tgt) == _state(src)


def test_a_binlog_written_anew_under_an_archived_name_is_never_merged_over_it(servers, tmp_path):
    src, _ = servers
    server = connections.server("t_bc_src")
    server.query("CREATE DATABASE IF NOT EXISTS shop")
    server.query("CREATE TABLE IF NOT EXISTS shop.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(120))")
    server.query("RESET MASTER")
    dest = tmp_path / "dest"
    storage = open_storage(f"file://{dest}")
    for i in range(4):  # the first file archived in 4 segments, no stream: nothing merged
        _insert(server, f"before {i}")
        archive.ship(server, storage)
    bid = catalog.branches(storage)[-1]["id"]
    before = _stored(dest, bid)
    assert len(catalog.read_branch(storage, bid).entries[0].segments) == 4
    server.query("RESET MASTER")  # the same name, written anew
    for i in range(30):
        _insert(server, f"after {i} {'z' * 90}")
    server.query("FLUSH BINARY LOGS")
    held = Streaming({"source_conn_id": "t_bc_src", "destination": f"file://{dest}", "ship_every_seconds": 0.25,
                      "stream_minutes": 10, "merge_after_segments": 2, "retired_grace_seconds": 0})
    try:
        time.sleep(6)
    finally:
        result = held.end()
    assert result["forks"] and result["branch"] != bid, result
    assert _stored(dest, bid) == before  # the old branch's objects, untouched
    old = catalog.read_branch(storage, bid)
    assert len(old.entries[0].segments) == 4 and old.retired == []
    files = _archived(storage, bid)
    assert b"before 3" in files[old.entries[0].name]
