"""Restore-time server settings: snapshot (durably, on the target) -> apply -> revert -> read back.

The snapshot is a row in `_lastline.config_snapshot` on the target itself, written before anything
changes and deleted only after a revert read every value back. A run that finds a row already there
knows a crashed run left the server tuned: it keeps that row (the production values), and its own
revert restores them. In Airflow 3 a teardown does not run when its setup fails, so taking the
snapshot (the setup) changes no setting; `tune` (a normal task) does.

Dynamic settings go through `SET GLOBAL`. Settings that need a restart (`innodb_doublewrite=0`,
`skip-log-bin`, `innodb_autoinc_lock_mode=2`) go into a drop-in in the connection's `config_dir`,
applied with `service_stop`/`service_start`, only when the run allows restarts.

Application traffic is kept out with `read_only=ON` for the whole load: accounts without
READ_ONLY ADMIN (or SUPER) cannot write; lastline's own account (it needs that privilege) can.
Readers are not blocked: point applications away from a server being restored.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from lastline.core.errors import LastlineError, PreflightError
from lastline.core.servers import Server
from lastline.core.sql import META_DB, global_variables, table_exists
from lastline.logical.restore.plans import ConfigSnapshot, Reverted, Tuned

log = logging.getLogger(__name__)

DROP_IN = "zz-lastline-restore.cnf"
RESTART_SETTINGS = {"innodb_doublewrite": "0", "skip-log-bin": None, "innodb_autoinc_lock_mode": "2"}
# variables read back after a restart-profile revert (the drop-in's effect)
RESTART_VARIABLES = ("innodb_doublewrite", "log_bin", "innodb_autoinc_lock_mode")
GIB = 1 << 30


# what every restore sets, tuned or not: the run accounts create triggers and functions without SUPER, which a
# server writing a binary log refuses unless it trusts routine creators (reverted with the rest)
REQUIRED = {"log_bin_trust_function_creators": "ON"}


def dynamic_profile(current: dict[str, str], redo_bytes: int, buffer_pool_bytes: int | None) -> dict[str, str]:
    """The SET GLOBAL values for a bulk load, given the current values (never shrinks anything)."""
    want = {
        "read_only": "ON",
        "innodb_flush_log_at_trx_commit": "0",
        "innodb_adaptive_hash_index": "OFF",
        "innodb_io_capacity_max": str(max(int(current.get("innodb_io_capacity_max", 0)), 4000)),
        "innodb_io_capacity": str(max(int(current.get("innodb_io_capacity", 0)), 2000)),
        "max_allowed_packet": str(GIB),
        "sync_binlog": "0",
        **REQUIRED,
    }
    if "innodb_log_file_size" in current:
        want["innodb_log_file_size"] = str(max(int(current["innodb_log_file_size"]), redo_bytes))
    if buffer_pool_bytes:
        want["innodb_buffer_pool_size"] = str(max(int(current["innodb_buffer_pool_size"]), buffer_pool_bytes))
    return want


# the order SET GLOBAL runs in (io_capacity_max before io_capacity: max must stay >= capacity)
TUNED_VARIABLES = (
    "read_only", "innodb_flush_log_at_trx_commit", "innodb_adaptive_hash_index", "innodb_io_capacity_max",
    "innodb_io_capacity", "max_allowed_packet", "sync_binlog", "innodb_log_file_size", "innodb_buffer_pool_size",
    "log_bin_trust_function_creators",
)


def _normal(value: Any) -> str:
    """Compare values as the server prints them (ON/OFF vs 1/0)."""
    text = str(value).upper()
    return {"1": "ON", "0": "OFF"}.get(text, text) if text in ("1", "0", "ON", "OFF") else text


def _meta(cur: Any) -> None:
    cur.execute("SET SESSION sql_log_bin = 0")
    cur.execute(f"CREATE DATABASE IF NOT EXISTS {META_DB}")
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {META_DB}.config_snapshot (id TINYINT PRIMARY KEY, taken_at VARCHAR(40), "
        "run_id VARCHAR(250), restart_profile TINYINT, variables LONGTEXT) ENGINE=InnoDB"
    )


def drop_in_path(server: Server) -> str | None:
    """Where the restart profile goes: the config_dir extra, on the server's own host."""
    return f"{server.config_dir.rstrip('/')}/{DROP_IN}" if server.config_dir else None


def _drop_in_exists(server: Server, path: str | None) -> bool:
    """Whether the drop-in is there, looked at on the server's host (local or over SSH)."""
    return path is not None and server.runner().run(["test", "-e", path], check=False).returncode == 0


def take_snapshot(server: Server, run_id: str, taken_at: str) -> ConfigSnapshot:
    """Record the production values on the target, or keep the record a crashed run left. No setting changes."""
    with server.session() as cur:
        _meta(cur)
        cur.execute(f"SELECT taken_at, run_id, restart_profile, variables FROM {META_DB}.config_snapshot WHERE id = 1")
        row = cur.fetchone()
        if row:
            snap = ConfigSnapshot(json.loads(row[3]), bool(row[2]), row[0], row[1], inherited=True)
            log.warning(
                "a config snapshot taken at %s by run %s was never reverted: the server may still be tuned. "
                "Keeping it as the production values; this run's revert restores them.", snap.taken_at, snap.run_id,
            )
            return snap
        path = drop_in_path(server)
        snap = ConfigSnapshot(
            global_variables(cur, TUNED_VARIABLES + RESTART_VARIABLES), _drop_in_exists(server, path), taken_at, run_id
        )
        if snap.restart_profile:
            raise PreflightError(
                f"{path} exists but no config snapshot records it: remove it (and restart the server) by hand, "
                "then re-run; lastline will not guess the production settings."
            )
        cur.execute(
            f"INSERT INTO {META_DB}.config_snapshot VALUES (1, %s, %s, %s, %s)",
            (snap.taken_at, snap.run_id, int(snap.restart_profile), json.dumps(snap.variables)),
        )
        cur.connection.commit()
        log.info("config snapshot recorded in %s.config_snapshot: %s", META_DB, snap.variables)
        return snap


def read_snapshot(server: Server) -> ConfigSnapshot | None:
    """The durable snapshot on the target, if any."""
    with server.session() as cur:
        if not table_exists(cur, META_DB, "config_snapshot"):
            return None
        cur.execute(f"SELECT taken_at, run_id, restart_profile, variables FROM {META_DB}.config_snapshot WHERE id = 1")
        row = cur.fetchone()
        return ConfigSnapshot(json.loads(row[3]), bool(row[2]), row[0], row[1]) if row else None


def apply(server: Server, snap: ConfigSnapshot, *, restart_allowed: bool, redo_bytes: int,
          buffer_pool_bytes: int | None = None, profile: bool = True) -> Tuned:
    """Tune the target for a bulk load; returns what was set (restart settings through the drop-in).
    `profile=False` (tune off): only what every restore needs (REQUIRED)."""
    applied: dict[str, str] = {}
    restarted = False
    if restart_allowed and profile:
        path = drop_in_path(server)
        if not path:
            raise PreflightError(f"restart_allowed needs a config_dir extra on {server.conn_id!r} for the drop-in.")
        text = "# written by lastline for a bulk restore; removed by its revert\n[mysqld]\n" + "".join(
            f"{k}\n" if v is None else f"{k}={v}\n" for k, v in RESTART_SETTINGS.items())
        server.runner().sh('cat > "$1.tmp" && mv "$1.tmp" "$1"', path, input=text.encode())  # on the server's host
        restarted = _restart(server, f"tune: restart profile {RESTART_SETTINGS} -> {path}")
    with server.session() as cur:
        current = global_variables(cur, TUNED_VARIABLES)
        want = dynamic_profile(current, redo_bytes, buffer_pool_bytes) if profile else dict(REQUIRED)
        for name in TUNED_VARIABLES:
            if name in want and _normal(current.get(name)) != _normal(want[name]):
                _set_global(cur, name, want[name])
                applied[name] = want[name]
        _probe_write(cur)
    log.info("tune: set %s%s", applied, " (after a restart with the drop-in)" if restarted else "")
    return Tuned(applied, restarted)


def _restart(server: Server, why: str) -> bool:
    """Restart the target through its service commands (to apply or drop the restart profile)."""
    log.info("%s; restarting the target", why)
    seconds = server.stop_service() + server.start_service()
    log.info("target restarted in %.1f s", seconds)
    return True


def _probe_write(cur: Any) -> None:
    """Fail now, naming the privilege, if read_only would also stop lastline's own loads."""
    try:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"UPDATE {META_DB}.config_snapshot SET taken_at = taken_at WHERE id = 1")
    except Exception as exc:
        if getattr(exc, "args", (None,))[0] == 1290:
            raise LastlineError(
                "read_only=ON (which keeps application writes out during the load) also stops this account: grant it "
                "READ_ONLY ADMIN (MariaDB 10.11+) or SUPER, or run with tune=false. Revert puts read_only back."
            ) from exc
        raise


def _set_global(cur: Any, name: str, value: str) -> None:
    literal = value if value.lstrip("-").isdigit() or value.upper() in ("ON", "OFF") else "'" + value.replace("'", "''") + "'"
    try:
        cur.execute(f"SET GLOBAL {name} = {literal}")
    except Exception as exc:
        raise LastlineError(f"SET GLOBAL {name} = {literal} failed on the target: {exc}") from exc


def revert(server: Server) -> Reverted:
    """Put every recorded value back (restarting if a drop-in was used), read them back, then forget the
    snapshot. Raises LastlineError naming each variable that still differs."""
    snap = read_snapshot(server)
    if snap is None:
        log.info("revert: no config snapshot on the target: nothing was tuned")
        return Reverted({}, False)
    path = drop_in_path(server)
    restarted = False
    if path is not None and _drop_in_exists(server, path):
        server.runner().run(["rm", "-f", path])
        restarted = _restart(server, f"revert: removed {path}")
    with server.session() as cur:
        reverted = {}
        current = global_variables(cur, TUNED_VARIABLES)
        for name in reversed(TUNED_VARIABLES):  # io_capacity before io_capacity_max on the way back
            want = snap.variables.get(name)
            if want is not None and _normal(current.get(name)) != _normal(want):
                _set_global(cur, name, want)
                reverted[name] = want
        now = global_variables(cur, TUNED_VARIABLES + RESTART_VARIABLES)
        differ = {k: (now.get(k), v) for k, v in snap.variables.items() if _normal(now.get(k)) != _normal(v)}
        if differ:
            raise LastlineError(
                "revert: the target's configuration still differs from its snapshot: "
                + "; ".join(f"{k} is {a!r}, was {b!r}" for k, (a, b) in sorted(differ.items()))
                + f". Fix them by hand (the snapshot stays in {META_DB}.config_snapshot)."
            )
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DELETE FROM {META_DB}.config_snapshot WHERE id = 1")
        cur.connection.commit()
    log.info("revert: restored %s%s; every value read back equal to the snapshot", reverted, " after a restart" if restarted else "")
    return Reverted(reverted, restarted, snap.variables)


def config_differs(server: Server, snapshot: dict[str, str]) -> dict[str, tuple[str | None, str]]:
    """Variables whose live value differs from `snapshot` (empty: all back)."""
    with server.session() as cur:
        now = global_variables(cur, tuple(snapshot))
    return {k: (now.get(k), v) for k, v in snapshot.items() if _normal(now.get(k)) != _normal(v)}
