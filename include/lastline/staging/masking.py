"""Deterministic masking in bulk SQL on the target: one UPDATE per table, every output derived from the
value's keyed HMAC-SHA256 computed by the server (SHA2 over the key's inner and outer pads), so rows
never pass through Python and the same value masks alike in every table and every refresh.

Text is hashed as its column compares it: converted to utf8mb4, and lowercased under a case-insensitive
collation (so `Ann@X.com` in one table and `ann@x.com` in another, equal under `_ci`, still join).
NULL stays NULL and the empty string stays empty.

Statements that name a table or column carry no client-side parameters (a `%` in a name would be taken
for one): values reach them as session variables set by a statement of their own.

Exactly once: a table's UPDATE commits with its row in `_lastline.masked` (keyed by the run), so a
retried task never masks a masked value again. Before it, the same transaction records each masked
column's original values under a key derived from the masking key and the run (HMAC, never a plain hash)
in `_lastline.mask_originals`, for verify_masking; `open` deletes them.

Key material reaches the server only as the contents of a LOAD DATA LOCAL stream (set_key), never in a
statement's text, so no log of statements holds it.
"""
from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, BinaryIO

from lastline.core.errors import LastlineError
from lastline.core.sql import META_DB, qualified, quote_ident, sql_error, string_literal
from lastline.logical.format import infile
from lastline.staging.rules import EMAIL_DOMAIN, EMAIL_HEX, Rule

# made-up names: two syllables for a first name, three for a last name (no real person's name)
SYLLABLES = ("ka", "lo", "mi", "ren", "ta", "vo", "shi", "dan", "el", "ru", "po", "nia", "bex", "tor", "wen", "qua",
             "ly", "sar", "fin", "oda", "ze", "mar", "ith", "gu", "ba", "nel", "cor", "ja", "uvi", "hal", "pe", "os")
_HMAC = "SHA2(CONCAT(@lastline_opad, UNHEX(SHA2(CONCAT(@lastline_ipad, {v}), 256))), 256)"


@dataclass(frozen=True)
class ColumnInfo:
    """What masking needs to know of a column on the target."""

    data_type: str
    max_chars: int | None
    collation: str | None
    nullable: bool
    unique: bool

    @property
    def text(self) -> bool:
        return self.collation is not None


def key_pads(key: str | bytes) -> tuple[bytes, bytes]:
    """HMAC-SHA256's inner and outer pads of `key`."""
    k = key.encode() if isinstance(key, str) else key
    if len(k) > 64:
        k = hashlib.sha256(k).digest()
    k = k.ljust(64, b"\0")
    return bytes(b ^ 0x36 for b in k), bytes(b ^ 0x5C for b in k)


def originals_key(key: str, run_key: str) -> bytes:
    """The key the originals' hashes are kept under: derived from the masking key and the run, so what
    mask_originals holds is neither a plain hash of personal data nor comparable across runs."""
    return hmac.new(key.encode(), b"lastline-originals/" + run_key.encode(), hashlib.sha256).digest()


def set_key(conn: Any, key: str, run_key: str) -> None:
    """This session's key material: the masking key's pads and the originals key's, as user variables of this
    connection only. They reach the server as the contents of a LOAD DATA LOCAL stream (lastline's handler, a
    FIFO), never in a statement's text: the general, slow and audit logs and performance_schema's statement
    history record statements, and none of these holds a key. `conn` must allow LOCAL INFILE."""
    ipad, opad = key_pads(key)
    oipad, oopad = key_pads(originals_key(key, run_key))
    data = b"".join(b"%s\t%s\n" % (name, value.hex().encode())
                    for name, value in ((b"ipad", ipad), (b"opad", opad), (b"oipad", oipad), (b"oopad", oopad)))
    handler = infile.install(conn)
    cur = conn.cursor()
    cur.execute("SET SESSION sql_log_bin = 0")  # a statement-format binary log would carry the LOAD DATA's bytes
    # MEMORY, never another engine's files on disk: NO_ENGINE_SUBSTITUTION for this statement alone (refused, not made
    # InnoDB, where enforce_storage_engine says so), whatever the session's sql_mode
    cur.execute("SELECT @@SESSION.sql_mode")
    mode = ",".join(m for m in [*str(cur.fetchone()[0] or "").split(","), "NO_ENGINE_SUBSTITUTION"] if m)
    cur.execute(f"SET STATEMENT sql_mode = %s FOR CREATE TEMPORARY TABLE {META_DB}.lastline_pads "
                "(name VARCHAR(8) NOT NULL PRIMARY KEY, v VARBINARY(128) NOT NULL) ENGINE=MEMORY", (mode,))
    def feed(fh: BinaryIO) -> None:
        fh.write(data)

    with infile.fed_fifo(feed, "lastline-key") as (fifo, failed):
        handler.offer(fifo, "none", len(data))
        cur.execute(f"LOAD DATA LOCAL INFILE {string_literal(fifo)} INTO TABLE {META_DB}.lastline_pads CHARACTER SET binary "
                    "FIELDS TERMINATED BY '\\t' ESCAPED BY '' LINES TERMINATED BY '\\n' (name, @hex) SET v = UNHEX(@hex)")
    if failed or cur.rowcount != 4:
        raise LastlineError(f"the masking key could not be set on the server ({failed[0] if failed else cur.rowcount}).")
    for name in ("ipad", "opad", "oipad", "oopad"):
        cur.execute(f"SELECT v INTO @lastline_{name} FROM {META_DB}.lastline_pads WHERE name = '{name}'")
    cur.execute(f"DROP TEMPORARY TABLE {META_DB}.lastline_pads")


def normalized(column: str, info: ColumnInfo, alias: str = "") -> str:
    """The bytes a column's value is hashed as (see the module doc); `alias`: the table's, if any."""
    c = f"{alias}.{quote_ident(column)}" if alias else quote_ident(column)
    if info.text:
        v = f"CONVERT({c} USING utf8mb4)"
        if info.collation and info.collation.endswith("_ci"):
            v = f"LOWER({v})"
        return f"CAST({v} AS BINARY)"
    if info.data_type in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
        return c
    return f"CAST(CAST({c} AS CHAR) AS BINARY)"


def original_hash(column: str, info: ColumnInfo, alias: str = "") -> str:
    """A value as normalized, under the run's originals key (HMAC-SHA256, binary): what mask_originals holds
    and verify compares (see set_key)."""
    inner = f"UNHEX(SHA2(CONCAT(@lastline_oipad, {normalized(column, info, alias)}), 256))"
    return f"UNHEX(SHA2(CONCAT(@lastline_oopad, {inner}), 256))"


def _syllables(h: str, at: int, count: int) -> str:
    parts = [f"ELT(1 + MOD(CONV(SUBSTR({h}, {at + 2 * i}, 2), 16, 10), {len(SYLLABLES)}), "
             + ", ".join(f"'{s}'" for s in SYLLABLES) + ")" for i in range(count)]
    word = f"CONCAT({', '.join(parts)})"
    return f"CONCAT(UPPER(LEFT({word}, 1)), SUBSTR({word}, 2))"


def _digits(h: str) -> str:
    out = h
    for i, letter in enumerate("abcdef"):
        out = f"REPLACE({out}, '{letter}', '{i}')"
    return out


def expression(rule: Rule, info: ColumnInfo, longest: int = 0, fixed_var: str = "@lastline_fixed") -> str:
    """The SQL that computes the masked value of `rule`'s column; `longest` is the longest value's length in
    characters (phone masks position by position); a fixed value is read from `fixed_var`, set by the caller."""
    c = quote_ident(rule.column)
    if rule.strategy == "null":
        return "NULL"
    if rule.strategy == "fixed":
        return fixed_var
    h = "@lastline_h"
    hmac = _HMAC.format(v=normalized(rule.column, info))
    limit = info.max_chars or 64
    if rule.strategy == "hash":
        body = f"LEFT({h}, {min(64, limit)})"
    elif rule.strategy == "email":
        n = max(1, min(EMAIL_HEX, limit - len(EMAIL_DOMAIN) - 2))
        body = f"CONCAT('u', LEFT({h}, {n}), '@{EMAIL_DOMAIN}')"
    elif rule.strategy in ("name", "first_name", "last_name"):
        first, last = _syllables(h, 1, 2), _syllables(h, 5, 3)
        body = {"name": f"CONCAT({first}, ' ', {last})", "first_name": first, "last_name": last}[rule.strategy]
        if info.unique:  # a made-up name alone would repeat: 48 bits of the HMAC keep the column unique
            body = f"CONCAT({body}, ' ', SUBSTR({h}, 17, 12))"
        body = f"LEFT({body}, {limit})"
    elif rule.strategy == "phone":
        blocks = max(1, -(-longest // 64))
        digits = "CONCAT(" + ", ".join(_digits(h if b == 0 else f"SHA2(CONCAT({h}, '{b}'), 256)") for b in range(blocks)) + ")"
        v = f"CONVERT(CAST({c} AS CHAR) USING utf8mb4)"
        positions = [f"IF(SUBSTR({v}, {i}, 1) BETWEEN '0' AND '9', SUBSTR(@lastline_d, {i}, 1), SUBSTR({v}, {i}, 1))"
                     for i in range(1, max(1, longest) + 1)]
        body = f"IF((@lastline_d := {digits}) IS NULL, NULL, CONCAT({', '.join(positions)}))"
    else:
        raise AssertionError(rule.strategy)
    empty = f"{c} = ''" if info.text else "FALSE"
    return f"IF({c} IS NULL OR {empty}, {c}, IF(({h} := {hmac}) IS NULL, NULL, {body}))"


def mask_table(conn: Any, run_key: str, schema: str, table: str, rules: list[Rule], infos: dict[str, ColumnInfo]) -> dict | None:
    """Mask one table's columns in one transaction with its `masked` row and its originals' hashes;
    None if this run masked it already. Returns per column: its strategy, the non-NULL values it held, the rows
    whose masked value equals their own (phone: none expected) and the rows the table's UPDATE changed."""
    cur = conn.cursor()
    where = qualified(schema, table)
    try:
        cur.execute(f"INSERT INTO {META_DB}.masked (run_key, schema_name, table_name) VALUES (%s, %s, %s)", (run_key, schema, table))
    except Exception as exc:
        conn.rollback()
        if sql_error(exc)[0] == 1062:
            return None
        raise
    try:
        audit: dict[str, dict] = {}
        sets = []
        cur.execute("SET @lastline_run = %s", (run_key,))
        for i, r in enumerate(rules):
            info = infos[r.column]
            c = quote_ident(r.column)
            cur.execute(f"SELECT COUNT({c}), COALESCE(MAX(CHAR_LENGTH(CAST({c} AS CHAR))), 0) FROM {where}")
            values, longest = cur.fetchone()
            entry = {"strategy": r.strategy if r.strategy != "fixed" else f"fixed:{r.value}", "values": int(values),
                     "left_equal": 0}
            audit[r.column] = entry
            if r.strategy == "keep":
                continue
            cur.execute("SET @lastline_column = %s, @lastline_fixed_" + str(i) + " = %s", (r.key, r.value))
            cur.execute(f"INSERT IGNORE INTO {META_DB}.mask_originals (run_key, column_key, h) SELECT DISTINCT @lastline_run, "
                        f"@lastline_column, {original_hash(r.column, info)} FROM {where} WHERE {c} IS NOT NULL")
            expr = expression(r, info, int(longest), f"@lastline_fixed_{i}")
            if r.strategy == "phone":  # rows whose masked number is their own: none expected, counted for the audit
                cur.execute(f"SELECT COUNT(*) FROM {where} WHERE {c} IS NOT NULL AND ({expr}) <=> CAST({c} AS CHAR)")
                entry["left_equal"] = int(cur.fetchone()[0])
            sets.append(f"{c} = {expr}")
        changed = 0
        if sets:
            cur.execute(f"UPDATE {where} SET {', '.join(sets)}")
            changed = cur.rowcount
        for column, entry in audit.items():
            entry["rows_changed"] = changed if entry["strategy"] != "keep" else 0
            cur.execute(f"INSERT INTO {META_DB}.mask_audit (run_key, schema_name, table_name, column_name, strategy, "
                        "values_masked, left_equal, rows_changed) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                        (run_key, schema, table, column, entry["strategy"], entry["values"], entry["left_equal"], changed))
        conn.commit()
        return audit
    except BaseException:
        conn.rollback()
        raise


def column_infos(cur: Any, schema: str, table: str) -> dict[str, ColumnInfo]:
    """What masking needs to know of each column of a table on the target."""
    cur.execute("SELECT c.COLUMN_NAME, c.DATA_TYPE, c.CHARACTER_MAXIMUM_LENGTH, c.COLLATION_NAME, c.IS_NULLABLE, "
                "EXISTS (SELECT 1 FROM information_schema.STATISTICS s WHERE s.TABLE_SCHEMA = c.TABLE_SCHEMA AND "
                "s.TABLE_NAME = c.TABLE_NAME AND s.COLUMN_NAME = c.COLUMN_NAME AND s.NON_UNIQUE = 0) "
                "FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = %s AND c.TABLE_NAME = %s", (schema, table))
    return {str(n): ColumnInfo(str(dt), int(m) if m is not None else None, str(coll) if coll else None,
                                      nullable == "YES", bool(u)) for n, dt, m, coll, nullable, u in cur.fetchall()}


def by_table(rules: list[Rule]) -> dict[tuple[str, str], list[Rule]]:
    """The rules grouped by table, in their order."""
    out: dict[tuple[str, str], list[Rule]] = {}
    for r in rules:
        out.setdefault((r.schema, r.table), []).append(r)
    return out


def ensure_tables(cur: Any) -> None:
    """The masking bookkeeping on the target (idempotent)."""
    cur.execute(f"CREATE DATABASE IF NOT EXISTS {META_DB}")
    cur.execute(f"CREATE TABLE IF NOT EXISTS {META_DB}.masked (run_key VARBINARY(250) NOT NULL, schema_name VARBINARY(256) NOT NULL, "
                "table_name VARBINARY(256) NOT NULL, masked_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
                "PRIMARY KEY (run_key, schema_name, table_name)) ENGINE=InnoDB")
    cur.execute(f"CREATE TABLE IF NOT EXISTS {META_DB}.mask_originals (run_key VARBINARY(250) NOT NULL, "
                "column_key VARBINARY(800) NOT NULL, h BINARY(32) NOT NULL, PRIMARY KEY (run_key, h, column_key)) ENGINE=InnoDB")
    cur.execute(f"CREATE TABLE IF NOT EXISTS {META_DB}.mask_audit (run_key VARBINARY(250) NOT NULL, schema_name VARBINARY(256) NOT NULL, "
                "table_name VARBINARY(256) NOT NULL, column_name VARBINARY(256) NOT NULL, strategy VARBINARY(300) NOT NULL, "
                "values_masked BIGINT NOT NULL, left_equal BIGINT NOT NULL, rows_changed BIGINT NOT NULL, "
                "PRIMARY KEY (run_key, schema_name, table_name, column_name)) ENGINE=InnoDB")
