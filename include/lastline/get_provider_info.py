"""lastline as an Airflow provider (the `apache_airflow_provider` entry point in pyproject.toml): its connection type
`lastline`, whose form shows lastline's settings as fields of their own, each described, and its hooks.

The fields are declared here (`conn-fields`, `ui-field-behaviour`), as Airflow 3.2+ reads them without importing the
hook; they are stored in the connection's extras under the same names, so a plain `mysql` connection with those
extras works the same (lastline.core.servers reads them).
"""
from __future__ import annotations

from typing import Any

VERSION = "0.13.0"


def _text(label: str, description: str, default: str | None = None, enum: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": ["string", "null"]}
    if default is not None:
        schema["default"] = default
    if enum is not None:
        schema["enum"] = enum
    return {"label": label, "description": description, "schema": schema}


def _flag(label: str, description: str) -> dict[str, Any]:
    return {"label": label, "description": description, "schema": {"type": ["boolean", "null"], "default": False}}


CONN_FIELDS: dict[str, dict[str, Any]] = {
    "role": _text("Role", "empty: a server restores may write into; staging: only the staging refresh writes here (it masks "
                  "personal data before anyone reads it); drill: a scratch server restore drills replace", "",
                  ["", "staging", "drill"]),
    "protected": _flag("Protected (production)", "lastline never restores into, restarts or replaces this server"),
    "approval": _text("Approval before data is replaced", "empty: the deployment's setting (LASTLINE_APPROVAL, on by "
                      "default); true: a person approves every restore that replaces data here; false: never asks", "",
                      ["", "true", "false"]),
    "datadir": _text("Data directory", "the server's datadir (physical backup and restore need it), e.g. /var/lib/mysql"),
    "config_dir": _text("Option file folder", "a folder the server reads option files from (!includedir): a restore may put "
                        "a drop-in there for its own restart and removes it again, e.g. /etc/mysql/mariadb.conf.d"),
    "service_start": _text("Start command", "a shell command that starts the server", "systemctl start mariadb"),
    "service_stop": _text("Stop command", "a shell command that stops the server", "systemctl stop mariadb"),
    "ssh_conn_id": _text("SSH connection", "run the server's own commands (mariabackup, mbstream, service control, file "
                         "checks) on that host over SSH; SQL still goes to host and port"),
    "unix_socket": _text("Unix socket", "connect through this socket instead of host and port (with an SSH connection: the "
                         "socket on that host, for the commands run there)"),
    "charset": _text("Client character set", "names outside it cannot be restored", "utf8mb4"),
    "ssl_mode": _text("TLS mode", "every connection lastline opens, its tools' too, uses TLS (ssl: ca, cert, key in the "
                      "extras)", "", ["", "REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY"]),
    "replica": _flag("Replica", "backups taken here record its primary's coordinates and pause its SQL thread only for the "
                     "snapshot"),
    "definer": _text("Definer of restored objects", "empty: an account lastline keeps per set of restored databases, locked; "
                     "backup: the backup's own DEFINER"),
    "restore_grants": _flag("Restores may create accounts", "lets the restore_grants Param recreate a backup's accounts "
                            "here, with the backup's passwords"),
    # bounds on what a run's conf may ask of this server (lastline.core.bounds); empty: the deployment's LASTLINE_* setting
    "allow_kill_long_queries": _text("Runs may kill long statements", "empty: the deployment's LASTLINE_ALLOW_KILL_LONG_QUERIES "
                                     "(off by default); never on a protected server", "", ["", "true", "false"]),
    "min_long_query_guard": _text("Kill only statements older than (s)", "with kill_long_queries: the floor of "
                                  "long_query_guard (empty: LASTLINE_MIN_LONG_QUERY_GUARD, default 60)"),
    "max_long_query_wait": _text("Longest wait for long statements (s)", "the ceiling of long_query_wait (empty: "
                                 "LASTLINE_MAX_LONG_QUERY_WAIT, default 1800)"),
    "max_lock_timeout": _text("Longest lock attempt (s)", "the ceiling of lock_timeout, so the longest any write waits behind "
                              "a backup's lock attempt (empty: LASTLINE_MAX_LOCK_TIMEOUT, default 0.5)"),
    "allow_ftwrl": _text("Runs may use FLUSH TABLES WITH READ LOCK", "where BACKUP STAGE exists (empty: LASTLINE_ALLOW_FTWRL, "
                         "off by default)", "", ["", "true", "false"]),
    "max_parallel": _text("Most parallel work", "the ceiling of parallel here (empty: LASTLINE_MAX_PARALLEL, default 16)"),
    "connection_reserve": _text("Connections kept for the application", "parallel never takes these of max_connections "
                                "(empty: LASTLINE_CONNECTION_RESERVE, default 10)"),
    "max_read_mb_per_s": _text("Read cap (MB/s)", "the highest max_read_mb_per_s, and the cap of a run that sets none "
                               "(empty: LASTLINE_MAX_READ_MB_PER_S, default none)"),
    "max_priority": _text("Harshest priority", "the harshest priority a run may ask (empty: LASTLINE_MAX_PRIORITY, default "
                          "low)", "", ["", "idle", "low", "normal"]),
    "max_replica_lag": _text("Highest replica lag limit (s)", "the ceiling of max_replica_lag; 0: any lag may be asked "
                             "(empty: LASTLINE_MAX_REPLICA_LAG, default 3600)"),
    "max_replay_threads": _text("Most replay threads", "applier threads a point-in-time replay starts here (empty: "
                                "LASTLINE_MAX_REPLAY_THREADS, default 16)"),
    "queue": _text("Celery queue", "the queue of a worker next to this server: its heavy tasks run there"),
    "pool": _text("Airflow pool", "caps heavy work on this server across every DAG (default: lastline_<connection id> when "
                  "that pool exists)"),
}


def field_defaults() -> dict[str, Any]:
    """Every field of the connection form with its default: a connection written with all of them shows all of them
    when it is edited in the UI (which shows the fields its extras hold)."""
    return {name: f["schema"].get("default") for name, f in CONN_FIELDS.items()}


def get_provider_info() -> dict[str, Any]:
    """What Airflow's providers manager reads of lastline."""
    return {
        "package-name": "lastline",
        "name": "lastline",
        "description": "Backup and restore pipelines for MariaDB and MySQL: fast, parallel, verified, safe.",
        "versions": [VERSION],
        "connection-types": [{
            "connection-type": "lastline",
            "hook-class-name": "lastline.hooks.mariadb.MariaDbHook",
            "hook-name": "MariaDB / MySQL (lastline)",
            "conn-fields": CONN_FIELDS,
            "ui-field-behaviour": {
                "hidden-fields": ["schema"],
                "relabeling": {"login": "User", "host": "Host"},
                "placeholders": {"host": "127.0.0.1", "port": "3306", "login": "lastline"},
            },
        }],
        "hooks": [{"integration-name": "MariaDB / MySQL (lastline)", "python-modules": ["lastline.hooks.mariadb"]}],
        "notifications": ["lastline.airflow.alerts.Alert"],
    }
