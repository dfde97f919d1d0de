"""lastline's LOAD DATA LOCAL handler (logical.infile, native/infile.c) on a real server: zstd chunks
decompressed inside the client library give the rows the decompressor process gives; a truncated or
damaged chunk fails the statement with its fault named and nothing kept; a server that asks for any file
but the offered one gets nothing."""
from __future__ import annotations

import os
import subprocess
import threading

import pytest

from lastline.logical import infile
from lastline.logical.load import _unblock

ROWS = b"".join(b"%d\tvalue \\\\ %d\\n\twith a tab\\t and \\N-like text\n" % (i, i * 7) for i in range(300_000))
TABLE = "infile_t"

pytestmark = pytest.mark.skipif(infile.library_path() is None, reason="liblastline-infile.so is not built (make setup)")


def zstd(data: bytes) -> bytes:
    return subprocess.run(["zstd", "-q", "-1", "-c"], input=data, capture_output=True, check=True).stdout


@pytest.fixture
def conn(target):
    c = target.server().connect(local_infile=1)
    cur = c.cursor()
    cur.execute("CREATE DATABASE IF NOT EXISTS infile_db")
    cur.execute(f"DROP TABLE IF EXISTS infile_db.{TABLE}")
    cur.execute(f"CREATE TABLE infile_db.{TABLE} (id INT PRIMARY KEY, v TEXT, w TEXT) ENGINE=InnoDB")
    c.autocommit(False)
    yield c
    c.rollback()
    cur.execute(f"DROP TABLE IF EXISTS infile_db.{TABLE}")
    c.close()


def load(conn, tmp_path, data: bytes, name: str = "chunk.tsv.zst", offer: str | None = None, sql_path: str | None = None) -> int:
    """LOAD DATA LOCAL of `data` written into a FIFO called `name` (the handler offered `offer`, default the FIFO)."""
    handler = infile.install(conn, "zstd")
    assert handler is not None
    fifo = str(tmp_path / name)
    os.mkfifo(fifo)
    handler.offer(offer or fifo)

    def pump() -> None:
        try:
            with open(fifo, "wb") as fh:
                fh.write(data)
        except BrokenPipeError:
            pass

    th = threading.Thread(target=pump, daemon=True)
    th.start()
    cur = conn.cursor()
    try:
        cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE infile_db.{TABLE} CHARACTER SET binary", (sql_path or fifo,))
        return cur.rowcount
    finally:
        _unblock(fifo)  # if the handler never opened the FIFO, the writer goes
        th.join(10)


def table_sum(conn) -> tuple:
    cur = conn.cursor()
    cur.execute(f"SELECT COUNT(*), SUM(CRC32(CONCAT_WS('|', id, v, w))) FROM infile_db.{TABLE}")
    return cur.fetchone()


def test_decompressed_in_the_client_the_rows_are_those_of_the_raw_file(conn, tmp_path):
    raw = tmp_path / "raw.tsv"
    raw.write_bytes(ROWS)
    cur = conn.cursor()
    cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE infile_db.{TABLE} CHARACTER SET binary", (str(raw),))
    expected = table_sum(conn)
    conn.rollback()
    assert table_sum(conn)[0] == 0
    # two frames back to back, as zstd writes a file made of concatenated parts
    half = ROWS.index(b"\n", len(ROWS) // 2) + 1
    assert load(conn, tmp_path, zstd(ROWS[:half]) + zstd(ROWS[half:])) == 300_000
    assert table_sum(conn) == expected


@pytest.mark.parametrize("damage", ["truncated", "flipped", "trailing garbage"])
def test_a_damaged_chunk_fails_its_statement_with_the_fault_named(conn, tmp_path, damage):
    packed = bytearray(zstd(ROWS))
    if damage == "truncated":
        packed = packed[: len(packed) * 2 // 3]
    elif damage == "flipped":
        packed[len(packed) // 2] ^= 0xFF
    else:
        packed += b"not a zstd frame"
    with pytest.raises(Exception, match=r"lastline-infile: cannot be decompressed: ") as err:
        load(conn, tmp_path, bytes(packed))
    if damage == "truncated":
        assert "it ends inside a zstd frame" in str(err.value)
    conn.rollback()
    assert table_sum(conn)[0] == 0  # the caller's rollback keeps nothing of it


def test_a_server_asking_for_another_file_gets_nothing(conn, tmp_path):
    secret = tmp_path / "secret.tsv"
    secret.write_bytes(b"1\tsecret\tvalue\n")
    with pytest.raises(Exception, match="did not offer"):
        load(conn, tmp_path, zstd(ROWS), sql_path=str(secret))
    conn.rollback()
    assert table_sum(conn)[0] == 0


def test_without_the_built_library_the_loader_keeps_the_decompressor_process(monkeypatch, conn):
    monkeypatch.setenv("LASTLINE_INFILE_LIB", "off")  # as if it were not built
    infile._library.cache_clear()
    try:
        assert infile.install(conn, "zstd") is None
    finally:
        infile._library.cache_clear()
    assert infile.install(conn, "pigz") is None  # only zstd is decompressed in the client
