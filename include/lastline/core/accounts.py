"""Least privilege on a restore target: the accounts that run what a backup brings.

A backup folder is untrusted input, so nothing it holds runs under the connection's own (admin) account.
Two kinds of account, both created and removed by lastline's own statements on the admin connection:

- the **run account** (`lastline_run_<hex>`): one per restore run; every statement that comes from the
  backup (tables, sequences, chunk loads, held-back indexes, foreign keys) runs under it. Its grants cover
  the restored databases only (their names escaped, so `_` and `%` in a name match nothing else), the
  restore's ledger and table checks in `_lastline` (row access to those two tables, nothing else there),
  one procedure that turns binary logging off for its own session, and READ_ONLY ADMIN (the load writes
  while `read_only` keeps applications out). No FILE, no SUPER, no `mysql.*`, no other database. The
  teardown drops it, always.
- the **objects owner** (`lastline_obj_<hex>`): the DEFINER of the triggers, views, routines and events
  of one set of restored databases. Objects run with their definer's privileges long after the restore,
  so their definer must outlive the run: it is kept, locked (it cannot log in), with privileges on those
  databases only. A backup's own DEFINER (root, say) is never used unless the connection says so.

Passwords are never stored: `_lastline.accounts` keeps a random nonce per account, and each task derives
the password on the worker as an HMAC of that nonce under the admin connection's password, so reading the
table (any account with global SELECT can) gives no login. They are sent as their hash (`IDENTIFIED BY
PASSWORD`): no password reaches a statement's text, a log or XCom.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import logging
import secrets
from typing import Any

from lastline.core.errors import ConfigError
from lastline.core.servers import Server
from lastline.core.sql import META_DB, quote_ident

log = logging.getLogger(__name__)

ACCOUNTS = f"{META_DB}.accounts"
SESSION_PROCEDURE = f"{META_DB}.restore_session"  # SET SESSION sql_log_bin = 0, for accounts without BINLOG ADMIN
RUN_PREFIX, OWNER_PREFIX = "lastline_run_", "lastline_obj_"
# what a restore does inside its own databases: create and fill tables, build indexes, create objects
DATABASE_PRIVILEGES = ("SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, REFERENCES, CREATE VIEW, SHOW VIEW, "
                       "TRIGGER, CREATE ROUTINE, ALTER ROUTINE, EVENT, LOCK TABLES, EXECUTE")
# what an archived statement of a point-in-time replay may do in the restored databases: change rows, call their code
REPLAY_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE, EXECUTE"
# lastline's own tables the run account writes in the same transactions as the rows (table-level grants)
META_TABLES = {"ledger": "SELECT, INSERT, UPDATE", "table_checks": "SELECT, INSERT, UPDATE, DELETE"}


def unlogged(cur: Any) -> None:
    """This session's writes stay out of the binary log (a restore is not replicated statement by statement):
    through the session procedure, which an account without BINLOG ADMIN may call, or directly where it is
    missing (an admin session before any restore account existed)."""
    try:
        cur.execute(f"CALL {SESSION_PROCEDURE}()")
    except Exception as exc:  # noqa: BLE001 - 1305: no such procedure yet
        if getattr(exc, "args", (None,))[0] != 1305:
            raise
        cur.execute("SET SESSION sql_log_bin = 0")


def run_account_name() -> str:
    """A new run account's user name (chosen once, by the preflight; it travels in the plan)."""
    return RUN_PREFIX + secrets.token_hex(6)


def owner_name(databases: list[str]) -> str:
    """The objects owner of a set of databases (the same set gives the same owner)."""
    return OWNER_PREFIX + hashlib.sha256("\0".join(sorted(databases)).encode()).hexdigest()[:16]


def grant_pattern(database: str) -> str:
    """A database name as a GRANT matches it literally: `_` and `%` are wildcards there, `\\` escapes."""
    return quote_ident(database.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%"))


def account_sql(user: str, host: str) -> str:
    """'user'@'host' as a statement names an account (quotes doubled)."""
    return "'{}'@'{}'".format(user.replace("\\", "\\\\").replace("'", "''"), host.replace("\\", "\\\\").replace("'", "''"))


def password_hash(password: str) -> str:
    """mysql_native_password's hash of `password` (what `IDENTIFIED BY PASSWORD` takes)."""
    return "*" + hashlib.sha1(hashlib.sha1(password.encode()).digest()).hexdigest().upper()


def admin_host(cur: Any) -> str:
    """The host part of the admin account as the server matched it: lastline's accounts connect from
    wherever the admin account may, never from further."""
    cur.execute("SELECT CURRENT_USER()")
    value = cur.fetchone()[0]
    text = value.decode() if isinstance(value, bytes) else str(value)
    return text.rpartition("@")[2] or "localhost"


def _prepare_meta(cur: Any) -> None:
    """`_lastline.accounts` and the session procedure (idempotent; the procedure's definer is the admin)."""
    cur.execute("SET SESSION sql_log_bin = 0")
    cur.execute(f"CREATE DATABASE IF NOT EXISTS {META_DB}")
    cur.execute(f"CREATE TABLE IF NOT EXISTS {ACCOUNTS} (user VARCHAR(80) NOT NULL PRIMARY KEY, host VARCHAR(255) NOT NULL, "
                "secret VARCHAR(64) NOT NULL, kind VARCHAR(16) NOT NULL, databases_json LONGTEXT NOT NULL, "
                "created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB")
    # IF NOT EXISTS: replacing it would drop the EXECUTE grants of accounts a concurrent task is using
    cur.execute(f"CREATE PROCEDURE IF NOT EXISTS {SESSION_PROCEDURE}() SQL SECURITY DEFINER SET SESSION sql_log_bin = 0")


def derive_password(admin_password: str | None, user: str, nonce: str) -> str:
    """An account's password: HMAC-SHA256 of its name and nonce under the admin's password (computed on the
    worker; the target keeps only the nonce)."""
    mac = hmac.new((admin_password or "").encode(), f"lastline account {user} {nonce}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def _secret(cur: Any, admin_password: str | None, user: str, host: str, kind: str, databases: list[str]) -> str:
    """The account's password, derived from the nonce kept on the target (a new nonce for a new account)."""
    # INSERT IGNORE: of two tasks ensuring the same account at once, the first one's nonce wins
    cur.execute(f"INSERT IGNORE INTO {ACCOUNTS} (user, host, secret, kind, databases_json) VALUES (%s, %s, %s, %s, %s)",
                (user, host, secrets.token_urlsafe(24), kind, json.dumps(sorted(databases))))
    cur.connection.commit()
    cur.execute(f"SELECT secret FROM {ACCOUNTS} WHERE user = %s", (user,))
    return derive_password(admin_password, user, _text(cur.fetchone()[0]))  # the column holds the nonce


def _ensure(admin: Server, user: str, kind: str, databases: list[str], grant_option: bool = False,
            privileges: str = DATABASE_PRIVILEGES, read_only_admin: bool = True) -> Server:
    """Create or refresh one account with its grants (idempotent: every task that uses it calls this); a
    Server that connects as it, where the admin connection connects."""
    if not databases:
        raise ConfigError("a restore account needs the databases it may write: none were given.")
    with admin.session() as cur:
        _prepare_meta(cur)
        host = admin_host(cur)
        secret = _secret(cur, admin.password, user, host, kind, databases)
        who = account_sql(user, host)
        hashed = password_hash(secret)  # `*` and 40 hex digits: a literal (no driver args: a host may hold `%`)
        cur.execute(f"CREATE USER IF NOT EXISTS {who} IDENTIFIED BY PASSWORD '{hashed}'")
        cur.execute(f"ALTER USER {who} IDENTIFIED BY PASSWORD '{hashed}' ACCOUNT UNLOCK")
        option = " WITH GRANT OPTION" if grant_option else ""
        for db in sorted(databases):
            cur.execute(f"GRANT {privileges} ON {grant_pattern(db)}.* TO {who}{option}")
        cur.execute(f"GRANT EXECUTE ON PROCEDURE {SESSION_PROCEDURE} TO {who}")
        try:  # writes while read_only keeps applications out (MariaDB 10.5.2+; elsewhere tune's probe names the need)
            if read_only_admin:
                cur.execute(f"GRANT READ_ONLY ADMIN ON *.* TO {who}")
        except Exception as exc:  # noqa: BLE001 - a server without that privilege
            log.warning("READ_ONLY ADMIN could not be granted to %s (%s): run with tune=false on this server", user, exc)
        if kind == "run":
            for table, privileges in META_TABLES.items():
                try:
                    cur.execute(f"GRANT {privileges} ON {META_DB}.{quote_ident(table)} TO {who}")
                except Exception as exc:  # noqa: BLE001 - 1146: finalize dropped the emptied ledger (a retry after it)
                    if getattr(exc, "args", (None,))[0] != 1146:
                        raise
    return dataclasses.replace(admin, conn_id=f"{admin.conn_id}:{user}", user=user, password=secret)


def run_account(admin: Server, user: str, databases: list[str], grant_option: bool = False) -> Server:
    """The run account (see the module doc), ready to use; `_lastline.ledger` and `_lastline.table_checks`
    must exist (the restore's create_schema makes them before it calls this)."""
    if not user.startswith(RUN_PREFIX):
        raise ConfigError(f"{user!r} is not a run account's name ({RUN_PREFIX}...): re-run from preflight.")
    return _ensure(admin, user, "run", databases, grant_option)


def replay_account(admin: Server, user: str, databases: list[str], ledger: str) -> Server:
    """A point-in-time replay's run account (pitr.interleave): the archived statements of a logical base's roll-forward
    run under it. Narrower than a restore's: rows of the restored databases (REPLAY_PRIVILEGES: no DDL, no objects),
    INSERT into its own ledger table `ledger` (`_lastline`.`...`, made by the caller) and nothing else there, the
    session procedure. No READ_ONLY ADMIN: it lets `SET GLOBAL read_only` run (tested), and an archived statement must
    not. Dropped by `drop`, as a restore's."""
    if not user.startswith(RUN_PREFIX):
        raise ConfigError(f"{user!r} is not a run account's name ({RUN_PREFIX}...).")
    server = _ensure(admin, user, "replay", databases, privileges=REPLAY_PRIVILEGES, read_only_admin=False)
    with admin.session() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        who = account_sql(user, admin_host(cur))
        cur.execute(f"GRANT INSERT ON {ledger} TO {who}")
        # one session, lastline's: a statement that set the account's password (any account may) logs no one else in
        cur.execute(f"ALTER USER {who} WITH MAX_USER_CONNECTIONS 1")
        end_sessions(cur, user)  # a killed worker's session, which would hold that one slot (and may still run)
    return server


def end_sessions(cur: Any, user: str) -> list[int]:
    """KILL every session of account `user` (a dropped account's sessions go on running what they run)."""
    cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s AND ID <> CONNECTION_ID()", (user,))
    ended = []
    for (thread,) in cur.fetchall():
        try:
            cur.execute(f"KILL CONNECTION {int(thread)}")
            ended.append(int(thread))
        except Exception as exc:  # noqa: BLE001 - 1094: it ended meanwhile
            if getattr(exc, "args", (None,))[0] != 1094:
                raise
    return ended


def objects_owner(admin: Server, databases: list[str]) -> Server:
    """The objects owner of `databases`, unlocked for the objects step (lock it again with `lock`); older owners
    lose their reach into these databases first (see revoke_older_owners)."""
    revoke_older_owners(admin, databases)
    return _ensure(admin, owner_name(databases), "owner", databases)


def revoke_older_owners(admin: Server, databases: list[str]) -> None:
    """The owners of earlier restores lose what they held on `databases`: a database restored anew belongs to one
    owner, so an object an older backup left elsewhere cannot reach into it. Called before any row arrives
    (create_schema) and again at the objects step."""
    name = owner_name(databases)
    with admin.session() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("SELECT User, Host, Db FROM mysql.db WHERE User LIKE %s AND User <> %s",
                    (OWNER_PREFIX.replace("_", "\\_") + "%", name))
        for user, host, pattern in cur.fetchall():
            if _unescape(_text(pattern)) in databases:
                revoke = f"REVOKE ALL PRIVILEGES ON {quote_ident(_text(pattern))}.* FROM {account_sql(_text(user), _text(host))}"
                try:
                    cur.execute(revoke)
                except Exception as exc:
                    if getattr(exc, "args", (None,))[0] not in (1044, 1045, 1142, 1227):  # access denied, of any kind
                        raise
                    raise ConfigError(
                        f"{admin.describe()} may not revoke what the objects owner of an earlier restore, "
                        f"{_text(user)}@{_text(host)}, holds on {_unescape(_text(pattern))} ({exc.args[-1]}): it was made "
                        f"by an account with more privileges than this one. As an administrator, run `{revoke}` (or drop "
                        "that account), then run the restore again; nothing was restored yet.") from exc
                log.info("objects owner %s loses its grants on %s (restored anew here)", _text(user), _unescape(_text(pattern)))


def _unescape(pattern: str) -> str:
    """A database name as mysql.db stores a grant's pattern (`\\_` for `_`)."""
    return pattern.replace("\\\\", "\0").replace("\\_", "_").replace("\\%", "%").replace("\0", "\\")


def lock(admin: Server, user: str) -> None:
    """An objects owner, locked again: it stays the DEFINER of its objects and cannot log in."""
    with admin.session() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("SELECT User, Host FROM mysql.user WHERE User = %s", (user,))
        for name, host in cur.fetchall():
            who = account_sql(_text(name), _text(host))
            cur.execute(f"ALTER USER {who} ACCOUNT LOCK")
            # what it needed only to create the objects: not kept (its code must not write past read_only, nor
            # turn binary logging off for a caller's session)
            for grant in (f"EXECUTE ON PROCEDURE {SESSION_PROCEDURE}", "READ_ONLY ADMIN ON *.*"):
                try:
                    cur.execute(f"REVOKE {grant} FROM {who}")
                except Exception as exc:  # noqa: BLE001 - 1141/1147/1403: it held no such grant (already locked)
                    if getattr(exc, "args", (None,))[0] not in (1141, 1147, 1403):
                        raise


def drop(admin: Server, user: str) -> bool:
    """Drop a run account (every host it was created for), end its sessions and forget its password; True if one
    existed."""
    with admin.session() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("SELECT User, Host FROM mysql.user WHERE User = %s", (user,))
        found = [(_text(u), _text(h)) for u, h in cur.fetchall()]
        for name, host in found:
            cur.execute(f"DROP USER IF EXISTS {account_sql(name, host)}")
        end_sessions(cur, user)  # after the drop: no new one logs in, and the ones it had stop
        if _table_exists(cur):
            cur.execute(f"DELETE FROM {ACCOUNTS} WHERE user = %s", (user,))
            cur.connection.commit()
    if found:
        log.info("dropped the run account %s", ", ".join(f"{u}@{h}" for u, h in found))
    return bool(found)


def recorded(cur: Any) -> set[tuple[str, str]]:
    """Every account lastline created on this server (run and owner accounts), as (user, host)."""
    if not _table_exists(cur):
        return set()
    cur.execute(f"SELECT user, host FROM {ACCOUNTS}")
    return {(_text(u), _text(h)) for u, h in cur.fetchall()}


def _table_exists(cur: Any) -> bool:
    cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'accounts'", (META_DB,))
    return bool(cur.fetchone()[0])


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
