"""Airflow connections -> lastline's typed objects: the one module below the Airflow layer that reads them.

- `server(conn_id)`: a mysql connection as a :class:`Server` (its ssh_conn_id's host resolved);
- `ssh_host(conn_id)`: an ssh connection as an :class:`SshHost`: host, port, login and the provider's
  extras `key_file` or `private_key`, `host_key` (checked: lastline never turns host key checking off),
  and `compress` (off unless asked: compressing compressed backup streams only slows them);
- `extras(conn_id)`: a connection's extras (the AWS connection's, for S3 settings);
- `secret(conn_id)`: a connection's password, for keys (the masking key): read where it is used, never
  passed through XCom or logged.

The connections come from wherever Airflow keeps them (env `AIRFLOW_CONN_*`, a secrets backend, the
metadata DB); the layers below take the objects and never look a connection up themselves.
"""
from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import tempfile
from typing import Any

from lastline.core.errors import ConfigError
from lastline.core.hosts import LOCAL, Host, SshHost
from lastline.core.servers import Server, as_bool

_HOSTS: dict[str, SshHost] = {}
_DIR: list[str] = []


def _private_dir() -> str:
    """A 0700 folder for this process's key and known_hosts files, removed at exit."""
    if not _DIR:
        path = tempfile.mkdtemp(prefix="lastline-ssh-")
        os.chmod(path, 0o700)
        atexit.register(shutil.rmtree, path, True)
        _DIR.append(path)
    return _DIR[0]


def _write(name: str, text: str) -> str:
    path = os.path.join(_private_dir(), name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text if text.endswith("\n") else text + "\n")
    return path


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
    """The Server of a mysql connection, with the host its commands run on (its ssh_conn_id's, if set)."""
    found = Server.from_connection(_connection(conn_id, "mysql"))
    return dataclasses.replace(found, remote=ssh_host(found.ssh_conn_id)) if found.ssh_conn_id else found


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
    """The SshHost for an Airflow SSH connection (cached per process)."""
    if conn_id in _HOSTS:
        return _HOSTS[conn_id]
    conn = _connection(conn_id, "ssh")
    extra = conn.extra_dejson or {}
    host, port, user = conn.host, int(conn.port or 22), conn.login or os.environ.get("USER", "root")
    if not host:
        raise ConfigError(f"SSH connection {conn_id!r} has no host.")
    if extra.get("key_file"):
        key_file = extra["key_file"]
    elif extra.get("private_key"):
        key_file = _write(f"{conn_id}.key", extra["private_key"])
    else:
        raise ConfigError(
            f"SSH connection {conn_id!r} has no key: set the extra key_file (a path) or private_key (the key itself). "
            "lastline uses key authentication only."
        )
    host_key = (extra.get("host_key") or "").strip()
    if as_bool(extra.get("no_host_key_check", False)) or not host_key:
        raise ConfigError(
            f"SSH connection {conn_id!r}: set the extra host_key to the server's public host key "
            f"(`ssh-keyscan -p {port} {host}`, e.g. 'ssh-ed25519 AAAA...'); lastline always checks host keys."
        )
    if " " not in host_key:
        raise ConfigError(f"SSH connection {conn_id!r}: host_key must be '<type> <base64>', e.g. 'ssh-ed25519 AAAA...'.")
    pattern = host if port == 22 else f"[{host}]:{port}"
    known = _write(f"{conn_id}.known_hosts", f"{pattern} {host_key}")
    _HOSTS[conn_id] = SshHost(f"{conn_id} ({user}@{host}:{port})", host, port, user, key_file, known,
                              compress=as_bool(extra.get("compress", False)))
    return _HOSTS[conn_id]


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
