"""logical.backup.snapshot: the lock method each server version gets, and on a real server (the suite's target
sandbox, a database of its own dropped after) a pool of dump workers that share one snapshot: a row committed after
it opened is seen by none of them, and the locks are gone once it is open."""
from __future__ import annotations

import pytest

from lastline.core.errors import PreflightError
from lastline.logical.backup.parts import open_part
from lastline.logical.backup.snapshot import Guard, SnapshotPool, instance_lock, snapshot_method
from lastline.logical.backup.worker import DumpWorker
from lastline.storage.file import FileStorage


@pytest.mark.parametrize(("version", "asked", "method"), [
    ("11.4.2-MariaDB", "auto", "backup_stage"),
    ("10.4.1-MariaDB-log", "auto", "backup_stage"),
    ("10.4.0-MariaDB", "auto", "ftwrl"),
    ("10.3.39-MariaDB", "auto", "ftwrl"),
    ("8.0.36", "auto", "ftwrl"),
    ("5.5.5-10.6.4-MariaDB", "auto", "ftwrl"),
    ("11.4.2-MariaDB", "ftwrl", "ftwrl"),
    ("10.6.4-MariaDB", "backup_stage", "backup_stage"),
    ("garbage", "auto", "ftwrl"),
], ids=["mariadb-11", "first-with-stages", "just-before", "mariadb-10.3", "mysql-8", "replication-prefix-read-as-5.5",
        "ftwrl-asked", "backup-stage-asked", "unreadable-version"])
def test_snapshot_method(version, asked, method):
    assert snapshot_method(version, asked) == method


@pytest.mark.parametrize(("version", "asked", "refusal"), [
    ("8.0.36", "backup_stage", "needs MariaDB 10.4.1"),
    ("10.3.39-MariaDB", "backup_stage", "needs MariaDB 10.4.1"),
    ("11.4.2-MariaDB", "flush", "choose one of auto, backup_stage, ftwrl"),
], ids=["stages-on-mysql", "stages-on-old-mariadb", "unknown-method"])
def test_snapshot_method_refuses(version, asked, refusal):
    with pytest.raises(PreflightError, match=refusal):
        snapshot_method(version, asked)


@pytest.mark.parametrize(("version", "locks"), [
    ("8.0.0", True), ("8.4.1-commercial", True), ("5.7.44-log", False), ("10.11.6-MariaDB", False), ("", False),
], ids=["mysql-8.0", "mysql-8.4", "mysql-5.7", "mariadb", "unknown"])
def test_instance_lock(version, locks):
    assert instance_lock(version) is locks


DB = "unit_snapshot"


def _commit(server, sql: str) -> None:
    with server.session(autocommit=True) as cur:
        cur.execute(sql)


@pytest.fixture
def server(target):
    server = target.server()
    server.query(f"DROP DATABASE IF EXISTS {DB}")
    server.query(f"CREATE DATABASE {DB}")
    try:
        server.query(f"CREATE TABLE {DB}.t (id INT PRIMARY KEY) ENGINE=InnoDB")
        _commit(server, f"INSERT INTO {DB}.t VALUES (1), (2)")
        yield server
    finally:
        server.query(f"DROP DATABASE IF EXISTS {DB}")


def _rows(worker: DumpWorker, tmp_path, name: str) -> int:
    store = FileStorage(str(tmp_path / name) + "/")
    return worker.dump(f"SELECT id, id FROM {DB}.t", 100, lambda i: (f"{i}", open_part(store, f"{i}", "none"))).rows


@pytest.mark.parametrize("method", ["backup_stage", "ftwrl"])
def test_every_worker_reads_the_one_snapshot(server, tmp_path, method):
    seen = []
    with SnapshotPool(server, 2, Guard(wait=10), method=method) as pool:
        coords = pool.open(lambda: seen.append(server.query(f"SELECT COUNT(*) FROM {DB}.t")[0][0]))
        assert pool.method == method and seen == [2]  # `frozen` ran once, under the lock
        assert coords.server_version == pool.version and "MariaDB" in coords.server_version
        _commit(server, f"INSERT INTO {DB}.t VALUES (3)")  # commits go on once it is open
        assert [_rows(w, tmp_path, f"w{i}") for i, w in enumerate(pool.workers)] == [2, 2]
        assert 0 <= pool.lock_seconds <= pool.writes_blocked_seconds
    assert pool.workers == [] and pool.control is None
    fresh = DumpWorker(server, "after")
    try:
        assert _rows(fresh, tmp_path, "after") == 3
    finally:
        fresh.close()
