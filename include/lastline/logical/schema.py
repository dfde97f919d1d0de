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

from lastline.core.errors import IntegrityError, PreflightError
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


# --- what a restore accepts from schema.json (untrusted input: a backup folder is writable by many) ----
NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")  # character sets and collations
_IDENT = r"(?:`(?:[^`]|``)*`|\"(?:[^\"]|\"\")*\")"  # backquoted, or double-quoted (sql_mode ANSI_QUOTES)
_DEFINER = rf"(?:DEFINER=(?:{_IDENT}|[\w.]+)@(?:{_IDENT}|[\w.%:-]+|'[^']*')\s+)?"
_QUOTED = re.compile(r"`(?:[^`]|``)*`|'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"", re.S)


def _spelled(name: str) -> str:
    """A regex for one identifier as a statement may spell it: backquoted, or bare if it needs no quotes."""
    forms = [re.escape(quote_ident(name)), re.escape('"' + name.replace('"', '""') + '"')]
    if re.fullmatch(r"[A-Za-z0-9_$]+", name) and not name.isdigit():
        forms.append(re.escape(name) + r"(?![A-Za-z0-9_$])")
    return "(?:" + "|".join(forms) + ")"


def _object(schema: str, name: str) -> str:
    """A regex for `name`, optionally qualified by its own database (never another one)."""
    return rf"(?:{_spelled(schema)}\s*\.\s*)?{_spelled(name)}"


def _shape(kind: str, obj: dict) -> re.Pattern:
    """How the server prints the CREATE statement of one object of `kind` named as `obj` says (triggers:
    as they were written, so names may be bare or qualified by their own database)."""
    name = re.escape(quote_ident(obj["name"]))
    if kind == "tables":
        return re.compile(rf"^CREATE TABLE {name} \(")
    if kind == "sequences":
        return re.compile(rf"^CREATE SEQUENCE {name} ")
    if kind == "views":
        view = _object(obj["schema"], obj["name"])
        return re.compile(rf"^CREATE (?:OR REPLACE )?(?:ALGORITHM=\w+ )?{_DEFINER}(?:SQL SECURITY \w+ )?VIEW {view} (?:\([^)]*\) )?AS ", re.I)
    if kind == "triggers":
        trigger, table = _object(obj["schema"], obj["name"]), _object(obj["schema"], str(obj.get("table", "")))
        return re.compile(
            rf"^CREATE\s+{_DEFINER}TRIGGER\s+{trigger}\s+(?:BEFORE|AFTER)\s+(?:INSERT|UPDATE|DELETE)\s+ON\s+{table}\s", re.I
        )
    if kind == "routines":
        kind_word = str(obj.get("type")).upper()
        if kind_word not in ("PROCEDURE", "FUNCTION"):
            return re.compile(r"(?!)")
        return re.compile(rf"^CREATE {_DEFINER}{kind_word} {_object(obj['schema'], obj['name'])}\s*\(", re.I)
    if kind == "events":
        return re.compile(rf"^CREATE {_DEFINER}EVENT {_object(obj['schema'], obj['name'])}\s", re.I)
    return re.compile(r"(?!)")


def checked_create(kind: str, obj: dict) -> str:
    """The CREATE statement of a schema.json object, refused unless it creates that very object as the
    server prints it: a table's DDL a CREATE TABLE of that table (and no SELECT in it), a view's a CREATE
    VIEW of that view, a trigger's on its own table... One statement: connections run no multi-statements."""
    create = obj.get("create")
    if not isinstance(create, str) or not isinstance(obj.get("name"), str) or not isinstance(obj.get("schema"), str):
        raise IntegrityError(f"schema.json: a {kind[:-1]} entry without a name, database or statement: {str(obj)[:200]}")
    what = f"{kind[:-1]} {obj['schema']}.{obj['name']}"
    if not _shape(kind, obj).match(create):
        raise IntegrityError(
            f"schema.json: the statement of {what} is not a CREATE of that {kind[:-1]} ({create[:120]!r}...): the "
            "backup was changed after it was taken. Nothing of it was run; restore another backup."
        )
    bare = _QUOTED.sub("", create)
    if kind in ("tables", "sequences") and re.search(r"\bSELECT\b", bare, re.I):
        raise IntegrityError(f"schema.json: the statement of {what} reads other tables (SELECT): refused, nothing was run.")
    if kind in ("tables", "sequences", "views") and ";" in bare:
        raise IntegrityError(f"schema.json: the statement of {what} holds more than one statement (;): refused, nothing was run.")
    return create


def database_create(d: dict) -> str:
    """`CREATE DATABASE IF NOT EXISTS` rebuilt from the entry's name, character set and collation."""
    for key in ("charset", "collation"):
        if not NAME_RE.match(str(d.get(key) or "")):
            raise IntegrityError(f"schema.json: database {d.get('name')!r} has a {key} {d.get(key)!r} that is not a name; refused.")
    return f"CREATE DATABASE IF NOT EXISTS {quote_ident(d['name'])} CHARACTER SET {d['charset']} COLLATE {d['collation']}"


def _account(user: str, host: str) -> str:
    """A regex for `user`@`host` as SHOW CREATE USER / SHOW GRANTS print it (backquotes or quotes)."""
    def one(name: str) -> str:
        return "(?:" + "|".join(re.escape(q + name.replace(q, q + q) + q) for q in ("`", "'")) + ")"
    return one(user) + "@" + one(host)


def checked_grants(g: dict) -> list[str]:
    """The statements that recreate one account of schema.json (CREATE USER IF NOT EXISTS, then its
    GRANTs), refused unless each is the CREATE USER or a GRANT ... TO of that very account."""
    user, host = g.get("user"), g.get("host")
    if not isinstance(user, str) or not isinstance(host, str) or not isinstance(g.get("create"), str):
        raise IntegrityError(f"schema.json: a grants entry without user, host or statement: {str(g)[:200]}")
    account = _account(user, host)
    out = []
    if not re.match(rf"^CREATE USER {account}(?:\s|$)", g["create"]) or ";" in _QUOTED.sub("", g["create"]):
        raise IntegrityError(f"schema.json: the CREATE USER of {user}@{host} is not that account's ({g['create'][:80]!r}); refused.")
    out.append(g["create"].replace("CREATE USER ", "CREATE USER IF NOT EXISTS ", 1))
    for grant in g.get("grants", []):
        if not (isinstance(grant, str) and re.match(rf"^GRANT .+ TO {account}(?:\s|$)", grant, re.S)) or ";" in _QUOTED.sub("", grant):
            raise IntegrityError(f"schema.json: a grant of {user}@{host} is not a GRANT to that account ({str(grant)[:80]!r}); refused.")
        out.append(grant)
    return out


def validate_schema(schema: dict, databases: list[str], grants: bool = False) -> None:
    """Check every statement a restore of `databases` would run from schema.json (before anything is touched)."""
    for d in schema.get("databases", []):
        if d.get("name") in databases:
            database_create(d)
    for kind in ("tables", "sequences", "views", "triggers", "routines", "events"):
        for obj in schema.get(kind, []):
            if obj.get("schema") in databases:
                checked_create(kind, obj)
                session_name(obj.get("character_set_client"), "character_set_client")
                session_name(obj.get("collation_connection"), "collation_connection")
    if grants:
        for g in schema.get("grants", []):
            checked_grants(g)


def session_name(value: Any, what: str) -> str | None:
    """A character set or collation name from schema.json, checked to be one (None stays None)."""
    if value in (None, ""):
        return None
    if not NAME_RE.match(str(value)):
        raise IntegrityError(f"schema.json: {what} {value!r} is not a character set or collation name; refused.")
    return str(value)


DEFERRABLE = re.compile(r"^\s*(UNIQUE KEY|KEY|FULLTEXT KEY|SPATIAL KEY|CONSTRAINT\s+`(?:[^`]|``)*`\s+FOREIGN KEY)\b")


def split_deferred(create: str) -> tuple[str, list[str], list[str]]:
    """CREATE TABLE without its secondary indexes and foreign keys (as SHOW CREATE TABLE prints them,
    one definition per line), plus those definitions: (create, index definitions, foreign keys).
    The primary key stays: chunks load in its order."""
    lines = create.split("\n")
    keep, indexes, fks = [], [], []
    for line in lines:
        m = DEFERRABLE.match(line)
        if m:
            (fks if "FOREIGN KEY" in m.group(1) else indexes).append(line.strip().rstrip(","))
        else:
            keep.append(line)
    # the last kept definition before ") ENGINE=..." must not end with a comma
    for i in range(len(keep) - 1, 0, -1):
        if keep[i].startswith(")"):
            keep[i - 1] = keep[i - 1].rstrip().rstrip(",")
            break
    return "\n".join(keep), indexes, fks
