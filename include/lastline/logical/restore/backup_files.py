"""What a logical restore checks of its opened backup (lastline.backups) and reaches it through: the tables a restore
selects, the engines they need, every chunk file present with its size before anything is touched, and the target as
the admin or the run account.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from lastline import connections
from lastline.core import accounts
from lastline.core.errors import ConfigError, IntegrityError, PreflightError
from lastline.core.servers import Server
from lastline.core.sql import NameKeys, as_text, engine_name, never_restored, sql_error
from lastline.logical.format import dialect
from lastline.logical.restore.plans import RestorePlan
from lastline.manifest import LogicalManifest
from lastline.storage import Storage

log = logging.getLogger(__name__)
# the session every connection of the run account starts with: the load's sql_mode, time zone and checks, and the
# binary log off through the session procedure (the run account may not set sql_log_bin itself)
RUN_SESSION = (dialect.LOAD_SESSION, f"CALL {accounts.SESSION_PROCEDURE}()")


def target_server(plan: RestorePlan) -> Server:
    """The target as its connection's (admin) account: for lastline's own statements only."""
    return connections.server(plan.target_conn_id)


def run_server(plan: RestorePlan) -> Server:
    """The target as the run account (core.accounts): every statement from the backup runs on it."""
    if not plan.restore_account:
        raise ConfigError("this restore's plan names no run account (a plan from an older lastline?): re-run from preflight.")
    return accounts.run_account(target_server(plan), plan.restore_account, plan.databases, grant_option=plan.restore_grants)


def selected(manifest: LogicalManifest, databases: list[str]) -> list:
    """The manifest's tables of `databases` (a set for the look-ups: a list would cost tables x databases)."""
    wanted = set(databases)
    return [t for t in manifest.tables if t.schema in wanted]


def require_engines(cur: Any, manifest: LogicalManifest, databases: list[str],
                    named: dict[tuple[str, str], frozenset[str]], target: str) -> None:
    """Every table is made with the engine the manifest says it has (which decides how it is loaded: in one
    transaction with its ledger row, or whole), and the target has every engine the restored tables and sequences use
    (SHOW ENGINES: YES or DEFAULT; only the one `enforce_storage_engine` names, if it is set). `named`: the engines each
    CREATE names (schema_checks.validate_schema; none: the target's default). The load session never lets the server
    substitute one (dialect.LOAD_SESSION: NO_ENGINE_SUBSTITUTION); this names the tables and the remedy first."""
    cur.execute("SELECT UPPER(ENGINE) FROM information_schema.ENGINES WHERE SUPPORT IN ('YES', 'DEFAULT')")
    have = {as_text(e) for (e,) in cur.fetchall()}
    cur.execute("SELECT UPPER(@@default_storage_engine)")
    default = as_text(cur.fetchone()[0])
    enforced = enforced_engine(cur)
    made = {key: engines or frozenset({default}) for key, engines in named.items()}
    differ = [f"{t.schema}.{t.name} ({t.engine} in the manifest, {', '.join(sorted(made[(t.schema, t.name)]))} in schema.json)"
              for t in selected(manifest, databases) if made.get((t.schema, t.name), frozenset()) != {engine_name(t.engine)}]
    if differ:
        raise IntegrityError(
            f"backup {manifest.backup_id}: the manifest and schema.json disagree on the engine of {len(differ)} table(s): "
            + "; ".join(differ[:5]) + ". The backup folder was altered or is damaged: restore another backup. Nothing was touched.")
    lacking: dict[str, list[str]] = {}
    for (schema, name), engines in made.items():
        for e in engines:
            if e not in have or (enforced and e != enforced):
                lacking.setdefault(e, []).append(f"{schema}.{name}")
    if lacking:
        raise PreflightError(
            f"{target} " + (f"makes every table {enforced} (enforce_storage_engine) and so refuses" if enforced else "lacks")
            + " the storage engine(s) of these tables: " + "; ".join(
                f"{e} ({len(ts)}: {', '.join(sorted(ts)[:5])}{', ...' if len(ts) > 5 else ''})" for e, ts in sorted(lacking.items()))
            + ". " + ("Unset enforce_storage_engine there (SET GLOBAL enforce_storage_engine = NULL, and in my.cnf)" if enforced else
                      "Install them there first (e.g. INSTALL SONAME 'ha_archive' for ARCHIVE)")
            + ", or leave those databases out: lastline never lets the server make a table with another engine than "
            "the backup's. Nothing was touched.")


def refuse_names_one_by_case(cur: Any, schema: dict, databases: list[str], target: str) -> NameKeys:
    """On a target that matches names regardless of case (sql.NameKeys, by the server's own rule): a database that is
    one of never_restored's there (`_LASTLİNE` is `_lastline`), and two databases, or two tables, views or sequences of
    one database, that would be one (the second CREATE would find the first made, and both tables' rows go into it):
    refused before anything is touched. Returns the keys, for the preflight's other look-ups."""
    keys = NameKeys(cur)
    if not keys.folds:
        return keys
    wanted = set(databases)
    objects = [(o["schema"], o["name"]) for kind in ("tables", "views", "sequences") for o in schema.get(kind, [])
               if o["schema"] in wanted]
    keys.learn([*databases, *(n for pair in objects for n in pair)])
    reserved = [db for db in databases if never_restored(keys(db))]
    if reserved:
        raise PreflightError(
            f"{target} matches database names regardless of case (lower_case_table_names is not 0): there "
            f"{', '.join(reserved)} would be {', '.join(keys(db) for db in reserved)}, a system schema or lastline's own. "
            "Leave them out of databases. Nothing was touched.")
    groups: dict[tuple[str, ...], list[str]] = {}
    for db in databases:
        groups.setdefault((keys(db),), []).append(f"database {db}")
    for db, name in objects:
        groups.setdefault((keys(db), keys(name)), []).append(f"{db}.{name}")
    clashes = sorted(" and ".join(sorted(names)) for names in groups.values() if len(names) > 1)
    if clashes:
        raise PreflightError(
            f"{target} matches database and table names regardless of case (lower_case_table_names is not 0): it cannot "
            f"hold both of {len(clashes)} pair(s) of names the backup keeps apart: " + "; ".join(clashes[:5])
            + ". Restore into a server with lower_case_table_names=0, or leave those databases out. Nothing was touched.")
    return keys


def enforced_engine(cur: Any) -> str | None:
    """The engine MariaDB's enforce_storage_engine makes every new table use, if set (MySQL has no such variable)."""
    try:
        cur.execute("SELECT UPPER(@@enforce_storage_engine)")
    except Exception as exc:  # noqa: BLE001 - 1193: unknown system variable
        if sql_error(exc)[0] != 1193:
            raise
        return None
    value = cur.fetchone()[0]
    return as_text(value) if value else None


def require_chunk_files(storage: Storage, manifest: LogicalManifest, databases: list[str]) -> None:
    """Every chunk file the restore will load exists with the size the manifest gives (before anything is
    touched: a truncated or missing chunk found mid-load would leave a half-restored target)."""
    t0, bad, n = time.monotonic(), [], 0
    for t in selected(manifest, databases):
        for c in t.chunks:
            key, n = f"{manifest.backup_id}/{c.file}", n + 1
            size = storage.size_if_exists(key)
            if size != c.bytes:
                bad.append(f"{storage.location(key)} ({t.schema}.{t.name}): "
                           + ("missing" if size is None else f"{size} bytes, the manifest says {c.bytes}"))
    if bad:
        raise IntegrityError(
            f"{len(bad)} chunk file(s) of backup {manifest.backup_id} are missing or truncated:\n  " + "\n  ".join(bad[:20])
            + "\nNothing was touched on the target; restore another backup."
        )
    log.info("preflight: %d chunk files present with their sizes (%.1f s)", n, time.monotonic() - t0)
