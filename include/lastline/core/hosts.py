"""Where commands run: :class:`LocalHost` here, :class:`SshHost` on another machine through the OpenSSH
client (ControlMaster for short commands, a connection of its own for each stream). A :class:`Stage` is
one command and, optionally, the host it runs on; consecutive stages on one SSH host run as ONE remote
shell pipeline (:func:`group_script`) that reports each stage's exit status and stderr. This layer knows
nothing of Airflow: `lastline.connections` builds an SshHost from an Airflow SSH connection.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from lastline.core.child_env import child_env
from lastline.core.errors import LastlineError, PipelineError, PreflightError


@dataclass(frozen=True)
class Stage:
    """One command of a pipeline; `keep_stderr` returns its whole stderr in the result."""

    name: str
    argv: list[str]
    keep_stderr: bool = False
    cwd: str | None = None
    host: Host | None = field(default=None, compare=False)  # None: the pipeline's host

    def display(self) -> str:
        """The command as a shell line (argv never holds secrets in lastline)."""
        return shlex.join(self.argv)

    def shell_line(self) -> str:
        """The command as a line for a shell, with its cwd."""
        return f"cd {shlex.quote(self.cwd)} && exec {self.display()}" if self.cwd else f"exec {self.display()}"


# keep stdin's first $1 bytes in a file nobody else can read, open it as fd 3, unlink it, print where it is held,
# then hold it (as cat, same pid) until stdin closes
_HOLD = ('umask 077 && f=$(mktemp "${TMPDIR:-/tmp}/lastline-XXXXXX") || exit 1; head -c "$1" > "$f" && exec 3<"$f"; '
         'rm -f -- "$f"; [ -e /proc/$$/fd/3 ] || exit 1; echo "/proc/$$/fd/3"; exec cat > /dev/null')


class Host:
    """Where server-side commands run: :class:`LocalHost` here, :class:`SshHost` over SSH."""

    name = "local"

    def popen(self, stage: Stage, stdin, stdout, stderr) -> subprocess.Popen:
        """Start one command, its output streamed live (run_logged)."""
        raise NotImplementedError

    def popen_script(self, script: str, *args: str, stdin=subprocess.DEVNULL) -> subprocess.Popen:
        """Start a POSIX shell script with positional arguments; its stdout and stderr are pipes."""
        return self.popen(Stage("sh", ["sh", "-c", script, "lastline", *args]), stdin, subprocess.PIPE, subprocess.PIPE)

    def start(self, stages: list[Stage], stdin, stdout, stderr) -> subprocess.Popen:
        """Start stages of a pipeline as one local process (one stage here, a remote group over SSH)."""
        if len(stages) != 1:
            raise LastlineError(f"{self.name} runs one stage per process, got {len(stages)}")
        return self.popen(stages[0], stdin, stdout, stderr)

    def groups_stages(self) -> bool:
        """Whether consecutive stages on this host share one process (a remote shell pipeline)."""
        return False

    def run(self, argv: list[str], *, timeout: float | None = None, check: bool = True,
            input: bytes | None = None) -> subprocess.CompletedProcess:
        """Run one command to completion, output captured; raise with its stderr tail on failure."""
        raise NotImplementedError

    def shell(self, command: str, *, timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run a shell command line (a connection's service_start/service_stop)."""
        return self.run(["bash", "-c", command], timeout=timeout)

    def sh(self, script: str, *args: str, check: bool = True, input: bytes | None = None) -> str:
        """Run a small POSIX shell script with positional arguments; return its stdout as text."""
        out = self.run(["sh", "-c", script, "lastline", *args], check=check, input=input)
        return out.stdout.decode("utf-8", "replace")

    @contextlib.contextmanager
    def private_file(self, text: str) -> Iterator[str]:
        """`text` (an option file with credentials) on this host as `/proc/<pid>/fd/3` of a holder process that
        keeps it open with no name: written 0600, opened and unlinked at once, held until this context ends or
        lastline's end of the channel closes (a kill -9 of the worker closes it), so no named file outlives the
        run. The text travels on stdin, never on a command line."""
        data = text.encode()
        holder = self.popen_script(_HOLD, str(len(data)), stdin=subprocess.PIPE)
        assert holder.stdin is not None and holder.stdout is not None
        try:
            holder.stdin.write(data)
            holder.stdin.flush()
            path = holder.stdout.readline().decode().strip()
            if not path.startswith("/proc/"):
                err = holder.stderr.read().decode("utf-8", "replace")[-500:] if holder.stderr else ""
                raise PipelineError(f"could not hold a private file{self._where()}: {err or path!r}")
            yield path
        finally:
            with contextlib.suppress(OSError):
                holder.stdin.close()
            try:
                holder.wait(timeout=30)
            except subprocess.TimeoutExpired:
                holder.kill()
                holder.wait()

    def _where(self) -> str:
        return ""


class LocalHost(Host):
    """Run commands on this machine."""

    def popen(self, stage: Stage, stdin, stdout, stderr) -> subprocess.Popen:
        try:
            return subprocess.Popen(stage.argv, stdin=stdin, stdout=stdout, stderr=stderr, cwd=stage.cwd, env=child_env())
        except FileNotFoundError as exc:
            raise PipelineError(
                f"{stage.name}: command {stage.argv[0]!r} not found on {self.name}; run `make setup` "
                "or install it."
            ) from exc

    def run(self, argv: list[str], *, timeout: float | None = None, check: bool = True,
            input: bytes | None = None) -> subprocess.CompletedProcess:
        return self._run(argv, argv, timeout, check, input)

    def _run(self, argv: list[str], shown: list[str], timeout: float | None, check: bool,
             input: bytes | None) -> subprocess.CompletedProcess:
        """Run `argv` here; messages show `shown` (the command as the user thinks of it)."""
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=timeout, input=input, env=child_env(),
                                  stdin=subprocess.DEVNULL if input is None else None)
        except FileNotFoundError as exc:
            raise PipelineError(f"command {argv[0]!r} not found; run `make setup` or install it.") from exc
        except subprocess.TimeoutExpired as exc:
            raise PipelineError(f"`{shlex.join(shown)}` did not finish within {timeout} s{self._where()}.") from exc
        if check and proc.returncode != 0:
            tail = "\n".join(proc.stderr.decode("utf-8", "replace").strip().splitlines()[-15:])
            raise PipelineError(f"`{shlex.join(shown)}` exited with status {proc.returncode}{self._where()}:\n{tail}")
        return proc

    @contextlib.contextmanager
    def private_file(self, text: str) -> Iterator[str]:
        """`text` in an anonymous file (memfd, 0600) this process holds open, as a path its children open by name:
        nothing is named on disk, so a kill -9 leaves nothing behind."""
        with anonymous_file(text) as path:
            yield path


LOCAL = LocalHost()


def memfd(text: str, name: str) -> int:
    """A 0600 memfd holding `text`, open in this process (its descriptor): named nowhere on disk, gone with the
    descriptor or the process, whatever ends it. A child of the same user opens it as `/proc/<pid>/fd/<n>`."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.fchmod(fd, 0o600)  # a memfd is made 0777; option files readable by others are ignored, ssh keys refused
    data = text.encode()
    while data:
        data = data[os.write(fd, data):]
    return fd


@contextlib.contextmanager
def anonymous_file(text: str, name: str = "lastline-secret") -> Iterator[str]:
    """`text` in a memfd for the block's length; yields `/proc/<pid>/fd/<n>` (see memfd)."""
    fd = memfd(text, name)
    try:
        yield f"/proc/{os.getpid()}/fd/{fd}"
    finally:
        os.close(fd)

_STATUS = "@@lastline-stage"
_STATUS_RE = re.compile(rf"^{_STATUS} (\d+) (\d+)$", re.M)


def group_script(stages: list[Stage]) -> str:
    """A bash script running `stages` as one pipeline, then printing each stage's exit status and stderr
    (each behind a marker line) on stderr; it exits with the first non-zero status."""
    n = len(stages)
    pipe = " | ".join(f"({st.shell_line()}) 2>\"$d/{i}\"" for i, st in enumerate(stages))
    return (
        'd=$(mktemp -d "${TMPDIR:-/tmp}/lastline-XXXXXX") || exit 96\n'
        "trap 'rm -rf \"$d\"' EXIT\n"
        f"{pipe}\n"
        's=("${PIPESTATUS[@]}")\n'
        f'for i in {" ".join(map(str, range(n)))}; do printf \'\\n{_STATUS} %s %s\\n\' "$i" "${{s[$i]}}" >&2; '
        'cat "$d/$i" >&2; done\n'
        'for c in "${s[@]}"; do [ "$c" = 0 ] || exit "$c"; done\n'
    )


def split_group_stderr(text: str) -> tuple[str, dict[int, tuple[int, str]]]:
    """Parse what group_script printed: (the ssh client's own stderr, {stage index: (status, stderr)})."""
    marks = list(_STATUS_RE.finditer(text))
    own = text[: marks[0].start()] if marks else text
    found: dict[int, tuple[int, str]] = {}
    for k, m in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(text)
        found[int(m[1])] = (int(m[2]), text[m.end():end].strip("\n"))
    return own, found


# AES-GCM first (AES-NI: 0.67 s for 308 MB through ssh here, chacha20-poly1305 0.94 s), then the rest.
CIPHERS = "aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,aes256-gcm@openssh.com,aes128-ctr,aes256-ctr"


class SshHost(LocalHost):
    """Run commands on another host through the OpenSSH client: each process is a local `ssh` whose
    stdin/stdout are the remote command's, so streams go through the SSH channel itself (no buffering,
    no command timeout). Host keys are checked against a known_hosts file; the private key is a 0600 file
    (lastline.hooks.ssh makes both anonymous); neither reaches a command line (only their paths do)."""

    def __init__(self, name: str, host: str, port: int, user: str, key_file: str, known_hosts: str,
                 compress: bool = False, control_dir: str | None = None) -> None:
        self.name, self.host, self.port, self.user = name, host, port, user
        self.key_file, self.known_hosts, self.compress = key_file, known_hosts, compress
        self.control = os.path.join(control_dir or os.path.dirname(known_hosts), f"cm-{user}@{host}:{port}")
        self._shared: bool | None = None
        self._lock = threading.Lock()

    def _options(self) -> list[str]:
        return [
            "-F", "none", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", f"Compression={'yes' if self.compress else 'no'}", "-o", f"Ciphers={CIPHERS}",
            "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4", "-o", "ConnectTimeout=20",
            "-i", self.key_file, "-p", str(self.port), "-l", self.user,
        ]

    def ssh_argv(self, remote: str, shared: bool = False) -> list[str]:
        """The local `ssh` command that runs the shell command line `remote` on the host. `shared`: through
        this process's master connection (short commands; streams get a connection of their own)."""
        mux = ["-o", f"ControlPath={self.control}", "-o", "ControlMaster=no"] if shared and self._master() else []
        return ["ssh", *self._options(), *mux, self.host, "--", remote]

    def _master(self) -> bool:
        """Start, once per process, a background master connection that short commands share (a new
        SSH handshake costs ~0.3 s here); if it cannot start or dies, commands connect on their own."""
        with self._lock:
            if self._shared is None:
                try:
                    proc = subprocess.run(
                        ["ssh", *self._options(), "-M", "-N", "-f", "-o", f"ControlPath={self.control}",
                         "-o", "ControlPersist=300", self.host],
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
                        env=child_env(),
                    )
                    self._shared = proc.returncode == 0
                except (OSError, subprocess.TimeoutExpired):
                    self._shared = False
                if self._shared:
                    atexit.register(self.close)
            return self._shared

    def close(self) -> None:
        """Stop the master connection (at exit)."""
        subprocess.run(["ssh", "-F", "none", "-o", f"ControlPath={self.control}", "-O", "exit", self.host],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                       env=child_env())
        self._shared = None

    def _where(self) -> str:
        return f" on {self.name}"

    def groups_stages(self) -> bool:
        return True

    def popen(self, stage: Stage, stdin, stdout, stderr) -> subprocess.Popen:
        remote = Stage(stage.name, self.ssh_argv(stage.shell_line()), keep_stderr=stage.keep_stderr)
        return super().popen(remote, stdin, stdout, stderr)

    def start(self, stages: list[Stage], stdin, stdout, stderr) -> subprocess.Popen:
        remote = shlex.join(["bash", "-c", group_script(stages)])
        return super().popen(Stage("ssh", self.ssh_argv(remote)), stdin, stdout, stderr)

    def run(self, argv: list[str], *, timeout: float | None = None, check: bool = True,
            input: bytes | None = None) -> subprocess.CompletedProcess:
        return self._run(self.ssh_argv(shlex.join(argv), shared=True), argv, timeout, check, input)

    def shell(self, command: str, *, timeout: float | None = None) -> subprocess.CompletedProcess:
        return self._run(self.ssh_argv(command, shared=True), [command], timeout, True, None)

    private_file = Host.private_file  # on the remote host, not here


def require_tools(*tools: str | None, host: Host = LOCAL) -> None:
    """Raise a PreflightError naming every command missing on `host`."""
    wanted = [t for t in tools if t]
    if host is LOCAL:
        missing = [t for t in wanted if shutil.which(t) is None]
    else:
        out = host.sh('for t in "$@"; do command -v "$t" >/dev/null 2>&1 || echo "$t"; done', *wanted)
        missing = out.split()
    if missing:
        where = "" if host is LOCAL else f" on {host.name}"
        raise PreflightError(
            f"missing commands{where}: {', '.join(missing)}; run `make setup` or "
            "`apt-get install mariadb-backup pigz zstd`" + (" there." if where else ".")
        )
