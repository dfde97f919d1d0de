"""The session values of schema.json under which a restore creates objects: each object's sql_mode,
character_set_client and collation_connection, and each database's character set and collation, checked to be
names (never text that reaches the server as SQL)."""
from __future__ import annotations

import re
from typing import Any

from lastline.core.errors import IntegrityError
from lastline.core.sql import quote_ident

NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")  # character sets and collations

# every sql_mode name MariaDB and MySQL print (a schema.json value must be a comma list of these, as a string:
# a number would be taken as a bitmask, which the checks could not read the same way as the server)
SQL_MODES = frozenset("""REAL_AS_FLOAT PIPES_AS_CONCAT ANSI_QUOTES IGNORE_SPACE IGNORE_BAD_TABLE_OPTIONS ONLY_FULL_GROUP_BY
    NO_UNSIGNED_SUBTRACTION NO_DIR_IN_CREATE POSTGRESQL ORACLE MSSQL DB2 MAXDB NO_KEY_OPTIONS NO_TABLE_OPTIONS
    NO_FIELD_OPTIONS MYSQL323 MYSQL40 ANSI NO_AUTO_VALUE_ON_ZERO NO_BACKSLASH_ESCAPES STRICT_TRANS_TABLES STRICT_ALL_TABLES
    NO_ZERO_IN_DATE NO_ZERO_DATE INVALID_DATES ERROR_FOR_DIVISION_BY_ZERO TRADITIONAL NO_AUTO_CREATE_USER
    HIGH_NOT_PRECEDENCE NO_ENGINE_SUBSTITUTION PAD_CHAR_TO_FULL_LENGTH EMPTY_STRING_IS_NULL SIMULTANEOUS_ASSIGNMENT
    TIME_ROUND_FRACTIONAL TIME_TRUNCATE_FRACTIONAL""".split())


def session_mode(value: Any) -> str:
    """An object's sql_mode from schema.json: a string of known mode names (refused otherwise)."""
    if value in (None, ""):
        return ""
    if not isinstance(value, str) or any(m.strip().upper() not in SQL_MODES for m in value.split(",")):
        raise IntegrityError(f"schema.json: sql_mode {str(value)[:120]!r} is not a list of sql_mode names; refused.")
    return value


def session_name(value: Any, what: str) -> str | None:
    """A character set or collation name from schema.json, checked to be one (None stays None)."""
    if value in (None, ""):
        return None
    if not NAME_RE.match(str(value)):
        raise IntegrityError(f"schema.json: {what} {value!r} is not a character set or collation name; refused.")
    return str(value)



def database_create(d: dict) -> str:
    """`CREATE DATABASE IF NOT EXISTS` rebuilt from the entry's name, character set and collation."""
    for key in ("charset", "collation"):
        if not NAME_RE.match(str(d.get(key) or "")):
            raise IntegrityError(f"schema.json: database {d.get('name')!r} has a {key} {d.get(key)!r} that is not a name; refused.")
    return f"CREATE DATABASE IF NOT EXISTS {quote_ident(d['name'])} CHARACTER SET {d['charset']} COLLATE {d['collation']}"
