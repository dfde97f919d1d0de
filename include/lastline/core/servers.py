"""A database server as lastline sees it: a `mysql` connection plus its extras, as one typed object.
(Over 300 lines: one class, with every extra of the connection and the guards every writing path calls.)

`lastline.connections.server(conn_id)` builds one from an Airflow connection; this module knows nothing
of Airflow. The client settings are read the way the mysql provider's MySqlHook reads them, so a
connection that works for MySqlHook works for lastline. The extras it reads (all optional: the server's datadir, its
option file folder, start and stop commands, SSH connection, socket, TLS, character set, its `protected`, `role`,
`approval`, `definer`, `restore_grants` and `replica` marks, and the bounds on a run's conf) are declared, each with
its meaning, in lastline.core.connection_fields.

Credentials never reach a command line or a named file: :func:`option_file` hands them over as a 0600
``--defaults-extra-file`` with no name on disk (an anonymous file the worker holds open; on an SSH host, one
held open and unlinked), so a kill -9 leaves nothing behind; the Python driver gets them as arguments.
"""
from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lastline.core import stopping
from lastline.core.connection_fields import LIMIT_EXTRAS
from lastline.core.errors import AccessDenied, ConfigError, PreflightError, ProtectedTargetError, ServerError
from lastline.core.hosts import LOCAL, Host
from lastline.core.plans import as_bool, safety_flag
from lastline.core.sql import global_variables, server_identity

DEFAULT_SERVICE_START = "systemctl start mariadb"
DEFAULT_SERVICE_STOP = "systemctl stop mariadb"
POLL = 0.2  # seconds between the tries of a server that is starting or stopping


@dataclass(frozen=True)
class Server:
    """One MariaDB/MySQL server: where to reach it and how lastline may act on it."""

    conn_id: str
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    socket: str | None = None
    datadir: str | None = None
    config_dir: str | None = None
    service_start: str = DEFAULT_SERVICE_START
    service_stop: str = DEFAULT_SERVICE_STOP
    ssh_conn_id: str | None = None
    protected: bool = False
    role: str | None = None  # "staging" / "drill": a server staging refreshes / restore drills may write into
    ssl: dict | None = None
    ssl_mode: str | None = None
    charset: str = "utf8mb4"
    approval: bool | None = None  # the connection's own say on approvals (None: the deployment's LASTLINE_APPROVAL)
    definer: str | None = None  # who restored objects run as (None: lastline's objects owner; "backup": the backup's)
    restore_grants: bool = False  # whether restores may create the accounts a backup holds (the restore_grants Param)
    replica: bool = False  # a replica: backups record its primary's coordinates (replicas.backup_source)
    limits: dict | None = field(default=None, compare=False)  # the extras that bound a run's knobs (core.bounds)
    remote: Host | None = field(default=None, compare=False, repr=False)  # the ssh_conn_id's host, once resolved

    @classmethod
    def from_connection(cls, conn: Any) -> Server:
        """Build a Server from an Airflow Connection (or anything with the same attributes)."""
        extra = conn.extra_dejson or {}
        return cls(
            conn_id=conn.conn_id,
            host=conn.host or "127.0.0.1",
            port=int(conn.port or 3306),
            user=conn.login or "root",
            password=conn.password or "",
            socket=extra.get("unix_socket") or extra.get("socket") or None,
            datadir=extra.get("datadir") or None,
            config_dir=extra.get("config_dir") or None,
            service_start=extra.get("service_start") or DEFAULT_SERVICE_START,
            service_stop=extra.get("service_stop") or DEFAULT_SERVICE_STOP,
            ssh_conn_id=extra.get("ssh_conn_id") or None,
            protected=bool(safety_flag(extra.get("protected"), "protected", False)),
            role=str(extra["role"]).strip().lower() if extra.get("role") else None,
            ssl=_ssl_extra(extra.get("ssl")),
            ssl_mode=str(extra["ssl_mode"]).upper() if extra.get("ssl_mode") else None,
            charset=str(extra.get("charset") or "utf8mb4"),
            approval=safety_flag(extra.get("approval"), "approval", None),
            definer=str(extra["definer"]).strip() or None if extra.get("definer") else None,
            restore_grants=bool(safety_flag(extra.get("restore_grants"), "restore_grants", False)),
            replica=as_bool(extra.get("replica", False)),
            limits={k: v for k, v in extra.items() if k in LIMIT_EXTRAS and v not in (None, "")},
        )

    def require_datadir(self) -> str:
        """The datadir extra, or a clear error saying how to set it."""
        if not self.datadir:
            raise ConfigError(
                f"connection {self.conn_id!r} has no 'datadir' extra; physical operations need the "
                "server's data directory: add it to the connection's extras."
            )
        return self.datadir

    def runner(self) -> Host:
        """The Host where this server's commands and file operations (service control, datadir, drop-ins,
        free space, markers) run: here, or its ssh_conn_id's host."""
        if not self.ssh_conn_id:
            return LOCAL
        if self.remote is None:
            raise ConfigError(
                f"{self.describe()} runs its commands over ssh_conn_id {self.ssh_conn_id!r}, but was built without "
                "that host: build it with lastline.connections.server()."
            )
        return self.remote

    def answers(self) -> bool:
        """Whether the server accepts a connection right now."""
        try:
            self.connect(connect_timeout=2).close()
            return True
        except ServerError:
            return False

    def stop_service(self, timeout: float = 120) -> float:
        """Run service_stop and wait until the server no longer answers; returns seconds."""
        t0 = time.monotonic()
        self.runner().shell(self.service_stop, timeout=timeout)
        while self.answers():
            if time.monotonic() - t0 > timeout:
                raise ServerError(f"{self.describe()} still answers {timeout:.0f} s after `{self.service_stop}`.")
            time.sleep(POLL)
        return time.monotonic() - t0

    def start_service(self, timeout: float = 180) -> float:
        """Run service_start and wait until the server answers; returns seconds."""
        t0 = time.monotonic()
        self.runner().shell(self.service_start, timeout=timeout)
        while not self.answers():
            if time.monotonic() - t0 > timeout:
                raise ServerError(f"{self.describe()} does not answer {timeout:.0f} s after `{self.service_start}`.")
            time.sleep(POLL)
        return time.monotonic() - t0

    def refuse_if_protected(self, action: str = "restores into it") -> None:
        """ProtectedTargetError if the connection marks the server as production (every path that writes
        to a server or restarts it calls this first)."""
        if self.protected:
            raise ProtectedTargetError(
                f"target {self.describe()} is marked protected (production): lastline never {action}. "
                "Pick a non-production target, or remove 'protected' from its connection if this is wrong."
            )

    def require_role(self, role: str, action: str, why: str) -> None:
        """Refuse (nothing touched) unless the connection gives this server `role` and does not mark it
        protected: the paths that replace a whole server's data on a schedule write only where a role says so."""
        self.refuse_if_protected(action)
        if self.role != role:
            raise ProtectedTargetError(
                f"target {self.describe()} is not marked as a {role} server (its connection's extra role is "
                f"{self.role!r}): {why}, so it writes only into a connection whose extra has \"role\": \"{role}\". "
                "Nothing was touched."
            )

    def require_target(self, role: str | None, action: str = "restores into it") -> None:
        """Refuse (nothing touched) a protected server, and a server whose connection gives it a role (staging,
        drill) unless this path is that role's: a staging server takes only the staging refresh, which masks its
        data before anyone reads it; a plain restore there would hand production's personal data to staging."""
        self.refuse_if_protected(action)
        if self.role != role:
            only = {"staging": "staging_refresh", "drill": "restore_drill"}.get(self.role or "", "")
            raise ProtectedTargetError(
                f"target {self.describe()} is a {self.role or 'plain'} server (its connection's extra role is {self.role!r}): "
                + (f"only {only} writes into it (it alone locks, masks or scraps what it restores). " if only else
                   f"this path writes only into a {role} server. ")
                + "Pick a target of the right role. Nothing was touched."
            )

    def asks_approval(self) -> bool:
        """Whether a restore that replaces data here waits for a person first: never on a staging or drill server
        (replaced by design), else the connection's extra `approval`, else the deployment's LASTLINE_APPROVAL
        (on by default). Settings of the deployment, never of a run."""
        if self.role in ("staging", "drill"):
            return False
        if self.approval is not None:
            return self.approval
        return as_bool(os.environ.get("LASTLINE_APPROVAL", "true"))

    def unforced(self) -> str:
        """Why a restore here without force may not replace data (no person is asked: asks_approval is false),
        and what to do: set force, or turn on the setting that makes such a restore wait for a person."""
        if self.role in ("staging", "drill"):
            return f"a {self.role} server is replaced by design, no person is asked: set force to replace it"
        why, turn_on = (("its connection's extra \"approval\" is false", "set \"approval\": true on the connection")
                        if self.approval is False else
                        ("the deployment's LASTLINE_APPROVAL is false", "set LASTLINE_APPROVAL=true in the deployment "
                         "(or the extra \"approval\": true on this connection)"))
        return (f"no person is asked to approve replacing data on {self.conn_id} ({why}): set force to replace it "
                f"without asking (an unattended run), or {turn_on} so that such a restore waits for a person's "
                "approval under Required actions")

    def describe(self) -> str:
        """A short human name, free of secrets."""
        where = self.socket or f"{self.host}:{self.port}"
        return f"{self.conn_id} ({self.user}@{where})"

    def driver_args(self, database: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """The MySQLdb arguments of a connection to this server: lastline's one way of making them (`connect` and
        the hook's `get_conn` both use it). One statement per call (no multi-statements) and no `LOAD DATA LOCAL`
        unless asked for with `local_infile=1` (only the loader's connections do): nothing a backup holds can chain
        a second statement or make the server read a worker's file. The socket is never used with an SSH
        connection (that socket is on the server's host, not here)."""
        args: dict[str, Any] = {
            "user": self.user, "passwd": self.password, "charset": self.charset, "multi_statements": False, "local_infile": 0,
        }
        if self.socket and not self.ssh_conn_id:
            args["unix_socket"] = self.socket
        else:
            args["host"], args["port"] = self.host, self.port
        if database:
            args["database"] = database
        if self.ssl:
            args["ssl"] = self.ssl
        if self.ssl_mode:
            args["ssl_mode"] = self.ssl_mode
        args.update(kwargs)
        return args

    def connect(self, database: str | None = None, **kwargs: Any) -> Any:
        """Open a MySQLdb connection made from :meth:`driver_args`; the password goes through the driver, never argv."""
        import MySQLdb

        try:
            return MySQLdb.connect(**self.driver_args(database, **kwargs))
        except MySQLdb.OperationalError as exc:
            raise self.connect_error(exc.args[0] if exc.args else None, str(exc.args[-1])) from exc

    @contextlib.contextmanager
    def session(self, database: str | None = None, **kwargs: Any) -> Iterator[Any]:
        """A cursor on a connection of its own, closed after the block (uncommitted work is rolled back):
        lastline's one "connect, run, close"."""
        conn = self.connect(database, **kwargs)
        try:
            yield conn.cursor()
        finally:
            conn.close()

    def connect_error(self, code: int | None, message: str, via: str = "") -> ServerError:
        """The error for a refused connection (from the driver or a dump worker): AccessDenied (fails at
        once) for bad credentials, a ServerError (retried) for a server that does not answer."""
        hint = {
            1045: "wrong user or password: fix the connection's login/password",
            2002: "nothing listens there: is the server running?",
            2003: "nothing listens there: is the server running and the port right?",
        }.get(code or 0, "check the connection and that the server runs")
        error = AccessDenied if code in (1045, 1698) else ServerError
        return error(f"cannot connect to {self.describe()}{via}: {message} ({hint}).")

    def identity(self) -> str:
        """This server's identity (see server_identity), over a connection of its own."""
        with self.session() as cur:
            return server_identity(cur)

    def query(self, sql: str, args: Any = None) -> list[tuple]:
        """Run one statement and return all rows. Nothing is committed (a read, or DDL, which commits itself): a change
        to rows goes through session() and its commit."""
        with self.session() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def variables(self, *names: str) -> dict[str, str]:
        """Global variables by name (lower-case keys)."""
        with self.session() as cur:
            return global_variables(cur, names)


def over_connections(server: Server, n: int, items: list, work: Callable[[Any, Any], Any],
                     setup: tuple[str, ...] = ()) -> list:
    """`work(cursor, item)` for every item, on up to `n` connections of their own at once (a thread pool;
    each connection runs `setup` first and is KILLed on SIGTERM); results in item order, the first error raised."""
    local, opened, lock = threading.local(), [], threading.Lock()

    def cursor() -> Any:
        if not hasattr(local, "cur"):
            conn = server.connect()
            with lock:
                opened.append((conn, stopping.add("KILL QUERY on a finalize/verify connection",
                                                  stopping.kill_query(server, conn.thread_id()))))
            local.cur = conn.cursor()
            for sql in setup:
                local.cur.execute(sql)
        return local.cur

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(n, len(items))), thread_name_prefix="lastline-sql") as pool:
            futures = [pool.submit(lambda item: work(cursor(), item), item) for item in items]
            try:
                return [f.result() for f in futures]
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
    finally:
        for conn, token in opened:
            stopping.remove(token)
            conn.close()


def base_version(version: str) -> tuple[int, int, int]:
    """`10.11.19-MariaDB-0+deb12u1-log` -> (10, 11, 19)."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version or "")
    if not m:
        raise PreflightError(f"cannot read a version number from {version!r}")
    return int(m[1]), int(m[2]), int(m[3])


def refuse_restore_into_source(target: Server, identity: str, source_identity: str | None, source_conn_id: str,
                               allowed: str | None) -> None:
    """A restore into the very server the backup was taken from overwrites production with its own past:
    refused unless the `restore_into_source` Param names the target connection."""
    if source_identity and identity == source_identity and allowed != target.conn_id:
        raise ProtectedTargetError(
            f"target {target.describe()} is the server this backup was taken from ({source_conn_id}, {identity}): "
            f"restoring into it replaces its data with the backup's. If that is what you want, set the Param "
            f"restore_into_source to {target.conn_id!r}."
        )


def _ssl_extra(value: Any) -> dict | None:
    """The `ssl` extra as the mysql provider takes it: a dict, or its JSON text."""
    if not value:
        return None
    if isinstance(value, str):
        import json

        value = json.loads(value)
    return {str(k): str(v) for k, v in dict(value).items()}
