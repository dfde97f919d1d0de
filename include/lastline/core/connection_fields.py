"""The settings a server's connection carries in its extras, declared once: the connection form's fields
(lastline.get_provider_info builds them from here), the bounds a server sets on a run's conf
(lastline.core.servers takes their names from here) and docs/connections.md's table (a test holds it to this).

Each field is stored in the extras under its name, so a plain `mysql` connection with the same keys works the
same as a `lastline` one. Airflow-free: the provider info is read without importing the hook.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Field:
    """One extra: its form label and description, how the form edits it, and who reads it.

    `kind` is text, a choice among `choices`, or a flag (a switch, off by default); `bound` marks an extra that
    bounds what a run's conf may ask of the server (lastline.core.bounds); `read_by` says whether the Server
    (lastline.core.servers) or the routing policy (lastline.airflow.routing) reads it; `aliases` are other names
    read for it; `form` is false for an extra the form has no field for (a dict)."""

    name: str
    label: str
    description: str
    kind: Literal["text", "choice", "flag"] = "text"
    default: str | None = None
    choices: tuple[str, ...] = ()
    bound: bool = False
    read_by: Literal["server", "routing"] = "server"
    aliases: tuple[str, ...] = ()
    form: bool = True

    def form_field(self) -> dict[str, Any]:
        """The field as Airflow's provider info declares one (`conn-fields`): label, description, JSON schema."""
        if self.kind == "flag":
            return {"label": self.label, "description": self.description,
                    "schema": {"type": ["boolean", "null"], "default": False}}
        schema: dict[str, Any] = {"type": ["string", "null"]}
        if self.default is not None:
            schema["default"] = self.default
        if self.choices:
            schema["enum"] = list(self.choices)
        return {"label": self.label, "description": self.description, "schema": schema}


_ON_OFF = ("", "true", "false")

FIELDS: tuple[Field, ...] = (
    Field("role", "Role", "empty: a server restores may write into; staging: only the staging refresh writes here (it masks "
          "personal data before anyone reads it); drill: a scratch server restore drills replace", "choice", "",
          ("", "staging", "drill")),
    Field("protected", "Protected (production)", "lastline never restores into, restarts or replaces this server", "flag"),
    Field("approval", "Approval before data is replaced", "empty: the deployment's setting (LASTLINE_APPROVAL, on by "
          "default); true: a person approves every restore that replaces data here; false: never asks", "choice", "", _ON_OFF),
    Field("datadir", "Data directory", "the server's datadir (physical backup and restore need it), e.g. /var/lib/mysql"),
    Field("config_dir", "Option file folder", "a folder the server reads option files from (!includedir): a restore may put "
          "a drop-in there for its own restart and removes it again, e.g. /etc/mysql/mariadb.conf.d"),
    Field("service_start", "Start command", "a shell command that starts the server", default="systemctl start mariadb"),
    Field("service_stop", "Stop command", "a shell command that stops the server", default="systemctl stop mariadb"),
    Field("ssh_conn_id", "SSH connection", "run the server's own commands (mariabackup, mbstream, service control, file "
          "checks) on that host over SSH; SQL still goes to host and port"),
    Field("unix_socket", "Unix socket", "connect through this socket instead of host and port (with an SSH connection: the "
          "socket on that host, for the commands run there)", aliases=("socket",)),
    Field("charset", "Client character set", "names outside it cannot be restored", default="utf8mb4"),
    Field("ssl_mode", "TLS mode", "every connection lastline opens, its tools' too, uses TLS (ssl: ca, cert, key in the "
          "extras)", "choice", "", ("", "REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY")),
    Field("ssl", "TLS files", "ca, cert and key, as the mysql provider reads them (a dict, or its JSON)", form=False),
    Field("replica", "Replica", "backups taken here record its primary's coordinates and pause its SQL thread only for the "
          "snapshot", "flag"),
    Field("definer", "Definer of restored objects", "empty: an account lastline keeps per set of restored databases, locked; "
          "backup: the backup's own DEFINER"),
    Field("restore_grants", "Restores may create accounts", "lets the restore_grants Param recreate a backup's accounts "
          "here, with the backup's passwords", "flag"),
    # bounds on what a run's conf may ask of this server (lastline.core.bounds); empty: the deployment's LASTLINE_* setting
    Field("allow_kill_long_queries", "Runs may kill long statements", "empty: the deployment's LASTLINE_ALLOW_KILL_LONG_QUERIES "
          "(off by default); never on a protected server", "choice", "", _ON_OFF, bound=True),
    Field("min_long_query_guard", "Kill only statements older than (s)", "with kill_long_queries: the floor of "
          "long_query_guard (empty: LASTLINE_MIN_LONG_QUERY_GUARD, default 60)", bound=True),
    Field("max_long_query_wait", "Longest wait for long statements (s)", "the ceiling of long_query_wait (empty: "
          "LASTLINE_MAX_LONG_QUERY_WAIT, default 1800)", bound=True),
    Field("max_lock_timeout", "Longest lock attempt (s)", "the ceiling of lock_timeout, so the longest any write waits behind "
          "a backup's lock attempt (empty: LASTLINE_MAX_LOCK_TIMEOUT, default 0.5)", bound=True),
    Field("allow_ftwrl", "Runs may use FLUSH TABLES WITH READ LOCK", "where BACKUP STAGE exists (empty: LASTLINE_ALLOW_FTWRL, "
          "off by default)", "choice", "", _ON_OFF, bound=True),
    Field("max_parallel", "Most parallel work", "the ceiling of parallel here (empty: LASTLINE_MAX_PARALLEL, default 16)",
          bound=True),
    Field("connection_reserve", "Connections kept for the application", "parallel never takes these of max_connections "
          "(empty: LASTLINE_CONNECTION_RESERVE, default 10)", bound=True),
    Field("max_read_mb_per_s", "Read cap (MB/s)", "the highest max_read_mb_per_s, and the cap of a run that sets none "
          "(empty: LASTLINE_MAX_READ_MB_PER_S, default none)", bound=True),
    Field("max_priority", "Harshest priority", "the harshest priority a run may ask (empty: LASTLINE_MAX_PRIORITY, default "
          "low)", "choice", "", ("", "idle", "low", "normal"), bound=True),
    Field("max_replica_lag", "Highest replica lag limit (s)", "the ceiling of max_replica_lag; 0: any lag may be asked "
          "(empty: LASTLINE_MAX_REPLICA_LAG, default 3600)", bound=True),
    Field("max_replay_threads", "Most replay threads", "applier threads a point-in-time replay starts here (empty: "
          "LASTLINE_MAX_REPLAY_THREADS, default 16)", bound=True),
    Field("queue", "Celery queue", "the queue of a worker next to this server: its heavy tasks run there", read_by="routing"),
    Field("pool", "Airflow pool", "caps heavy work on this server across every DAG (default: lastline_<connection id> when "
          "that pool exists)", read_by="routing"),
)

# the extras that bound what a run's conf may ask of a server (lastline.core.bounds reads them)
LIMIT_EXTRAS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.bound)


def form_fields() -> dict[str, dict[str, Any]]:
    """The connection form's fields (Airflow's `conn-fields`), in the order the form shows them."""
    return {f.name: f.form_field() for f in FIELDS if f.form}
