"""schema.json is untrusted input: every statement a restore runs from it is checked to be the CREATE of its
kind and name (no second statement, no other object), and every name it sets goes in checked."""
from __future__ import annotations

import re
from typing import Any

from lastline.core.errors import IntegrityError
from lastline.core.sql import quote_ident

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
