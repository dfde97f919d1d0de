"""The MariaDB / MySQL hook: the mysql provider's `MySqlHook` whose connection also carries lastline's settings.

A connection of type `lastline` ("MariaDB / MySQL (lastline)") shows them as fields of their own in the
connection form (declared once in :mod:`lastline.core.connection_fields`, given to Airflow by the provider info); a plain `mysql` connection with the same
keys in its extras works the same. `test_connection()` is the form's "Test connection": reachable, the server's
version, and the privileges lastline needs for what the connection may be used as, naming those missing. `server()` gives the typed :class:`~lastline.core.servers.Server` every stage
takes; `get_conn()` gives a DB-API connection made the same way (`Server.driver_args`), and the rest is MySqlHook's.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from airflow.providers.mysql.hooks.mysql import MySqlHook

from lastline.core import privileges
from lastline.core.errors import ConfigError, LastlineError
from lastline.core.servers import Server
from lastline.hooks.ssh import ssh_host

CONN_TYPE = "lastline"


class MariaDbHook(MySqlHook):
    """A MariaDB or MySQL server that lastline backs up or restores into (connection type `lastline` or `mysql`)."""

    conn_name_attr = "lastline_conn_id"
    default_conn_name = "lastline_source"
    conn_type = CONN_TYPE
    hook_name = "MariaDB / MySQL (lastline)"

    def __init__(self, lastline_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(lastline_conn_id, **kwargs)
        self.lastline_conn_id = lastline_conn_id

    def get_conn(self) -> Any:
        """A DB-API (MySQLdb) connection to this connection's server, made as every lastline stage makes one
        (:meth:`Server.driver_args`): one statement per call (a multi-statement string fails, where plain MySqlHook
        allows it), no `LOAD DATA LOCAL` unless this hook was made with `local_infile=True` (code, never an extra),
        the socket read as lastline reads it (`unix_socket` or `socket`, never with an SSH connection), the
        connection's TLS and charset; the hook's `schema`, when given, is the database. No other extra reaches the
        driver (`cursor` is not read); a `client` other than mysqlclient and an `iam` login are refused."""
        conn = self._server_connection()
        extra = conn.extra_dejson or {}
        if extra.get("client", "mysqlclient") != "mysqlclient" or extra.get("iam"):
            what = "an IAM login" if extra.get("iam") else f"the {extra.get('client')!r} client"
            raise ConfigError(f"connection {self.lastline_conn_id!r} asks for {what}: lastline connects with mysqlclient "
                              "and the connection's login and password only; remove the extra \"client\" / \"iam\".")
        options: dict[str, Any] = {"local_infile": 1} if self.local_infile else {}
        if self.init_command:
            options["init_command"] = self.init_command
        return Server.from_connection(conn).connect(self.schema or conn.schema or None, **options)

    def get_uri(self) -> str:
        """MySqlHook's URI without its query: a connection's extras never become driver options through it."""
        return super().get_uri().split("?", 1)[0]

    def get_sqlalchemy_engine(self, engine_kwargs: dict | None = None) -> Any:
        """An SQLAlchemy engine whose connections are :meth:`get_conn`'s (common-sql's inspector and table schema use
        it): made the same way, never from the URI's options."""
        from sqlalchemy import create_engine

        return create_engine("mysql+mysqldb://", **{**(engine_kwargs or {}), "creator": self.get_conn})

    def read_connection(self) -> Any:
        """The Airflow connection, or a ConfigError saying how to create it."""
        try:
            return self.get_connection(self.lastline_conn_id)
        except Exception as exc:  # noqa: BLE001 - the SDK raises several types for "not found"
            raise ConfigError(f"Airflow connection {self.lastline_conn_id!r} could not be read ({exc}); create it (type "
                              f"{CONN_TYPE} or mysql) or set AIRFLOW_CONN_{self.lastline_conn_id.upper()}.") from exc

    def _server_connection(self) -> Any:
        """The Airflow connection, refused unless it is a server's (type lastline, mysql or mariadb)."""
        conn = self.read_connection()
        if (conn.conn_type or "mysql") not in (CONN_TYPE, "mysql", "mariadb"):
            raise ConfigError(f"connection {self.lastline_conn_id!r} is of type {conn.conn_type!r}: a server lastline "
                              f"backs up or restores into is a {CONN_TYPE} (or mysql) connection.")
        return conn

    def server(self) -> Server:
        """The Server of this connection, with the host its commands run on (its ssh_conn_id's, if set)."""
        found = Server.from_connection(self._server_connection())
        return dataclasses.replace(found, remote=ssh_host(found.ssh_conn_id)) if found.ssh_conn_id else found

    def test_connection(self) -> tuple[bool, str]:  # type: ignore[override]  # DbApiHook's says None, returns this
        """The connection form's "Test connection": whether the server answers (its version), and whether the account
        holds on *.* what lastline needs of it as a backup source and/or a restore target (lastline.core.privileges:
        its grants and those of the roles it has enabled at login). It passes when the account is ready for at least
        one of the uses the connection allows; the message says for which, what was checked, and names each missing
        privilege with what lastline needs it for. SSH, the datadir and the service commands are not tried."""
        try:
            conn = self.read_connection()
            server = Server.from_connection(conn)
            with server.session() as cur:
                cur.execute("SELECT VERSION()")
                version = str(cur.fetchone()[0])
                account, grants, roles = privileges.account_grants(cur)
        except LastlineError as exc:
            return False, str(exc)
        except Exception as exc:  # noqa: BLE001 - the driver's errors: the form shows them as they are
            return False, f"cannot test {self.lastline_conn_id!r}: {type(exc).__name__}: {exc}"
        used_as = privileges.uses(server.protected, server.role)
        have = privileges.held(grants)
        _, lines = privileges.verdict(have, used_as)
        ready = [use for use in used_as if not privileges.missing(have, use)]
        checked = f"SHOW GRANTS of {account}" + (f" and of its role {', '.join(roles)}" if roles else "")
        where = server.socket or f"{server.host}:{server.port}"
        head = f"{server.user}@{where} answers: {version}; it may be used as a {' and a '.join(used_as)}."
        # an account granted for one use (a backup source, as docs/grants.md grants it) is ready for that use
        if not ready:
            said = "Not ready: it lacks what lastline needs of it."
        elif len(ready) == len(used_as):
            said = f"Ready as a {' and a '.join(ready)}."
        else:
            said = (f"Ready as a {' and a '.join(ready)}; not as a "
                    f"{' or a '.join(u for u in used_as if u not in ready)} (what that lacks is below).")
        return bool(ready), (f"{head} {said} {' '.join(lines)} Checked: {checked}; not tried: SSH, the datadir, the start "
                             "and stop commands.")
