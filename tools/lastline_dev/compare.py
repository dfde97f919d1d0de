"""CHECKSUM TABLE over every user table: how the demo, tests and benchmarks compare two servers."""
from __future__ import annotations

from lastline.core.servers import Server
from lastline.core.sql import META_DB, SYSTEM_SCHEMAS, qualified


def user_tables(server: Server) -> list[tuple[str, str]]:
    """(schema, table) of every user base table, sorted."""
    return [
        (s, t)
        for s, t in server.query(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
            "AND TABLE_SCHEMA NOT IN (%s, %s, %s, %s, %s) ORDER BY 1, 2",
            (*SYSTEM_SCHEMAS, META_DB),
        )
    ]


def table_checksums(server: Server) -> dict[str, int | None]:
    """`schema.table` -> CHECKSUM TABLE value, for every user table."""
    with server.session() as cur:
        out: dict[str, int | None] = {}
        for schema, table in user_tables(server):
            cur.execute(f"CHECKSUM TABLE {qualified(schema, table)}")
            out[f"{schema}.{table}"] = cur.fetchone()[1]
        return out


def compare(source: Server, target: Server) -> list[str]:
    """The tables whose checksums differ or that exist on one side only (empty list: identical)."""
    a, b = table_checksums(source), table_checksums(target)
    return sorted(k for k in a.keys() | b.keys() if a.get(k, "missing") != b.get(k, "missing"))
