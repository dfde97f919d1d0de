"""Schema objects of a logical backup, read as the server prints them, kept apart by kind.

A restore creates them in this order: databases, tables (and sequences), then the data, then
triggers (after the data, so they never fire on restored rows), views in dependency order, routines,
events, sequence states, and (optionally) users and grants. Every statement keeps the sql_mode and
character set it was created under, so bodies are restored byte for byte.
"""
from __future__ import annotations

import logging
import re
from typing import Any

from lastline.core import privileges
from lastline.core.errors import PreflightError
from lastline.core.sql import ASIDE_PREFIX, META_DB, SYSTEM_SCHEMAS, placeholders, qualified, quote_ident

SKIPPED_USERS = {("mariadb.sys", "localhost")}
log = logging.getLogger(__name__)


def _one(cur: Any, sql: str, what: str, privilege: str) -> tuple:
    """The single row of a SHOW CREATE statement, or a clear error naming the missing privilege."""
    cur.execute(sql)
    row = cur.fetchone()
    if row is None:
        raise PreflightError(f"{what}: `{sql}` returned nothing; the backup user needs {privilege}.")
    return row


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, (bytes, bytearray)) else value


def resolve_databases(cur: Any, requested: list[str] | None) -> list[str]:
    """The databases to dump: `requested`, each checked to exist, or every non-system database."""
    cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA ORDER BY 1")
    present = [_text(r[0]) for r in cur.fetchall()]
    if not requested:
        return [d for d in present if d not in SYSTEM_SCHEMAS and d != META_DB and not d.startswith(ASIDE_PREFIX)]
    missing = [d for d in requested if d not in present]
    if missing:
        raise PreflightError(
            f"unknown database(s) {', '.join(missing)} on the source (or not visible to the backup user); "
            f"it has: {', '.join(d for d in present if d not in SYSTEM_SCHEMAS) or 'none'}."
        )
    system = [d for d in requested if d in SYSTEM_SCHEMAS or d == META_DB]
    if system:
        raise PreflightError(
            f"{', '.join(system)}: system schemas and lastline's own {META_DB} are not dumped; use include_grants for users."
        )
    return list(dict.fromkeys(requested))


OBJECT_PRIVILEGES = {"TRIGGER": "triggers", "EVENT": "events"}  # hidden from information_schema without these


def require_object_privileges(cur: Any, databases: list[str]) -> None:
    """Refuse a backup whose account may not see every trigger and event of `databases`: information_schema lists
    only those the account holds TRIGGER (on the table) and EVENT (on the database) for, so without them a backup
    would carry none and still verify. Granted on *.*, on each database, or through the role enabled at login."""
    account, grants, _ = privileges.account_grants(cur)
    lacking: dict[str, list[str]] = {}
    for db in databases:
        have = privileges.held_on(grants, db)
        if "ALL PRIVILEGES" in have or "ALL" in have:
            continue
        for priv in OBJECT_PRIVILEGES:
            if priv not in have:
                lacking.setdefault(priv, []).append(db)
    if lacking:
        said = "; ".join(f"{priv} on {', '.join(dbs[:5])}{' and more' if len(dbs) > 5 else ''} (its {OBJECT_PRIVILEGES[priv]} "
                         "would be left out)" for priv, dbs in lacking.items())
        raise PreflightError(
            f"the backup account {account} lacks {said}: the server hides those objects from an account without the "
            f"privilege, so the backup would carry none and still verify. GRANT {', '.join(lacking)} ON *.* TO {account} "
            "(the backup account's grants are in the documentation's Grants page), or on each database backed up."
        )


def view_order(views: list[dict]) -> list[dict]:
    """Views sorted so that every view comes after the views it selects from (stable by name)."""
    by_key = {(v["schema"], v["name"]): v for v in views}
    refs = {
        key: {other for other in by_key if other != key and qualified(*other) in v["create"]}
        for key, v in by_key.items()
    }
    done: list[dict] = []
    placed: set[tuple[str, str]] = set()
    pending = sorted(by_key)
    while pending:
        ready = [k for k in pending if refs[k] <= placed] or pending[:1]  # a cycle cannot be created anyway
        for k in ready:
            done.append(by_key[k])
            placed.add(k)
        pending = [k for k in pending if k not in placed]
    return done


def read_schema(cur: Any, databases: list[str], include_grants: bool = False) -> dict:
    """Every schema object of `databases`, by kind, as the server prints it (see the module doc)."""
    cur.execute("SET SESSION sql_quote_show_create = 1")
    schema: dict[str, list] = {k: [] for k in ("databases", "tables", "sequences", "views", "triggers", "routines", "events", "grants")}
    if not databases:
        return schema
    ph = placeholders(databases)
    cur.execute(
        f"SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA "
        f"WHERE SCHEMA_NAME IN ({ph}) ORDER BY 1",
        databases,
    )
    for name, charset, collation in cur.fetchall():
        row = _one(cur, f"SHOW CREATE DATABASE {quote_ident(name)}", f"database {name}", "access to the database")
        schema["databases"].append({"name": name, "charset": charset, "collation": collation, "create": _text(row[1])})

    cur.execute(
        f"SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA IN ({ph}) "
        "ORDER BY 1, 2",
        databases,
    )
    for db, name, kind in cur.fetchall():
        what = f"{kind.lower()} {db}.{name}"
        if kind == "VIEW":
            row = _one(cur, f"SHOW CREATE VIEW {qualified(db, name)}", what, "SHOW VIEW and SELECT on it")
            schema["views"].append(
                {"schema": db, "name": name, "create": _text(row[1]), "character_set_client": row[2], "collation_connection": row[3]}
            )
        elif kind == "SEQUENCE":
            row = _one(cur, f"SHOW CREATE SEQUENCE {qualified(db, name)}", what, "SELECT on it")
            cur.execute(f"SELECT next_not_cached_value FROM {qualified(db, name)}")
            schema["sequences"].append({"schema": db, "name": name, "create": _text(row[1]), "next_value": int(cur.fetchone()[0])})
        else:
            row = _one(cur, f"SHOW CREATE TABLE {qualified(db, name)}", what, "SELECT on it")
            schema["tables"].append({"schema": db, "name": name, "create": _text(row[1])})
    schema["views"] = view_order(schema["views"])

    cur.execute(
        f"SELECT TRIGGER_SCHEMA, TRIGGER_NAME, EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS "
        f"WHERE TRIGGER_SCHEMA IN ({ph}) ORDER BY 1, 3, ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER",
        databases,
    )
    for db, name, table in cur.fetchall():
        row = _one(cur, f"SHOW CREATE TRIGGER {qualified(db, name)}", f"trigger {db}.{name}", "TRIGGER on its table")
        schema["triggers"].append(
            {"schema": db, "name": name, "table": table, "sql_mode": row[1], "create": _text(row[2]),
             "character_set_client": row[3], "collation_connection": row[4], "database_collation": row[5]}
        )

    cur.execute(
        f"SELECT ROUTINE_SCHEMA, ROUTINE_NAME, ROUTINE_TYPE FROM information_schema.ROUTINES "
        f"WHERE ROUTINE_SCHEMA IN ({ph}) ORDER BY 1, 3, 2",
        databases,
    )
    for db, name, kind in cur.fetchall():
        row = _one(cur, f"SHOW CREATE {kind} {qualified(db, name)}", f"{kind.lower()} {db}.{name}", "SELECT on mysql.proc")
        if row[2] is None:
            raise PreflightError(
                f"{kind.lower()} {db}.{name}: the server hides its body from the backup user; grant it SELECT on "
                "mysql.proc (or SHOW CREATE ROUTINE on 11.3+) so routines can be backed up."
            )
        schema["routines"].append(
            {"schema": db, "name": name, "type": kind, "sql_mode": row[1], "create": _text(row[2]),
             "character_set_client": row[3], "collation_connection": row[4], "database_collation": row[5]}
        )

    cur.execute(f"SELECT EVENT_SCHEMA, EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA IN ({ph}) ORDER BY 1, 2", databases)
    for db, name in cur.fetchall():
        row = _one(cur, f"SHOW CREATE EVENT {qualified(db, name)}", f"event {db}.{name}", "EVENT on its database")
        schema["events"].append(
            {"schema": db, "name": name, "sql_mode": row[1], "time_zone": row[2], "create": _text(row[3]),
             "character_set_client": row[4], "collation_connection": row[5], "database_collation": row[6]}
        )
    if include_grants:
        schema["grants"] = read_grants(cur)
    return schema


def read_grants(cur: Any) -> list[dict]:
    """Every account (not roles) with its CREATE USER and GRANT statements."""
    try:
        cur.execute("SELECT User, Host FROM mysql.user WHERE is_role = 'N' ORDER BY 1, 2")
    except Exception as exc:  # noqa: BLE001 - named below
        raise PreflightError(f"include_grants: cannot read mysql.user ({exc}); grant the backup user SELECT on mysql.*.") from exc
    out = []
    for user, host in cur.fetchall():
        user, host = _text(user), _text(host)
        if (user, host) in SKIPPED_USERS:
            continue
        account = "'{}'@'{}'".format(user.replace("'", "''"), host.replace("'", "''"))
        try:
            create = _one(cur, f"SHOW CREATE USER {account}", f"user {account}", "SELECT on mysql.*")[0]
            cur.execute(f"SHOW GRANTS FOR {account}")
        except Exception as exc:  # noqa: BLE001 - an account the server did not load
            if getattr(exc, "args", (None,))[0] not in (1133, 1141):
                raise
            log.warning("account %s is in mysql.user but not loaded by the server (a host name under "
                        "skip-name-resolve?): left out of the backup", account)
            continue
        out.append({"user": user, "host": host, "create": _text(create), "grants": [_text(r[0]) for r in cur.fetchall()]})
    return out


def _with_context(obj: dict, create: str) -> str:
    """A statement wrapped in the sql_mode / character set it was created under (for schema.sql)."""
    pre = []
    if "sql_mode" in obj:
        pre.append(f"SET SESSION sql_mode = '{obj['sql_mode']}'")
    if "character_set_client" in obj:
        pre.append(f"SET NAMES {obj['character_set_client']} COLLATE {obj['collation_connection']}")
    if "time_zone" in obj:
        pre.append(f"SET SESSION time_zone = '{obj['time_zone']}'")
    return "".join(p + ";;\n" for p in pre) + create + ";;\n"


def render_sql(schema: dict) -> str:
    """A readable SQL rendition (for people and `mariadb` by hand; restores use schema.json).

    Data is not in it: load the chunk files between the tables and the triggers.
    """
    out = ["-- lastline schema (data goes between the tables and the triggers)", "DELIMITER ;;"]
    out += [f"{d['create']};;" for d in schema["databases"]]
    for kind in ("tables", "sequences"):
        for t in schema[kind]:
            out.append(f"USE {quote_ident(t['schema'])};;\n{t['create']};;")
    out.append("-- data: chunk files (LOAD DATA, see manifest.json)")
    for kind in ("triggers", "views", "routines", "events"):
        for o in schema[kind]:
            out.append(f"USE {quote_ident(o['schema'])};;\n" + _with_context(o, o["create"]).rstrip())
    for s in schema["sequences"]:
        out.append(f"SELECT SETVAL({qualified(s['schema'], s['name'])}, {s['next_value']}, 0);;")
    for g in schema["grants"]:
        out.append(f"{g['create']};;")
        out += [f"{x};;" for x in g["grants"]]
    out.append("DELIMITER ;")
    return "\n".join(out) + "\n"


AUTO_INCREMENT_RE = re.compile(r"\bAUTO_INCREMENT=(\d+)")


def auto_increment(create: str) -> int | None:
    """The AUTO_INCREMENT counter of a CREATE TABLE statement, if it has one."""
    m = AUTO_INCREMENT_RE.search(create)
    return int(m.group(1)) if m else None
