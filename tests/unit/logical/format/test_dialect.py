"""logical.format.dialect: how a column is written (its encoding), how a chunk's lines read back (decode_rows, with
every escape, NULL apart from 'NULL', '\\N' and ''), and on a real server (the suite's target sandbox) that a chunk
written in the dialect loads back with load_sql to the same checksum_sql, which any changed byte or NULL breaks."""
from __future__ import annotations

import pytest

from lastline.core.sql import qualified, string_literal
from lastline.logical.format import dialect
from lastline.logical.format.dialect import Column, decode_rows, encoding_for


def line(fields: list[bytes | None]) -> bytes:
    """One row as the dump worker writes it (the inverse decode_rows is checked against)."""
    def field(value: bytes | None) -> bytes:
        if value is None:
            return b"\\N"
        return value.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n")
    return b"\t".join(field(f) for f in fields) + b"\n"


@pytest.mark.parametrize(("data_type", "encoding"), [
    ("float", "double"), ("FLOAT", "double"), ("double", "plain"), ("bit", "bit"), ("point", "hex"),
    ("GeometryCollection", "hex"), ("int", "plain"), ("decimal", "plain"), ("timestamp", "plain"), ("year", "plain"),
    ("varchar", "text"), ("longblob", "text"), ("json", "text"), ("enum", "text"), ("set", "text"), ("char", "text"),
], ids=["float-through-double", "upper-case-name", "double-as-is", "bit-as-unsigned", "spatial-as-hex",
        "spatial-any-case", "integer", "decimal", "timestamp", "year", "varchar-escaped", "blob-escaped", "json-escaped",
        "enum-escaped", "set-escaped", "char-escaped"])
def test_encoding_for(data_type, encoding):
    assert encoding_for(data_type) == encoding


@pytest.mark.parametrize(("row", "column"), [
    (("a b", "varchar", "varchar(10)", "YES", "utf8mb4"), Column("a b", "varchar(10)", True, "text", "utf8mb4")),
    (("`x`", "float", "float", "NO", None), Column("`x`", "float", False, "double", None)),
    (("g", "point", "point", "YES", None), Column("g", "point", True, "hex", None)),
], ids=["name-with-space-nullable", "name-with-backticks-not-null", "spatial"])
def test_column_from_an_information_schema_row_and_back_to_a_dict(row, column):
    made = Column.from_row(*row)
    assert made == column
    assert Column(**made.to_dict()) == made  # the manifest keeps columns as dicts


BIG = b"x" * (16 << 20) + b"\t\\\n"  # past 16 MiB (the default max_allowed_packet), with an escape at its end


@pytest.mark.parametrize("rows", [
    [],
    [[b"a"]],
    [[None, b"NULL", b"\\N", b""]],
    [[b"tab\there", b"line\nfeed", b"back\\slash", b"\\t is not a tab"]],
    [[b"\\" * 1000 + b"\t" * 1000 + b"\n" * 1000]],
    [[b"\xff\x00\xfe", "é€😀".encode()]],
    [[str(i).encode(), None if i % 3 else b"v%d" % i] for i in range(100)],
    [[BIG, None]],
], ids=["empty", "one-field", "null-apart-from-its-look-alikes", "each-escape", "many-escapes", "any-bytes",
        "many-rows", "above-16-mib"])
def test_decode_rows_reads_back_what_the_dump_writes(rows):
    assert list(decode_rows(b"".join(line(r) for r in rows))) == rows


@pytest.mark.parametrize(("data", "rows"), [
    (b"a\\0b\n", [[b"a\x00b"]]),
    (b"a\\qb\n", [[b"aqb"]]),
    (b"a\n\nb\n", [[b"a"], [b"b"]]),
    (b"\t\n", [[b"", b""]]),
], ids=["escaped-nul", "unknown-escape-is-the-byte", "empty-line-skipped", "two-empty-fields"])
def test_decode_rows_edge_lines(data, rows):
    assert list(decode_rows(data)) == rows


def test_the_load_session_keeps_values_as_dumped():
    assert "NO_AUTO_VALUE_ON_ZERO" in dialect.LOAD_SESSION and "time_zone = '+00:00'" in dialect.LOAD_SESSION


# --- on a real server ------------------------------------------------------------------------------------------------
DB = "unit_dialect"
ROWS = [
    "(1, 'plain', x'00ff', 3.14159, b'10101', ST_PointFromText('POINT(1 2)'))",
    "(2, 'tab\\there\\nline \\\\ back', x'5c4e', -0.5, b'0', NULL)",
    "(3, NULL, NULL, 0, b'11111', ST_PointFromText('POINT(-1.5 1e10)'))",
    "(4, 'NULL', '\\\\N', 1e-30, b'1', NULL)",
    "(5, '', '', 2, b'0', NULL)",
    "(6, 'é€😀', x'', 7, b'0', NULL)",
]


def _columns(cur, table: str) -> list[Column]:
    cur.execute("SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (DB, table))
    return [Column.from_row(*row) for row in cur.fetchall()]


def _as_bytes(value) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()


@pytest.fixture
def tables(target):
    """`unit_dialect`.`a b` (a name with a space) holding every kind of tricky value, and an empty twin `c.d`."""
    server = target.server()
    with server.session() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"CREATE TABLE {qualified(DB, 'a b')} (id int PRIMARY KEY, `s``q` varchar(100) CHARACTER SET utf8mb4, "
                    "b blob, f float NOT NULL, bits bit(5) NOT NULL, g point)")
        cur.execute(f"INSERT INTO {qualified(DB, 'a b')} VALUES {', '.join(ROWS)}")
        cur.execute(f"CREATE TABLE {qualified(DB, 'c.d')} LIKE {qualified(DB, 'a b')}")
        cur.connection.commit()
    yield server
    server.query(f"DROP DATABASE IF EXISTS {DB}")


def test_a_chunk_in_the_dialect_loads_back_to_the_same_checksum(tables, tmp_path):
    server = tables
    conn = server.connect(local_infile=1)
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION character_set_results = NULL")  # each column's own bytes, as the dump reads them
        columns = _columns(cur, "a b")
        assert [c.encoding for c in columns] == ["plain", "text", "text", "double", "bit", "hex"]
        cur.execute(dialect.select_sql(DB, "a b", columns))
        dumped = cur.fetchall()
        chunk = tmp_path / "chunk"
        chunk.write_bytes(b"".join(line([_as_bytes(v) for v in row[:-1]]) for row in dumped))
        assert len(list(decode_rows(chunk.read_bytes()))) == len(ROWS)
        cur.execute(dialect.LOAD_SESSION)
        cur.execute(dialect.load_sql(DB, "c.d", columns, string_literal(str(chunk))))
        cur.execute("SHOW WARNINGS")
        assert cur.fetchall() == ()
        conn.commit()

        def checksum(table: str, where: str | None = None) -> tuple:
            cur.execute(dialect.checksum_sql(DB, table, columns, where))
            return tuple(int(v) for v in cur.fetchone())

        source = checksum("a b")
        assert source[0] == len(ROWS) and source == checksum("c.d")
        # the row hashes the dump sent sum to the checksum the target recomputes
        assert sum(int(row[-1]) for row in dumped) == source[1]
        assert checksum("c.d", "id <= 3") == (3, sum(int(row[-1]) for row in dumped if int(row[0]) <= 3))
        cur.execute(f"SELECT id, `s``q`, b, f, bits + 0, ST_AsText(g) FROM {qualified(DB, 'a b')} ORDER BY id")
        before = cur.fetchall()
        cur.execute(f"SELECT id, `s``q`, b, f, bits + 0, ST_AsText(g) FROM {qualified(DB, 'c.d')} ORDER BY id")
        assert cur.fetchall() == before

        for change in ("b = x'00fe' WHERE id = 1", "`s``q` = '' WHERE id = 3", "`s``q` = NULL WHERE id = 5",
                       "g = ST_PointFromText('POINT(1 3)') WHERE id = 1", "f = 3.1416 WHERE id = 1"):
            cur.execute(f"UPDATE {qualified(DB, 'c.d')} SET {change}")
            assert checksum("c.d") != source, change
            conn.rollback()
        assert checksum("c.d") == source
    finally:
        conn.close()


def test_select_sql_streams_every_row_once_whatever_the_where(tables):
    with tables.session() as cur:
        columns = _columns(cur, "a b")
        cur.execute(dialect.select_sql(DB, "a b", columns, "id >= 4"))
        assert sorted(int(row[0]) for row in cur.fetchall()) == [4, 5, 6]
        cur.execute(dialect.select_sql(DB, "a b", columns))
        rows = cur.fetchall()
    assert len(rows) == len(ROWS) and all(len(row) == len(columns) + 1 for row in rows)
