"""Exact at any size: values whose escaped form is past the server's default 16 MiB packet, every byte
value, hundreds of thousands of escapes; a verify that a wrong value in a chunk file cannot pass."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from lastline.core.errors import IntegrityError, StorageError
from lastline.logical.backup import stages as logical_backup
from lastline.logical.backup.dumper import Dumper, TableState
from lastline.logical.backup.parts import DirectPart, PartWriter, open_part
from lastline.logical.backup.snapshot import SESSION
from lastline.logical.backup.worker import DumpWorker, WorkerWarning
from lastline.logical.format import chunking, dialect
from lastline.logical.restore import stages as logical_restore
from lastline.manifest import LogicalManifest, read_manifest
from lastline.storage import open_storage

pytestmark = pytest.mark.e2e

MIB = 1 << 20
EVERY_BYTE = bytes(range(256)) * (18 * MIB // 256)  # 18 MiB, every byte value, escaped ~18.2 MiB
SHORT_LINES = b"abcdefg\n" * 2_000_000  # 16.0 MB (under the packet), escaped 18.0 MB (over it)
ESCAPES = b"a\nb\tc\\d" * 150_000  # 450,000 escapes in 1.05 MB
BACKSLASHES = b"\\" * 9_000_000  # 9 MB, escaped 18 MB


def _escape(value: bytes | None) -> bytes:
    """The dialect, written independently of the dump worker: what LOAD DATA reads back."""
    if value is None:
        return b"\\N"
    return value.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n")


ROWS = [
    # id, nullable LONGTEXT, NOT NULL LONGBLOB, nullable MEDIUMTEXT
    (1, SHORT_LINES, EVERY_BYTE, ESCAPES),
    (2, None, BACKSLASHES, b"\\N"),
    (3, b"NULL", b"", b""),
    (4, b"\t\n\\", b"\\N", None),
]


@pytest.fixture(scope="module")
def huge(logical_source):
    """`huge.docs` on the source, written with LOAD DATA (an INSERT of these values would not fit the
    default 16 MiB packet), under the server's default max_allowed_packet."""
    server = logical_source.server()
    assert int(server.query("SELECT @@max_allowed_packet")[0][0]) == 16 * MIB
    with tempfile.NamedTemporaryFile(suffix=".tsv") as fh:
        for row in ROWS:
            fh.write(b"\t".join([str(row[0]).encode(), *(_escape(v) for v in row[1:])]) + b"\n")
        fh.flush()
        conn = server.connect(local_infile=1)
        cur = conn.cursor()
        cur.execute("CREATE DATABASE huge CHARACTER SET utf8mb4")
        cur.execute(
            "CREATE TABLE huge.docs (id INT PRIMARY KEY, nullable_text LONGTEXT NULL, "
            "notnull_blob LONGBLOB NOT NULL, escapes MEDIUMTEXT NULL) ENGINE=InnoDB"
        )
        cur.execute(
            f"LOAD DATA LOCAL INFILE '{fh.name}' INTO TABLE huge.docs CHARACTER SET binary "
            "FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n'"
        )
        assert conn.warning_count() == 0
        conn.commit()
        conn.close()
    assert _values(server) == _expected()
    yield logical_source
    server.query("DROP DATABASE huge")


def _values(server) -> list[tuple]:
    """Per row and column: NULL-ness, length and MD5 (the values themselves are too big to compare in Python twice)."""
    cols = ("nullable_text", "notnull_blob", "escapes")
    sel = ", ".join(f"{c} IS NULL, LENGTH({c}), MD5({c})" for c in cols)
    return [tuple(r) for r in server.query(f"SELECT id, {sel} FROM huge.docs ORDER BY id")]


def _expected() -> list[tuple]:
    out = []
    for row in ROWS:
        vals: list = [row[0]]
        for v in row[1:]:
            vals += [1, None, None] if v is None else [0, len(v), hashlib.md5(v).hexdigest()]
        out.append(tuple(vals))
    return out


@pytest.fixture(scope="module")
def huge_backup(huge, tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("huge")
    plan = logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["huge"]})
    logical_backup.dump(plan)
    return dest


def _conf(dest: Path, **kw) -> dict:
    return {
        "target_conn_id": "t_ltarget", "backup": f"file://{dest}/latest", "redo_log_bytes": 128 << 20,
        "databases": ["huge"], "parallel": 2, "tune": True, "restart_allowed": False, "defer_indexes": True,
        "force": True, "aws_conn_id": None, **kw,
    }


def test_big_values_every_byte_and_many_escapes_round_trip_exactly(run_dag, huge, huge_backup, logical_target):
    m = read_manifest(open_storage(f"file://{huge_backup}"), next(p.name for p in huge_backup.iterdir()), "logical")
    (t,) = m.tables
    assert t.rows == len(ROWS) and m.checksum == dialect.CHECKSUM
    assert int(t.checksum) == sum(int(c.checksum) for c in t.chunks)
    assert int(logical_target.server().query("SELECT @@max_allowed_packet")[0][0]) == 16 * MIB
    state, tis, logs = run_dag("logical_restore", _conf(huge_backup))
    assert state == "success", tis
    assert "verify ok" in logs
    assert _values(logical_target.server()) == _expected()
    logical_target.server().query("DROP DATABASE huge")


def test_manifest_lists_every_file_with_its_sha256(huge_backup):
    (folder,) = [p for p in huge_backup.iterdir() if p.is_dir()]
    m = LogicalManifest.from_json((folder / "manifest.json").read_text())
    on_disk = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} - {"manifest.json"}
    assert {f.name for f in m.files} == on_disk
    assert {"schema.json", "schema.sql"} <= on_disk
    for f in m.files:
        data = (folder / f.name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (f.bytes, f.sha256), f.name


def _tampered_copy(src: Path, dst: Path) -> tuple[Path, LogicalManifest]:
    shutil.copytree(src, dst)
    (folder,) = [p for p in dst.iterdir() if p.is_dir()]
    return folder, LogicalManifest.from_json((folder / "manifest.json").read_text())


def test_a_wrong_value_in_a_chunk_file_is_refused_by_the_load_naming_chunk_and_table(run_dag, huge_backup, logical_target, tmp_path):
    """A chunk whose text was changed, its sha256 and size updated to match (as a dump bug would write
    them), passes its sha256; the load recomputes the row hash from the target's values inside the chunk's
    transaction, refuses it at once (no retry) naming chunk and table, and keeps nothing of it."""
    folder, m = _tampered_copy(huge_backup, tmp_path / "copy")
    chunk = m.tables[0].chunks[0]
    path = folder / chunk.file
    raw = subprocess.run(["zstd", "-dcq", str(path)], check=True, capture_output=True).stdout
    line3 = b"3\tNULL\t\t\n"
    assert line3 in raw
    raw = raw.replace(line3, b"3\tNULm\t\t\n")  # one byte of one value
    path.write_bytes(subprocess.run(["zstd", "-1", "-cq"], input=raw, check=True, capture_output=True).stdout)
    data = path.read_bytes()
    chunk.sha256, chunk.bytes = hashlib.sha256(data).hexdigest(), len(data)
    entry = m.file(chunk.file)
    entry.sha256, entry.bytes = chunk.sha256, chunk.bytes
    (folder / "manifest.json").write_text(m.to_json())
    state, tis, logs = run_dag("logical_restore", _conf(tmp_path / "copy"))
    assert state == "failed" and tis["load"] == "failed", tis
    assert f"{chunk.file} (huge.docs) loaded as 4 rows with checksum" in logs and "nothing of it was kept" in logs
    # a refusal is not retried: each lane that met it failed once (the reason itself is said again by the failure's
    # ERROR line, its record and its alert)
    assert "UP_FOR_RETRY" not in logs and logs.count("Task failed with exception") <= 2, "a refusal is not retried"
    server = logical_target.server()
    assert server.query("SELECT COUNT(*) FROM huge.docs") == [(0,)]
    assert server.query("SELECT COUNT(*) FROM _lastline.ledger WHERE backup_id = %s", (m.backup_id,)) == [(0,)]
    server.query("DROP DATABASE huge")


def test_a_table_checksum_that_its_chunks_do_not_add_up_to_fails_verify_naming_the_table(run_dag, huge_backup, logical_target, tmp_path):
    """Verify compares each table's kept check (the sum of its chunks' checks) with the manifest's own
    table checksum: a manifest whose table checksum was changed loads, then fails verify naming the table."""
    folder, m = _tampered_copy(huge_backup, tmp_path / "copy")
    m.tables[0].checksum = str(int(m.tables[0].checksum) + 1)
    (folder / "manifest.json").write_text(m.to_json())
    state, tis, logs = run_dag("logical_restore", _conf(tmp_path / "copy"))
    assert state == "failed" and tis["verify"] == "failed", tis
    assert "verify failed" in logs and f"huge.docs: 4 rows, checksum {int(m.tables[0].checksum) - 1}" in logs
    logical_target.server().query("DROP DATABASE huge")


def test_a_changed_schema_file_is_refused_before_anything_is_touched(huge_backup, logical_target, tmp_path):
    folder, m = _tampered_copy(huge_backup, tmp_path / "copy")
    schema = json.loads((folder / "schema.json").read_text())
    schema["tables"][0]["create"] += " COMMENT='changed'"
    (folder / "schema.json").write_text(json.dumps(schema))
    with pytest.raises(IntegrityError, match="schema.json has sha256 .* the manifest says"):
        logical_restore.preflight(_conf(tmp_path / "copy"))
    assert not logical_target.server().query("SHOW DATABASES LIKE 'huge'")


def test_a_warning_on_a_dump_query_fails_the_chunk_naming_table_range_and_column(huge, tmp_path):
    """A query that makes the server warn (here: a text column read through CAST AS UNSIGNED, as a wrong
    encoding would) fails the chunk; nothing of it is kept."""
    server = huge.server()
    conn = server.connect()
    try:
        (plan,) = chunking.table_plans(conn.cursor(), ["huge"])
    finally:
        conn.close()
    col = next(c for c in plan.columns if c.name == "escapes")
    col.encoding = "bit"  # CAST(`escapes` AS UNSIGNED): 'a\nb...' warns 1292 (truncated incorrect INTEGER value)
    storage = open_storage(f"file://{tmp_path}")
    state = TableState(plan)
    dumper = Dumper(server, storage, "x", "zstd", 1000, [state], 4)
    dumper.put("chunk", state, ["2"], None)
    worker = DumpWorker(server)
    try:
        worker.execute(SESSION)
        dumper.run([worker])
    except IntegrityError as exc:
        text = str(exc)
    else:
        pytest.fail("a warning on a dump query did not fail the chunk")
    finally:
        worker.close()
    assert "huge.docs (chunk 0: (id) from (2) to the end)" in text
    assert "1292" in text and "column `escapes`" in text
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # no part file taken for complete


def test_worker_reports_warnings_and_errors_by_code(huge, tmp_path):
    storage = open_storage(f"file://{tmp_path}")
    worker = DumpWorker(huge.server())
    try:
        parts = lambda i: (f"p{i}.tsv", PartWriter(storage, f"p{i}.tsv", "none"))  # noqa: E731
        with pytest.raises(WorkerWarning, match="1292"):
            worker.dump("SELECT CAST('x' AS UNSIGNED), 1", 10, parts)
        with pytest.raises(Exception) as err:
            worker.dump("SELECT nosuch FROM huge.docs", 10, parts)
        assert err.value.args[0] == 1054
        result = worker.dump("SELECT id, escapes, 7 FROM huge.docs ORDER BY id", 3, parts)
        assert (result.rows, result.checksum, [p.rows for p in result.parts]) == (4, 28, [3, 1])
        assert (tmp_path / "p1.tsv").read_bytes() == b"4\t\\N\n"
        assert (tmp_path / "p0.tsv").read_bytes().startswith(b"1\t")  # the parts of the warned query were discarded
    finally:
        worker.close()


def test_worker_writes_a_local_part_file_itself_and_what_it_reports_is_the_file_s(huge, tmp_path):
    """Into a local folder the worker writes each part's file through the descriptor it is handed (no pipe, no
    thread): the bytes and sha256 it reports are the file's, zstd or raw, and no .partial is left; a file that does
    not hold as many bytes as the worker wrote is refused, whichever part it is, and a write the destination
    refuses is named as the destination's: nothing of either stays."""
    storage = open_storage(f"file://{tmp_path}")
    worker = DumpWorker(huge.server())
    try:
        for compression, suffix in (("none", ""), ("zstd", ".zst")):
            made: list = []

            def parts(i: int, compression=compression, suffix=suffix, made=made) -> tuple:
                made.append(open_part(storage, f"{compression}/p{i}.tsv{suffix}", compression))
                return made[-1].key, made[-1]

            result = worker.dump("SELECT id, escapes, 7 FROM huge.docs ORDER BY id", 3, parts, compression)
            assert made and all(isinstance(p, DirectPart) for p in made)
            assert [p.rows for p in result.parts] == [3, 1] and result.checksum == 28
            for p in result.parts:
                data = (tmp_path / p.key).read_bytes()
                assert (p.bytes, p.sha256) == (len(data), hashlib.sha256(data).hexdigest())
            if compression == "zstd":
                raw = subprocess.run(["zstd", "-dc", str(tmp_path / result.parts[1].key)], capture_output=True, check=True).stdout
                assert raw == b"4\t\\N\n"
            assert sorted(p.name for p in (tmp_path / compression).iterdir()) == [f"p{i}.tsv{suffix}" for i in (0, 1)]

        class Cut(DirectPart):  # the file loses its last byte between the worker's write and the commit
            def commit(self) -> tuple[int, str]:
                os.ftruncate(self.write_fd, max(self.bytes - 1, 0))
                return super().commit()

        def cut(i: int) -> tuple:
            writer = storage.writer(f"cut/p{i}.tsv", durable=False)
            return f"cut/p{i}.tsv", Cut(f"cut/p{i}.tsv", writer, writer.fileno())

        for part_rows in (10, 3):  # the query's only part; its first part, found short once the second one ended
            worker.close()  # a fresh worker each time: a dump that failed mid-query leaves its answers unread
            worker = DumpWorker(huge.server())
            with pytest.raises(StorageError, match=r"the file holds \d+ bytes, the dump worker wrote"):
                worker.dump("SELECT id, escapes, 7 FROM huge.docs ORDER BY id", part_rows, cut)
            assert not [p for p in (tmp_path / "cut").rglob("*") if p.is_file()]
        worker.close()
        worker = DumpWorker(huge.server())

        handed: list[int] = []

        def refused(i: int) -> tuple:  # the worker is handed a descriptor it cannot write through
            writer = storage.writer(f"ro/p{i}.tsv", durable=False)
            handed.append(os.open(writer.tmp, os.O_RDONLY | os.O_CLOEXEC))
            return f"ro/p{i}.tsv", DirectPart(f"ro/p{i}.tsv", writer, handed[-1])

        try:
            with pytest.raises(StorageError, match=r"cannot write .*ro/p0\.tsv\.[0-9a-f]{16}\.partial: Bad file descriptor \(check the destination\)"):
                worker.dump("SELECT id, escapes, 7 FROM huge.docs ORDER BY id", 10, refused)
        finally:
            for fd in handed:
                os.close(fd)
        assert not [p for p in (tmp_path / "ro").rglob("*") if p.is_file()]
    finally:
        worker.close()


def test_values_with_millions_of_escapes_dump_in_linear_time(huge, tmp_path):
    """Values with 1M and 2M escapes dump in well under a second each: REPLACE in the server, quadratic in a
    value's escapes (2.3 s for 30k newlines, 7.0 s for 60k), would need hours. (How the time grows with
    the size is measured by `make bench-logical`, not asserted here: timings are not tests.)"""
    server = huge.server()
    conn = server.connect()
    cur = conn.cursor()
    cur.execute("CREATE TABLE huge.lines (id INT PRIMARY KEY, body LONGTEXT NOT NULL)")
    cur.execute("INSERT INTO huge.lines VALUES (1, REPEAT('ab\\n', 1000000)), (2, REPEAT('ab\\n', 2000000))")
    conn.commit()
    conn.close()
    storage = open_storage(f"file://{tmp_path}")
    worker = DumpWorker(server)
    try:
        took = []
        for i in (1, 2):
            t0 = time.monotonic()
            for _ in range(3):
                r = worker.dump(f"SELECT body, 0 FROM huge.lines WHERE id = {i}", 10,
                                lambda p, i=i: (f"l{i}.tsv", PartWriter(storage, f"l{i}.tsv", "none")))
            took.append((time.monotonic() - t0) / 3)
            assert r.parts[0].raw_bytes == i * 4_000_000 + 1
    finally:
        worker.close()
        server.query("DROP TABLE huge.lines")
    assert max(took) < 10, took
