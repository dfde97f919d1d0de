"""A throwaway sshd on a loopback port, for the tests and the benchmarks: generated host and client
keys, key authentication only, its own config, log and pid; stopped by PID. It also describes itself
as an Airflow SSH connection (host key pinned)."""
from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lastline.core.errors import LastlineError
from lastline_dev.sandbox import free_port

SSHD = "/usr/sbin/sshd"


@dataclass
class Sshd:
    """A running sshd and what a client needs to reach it."""

    dir: Path
    port: int
    user: str
    pid: int
    host_key: str  # "<type> <base64>"

    @property
    def log(self) -> Path:
        return self.dir / "sshd.log"

    @property
    def client_key(self) -> Path:
        return self.dir / "client"

    def connection(self) -> dict:
        """The Airflow connection (JSON form of AIRFLOW_CONN_*)."""
        return {"conn_type": "ssh", "host": "127.0.0.1", "port": self.port, "login": self.user,
                "extra": {"private_key": self.client_key.read_text(), "host_key": self.host_key}}

    def stop(self) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        for _ in range(100):
            try:
                os.waitpid(self.pid, os.WNOHANG)
                os.kill(self.pid, 0)
            except (ChildProcessError, ProcessLookupError):
                return
            time.sleep(0.1)


def available() -> bool:
    """sshd can run here: root (it switches users) and openssh-server installed."""
    return os.geteuid() == 0 and os.path.exists(SSHD) and shutil.which("ssh") is not None


def start(folder: Path, timeout: float = 20, wrap: list[str] | None = None) -> Sshd:
    """Generate keys and start sshd on a free loopback port; wait until it listens. `wrap`: a command
    line sshd runs under (e.g. `unshare --mount ...`, for a host whose files the worker cannot see)."""
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    for name in ("host", "client"):
        if not (d / name).exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    port, user = free_port(), getpass.getuser()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\nPidFile {d / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"PubkeyAuthentication yes\nUsePAM no\nSubsystem sftp internal-sftp\nStrictModes no\nPermitRootLogin prohibit-password\nAllowUsers {user}\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
    with open(d / "sshd.log", "ab") as out:
        proc = subprocess.Popen([*(wrap or []), SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise LastlineError(f"sshd did not listen on {port}: {(d / 'sshd.log').read_text()[-2000:]}")
    host_key = " ".join((d / "host.pub").read_text().split()[:2])
    return Sshd(d, port, user, proc.pid, host_key)
