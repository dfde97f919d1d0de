"""lastline's LOAD DATA LOCAL handler (logical.format.infile, native/infile.c) on a real server: zstd, gzip (as pigz
writes it) and uncompressed chunks give the rows of the raw file; a truncated or damaged chunk fails the
statement with its fault named and nothing kept; a chunk giving more than its declared raw size fails; a
server that asks for any file but the offered one gets nothing, whatever the codec. (The handler's pieces that need no
server, measure and the refusal without the built library, are in tests/unit/logical/format/test_infile.py.)"""
from __future__ import annotations

import hashlib
import os
import subprocess
import threading

import pytest

from lastline.core.sql import qualified
from lastline.logical.format import infile
from lastline.logical.format.infile import unblock as _unblock

ROWS = b"".join(b"%d\tvalue \\\\ %d\\n\twith a tab\\t and \\N-like text\n" % (i, i * 7) for i in range(300_000))
TABLE = "infile_t"
HALF = ROWS.index(b"\n", len(ROWS) // 2) + 1


def zstd(data: bytes) -> bytes:
    return subprocess.run(["zstd", "-q", "-1", "-c"], input=data, capture_output=True, check=True).stdout


def pigz(data: bytes) -> bytes:
    return subprocess.run(["pigz", "--fast", "-c", "-p", "2"], input=data, capture_output=True, check=True).stdout


PACK = {"zstd": zstd, "pigz": pigz, "none": lambda data: data}


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


def load(conn, tmp_path, data: bytes, codec: str = "zstd", max_bytes: int = len(ROWS), offer: str | None = None,
         sql_path: str | None = None, handler: infile.Handler | None = None) -> int:
    """LOAD DATA LOCAL of `data` written into a FIFO (the handler offered `offer`, default the FIFO, as `codec`)."""
    handler = handler or infile.install(conn)
    fifo = str(tmp_path / "chunk")
    os.mkfifo(fifo)
    handler.offer(offer or fifo, codec, max_bytes)

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
        os.unlink(fifo)


def table_sum(conn) -> tuple:
    cur = conn.cursor()
    cur.execute(f"SELECT COUNT(*), SUM(CRC32(CONCAT_WS('|', id, v, w))) FROM infile_db.{TABLE}")
    return cur.fetchone()


@pytest.fixture
def expected(conn, tmp_path) -> tuple:
    """The table's sum with ROWS loaded by the client library's own handler from a plain file (then rolled back)."""
    raw = tmp_path / "raw.tsv"
    raw.write_bytes(ROWS)
    cur = conn.cursor()
    cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE infile_db.{TABLE} CHARACTER SET binary", (str(raw),))
    found = table_sum(conn)
    conn.rollback()
    assert table_sum(conn)[0] == 0
    return found


@pytest.mark.parametrize("codec", ["zstd", "pigz", "none"])
def test_every_codec_gives_the_rows_of_the_raw_file(conn, tmp_path, expected, codec):
    # two frames / gzip members back to back, as a file made of concatenated parts
    packed = PACK[codec](ROWS[:HALF]) + PACK[codec](ROWS[HALF:])
    assert load(conn, tmp_path, packed, codec) == 300_000
    assert table_sum(conn) == expected


@pytest.mark.parametrize("codec", ["zstd", "pigz"])
@pytest.mark.parametrize("damage", ["truncated", "flipped", "trailing garbage"])
def test_a_damaged_chunk_fails_its_statement_with_the_fault_named(conn, tmp_path, damage, codec):
    packed = bytearray(PACK[codec](ROWS))
    if damage == "truncated":
        packed = packed[: len(packed) * 2 // 3]
    elif damage == "flipped":
        packed[len(packed) // 2] ^= 0xFF
    else:
        packed += b"not a compressed frame"
    with pytest.raises(Exception, match=r"lastline-infile: cannot be decompressed: ") as err:
        load(conn, tmp_path, bytes(packed), codec)
    if damage == "truncated":
        assert f"it ends inside a {'zstd frame' if codec == 'zstd' else 'gzip member'}" in str(err.value)
    conn.rollback()
    assert table_sum(conn)[0] == 0  # the caller's rollback keeps nothing of it


@pytest.mark.parametrize("codec", ["zstd", "pigz", "none"])
def test_a_chunk_giving_more_than_its_declared_size_fails(conn, tmp_path, codec):
    packed = PACK[codec](ROWS)
    with pytest.raises(Exception, match=rf"lastline-infile: decompresses to more than its declared {len(ROWS) - 1} bytes"):
        load(conn, tmp_path, packed, codec, max_bytes=len(ROWS) - 1)
    conn.rollback()
    assert table_sum(conn)[0] == 0
    assert load(conn, tmp_path, packed, codec, max_bytes=len(ROWS)) == 300_000  # exactly the declared size is fine


@pytest.mark.parametrize("codec", ["zstd", "pigz", "none"])
def test_a_server_asking_for_another_file_gets_nothing(conn, tmp_path, codec):
    secret = tmp_path / "secret.tsv"
    secret.write_bytes(b"1\tsecret\tvalue\n")
    with pytest.raises(Exception, match="did not offer"):
        load(conn, tmp_path, PACK[codec](ROWS), codec, sql_path=str(secret))
    conn.rollback()
    assert table_sum(conn)[0] == 0


def test_an_offer_opens_its_file_once_and_never_through_a_link(conn, tmp_path):
    handler = infile.install(conn)
    plain = tmp_path / "plain.tsv"
    plain.write_bytes(b"1\tone\tx\n")
    handler.offer(str(plain), "none", 100)
    cur = conn.cursor()
    sql = f"LOAD DATA LOCAL INFILE %s INTO TABLE infile_db.{TABLE} CHARACTER SET binary"
    cur.execute(sql, (str(plain),))
    with pytest.raises(Exception, match="did not offer"):  # the same path again: the offer was used up
        cur.execute(sql, (str(plain),))
    link = tmp_path / "link.tsv"
    link.symlink_to(plain)
    handler.offer(str(link), "none", 100)
    with pytest.raises(Exception, match="lastline-infile: cannot be read: opening it failed"):
        cur.execute(sql, (str(link),))
    conn.rollback()


def load_fd(conn, handler: infile.Handler, path, codec: str, sha256: str, max_bytes: int = len(ROWS)) -> int:
    """LOAD DATA LOCAL of the file at `path` offered as a descriptor (as the loader offers a local chunk)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        token = handler.offer_fd(fd, codec, max_bytes, sha256)
        cur = conn.cursor()
        try:
            cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE infile_db.{TABLE} CHARACTER SET binary", (token,))
        finally:
            handler.withdraw()
        return cur.rowcount
    finally:
        os.close(fd)


@pytest.mark.parametrize("codec", ["zstd", "pigz", "none"])
def test_a_descriptor_offer_reads_the_file_and_fails_at_its_end_unless_its_sha256_is_the_manifest_s(conn, tmp_path, expected, codec):
    """A local chunk is offered as a descriptor: the handler hashes what it reads; an intact file gives the raw file's
    rows, one whose bytes differ from the manifest's sha256 (though it decompresses: a whole frame swapped) fails
    the statement at its end, and the caller's rollback keeps nothing of it."""
    handler = infile.install(conn)
    path = tmp_path / "chunk"
    packed = PACK[codec](ROWS[:HALF]) + PACK[codec](ROWS[HALF:])
    path.write_bytes(packed)
    assert load_fd(conn, handler, path, codec, hashlib.sha256(packed).hexdigest()) == 300_000
    assert table_sum(conn) == expected
    conn.rollback()
    other = PACK[codec](ROWS[:HALF]) + PACK[codec](ROWS[HALF:].replace(b"value", b"VALUE", 1))
    path.write_bytes(other)
    with pytest.raises(Exception, match=r"lastline-infile: is corrupt: its sha256 differs from the manifest's"):
        load_fd(conn, handler, path, codec, hashlib.sha256(packed).hexdigest())
    conn.rollback()
    assert table_sum(conn)[0] == 0


def test_a_file_name_the_server_chose_never_reaches_a_format_string(conn, tmp_path):
    """The client library formats the handler's message (my_set_error): a name the server asks for, echoed in the
    refusal, has its `%` made `?`, so `%n` writes nothing and the connection says what happened."""
    handler = infile.install(conn)
    handler.offer(str(tmp_path / "offered"), "none", 100)
    cur = conn.cursor()
    with pytest.raises(Exception, match=r"did not offer: \?s\?s\?s\?n\?n") as err:
        cur.execute(f"LOAD DATA LOCAL INFILE '%s%s%s%n%n' INTO TABLE infile_db.{TABLE} CHARACTER SET binary")
    assert handler.refusal(err.value, "x") is not None
    cur.execute("SELECT 1")
    assert cur.fetchone() == (1,)
    conn.rollback()


def test_a_descriptor_offer_serves_one_statement_and_only_a_regular_file(conn, tmp_path):
    """The token names the offer once; after withdraw() (the loader's, after every statement) it names nothing, so a
    descriptor number closed and reused for another file is never read; a descriptor that is not a regular file
    (a FIFO: it could block, or be fed by anyone) is refused."""
    handler = infile.install(conn)
    plain = tmp_path / "plain.tsv"
    plain.write_bytes(b"1\tone\tx\n")
    sha = hashlib.sha256(plain.read_bytes()).hexdigest()
    fd = os.open(plain, os.O_RDONLY)
    cur = conn.cursor()
    sql = f"LOAD DATA LOCAL INFILE %s INTO TABLE infile_db.{TABLE} CHARACTER SET binary"
    try:
        token = handler.offer_fd(fd, "none", 100, sha)
        cur.execute(sql, (token,))
        assert cur.rowcount == 1
        with pytest.raises(Exception, match="did not offer"):  # the same token again: used up
            cur.execute(sql, (token,))
        token = handler.offer_fd(fd, "none", 100, sha)
        handler.withdraw()
        with pytest.raises(Exception, match="did not offer"):
            cur.execute(sql, (token,))
    finally:
        os.close(fd)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR)  # open without a writer waiting
    try:
        with pytest.raises(Exception, match="the descriptor offered is not a regular file"):
            cur.execute(sql, (handler.offer_fd(fd, "none", 100, sha),))
    finally:
        handler.withdraw()
        os.close(fd)
    conn.rollback()


def _checksums(server, db: str) -> dict:
    """CHECKSUM TABLE of every base table of `db` (names quoted: the corpus has `%`, quotes and backquotes)."""
    conn = server.connect()
    try:
        cur = conn.cursor()
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_TYPE = 'BASE TABLE'", (db,))
        out = {}
        for (name,) in cur.fetchall():
            cur.execute(f"CHECKSUM TABLE {qualified(db, name)}")
            out[name] = cur.fetchone()[1]
        return out
    finally:
        conn.close()


@pytest.mark.e2e
@pytest.mark.parametrize("compression", ["pigz", "none"])
def test_the_corpus_backed_up_with_pigz_or_none_restores_exactly(logical_source, logical_target, tmp_path, compression):
    """Every chunk, InnoDB or MyISAM, gzip or uncompressed, goes through lastline's handler (never the client
    library's), the corpus' names with `%`, quotes and backquotes included."""
    from lastline.logical.backup import stages as logical_backup
    from lastline.logical.restore import stages as logical_restore

    logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{tmp_path}", "databases": ["edge"],
                          "chunk_rows": 1000, "compression": compression}))
    plan = logical_restore.preflight({"target_conn_id": "t_ltarget", "backup": f"file://{tmp_path}/latest", "databases": ["edge"], "force": True})
    logical_restore.create_schema(plan)
    for unit in logical_restore.plan_load(plan):
        logical_restore.load(plan, unit)
    src = _checksums(logical_source.server(), "edge")
    assert "pct%s %d%%'\"`.é" in src and src == _checksums(logical_target.server(), "edge")
