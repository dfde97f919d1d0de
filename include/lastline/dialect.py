"""The chunk file dialect: how a row becomes one line of bytes, and how LOAD DATA turns it back.

One line per row, fields separated by TAB, lines ended by LF, no quoting. Inside a field a backslash
is written `\\\\`, a TAB `\\t`, a LF `\\n`; NULL is `\\N` (so the string 'NULL', the string '\\N' and the
empty string stay distinct). Every other byte is written as stored: the server sends each string
column's own bytes (`CAST(col AS BINARY)`, no character set conversion) and the load reads the file as
`CHARACTER SET binary`, so each column gets back exactly the bytes it had, whatever its charset.

The server builds each line itself (in C, inside the dump's snapshot), so the client only moves bytes.
A few types need an encoding of their own to round-trip exactly:

- `double`: FLOAT is printed through DOUBLE (`3.1415927410125732`, not the lossy `3.14159`);
- `bit`: BIT(n) as its unsigned integer value, loaded back with `CAST(@v AS UNSIGNED)`;
- `hex`: spatial values as the hex of their internal bytes (SRID + WKB), loaded with `UNHEX(@v)`.

The table checksum is `COUNT(*)` and `SUM(CRC32(line))` over the same line expression: order-free,
computed by the dumper from the bytes it writes, and recomputed by the target with one query after a
load (`checksum_sql`).
"""
from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass
from typing import Iterable

# the session a chunk is loaded in: values as they were (zero dates, an id of 0 in an AUTO_INCREMENT
# column), TIMESTAMPs in UTC as dumped, no checks the source already made
LOAD_SESSION = (
    "SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO', time_zone = '+00:00', foreign_key_checks = 0, "
    "unique_checks = 0, check_constraint_checks = 0"
)
DIALECT = "tsv: fields \\t, lines \\n, escape \\\\, NULL \\N, CHARACTER SET binary"

# DATA_TYPEs whose text form never holds a TAB, LF or backslash: no escaping needed
PLAIN_TYPES = {
    "tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "double",
    "date", "time", "datetime", "timestamp", "year",
}
SPATIAL_TYPES = {
    "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
    "geometrycollection",
}


def quote_ident(name: str) -> str:
    """A backquoted identifier (backquotes inside doubled)."""
    return "`" + name.replace("`", "``") + "`"


def qualified(schema: str, table: str) -> str:
    """`schema`.`table`."""
    return f"{quote_ident(schema)}.{quote_ident(table)}"


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
    """The SQL expression that writes one field of `col` (never NULL: NULL becomes `\\N`)."""
    c = quote_ident(col.name)
    if col.encoding == "plain":
        expr = c
    elif col.encoding == "double":
        expr = f"CAST({c} AS DOUBLE)"
    elif col.encoding == "bit":
        expr = f"CAST({c} AS UNSIGNED)"
    elif col.encoding == "hex":
        expr = f"HEX({c})"
    else:
        expr = (
            f"REPLACE(REPLACE(REPLACE(CAST({c} AS BINARY), '\\\\', '\\\\\\\\'), '\\t', '\\\\t'), '\\n', '\\\\n')"
        )
    return f"IFNULL({expr}, '\\\\N')" if col.nullable else expr


def line_sql(columns: list[Column]) -> str:
    """The SQL expression of a whole line (as a binary string, without the LF)."""
    return "CAST(CONCAT_WS(x'09', " + ", ".join(field_sql(c) for c in columns) + ") AS BINARY)"


def select_sql(schema: str, table: str, columns: list[Column], where: str | None = None) -> str:
    """The query that streams a chunk's lines."""
    sql = f"SELECT {line_sql(columns)} FROM {qualified(schema, table)}"
    return f"{sql} WHERE {where}" if where else sql


def checksum_sql(schema: str, table: str, columns: list[Column]) -> str:
    """The query a target runs to recompute (rows, checksum) of a loaded table."""
    return f"SELECT COUNT(*), COALESCE(SUM(CRC32({line_sql(columns)})), 0) FROM {qualified(schema, table)}"


def lines_checksum(lines: Iterable[bytes]) -> int:
    """The checksum contribution of some lines (sum of CRC32, as the server's SUM(CRC32(...)))."""
    return sum(map(zlib.crc32, lines))


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
