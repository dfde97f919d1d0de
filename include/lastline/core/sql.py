"""SQL text and small queries every stage shares: identifier quoting, placeholders, lastline's own
schema names, and the few information_schema reads that take an open cursor."""
from __future__ import annotations

from collections.abc import Sized
from typing import Any

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
META_DB = "_lastline"  # lastline's own bookkeeping on a restore target (config snapshot, ledger)
ASIDE_PREFIX = "lastline_aside_"  # where a forced restore keeps the old tables until it is verified
# engines whose rows cannot share a transaction with the load ledger: loaded whole, never split
NON_TRANSACTIONAL = frozenset({"myisam", "aria", "memory", "csv", "archive", "merge", "mrg_myisam"})


def quote_ident(name: str) -> str:
    """A backquoted identifier (backquotes inside doubled)."""
    return "`" + name.replace("`", "``") + "`"


def qualified(schema: str, table: str) -> str:
    """`schema`.`table`."""
    return f"{quote_ident(schema)}.{quote_ident(table)}"


def placeholders(items: Sized) -> str:
    """`%s, %s, ...`: one driver placeholder per item (for IN lists)."""
    return ", ".join(["%s"] * len(items))


def global_variables(cur: Any, names: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Global variables by name (lower-case keys), through an open cursor; names the server lacks are left out."""
    cur.execute(
        "SELECT LOWER(VARIABLE_NAME), VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES "
        "WHERE LOWER(VARIABLE_NAME) IN (" + placeholders(names) + ")",
        [n.lower() for n in names],
    )
    return {k: v for k, v in cur.fetchall()}


IDENTITY_SQL = "SELECT CONCAT_WS(':', @@hostname, @@port, @@datadir, @@server_id)"


def server_identity(cur: Any) -> str:
    """What tells one server from another (host name, port, datadir, server_id), through an open cursor:
    a backup records its source's, and a restore refuses to write into that same server unless asked."""
    cur.execute(IDENTITY_SQL)
    value = cur.fetchone()[0]
    return value.decode() if isinstance(value, bytes) else str(value)


def table_exists(cur: Any, schema: str, table: str) -> bool:
    """Whether `schema`.`table` exists (through an open cursor)."""
    cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (schema, table))
    return bool(cur.fetchone()[0])
