"""Staging fails closed: from the moment a refresh starts writing until its masking is verified, nobody but
lastline can read the staging server, and a refresh that does not reach a verified mask leaves no unmasked
row behind.

- `lock` (the refresh's setup task): every account of the staging server that can log in, except lastline's
  own (the connection's account and the accounts lastline created, recorded in `_lastline.accounts`: exact
  names, never a prefix), is locked, anonymous and USAGE-only ones too (grants to PUBLIC or a role reach
  them); the event scheduler is turned off (a locked definer's event still runs); every other open session is
  killed; then the accounts are read again and the lock fails unless none is left open. The list is recorded
  first, in `_lastline.staging_locks` on the server, so a lock that fails half-way, a retry or the next run
  knows exactly which accounts lastline locked, and unlocks those and no other.
- `close` (the teardown: it runs whatever happened): unless this run's masking was verified, every database
  the refresh restores is dropped first (what it held is not guessed from timestamps: unmasked rows may be in
  any of them); then the recorded accounts are unlocked and the event scheduler is set back. If `close`
  itself fails, they stay locked: closed, never open.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from lastline import connections
from lastline.core import accounts
from lastline.core.errors import Refusal
from lastline.core.servers import Server
from lastline.core.sql import META_DB, placeholders, quote_ident
from lastline.logical.restore.target_state import schema_exists
from lastline.staging.plans import Closed, Locked

log = logging.getLogger(__name__)

LOCKS = f"{META_DB}.staging_locks"
SYSTEM_ACCOUNTS = {"mariadb.sys", "mysql.sys", "mysql.session", "mysql.infoschema"}


def _ensure(cur: Any) -> None:
    cur.execute("SET SESSION sql_log_bin = 0")
    cur.execute("SET SESSION sql_mode = ''")  # account_sql doubles backslashes: NO_BACKSLASH_ESCAPES would name another account
    cur.execute(f"CREATE DATABASE IF NOT EXISTS {META_DB}")
    cur.execute(f"CREATE TABLE IF NOT EXISTS {LOCKS} (run_key VARBINARY(250) NOT NULL PRIMARY KEY, "
                "locked_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), phase VARCHAR(16) NOT NULL, "
                "accounts LONGTEXT NOT NULL) ENGINE=InnoDB")
    cur.execute(f"ALTER TABLE {LOCKS} ADD COLUMN IF NOT EXISTS event_scheduler VARCHAR(16) NULL")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


def readers(cur: Any) -> list[tuple[str, str]]:
    """The accounts to lock: every unlocked account that can log in (anonymous ones and those that hold only
    USAGE too: grants to PUBLIC or a role reach them), but lastline's own. Failing closed: whatever the
    server's grants say, nobody else logs in."""
    own = own_accounts(cur)
    cur.execute("SELECT User, Host, JSON_VALUE(Priv, '$.account_locked'), JSON_VALUE(Priv, '$.is_role') FROM mysql.global_priv")
    out = []
    for user, host, locked, role in cur.fetchall():
        user, host = _text(user), _text(host)
        if (user, host) in own or user in SYSTEM_ACCOUNTS \
                or str(locked).lower() in ("1", "true") or str(role).lower() in ("1", "true") or user == "PUBLIC":
            continue
        out.append((user, host))
    return out


def own_accounts(cur: Any) -> set[tuple[str, str]]:
    """lastline's own accounts, by exact name and host: the connection's and those recorded in `_lastline.accounts`
    (the run and owner accounts it created). An account that merely looks like one (`lastline_run_x`, planted by a
    backup's grants or by hand) is locked like any other."""
    cur.execute("SELECT CURRENT_USER()")
    me = _text(cur.fetchone()[0]).rpartition("@")
    return {(me[0], me[2]), *accounts.recorded(cur)}


def lock(target_conn_id: str, run_key: str) -> Locked:
    """Lock every account that could read staging (see the module doc); idempotent for a retry."""
    server = connections.server(target_conn_id)
    with server.session() as cur:
        _ensure(cur)
        cur.execute(f"SELECT accounts FROM {LOCKS} WHERE run_key = %s", (run_key,))
        row = cur.fetchone()
        found = [tuple(a) for a in json.loads(_text(row[0]))] if row else readers(cur)
        # recorded before any account is locked: whatever happens next, close knows them
        cur.execute("SELECT @@global.event_scheduler")
        scheduler = _text(cur.fetchone()[0])
        if not row:
            cur.execute(f"INSERT INTO {LOCKS} (run_key, phase, accounts, event_scheduler) VALUES (%s, 'locked', %s, %s)",
                        (run_key, json.dumps(found), scheduler))
            cur.connection.commit()
        if scheduler.upper() == "ON":  # a locked account's event runs all the same: none runs until close
            cur.execute("SET GLOBAL event_scheduler = OFF")
        unknown = set()
        for user, host in found:
            try:
                cur.execute(f"ALTER USER {accounts.account_sql(user, host)} ACCOUNT LOCK")
            except Exception as exc:  # noqa: BLE001 - 1396: dropped meanwhile, or not loaded (cannot log in)
                if getattr(exc, "args", (None,))[0] != 1396:
                    raise
                unknown.add((user, host))  # e.g. a host name under skip_name_resolve: the server ignores it
        killed = _kill_sessions(cur)
        still = [a for a in readers(cur) if a not in unknown]  # checked, not trusted: an account whose lock did not take (a name the server
        if still:             # spells otherwise, one created meanwhile) fails the lock, and close unlocks what was locked
            raise Refusal(f"staging {server.describe()}: {len(still)} account(s) could not be locked "
                          f"({', '.join(f'{u}@{h}' for u, h in still[:10])}): nothing is restored while anyone else "
                          "can log in. Lock or drop them by hand, then re-run.")
    log.info("staging %s: locked %d account(s) until the masking is verified (%s); %d open session(s) killed",
             server.describe(), len(found), ", ".join(f"{u}@{h}" for u, h in found) or "none", killed)
    return Locked([f"{u}@{h}" for u, h in found], killed)


def _kill_sessions(cur: Any) -> int:
    """End every open session but lastline's own (an account locked earlier may still have one open)."""
    own = {u for u, _ in own_accounts(cur)}  # read first: it runs on the same cursor
    cur.execute("SELECT ID, USER FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Daemon' "
                "AND USER NOT IN ('system user', 'event_scheduler', 'unauthenticated user')")
    killed = 0
    for thread, user in cur.fetchall():
        user = _text(user)
        if user in own:
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


def close(target_conn_id: str, run_key: str, databases: list[str]) -> Closed:
    """The teardown: drop what this run restored unless its masking was verified, then unlock what lastline
    locked (this run's accounts, and those of any earlier run that never closed)."""
    server = connections.server(target_conn_id)
    dropped: list[str] = []
    with server.session() as cur:
        _ensure(cur)
        cur.execute(f"SELECT run_key, locked_at, phase, accounts, event_scheduler FROM {LOCKS} WHERE phase <> 'closed'")
        found_rows = cur.fetchall()
        rows = {_text(k): (at, _text(p), json.loads(_text(a))) for k, at, p, a, _ in found_rows}
        scheduler_on = any(e is not None and _text(e).upper() == "ON" for *_, e in found_rows)
        mine = rows.get(run_key)
        if mine is None:
            log.info("staging %s: this run locked nothing (it stopped before its lock): nothing to close", server.describe())
            return Closed([], [])
        if mine[1] != "verified":
            dropped = _drop_unmasked(cur, databases)
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
        if scheduler_on:  # as it was before the first unclosed lock
            cur.execute("SET GLOBAL event_scheduler = ON")
        cur.execute(f"UPDATE {LOCKS} SET phase = 'closed' WHERE run_key IN ({placeholders(rows)})", list(rows))
        cur.connection.commit()
    if dropped:
        log.warning("staging %s: the masking of this run was not verified: dropped %s (restored, unmasked), so no personal "
                    "data stays readable; the previous refresh's copy, if any, is in lastline_aside_*", server.describe(),
                    ", ".join(dropped))
    log.info("staging %s: unlocked %d account(s)", server.describe(), len(unlocked))
    return Closed(dropped, sorted(f"{u}@{h}" for u, h in unlocked))


def _drop_unmasked(cur: Any, databases: list[str]) -> list[str]:
    """Every database the refresh restores, dropped: the masking was not verified, so any of them may hold
    unmasked rows (a partial restore, a resumed one that created nothing new, a mask that failed half-way).
    The previous refresh's copy, if any, is kept in lastline_aside_* by the restore's set-aside."""
    out = []
    for db in databases:
        if schema_exists(cur, db):
            cur.execute(f"DROP DATABASE {quote_ident(db)}")
            out.append(db)
    return out
