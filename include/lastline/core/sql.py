"""SQL text and small queries every stage shares: identifier quoting, placeholders, lastline's own
schema names, and the few information_schema reads that take an open cursor."""
from __future__ import annotations

from collections.abc import Iterable, Sized
from typing import Any

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
META_DB = "_lastline"  # lastline's own bookkeeping on a restore target (config snapshot, ledger)
ASIDE_PREFIX = "lastline_aside_"  # where a forced restore keeps the old tables until it is verified
# engines whose rows cannot share a transaction with the load ledger: loaded whole, never split
NON_TRANSACTIONAL = frozenset({"myisam", "aria", "memory", "csv", "archive", "merge", "mrg_myisam"})
# engines whose rows a restart of the server takes away (and a physical backup never holds)
VOLATILE = frozenset({"memory", "heap"})


def engine_name(name: str | None) -> str:
    """An engine's name as SHOW ENGINES gives it: upper case, HEAP as MEMORY (its other name)."""
    upper = str(name or "").upper()
    return "MEMORY" if upper == "HEAP" else upper


def never_restored(database: str) -> bool:
    """System schemas, lastline's own schema and its set-aside databases: a restore never writes them (the run
    account would hold the server's accounts, or lastline's own state)."""
    name = database.casefold()  # with lower_case_table_names=1 a grant on `MYSQL` or `_LASTLINE` lands on the real one
    return name in SYSTEM_SCHEMAS or name == META_DB or name.startswith(ASIDE_PREFIX)


def quote_ident(name: str) -> str:
    """A backquoted identifier (backquotes inside doubled)."""
    return "`" + name.replace("`", "``") + "`"


def qualified(schema: str, table: str) -> str:
    """`schema`.`table`."""
    return f"{quote_ident(schema)}.{quote_ident(table)}"


def string_literal(text: str) -> str:
    """A quoted SQL string for text lastline made itself (a temporary path), whatever the session's sql_mode:
    quotes doubled; a backslash or NUL, whose meaning depends on NO_BACKSLASH_ESCAPES, is refused."""
    if "\\" in text or "\x00" in text:
        raise ValueError(f"refusing to quote {text!r}: it holds a backslash or NUL")
    return "'" + text.replace("'", "''") + "'"


def placeholders(items: Sized) -> str:
    """`%s, %s, ...`: one driver placeholder per item (for IN lists)."""
    return ", ".join(["%s"] * len(items))


# what information_schema lists of each kind of schema object, by (schema, name), through the column the server uses to
# open one database's tables only: TRIGGERS filtered on TRIGGER_SCHEMA reads every table of the server (34 ms a
# query at 10,000 tables), on EVENT_OBJECT_SCHEMA (the same database: a trigger lives with its table) one database's
_OBJECTS = {
    "views": "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.VIEWS WHERE TABLE_SCHEMA IN",
    "triggers": "SELECT EVENT_OBJECT_SCHEMA, TRIGGER_NAME FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA IN",
    "routines": "SELECT ROUTINE_SCHEMA, ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA IN",
    "events": "SELECT EVENT_SCHEMA, EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA IN",
    "sequences": "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'SEQUENCE' AND TABLE_SCHEMA IN",
}


def objects_present(cur: Any, kind: str, databases: list[str]) -> set[tuple[str, str]]:
    """(schema, name) of every object of `kind` (views, triggers, routines, events, sequences) in `databases`, case
    folded (compare `name.casefold()`: information_schema compares names regardless of case): one query per 500
    databases, not one per object."""
    found: set[tuple[str, str]] = set()
    for i in range(0, len(databases), 500):
        batch = databases[i:i + 500]
        cur.execute(f"{_OBJECTS[kind]} ({placeholders(batch)})", batch)
        found |= {(as_text(a).casefold(), as_text(b).casefold()) for a, b in cur.fetchall()}
    return found


def folds_case(cur: Any) -> bool:
    """Whether the server matches database and table names regardless of case (lower_case_table_names 1: it stores
    them lower case; 2: as written) or as written (0)."""
    cur.execute("SELECT @@lower_case_table_names")
    return bool(int(cur.fetchone()[0]))


class NameKeys:
    """Keys for database and table names that are equal when the server takes them for one name: the name as
    written (lower_case_table_names=0), or lowered by the server's own rule (utf8mb3_general_ci's, asked of the
    server: Python's casefold differs on İ, ß, ſ, ς, so `_LASTLİNE` is `_lastline` there, `Straße` not `strasse`).
    `learn` the names first (a query per 500); a name not learnt costs a query of its own. Used within the session
    of the cursor it was given."""

    def __init__(self, cur: Any) -> None:
        self.cur, self.folds = cur, folds_case(cur)
        self.lowered: dict[str, str] = {}

    def learn(self, names: Iterable[str]) -> NameKeys:
        if self.folds:
            new = [n for n in dict.fromkeys(names) if n not in self.lowered]
            for i in range(0, len(new), 500):
                batch = new[i:i + 500]
                self.cur.execute("SELECT " + ", ".join(["LOWER(CONVERT(%s USING utf8mb3) COLLATE utf8mb3_general_ci)"] * len(batch)), batch)
                self.lowered.update(zip(batch, (as_text(v) for v in self.cur.fetchone()), strict=True))
        return self

    def __call__(self, name: str) -> str:
        if not self.folds:
            return name
        if name not in self.lowered:
            self.learn([name])
        return self.lowered[name]


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


def holds_any(cur: Any, *privileges: str) -> bool:
    """Whether the current account's grants (SHOW GRANTS) name any of `privileges` (e.g. "PROCESS",
    "ALL PRIVILEGES ON *.*"), through an open cursor."""
    cur.execute("SHOW GRANTS")
    grants = " ".join(str(r[0]).upper() for r in cur.fetchall())
    return any(p.upper() in grants for p in privileges)


def table_exists(cur: Any, schema: str, table: str) -> bool:
    """Whether `schema`.`table` exists (through an open cursor)."""
    cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (schema, table))
    return bool(cur.fetchone()[0])


def tables_at_risk(cur: Any, databases: list[str] | None = None, limit: int = 200) -> dict[str, Any]:
    """What a restore would replace, through an open cursor: every base table of `databases` (None: every
    user database) with its estimated rows, bytes and last write, the largest first (at most `limit`
    listed), and the totals. `updated` is None when the table was not written since the server started
    (InnoDB keeps its write time in memory)."""
    where, args = "TABLE_SCHEMA NOT IN (" + placeholders(SYSTEM_SCHEMAS) + ", %s) AND TABLE_SCHEMA NOT LIKE %s", [*SYSTEM_SCHEMAS, META_DB, ASIDE_PREFIX + "%"]
    if databases is not None:
        if not databases:
            return {"databases": [], "tables": [], "table_count": 0, "rows": 0, "bytes": 0}
        where, args = "TABLE_SCHEMA IN (" + placeholders(databases) + ")", list(databases)
    cur.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME, COALESCE(TABLE_ROWS, 0), COALESCE(DATA_LENGTH + INDEX_LENGTH, 0), "
        f"DATE_FORMAT(UPDATE_TIME, '%%Y-%%m-%%d %%H:%%i:%%s') FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' AND {where} "
        "ORDER BY DATA_LENGTH + INDEX_LENGTH DESC, TABLE_SCHEMA, TABLE_NAME",
        args,
    )
    rows = [(as_text(s), as_text(t), int(n), int(b), as_text(u) if u else None) for s, t, n, b, u in cur.fetchall()]
    return {
        "databases": sorted({s for s, *_ in rows}),
        "tables": [{"table": f"{s}.{t}", "rows": n, "bytes": b, "updated": u} for s, t, n, b, u in rows[:limit]],
        "table_count": len(rows),
        "rows": sum(n for _, _, n, _, _ in rows),
        "bytes": sum(b for _, _, _, b, _ in rows),
    }


def as_text(value: Any) -> str:
    """A value as the driver returned it (bytes for binary columns), as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


LOST_CONNECTION = (2006, 2013, 1927)
TIMED_OUT = (1969, 1205, 3024)  # max_statement_time, lock_wait_timeout, max_execution_time


def sql_error(exc: BaseException) -> tuple[int | None, str]:
    """(code, message) of a MySQLdb error."""
    args = getattr(exc, "args", ())
    code = args[0] if args and isinstance(args[0], int) else None
    return code, str(args[-1]) if args else str(exc)
