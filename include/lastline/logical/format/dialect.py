"""The chunk file dialect: how a row becomes one line of bytes, and how LOAD DATA turns it back.

One line per row, fields separated by TAB, lines ended by LF, no quoting. Inside a field a backslash
is written `\\\\`, a TAB `\\t`, a LF `\\n`; NULL is `\\N` (so the string 'NULL', the string '\\N' and the
empty string stay distinct). Every other byte is written as stored: the server sends each string
column's own bytes (`character_set_results = NULL`, no conversion) and the load reads the file as
`CHARACTER SET binary`, so each column gets back exactly the bytes it had, whatever its charset.

The server sends each column's value (`select_sql`) and the dump worker (native/tsvdump.c) escapes it
on the client in one linear pass, whatever the value's size (the server's REPLACE was quadratic in a
value's escapes, and returned NULL past max_allowed_packet). A few types need an encoding of their own
to round-trip exactly:

- `double`: FLOAT is sent through DOUBLE (`3.1415927410125732`, not the lossy `3.14159`);
- `bit`: BIT(n) as its unsigned integer value, loaded back with `CAST(@v AS UNSIGNED)`;
- `hex`: spatial values as the hex of their internal bytes (SRID + WKB), loaded with `UNHEX(@v)`.

The table checksum does not look at the chunk files' text: it is `COUNT(*)` and the sum of a row hash
the source server computes from each column's stored value (`row_hash_sql`: a CRC32 over every
column's value or, for strings, the CRC32 of its bytes, with NULL kept apart from every value),
summed order-free. The dump adds it as the query's last column; after a load the target recomputes
the same expression over what it holds (`checksum_sql`). A value that the dump, the file or the load
got wrong can then never verify.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from lastline.core.sql import qualified, quote_ident

# the session a chunk is loaded in: values as they were (zero dates, an id of 0 in an AUTO_INCREMENT
# column), TIMESTAMPs in UTC as dumped, no foreign-key or CHECK constraint checks (the source made them); a
# CREATE naming an engine the server lacks is refused, never made with the default engine (NO_ENGINE_SUBSTITUTION).
# innodb_strict_mode stays the server's: off, InnoDB would make a table it cannot compress uncompressed with a
# warning (SHOW CREATE TABLE printing the same text), so a table only a non-strict server makes is refused, and the
# operator decides (create.refused_create names the setting).
# Unique checks stay on: with both unique and foreign-key checks off, MariaDB 10.6+ loads an empty table
# through its bulk-insert path, which cost the server 1.6-2.3x the CPU here for the same rows
# (bench/load_shape_bench.py); no secondary unique index is there during a deferred-index load anyway.
LOAD_SESSION = (
    "SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION', time_zone = '+00:00', foreign_key_checks = 0, "
    "check_constraint_checks = 0"
)
DIALECT = "tsv: fields \\t, lines \\n, escape \\\\, NULL \\N, CHARACTER SET binary"
# what a table's `checksum` in the manifest is: COUNT(*) and SUM(row_hash_sql) (see the module doc)
CHECKSUM = "sum-crc32-row-hash/1"

# DATA_TYPEs whose text form never holds a TAB, LF or backslash: no escaping needed
PLAIN_TYPES = {
    "tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "double",
    "date", "time", "datetime", "timestamp", "year",
}
SPATIAL_TYPES = {
    "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
    "geometrycollection",
}


def encoding_for(data_type: str) -> str:
    """How a column of this information_schema DATA_TYPE is written: plain, text, double, bit or hex."""
    t = data_type.lower()
    if t == "float":
        return "double"
    if t == "bit":
        return "bit"
    if t in SPATIAL_TYPES:
        return "hex"
    if t in PLAIN_TYPES:
        return "plain"
    return "text"


@dataclass
class Column:
    """A column as the dump writes it."""

    name: str
    column_type: str
    nullable: bool
    encoding: str
    charset: str | None = None

    @classmethod
    def from_row(cls, name: str, data_type: str, column_type: str, nullable: str, charset: str | None) -> Column:
        """From information_schema.COLUMNS (COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME)."""
        return cls(name, column_type, nullable == "YES", encoding_for(data_type), charset)

    def to_dict(self) -> dict:
        return asdict(self)


def field_sql(col: Column) -> str:
    """The SQL expression the dump selects for one field (the worker escapes it; NULL stays NULL)."""
    c = quote_ident(col.name)
    if col.encoding == "double":
        return f"CAST({c} AS DOUBLE)"
    if col.encoding == "bit":
        return f"CAST({c} AS UNSIGNED)"
    if col.encoding == "hex":
        return f"HEX({c})"
    return c


def hash_token_sql(col: Column) -> str:
    """One column's part of the row hash: its value (numbers, dates) or the CRC32 of its bytes (strings,
    binary, spatial); never an empty string, so NULL (written as '') stays apart from every value."""
    if col.encoding in ("text", "hex"):  # the stored bytes, whatever their size (no string is built from them)
        token = f"CRC32({quote_ident(col.name)})"
    else:
        token = field_sql(col)
    return f"IFNULL({token}, '')" if col.nullable else token


def row_hash_sql(columns: list[Column]) -> str:
    """The row hash: CRC32 of the columns' tokens joined by ',' (no token holds a ','; all are short)."""
    return "CRC32(CONCAT_WS(',', " + ", ".join(hash_token_sql(c) for c in columns) + "))"


def select_sql(schema: str, table: str, columns: list[Column], where: str | None = None) -> str:
    """The query that streams a chunk: each column's field, then the row hash."""
    fields = ", ".join([*(field_sql(c) for c in columns), row_hash_sql(columns)])
    sql = f"SELECT {fields} FROM {qualified(schema, table)}"
    return f"{sql} WHERE {where}" if where else sql


def checksum_sql(schema: str, table: str, columns: list[Column], where: str | None = None) -> str:
    """The query a target runs to recompute (rows, checksum) of a loaded table, or of the rows `where` picks."""
    sql = f"SELECT COUNT(*), COALESCE(SUM({row_hash_sql(columns)}), 0) FROM {qualified(schema, table)}"
    return f"{sql} WHERE {where}" if where else sql


def legacy_checksum_sql(schema: str, table: str, columns: list[Column]) -> str:
    """The checksum of backups made before CHECKSUM existed (format lastline-logical/1): SUM(CRC32) over
    the escaped line as the server built it. It shares that dump's blind spot (a value past
    max_allowed_packet read as NULL on both sides) and is only used to verify such old backups."""
    def field(col: Column) -> str:
        c = quote_ident(col.name)
        expr = field_sql(col) if col.encoding != "text" else (
            f"REPLACE(REPLACE(REPLACE(CAST({c} AS BINARY), '\\\\', '\\\\\\\\'), '\\t', '\\\\t'), '\\n', '\\\\n')"
        )
        return f"IFNULL({expr}, '\\\\N')" if col.nullable else expr

    line = "CAST(CONCAT_WS(x'09', " + ", ".join(field(c) for c in columns) + ") AS BINARY)"
    return f"SELECT COUNT(*), COALESCE(SUM(CRC32({line})), 0) FROM {qualified(schema, table)}"


def load_sql(schema: str, table: str, columns: list[Column], path: str = "%s") -> str:
    """`LOAD DATA LOCAL INFILE` for a chunk of this table (the file path as a placeholder by default)."""
    targets, sets = [], []
    for i, col in enumerate(columns):
        c = quote_ident(col.name)
        if col.encoding == "bit":
            targets.append(f"@v{i}")
            sets.append(f"{c} = CAST(@v{i} AS UNSIGNED)")
        elif col.encoding == "hex":
            targets.append(f"@v{i}")
            sets.append(f"{c} = UNHEX(@v{i})")
        else:
            targets.append(c)
    sql = (
        f"LOAD DATA LOCAL INFILE {path} INTO TABLE {qualified(schema, table)} CHARACTER SET binary "
        "FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' "
        f"({', '.join(targets)})"
    )
    return sql + (" SET " + ", ".join(sets) if sets else "")


_UNESCAPE = {b"t": b"\t", b"n": b"\n", b"\\": b"\\", b"0": b"\0"}
_ESCAPE_RE = re.compile(rb"\\(.)", re.S)


def decode_rows(data: bytes) -> Iterator[list[bytes | None]]:
    """The rows of complete lines of a chunk's text (its DIALECT), fields unescaped, NULL as None."""
    for line in data.split(b"\n"):
        if line:
            yield [None if f == b"\\N" else _ESCAPE_RE.sub(lambda m: _UNESCAPE.get(m.group(1), m.group(1)), f)
                   for f in line.split(b"\t")]
