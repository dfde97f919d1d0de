"""Staging fails closed: from the moment a refresh starts writing until its masking is verified, nobody but
lastline can read the staging server, and a refresh that does not reach a verified mask leaves no unmasked
row behind.

- `lock` (the refresh's setup task): every account of the staging server that can log in, except lastline's
  own (the connection's account and the restore's accounts), is locked, anonymous and USAGE-only ones too
  (grants to PUBLIC or a role reach them), and every other open session is killed. The list is recorded first, in `_lastline.staging_locks` on the
  server, so a lock that fails half-way, a retry or the next run knows exactly which accounts lastline
  locked, and unlocks those and no other.
- `close` (the teardown: it runs whatever happened): unless this run's masking was verified, every restored
  database that holds tables this run created (or a partial restore) is dropped first; then the recorded
  accounts are unlocked. If `close` itself fails, they stay locked: closed, never open.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from lastline import connections
from lastline.core import accounts
from lastline.core.servers import Server
from lastline.core.sql import META_DB, placeholders, quote_ident
from lastline.logical.target_state import aside_name, schema_exists

log = logging.getLogger(__name__)

LOCKS = f"{META_DB}.staging_locks"
SYSTEM_ACCOUNTS = {"mariadb.sys", "mysql.sys", "mysql.session", "mysql.infoschema"}


def _ensure(cur: Any) -> None:
    cur.execute("SET SESSION sql_log_bin = 0")
    cur.execute(f"CREATE DATABASE IF NOT EXISTS {META_DB}")
    cur.execute(f"CREATE TABLE IF NOT EXISTS {LOCKS} (run_key VARBINARY(250) NOT NULL PRIMARY KEY, "
                "locked_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), phase VARCHAR(16) NOT NULL, "
                "accounts LONGTEXT NOT NULL) ENGINE=InnoDB")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


def readers(cur: Any) -> list[tuple[str, str]]:
    """The accounts to lock: every unlocked account that can log in (anonymous ones and those that hold only
    USAGE too: grants to PUBLIC or a role reach them), but lastline's own. Failing closed: whatever the
    server's grants say, nobody else logs in."""
    cur.execute("SELECT CURRENT_USER()")
    me = _text(cur.fetchone()[0]).rpartition("@")
    cur.execute("SELECT User, Host, JSON_VALUE(Priv, '$.account_locked'), JSON_VALUE(Priv, '$.is_role') FROM mysql.global_priv")
    out = []
    for user, host, locked, role in cur.fetchall():
        user, host = _text(user), _text(host)
        if (user, host) == (me[0], me[2]) or user in SYSTEM_ACCOUNTS or user.startswith((accounts.RUN_PREFIX, accounts.OWNER_PREFIX)) \
                or str(locked).lower() in ("1", "true") or str(role).lower() in ("1", "true") or user == "PUBLIC":
            continue
        out.append((user, host))
    return out


def lock(target_conn_id: str, run_key: str) -> dict:
    """Lock every account that could read staging (see the module doc); idempotent for a retry."""
    server = connections.server(target_conn_id)
    with server.session() as cur:
        _ensure(cur)
        cur.execute(f"SELECT accounts FROM {LOCKS} WHERE run_key = %s", (run_key,))
        row = cur.fetchone()
        found = [tuple(a) for a in json.loads(_text(row[0]))] if row else readers(cur)
        if not row:  # recorded before any account is locked: whatever happens next, close knows them
            cur.execute(f"INSERT INTO {LOCKS} (run_key, phase, accounts) VALUES (%s, 'locked', %s)", (run_key, json.dumps(found)))
            cur.connection.commit()
        for user, host in found:
            try:
                cur.execute(f"ALTER USER {accounts.account_sql(user, host)} ACCOUNT LOCK")
            except Exception as exc:  # noqa: BLE001 - 1396: dropped meanwhile
                if getattr(exc, "args", (None,))[0] != 1396:
                    raise
        killed = _kill_sessions(cur, me=me_user(cur))
    log.info("staging %s: locked %d account(s) until the masking is verified (%s); %d open session(s) killed",
             server.describe(), len(found), ", ".join(f"{u}@{h}" for u, h in found) or "none", killed)
    return {"locked": [f"{u}@{h}" for u, h in found], "sessions_killed": killed}


def me_user(cur: Any) -> str:
    cur.execute("SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1)")
    return _text(cur.fetchone()[0])


def _kill_sessions(cur: Any, me: str) -> int:
    """End every open session but lastline's own (an account locked earlier may still have one open)."""
    cur.execute("SELECT ID, USER FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Daemon' "
                "AND USER NOT IN ('system user', 'event_scheduler', 'unauthenticated user')")
    killed = 0
    for thread, user in cur.fetchall():
        user = _text(user)
        if user == me or user.startswith((accounts.RUN_PREFIX, accounts.OWNER_PREFIX)):
            continue
        try:
            cur.execute(f"KILL CONNECTION {int(thread)}")
            killed += 1
        except Exception as exc:  # noqa: BLE001 - 1094: it ended meanwhile
            if getattr(exc, "args", (None,))[0] != 1094:
                raise
    return killed


def mark_verified(server: Server, run_key: str) -> None:
    """Record that this run's masking was verified (close then keeps the data)."""
    with server.session() as cur:
        _ensure(cur)
        cur.execute(f"UPDATE {LOCKS} SET phase = 'verified' WHERE run_key = %s", (run_key,))
        cur.connection.commit()


def close(target_conn_id: str, run_key: str, databases: list[str]) -> dict:
    """The teardown: drop what this run restored unless its masking was verified, then unlock what lastline
    locked (this run's accounts, and those of any earlier run that never closed)."""
    server = connections.server(target_conn_id)
    dropped: list[str] = []
    with server.session() as cur:
        _ensure(cur)
        cur.execute(f"SELECT run_key, locked_at, phase, accounts FROM {LOCKS} WHERE phase <> 'closed'")
        rows = {_text(k): (at, _text(p), json.loads(_text(a))) for k, at, p, a in cur.fetchall()}
        mine = rows.get(run_key)
        if mine is None:
            log.info("staging %s: this run locked nothing (it stopped before its lock): nothing to close", server.describe())
            return {"dropped": [], "unlocked": []}
        if mine[1] != "verified":
            dropped = _drop_unmasked(cur, databases, mine[0])
        unlocked: set[tuple[str, str]] = set()
        for _key, (_at, _phase, found) in rows.items():
            for user, host in found:
                if (user, host) in unlocked:
                    continue
                try:
                    cur.execute(f"ALTER USER {accounts.account_sql(user, host)} ACCOUNT UNLOCK")
                except Exception as exc:  # noqa: BLE001 - 1396: dropped meanwhile
                    if getattr(exc, "args", (None,))[0] != 1396:
                        raise
                unlocked.add((user, host))
        cur.execute(f"UPDATE {LOCKS} SET phase = 'closed' WHERE run_key IN ({placeholders(rows)})", list(rows))
        cur.connection.commit()
    if dropped:
        log.warning("staging %s: the masking of this run was not verified: dropped %s (restored, unmasked), so no personal "
                    "data stays readable; the previous refresh's copy, if any, is in lastline_aside_*", server.describe(),
                    ", ".join(dropped))
    log.info("staging %s: unlocked %d account(s)", server.describe(), len(unlocked))
    return {"dropped": dropped, "unlocked": sorted(f"{u}@{h}" for u, h in unlocked)}


def _drop_unmasked(cur: Any, databases: list[str], locked_at: Any) -> list[str]:
    """The restored databases that may hold unmasked rows: any table created since the lock, or a partial
    restore beside a set-aside copy. Dropped."""
    out = []
    since = locked_at.replace(microsecond=0) if hasattr(locked_at, "replace") else locked_at  # CREATE_TIME has whole seconds
    for db in databases:
        if not schema_exists(cur, db):
            continue
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND CREATE_TIME >= %s",
                    (db, since))
        if cur.fetchone()[0] or schema_exists(cur, aside_name(db)):
            cur.execute(f"DROP DATABASE {quote_ident(db)}")
            out.append(db)
    return out
