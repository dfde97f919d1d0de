"""hooks.ssh: an SSH connection read by the SSH provider's hook as the OpenSSH host lastline streams through: the
host key always pinned (a connection without one, or that turns checking off, is refused), key authentication only
(a key file, or a key kept in the connection handed to ssh through an anonymous file), compression only when asked,
and one host per connection and process."""
from __future__ import annotations

import json
import os
import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from lastline.core.errors import ConfigError
from lastline.hooks.ssh import ssh_host


def openssh_key() -> tuple[str, str]:
    """A new ed25519 key: (the private key in OpenSSH's format, the public key line)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private, public


PRIVATE, HOST_KEY = openssh_key()


@pytest.fixture
def conn(monkeypatch):
    """Set an Airflow SSH connection `unit_ssh_<name>` for one test; returns its id."""
    def put(name: str, extra: dict, **fields) -> str:
        conn_id = f"unit_ssh_{name}"
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "ssh", "host": "backup-host",
                                                                           "login": "lastline", **fields, "extra": extra}))
        return conn_id
    return put


def test_a_key_file_and_a_pinned_host_key(conn, tmp_path):
    key_file = tmp_path / "id"
    key_file.write_text(PRIVATE)
    key_file.chmod(0o600)
    host = ssh_host(conn("key_file", {"key_file": str(key_file), "host_key": HOST_KEY}, port=2222))
    assert (host.host, host.port, host.user, host.key_file, host.compress) == ("backup-host", 2222, "lastline",
                                                                               str(key_file), False)
    with open(host.known_hosts) as known:
        assert known.read() == f"[backup-host]:2222 {HOST_KEY}\n"
    assert host.name == "unit_ssh_key_file (lastline@backup-host:2222)"
    assert stat.S_IMODE(os.stat(os.path.dirname(host.control)).st_mode) == 0o700  # the master sockets' folder
    assert ssh_host("unit_ssh_key_file") is host  # one per connection and process


def test_a_key_kept_in_the_connection_reaches_ssh_through_an_anonymous_file(conn):
    host = ssh_host(conn("private_key", {"private_key": PRIVATE, "host_key": HOST_KEY, "compress": "true"}))
    assert host.key_file.startswith(f"/proc/{os.getpid()}/fd/")
    assert stat.S_IMODE(os.stat(host.key_file).st_mode) == 0o600
    with open(host.key_file) as key:
        assert key.read().rstrip("\n") == PRIVATE.rstrip("\n")
    with open(host.known_hosts) as known:
        assert known.read() == f"backup-host {HOST_KEY}\n"  # port 22: the host alone
    assert host.compress is True


@pytest.mark.parametrize(("extra", "refused"), [
    ({"host_key": HOST_KEY}, "has no key: set the extra key_file"),
    ({"private_key": PRIVATE}, "set the extra host_key to the server's public host key"),
    ({"private_key": PRIVATE, "no_host_key_check": True}, "lastline always checks host keys"),
    ({"private_key": PRIVATE, "private_key_passphrase": "pp", "host_key": HOST_KEY}, "its private_key has a passphrase"),
], ids=["no-key", "no-host-key", "host-key-check-off", "key-with-a-passphrase"])
def test_refused_connections(conn, extra, refused):
    with pytest.raises(ConfigError, match=refused):
        ssh_host(conn("refused", extra))


def test_a_missing_connection_says_how_to_create_it():
    with pytest.raises(ConfigError, match="SSH connection 'unit_ssh_nowhere' could not be read"):
        ssh_host("unit_ssh_nowhere")
