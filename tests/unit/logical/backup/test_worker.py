"""logical.backup.worker: the dump worker process and its answers. `ERR <code> <message>` read as a server error's
(code, message); and on a real server (the suite's target sandbox, a database of its own dropped after) a worker runs
statements, streams a query into parts of at most `part_rows` rows with the sum of their row hashes, and reports a
server error and a warning as errors (nothing of such a query is taken as complete)."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from lastline.core.errors import ConfigError
from lastline.core.servers import Server
from lastline.logical.backup.parts import open_part
from lastline.logical.backup.worker import BINARY, DumpWorker, WorkerError, WorkerWarning, _error, binary
from lastline.storage.file import FileStorage


@pytest.mark.parametrize(("answer", "error"), [
    ("ERR 1146 Table 'db.t' doesn't exist", (1146, "Table 'db.t' doesn't exist")),
    ("ERR 0 a dump query needs its columns and the row hash", (0, "a dump query needs its columns and the row hash")),
    ("ERR 2013", (2013, "ERR 2013")),
    ("ERR x y", (0, "y")),
    ("garbage", (0, "garbage")),
], ids=["server-error", "worker-error", "code-alone", "code-not-a-number", "no-err-at-all"])
def test_error(answer, error):
    assert _error(answer) == error


def test_binary_is_the_named_executable_or_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("LASTLINE_TSVDUMP", str(tmp_path / "not-there"))
    found = binary()  # falls through to the venv's or PATH's build
    assert os.path.basename(found) == BINARY and os.access(found, os.X_OK)
    built = tmp_path / "mine"
    built.write_bytes(open(found, "rb").read())
    built.chmod(0o755)
    monkeypatch.setenv("LASTLINE_TSVDUMP", str(built))
    assert binary() == str(built)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr("sys.prefix", str(tmp_path / "no-venv"))
    monkeypatch.delenv("LASTLINE_TSVDUMP")
    with pytest.raises(ConfigError, match="is not built"):
        binary()


DB = "unit_worker"


@contextlib.contextmanager
def worker_in(server: Server, db: str, label: str, *setup: str) -> Iterator[DumpWorker]:
    """A worker on `server` beside a database `db` of its own, made with the `setup` statements (committed); the
    database dropped and the worker closed after."""
    server.query(f"DROP DATABASE IF EXISTS {db}")
    server.query(f"CREATE DATABASE {db}")
    try:
        with server.session(autocommit=True) as cur:
            for statement in setup:
                cur.execute(statement)
        w = DumpWorker(server, label)
        try:
            yield w
        finally:
            w.close()
    finally:
        server.query(f"DROP DATABASE IF EXISTS {db}")


@pytest.fixture
def worker(target):
    """A worker on the target sandbox, and DB.t with 10 rows; dropped and closed after."""
    with worker_in(target.server(), DB, "unit", f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v VARCHAR(8) NULL)",
                   f"INSERT INTO {DB}.t SELECT seq, IF(seq % 3, CONCAT('v\\t', seq), NULL) FROM {DB}.seq_1_to_10") as w:
        yield w


def test_a_query_streams_into_parts_with_its_rows_hashes(worker, tmp_path):
    assert worker.connection_id > 0 and worker.version
    store = FileStorage(str(tmp_path) + "/")

    def new_part(i: int):
        key = f"b/{i:03d}.tsv"
        return key, open_part(store, key, "none")

    worker.execute("SET SESSION time_zone = '+00:00'")
    result = worker.dump(f"SELECT id, v, id * 1000 FROM {DB}.t ORDER BY id", 4, new_part)
    assert (result.rows, result.checksum) == (10, 55_000)
    assert [(p.key, p.rows, p.checksum) for p in result.parts] == [
        ("b/000.tsv", 4, 10_000), ("b/001.tsv", 4, 26_000), ("b/002.tsv", 2, 19_000)]
    first = store.read_bytes("b/000.tsv")
    assert first == b"1\tv\\t1\n2\tv\\t2\n3\t\\N\n4\tv\\t4\n"  # tabs escaped, NULL as \N
    assert all(p.bytes == len(store.read_bytes(p.key)) for p in result.parts)


def test_server_errors_and_warnings_are_errors(worker, tmp_path):
    store = FileStorage(str(tmp_path) + "/")
    parts = []

    def new_part(i: int):
        parts.append(f"b/{i}.tsv")
        return parts[-1], open_part(store, parts[-1], "none")

    with pytest.raises(WorkerError) as err:
        worker.execute(f"SELECT * FROM {DB}.missing")
    assert err.value.args[0] == 1146
    with pytest.raises(WorkerWarning, match="warning"):
        worker.dump(f"SELECT id, CAST('x1' AS UNSIGNED), 1 FROM {DB}.t", 100, new_part)
    assert parts and not any(store.exists(k) for k in parts)  # the part it had written is gone
    worker.execute("SELECT 1")  # the worker is still usable
