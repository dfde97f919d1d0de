"""Airflow connections -> lastline's typed objects: the stages' one entry to them (the hooks in lastline.hooks read
the connections, one per system).

- `server(conn_id)`: a lastline (or mysql) connection as a :class:`Server` (lastline.hooks.mariadb; its
  ssh_conn_id's host resolved);
- `ssh_host(conn_id)`: an ssh connection as an :class:`SshHost` (lastline.hooks.ssh: the SSH provider's hook reads
  host, port, login, `key_file` or `private_key`, `host_key`; lastline never turns host key checking off, and
  compresses only where `compress` asks: compressing compressed backup streams only slows them);
- `extras(conn_id)`: a connection's extras (the AWS connection's, for S3 settings);
- `secret(conn_id)`: a connection's password, for keys (the masking key): read where it is used, never
  passed through XCom or logged.

The connections come from wherever Airflow keeps them (env `AIRFLOW_CONN_*`, a secrets backend, the
metadata DB); the layers below take the objects and never look a connection up themselves.
"""
from __future__ import annotations

from typing import Any

from lastline.core.errors import ConfigError
from lastline.core.hosts import LOCAL, Host, SshHost
from lastline.core.servers import Server
from lastline.hooks import ssh


def _connection(conn_id: str, kind: str) -> Any:
    """The Airflow connection `conn_id`, or a ConfigError saying how to create it."""
    from airflow.sdk import Connection

    try:
        return Connection.get(conn_id)
    except Exception as exc:  # noqa: BLE001 - the SDK raises several types for "not found"
        label = "SSH" if kind == "ssh" else "Airflow"
        raise ConfigError(
            f"{label} connection {conn_id!r} could not be read ({exc}); "
            f"create it (type {kind}) or set AIRFLOW_CONN_{conn_id.upper()}."
        ) from exc


def server(conn_id: str) -> Server:
    """The Server of a lastline (or mysql) connection, with the host its commands run on (its ssh_conn_id's)."""
    from lastline.hooks.mariadb import MariaDbHook

    return MariaDbHook(conn_id).server()


def host_for(ssh_conn_id: str | None) -> Host:
    """Where commands run: here, or on an SSH connection's host."""
    return ssh_host(ssh_conn_id) if ssh_conn_id else LOCAL


def extras(conn_id: str | None) -> dict:
    """A connection's extras ({} without a connection id, or for one that cannot be read: the hook that uses
    it then names the problem itself)."""
    if not conn_id:
        return {}
    try:
        return _connection(conn_id, "aws").extra_dejson or {}
    except ConfigError:
        return {}


def ssh_host(conn_id: str) -> SshHost:
    """The SshHost for an Airflow SSH connection (read by the SSH provider's hook; cached per process)."""
    return ssh.ssh_host(conn_id)


def secret(conn_id: str) -> str:
    """The password of connection `conn_id`, a key kept as a `generic` connection (never a server's or a cloud
    account's password: whatever a key becomes on a server must not give one of those away), or a ConfigError
    saying how to set it."""
    conn = _connection(conn_id, "generic")
    if (conn.conn_type or "generic") != "generic":
        raise ConfigError(f"connection {conn_id!r} is of type {conn.conn_type!r}: a key must be kept in a connection of its "
                          "own, of type generic (its password is the key).")
    value = conn.password or ""
    if not value:
        raise ConfigError(f"connection {conn_id!r} has no password: put the secret in its password field "
                          f"(e.g. AIRFLOW_CONN_{conn_id.upper()}='{{\"conn_type\": \"generic\", \"password\": \"...\"}}').")
    return value


def key_ring(conn_id: str) -> tuple[str, str, str, dict]:
    """(type, login, password, extras) of a connection that holds keys (storage.auth's, storage.encryption_keys');
    every secret in it is handed to Airflow's log masker first."""
    conn = _connection(conn_id, "generic")
    extra = conn.extra_dejson or {}
    try:
        from airflow.sdk.log import mask_secret

        rings = [extra.get(name) for name in ("keys", "identities")]  # older keys; private keys (encryption's)
        for secret in [conn.password, *(value for ring in rings if isinstance(ring, dict) for value in ring.values())]:
            if isinstance(secret, str) and secret:
                mask_secret(secret)
    except ImportError:  # pragma: no cover - without Airflow nothing prints task logs
        pass
    return conn.conn_type or "generic", conn.login or "", conn.password or "", extra
