"""An SSH connection as the host lastline streams through: the SSH provider's `SSHHook` reads the connection
(host, port, login, `key_file` or `private_key`, `host_key`, `compress`), lastline runs OpenSSH with what it read
(ControlMaster, its stdin and stdout as pipes: the provider's exec helpers buffer a command's whole output, which
a backup stream cannot afford). Host keys are always checked: a connection without `host_key` is refused, as is
`no_host_key_check`; key authentication only."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from lastline.core.errors import ConfigError
from lastline.core.hosts import SshHost, memfd
from lastline.core.plans import as_bool

_HOSTS: dict[tuple[str, int], SshHost] = {}  # per process: a key's /proc/<pid>/fd path names this process
_DIR: list[str] = []
_KEYS: list[int] = []  # the memfds holding keys and known hosts, open for the process's life


def _private_dir() -> str:
    """A 0700 folder for this process's master connection sockets (nothing secret), removed at exit."""
    if not _DIR:
        path = tempfile.mkdtemp(prefix="lastline-ssh-")
        os.chmod(path, 0o700)
        atexit.register(shutil.rmtree, path, True)
        _DIR.append(path)
    return _DIR[0]


def _anonymous(text: str, name: str) -> str:
    """`text` in an anonymous file (memfd, 0600) open for this process's life, as the path ssh opens it by
    (/proc/<pid>/fd/<n>): nothing named holds a private key or a host key, so a kill -9 leaves none behind."""
    fd = memfd(text if text.endswith("\n") else text + "\n", name)  # 0600: ssh refuses a key others may read
    _KEYS.append(fd)
    return f"/proc/{os.getpid()}/fd/{fd}"


def ssh_host(conn_id: str) -> SshHost:
    """The SshHost of an Airflow SSH connection, read by the provider's SSHHook (cached per process)."""
    if (conn_id, os.getpid()) in _HOSTS:
        return _HOSTS[(conn_id, os.getpid())]
    from airflow.providers.ssh.hooks.ssh import SSHHook

    try:
        hook = SSHHook(ssh_conn_id=conn_id)
    except Exception as exc:  # noqa: BLE001 - the provider raises several types for a missing or bad connection
        raise ConfigError(f"SSH connection {conn_id!r} could not be read ({exc}); create it (type ssh) or set "
                          f"AIRFLOW_CONN_{conn_id.upper()}.") from exc
    host, port = hook.remote_host, int(hook.port or 22)
    user = hook.username or os.environ.get("USER", "root")
    if not host:
        raise ConfigError(f"SSH connection {conn_id!r} has no host.")
    extra = hook.get_connection(conn_id).extra_dejson or {}
    if hook.key_file:
        key_file = hook.key_file
    elif extra.get("private_key") and extra.get("private_key_passphrase"):
        raise ConfigError(f"SSH connection {conn_id!r}: its private_key has a passphrase; lastline runs OpenSSH without a "
                          "prompt, so give it a key without one (kept in the connection, 0600 on the worker) or a key_file.")
    elif hook.pkey is not None and extra.get("private_key"):  # the key as the provider read it, for OpenSSH
        key_file = _anonymous(str(extra["private_key"]), "lastline-ssh-key")
    else:
        raise ConfigError(f"SSH connection {conn_id!r} has no key: set the extra key_file (a path) or private_key (the "
                          "key itself). lastline uses key authentication only.")
    if hook.no_host_key_check or hook.host_key is None:
        raise ConfigError(f"SSH connection {conn_id!r}: set the extra host_key to the server's public host key "
                          f"(`ssh-keyscan -p {port} {host}`, e.g. 'ssh-ed25519 AAAA...'); lastline always checks host keys.")
    pattern = host if port == 22 else f"[{host}]:{port}"
    known = _anonymous(f"{pattern} {hook.host_key.get_name()} {hook.host_key.get_base64()}", "lastline-known-hosts")
    # compression only where the extra asks (the provider's default is on; it only slows a compressed stream)
    compress = as_bool(extra.get("compress", False))
    _HOSTS[(conn_id, os.getpid())] = SshHost(f"{conn_id} ({user}@{host}:{port})", host, port, user, key_file, known,
                                             compress=compress, control_dir=_private_dir())
    return _HOSTS[(conn_id, os.getpid())]
