"""SSH hosts from Airflow connections (type ssh): host, port, login and the provider's extras
`key_file` or `private_key`, `host_key` (checked: lastline never turns host key checking off), and
`compress` (off unless asked: compressing compressed backup streams only slows them)."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from lastline.errors import ConfigError
from lastline.runner import SshHost
from lastline.servers import as_bool

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


def ssh_host(conn_id: str) -> SshHost:
    """The SshHost for an Airflow SSH connection (cached per process)."""
    if conn_id in _HOSTS:
        return _HOSTS[conn_id]
    from airflow.sdk import Connection

    try:
        conn = Connection.get(conn_id)
    except Exception as exc:  # the SDK raises several types for "not found"
        raise ConfigError(f"SSH connection {conn_id!r} could not be read ({exc}); create it (type ssh).") from exc
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
