"""Run commands and OS pipelines: every stage's exit status, byte counts, sha256, progress, stderr tails.

A pipeline is a list of :class:`Stage` connected stdout->stdin by the OS (no Python copy in between).
Python only touches the two ends: it may feed the first stage from a byte source and drain the last
stage into a sink, hashing and counting what passes. Server-side commands go through a
:class:`Host`: :class:`LocalHost` runs them here, :class:`SshHost` on another machine through the
OpenSSH client. A stage may name its own host, so one pipeline can span two machines
(`mariabackup | zstd | ssh target "zstd -d | mbstream -x"`): consecutive stages on one SSH host run
as ONE remote shell pipeline behind one ssh process, which reports each remote stage's exit status
and stderr. :func:`tap_stage` counts and checksums the bytes passing a point of a pipeline, on
whichever host it runs.
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from lastline import stopping
from lastline.errors import LastlineError, PipelineError

log = logging.getLogger(__name__)

CHUNK = 1 << 20  # 1 MiB reads at the pipeline's ends
F_SETPIPE_SZ = 1031  # fcntl: a pipe's buffer size (Linux)
PIPE_BYTES = 1 << 20  # 1 MiB pipes between stages (64 KiB by default): fewer switches, a few % faster streams


def _widen(fd: int) -> None:
    """Give a pipe PIPE_BYTES of buffer where the system allows it (else keep the default)."""
    try:
        fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass


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


@dataclass
class StageResult:
    """How one stage ended."""

    name: str
    returncode: int
    stderr_tail: str
    stderr: str | None = None

    @property
    def sigpipe(self) -> bool:
        """True if the stage died only because a downstream stage stopped reading (SIGPIPE, or a write
        error on a broken pipe)."""
        return self.returncode in (-signal.SIGPIPE, 128 + signal.SIGPIPE) or "Broken pipe" in self.stderr_tail


@dataclass
class PipelineResult:
    """What a whole pipeline did: per-stage results and what crossed its two Python ends."""

    stages: list[StageResult]
    seconds: float
    bytes_in: int = 0
    sha256_in: str | None = None
    bytes_out: int = 0
    sha256_out: str | None = None
    stderr: dict[str, str] = field(default_factory=dict)

    @property
    def mb_per_s(self) -> float:
        """Throughput of the larger end, in MB/s."""
        return max(self.bytes_in, self.bytes_out) / 1e6 / max(self.seconds, 1e-6)


class Progress:
    """Logs `label: done MB[/total MB], MB/s[, ETA]` at most every `every` seconds."""

    def __init__(self, label: str, total: int | None = None, every: float = 5.0) -> None:
        self.label, self.total, self.every = label, total, every
        self.start = self.last = time.monotonic()
        self.done = 0

    def add(self, n: int) -> None:
        """Count n more bytes and log if it is time."""
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            log.info("%s", self.line(now))

    def line(self, now: float | None = None) -> str:
        """One progress line in the house shape."""
        elapsed = max((now or time.monotonic()) - self.start, 1e-6)
        rate = self.done / 1e6 / elapsed
        text = f"{self.label}: {self.done / 1e6:,.1f} MB"
        if self.total:
            text += f" / {self.total / 1e6:,.1f} MB ({100 * self.done / self.total:.0f}%)"
        text += f", {rate:.1f} MB/s"
        if self.total and rate > 0 and self.done < self.total:
            text += f", ETA {(self.total - self.done) / 1e6 / rate:.0f} s"
        return text


def _tail(path: str, lines: int = 15) -> tuple[str, str]:
    """The whole text of a stderr file and its last `lines` lines."""
    with open(path, "rb") as fh:
        text = fh.read().decode("utf-8", "replace")
    return text, "\n".join(text.strip().splitlines()[-lines:])


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
        """A 0600 file holding `text` on this host (an option file with credentials); removed afterwards.
        The text travels on stdin, never on a command line."""
        path = self.sh('umask 077 && f=$(mktemp "${TMPDIR:-/tmp}/lastline-XXXXXX") && cat > "$f" && echo "$f"',
                       input=text.encode()).strip()
        try:
            yield path
        finally:
            self.run(["rm", "-f", path], check=False)


class LocalHost(Host):
    """Run commands on this machine."""

    def popen(self, stage: Stage, stdin, stdout, stderr) -> subprocess.Popen:
        try:
            return subprocess.Popen(stage.argv, stdin=stdin, stdout=stdout, stderr=stderr, cwd=stage.cwd)
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
            proc = subprocess.run(argv, capture_output=True, timeout=timeout, input=input,
                                  stdin=subprocess.DEVNULL if input is None else None)
        except FileNotFoundError as exc:
            raise PipelineError(f"command {argv[0]!r} not found; run `make setup` or install it.") from exc
        except subprocess.TimeoutExpired as exc:
            raise PipelineError(f"`{shlex.join(shown)}` did not finish within {timeout} s{self._where()}.") from exc
        if check and proc.returncode != 0:
            tail = "\n".join(proc.stderr.decode("utf-8", "replace").strip().splitlines()[-15:])
            raise PipelineError(f"`{shlex.join(shown)}` exited with status {proc.returncode}{self._where()}:\n{tail}")
        return proc

    def _where(self) -> str:
        return ""

    @contextlib.contextmanager
    def private_file(self, text: str) -> Iterator[str]:
        fd, path = tempfile.mkstemp(prefix="lastline-", suffix=".cnf")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            yield path
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


LOCAL = LocalHost()

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
    no command timeout). Host keys are checked against a known_hosts file; the private key is a 0600
    file; neither secret reaches a command line (only their paths do)."""

    def __init__(self, name: str, host: str, port: int, user: str, key_file: str, known_hosts: str,
                 compress: bool = False) -> None:
        self.name, self.host, self.port, self.user = name, host, port, user
        self.key_file, self.known_hosts, self.compress = key_file, known_hosts, compress
        self.control = os.path.join(os.path.dirname(known_hosts), f"cm-{user}@{host}:{port}")
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
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
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


def host_for(ssh_conn_id: str | None) -> Host:
    """The Host a server's commands run on: here, or over SSH for connections with ssh_conn_id."""
    if not ssh_conn_id:
        return LOCAL
    from lastline.ssh import ssh_host

    return ssh_host(ssh_conn_id)


def _groups(stages: list[Stage], default: Host) -> list[tuple[Host, list[Stage]]]:
    """Stages by process: one each here, consecutive stages on one SSH host together."""
    groups: list[tuple[Host, list[Stage]]] = []
    for stage in stages:
        host = stage.host or default
        if groups and groups[-1][0] is host and host.groups_stages():
            groups[-1][1].append(stage)
        else:
            groups.append((host, [stage]))
    return groups


def _results(host: Host, stages: list[Stage], code: int, errpath: str) -> list[StageResult]:
    """Per-stage results of one process: itself, or each stage of a remote group (from its report)."""
    text, tail = _tail(errpath)
    if not host.groups_stages():
        return [StageResult(stages[0].name, code, tail, text if stages[0].keep_stderr else None)]
    own, found = split_group_stderr(text)
    if len(found) != len(stages):  # the ssh link itself failed: the remote statuses never came back
        names = " | ".join(s.name for s in stages)
        own_tail = "\n".join(own.strip().splitlines()[-15:])
        return [StageResult(f"ssh to {host.name} running {names}", code or 255,
                            own_tail or "(no message: the SSH connection ended)")]
    out = []
    for i, stage in enumerate(stages):
        status, err = found[i]
        out.append(StageResult(stage.name, status, "\n".join(err.strip().splitlines()[-15:]),
                               err if stage.keep_stderr else None))
    return out


def _watch_io(pid: int, progress: Progress, stop: threading.Event) -> None:
    """Progress of a pipeline with no Python end: the bytes its last process has read (/proc/PID/io)."""
    last = 0
    while not stop.wait(1.0):
        try:
            with open(f"/proc/{pid}/io") as fh:
                rchar = int(next(line for line in fh if line.startswith("rchar:")).split()[1])
        except (OSError, StopIteration, ValueError):
            return
        progress.add(max(rchar - last, 0))
        last = rchar


def run_pipeline(
    stages: list[Stage],
    *,
    source: Iterable[bytes] | None = None,
    sink: Callable[[bytes], None] | None = None,
    label: str = "stream",
    expected_bytes: int | None = None,
    progress_every: float | None = 5.0,
    host: Host = LOCAL,
    hash_source: bool = True,
) -> PipelineResult:
    """Run `stages` as one OS pipeline; feed `source` into the first, drain the last into `sink`.

    Each stage runs on `stage.host`, else on `host`. Raises PipelineError naming the stage that failed
    first (stages killed by SIGPIPE only because a later stage stopped are not blamed; a cut SSH link is
    named as such), with its exit status and the tail of its stderr. Errors raised by `source` or `sink`
    (a read or a write that failed) stop every stage and rise as they are.
    `progress_every=None`: no progress lines (for the many small pipelines of a logical dump);
    `hash_source=False`: count the source's bytes but skip its sha256 (sha256_in is then None).
    Without a Python end, progress counts the bytes read by the last local process.
    """
    if not stages:
        raise LastlineError("empty pipeline")
    start = time.monotonic()
    groups = _groups(stages, host)
    procs: list[subprocess.Popen] = []
    stop_tokens: list[int] = []
    errfiles: list[str] = []
    feed_error: list[BaseException] = []
    in_hash, out_hash = (hashlib.sha256() if hash_source else None), hashlib.sha256()
    counters = {"in": 0, "out": 0}
    progress = Progress(label, expected_bytes, progress_every or float("inf"))
    watch_stop = threading.Event()
    try:
        prev_stdout = subprocess.PIPE if source is not None else subprocess.DEVNULL
        for i, (where, group) in enumerate(groups):
            fd, errpath = tempfile.mkstemp(prefix=f"lastline-{group[0].name}-", suffix=".err")
            errfiles.append(errpath)
            last = i == len(groups) - 1
            stdout = subprocess.PIPE if (not last or sink is not None) else subprocess.DEVNULL
            with os.fdopen(fd, "wb") as errfh:
                proc = where.start(group, stdin=prev_stdout, stdout=stdout, stderr=errfh)
            if procs and procs[-1].stdout:
                procs[-1].stdout.close()  # the child holds it now; we must not, or SIGPIPE never comes
            if proc.stdout is not None:
                _widen(proc.stdout.fileno())
            procs.append(proc)
            stop_tokens.append(stopping.add(f"{label}: killed {group[0].name}", stopping.kill_process(proc)))
            prev_stdout = proc.stdout

        if source is None and sink is None and progress_every:
            threading.Thread(target=_watch_io, args=(procs[-1].pid, progress, watch_stop),
                             name=f"{label}-watch", daemon=True).start()
        feeder = None
        if source is not None:
            feeder = threading.Thread(
                target=_feed, args=(source, procs[0], in_hash, counters, feed_error, progress, sink is None),
                name=f"{label}-feed", daemon=True,
            )
            feeder.start()
        try:
            if sink is not None:
                out = procs[-1].stdout
                while True:
                    chunk = out.read(CHUNK)
                    if not chunk:
                        break
                    out_hash.update(chunk)
                    counters["out"] += len(chunk)
                    if source is None:
                        progress.add(len(chunk))
                    sink(chunk)
        except BaseException:
            _kill(procs)
            raise
        finally:
            if feeder is not None:
                if feed_error or any(p.poll() not in (None, 0) for p in procs):
                    _kill(procs[:1])
                feeder.join()
        codes = [p.wait() for p in procs]
        watch_stop.set()
        if feed_error:
            _kill(procs)
            raise feed_error[0]
        results = []
        for (where, group), errpath, code in zip(groups, errfiles, codes):
            results += _results(where, group, code, errpath)
        seconds = time.monotonic() - start
        failed = [r for r in results if r.returncode != 0]
        if failed:
            blamed = next((r for r in failed if not r.sigpipe), failed[0])
            others = ", ".join(f"{r.name}={r.returncode}" for r in results)
            raise PipelineError(
                f"{label}: stage {blamed.name!r} failed with exit status {blamed.returncode} "
                f"(all stages: {others}). Its stderr ends with:\n{blamed.stderr_tail or '(empty)'}"
            )
        if progress_every:
            log.info("%s", progress.line())
        return PipelineResult(
            stages=results,
            seconds=seconds,
            bytes_in=counters["in"],
            sha256_in=in_hash.hexdigest() if source is not None and in_hash is not None else None,
            bytes_out=counters["out"],
            sha256_out=out_hash.hexdigest() if sink is not None else None,
            stderr={r.name: r.stderr for r in results if r.stderr is not None},
        )
    finally:
        watch_stop.set()
        _kill(procs)
        for token in stop_tokens:
            stopping.remove(token)
        for path in errfiles:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


# Passes its stdin to its stdout and, at the end, prints `@@lastline-tap <bytes> <crc>` on stderr:
# POSIX cksum (CRC-32 and byte count in one pass: 0.05 s for 308 MB here, sha256sum 0.68 s; see
# `make bench-rebuild`). bash + coreutils only: runs on any host.
TAP_SCRIPT = (
    'd=$(mktemp -d "${TMPDIR:-/tmp}/lastline-tap-XXXXXX") || exit 96\n'
    "trap 'rm -rf \"$d\"' EXIT\n"
    'mkfifo "$d/f" || exit 96\n'
    'cksum < "$d/f" > "$d/sum" & a=$!\n'
    'tee "$d/f"; rc=$?\n'
    'wait "$a" || exit 97\n'
    'read -r crc n _ < "$d/sum"\n'
    'printf "@@lastline-tap %s %s\\n" "$n" "$crc" >&2\n'
    'exit "$rc"\n'
)
_TAP_RE = re.compile(r"^@@lastline-tap (\d+) (\d+)$", re.M)


def tap_stage(name: str, host: Host | None = None) -> Stage:
    """A pass-through stage that counts and checksums what crosses it (read with :func:`tap_result`)."""
    return Stage(name, ["bash", "-c", TAP_SCRIPT, name], keep_stderr=True, host=host)


def tap_result(result: PipelineResult, name: str) -> tuple[int, str]:
    """(bytes, CRC-32 as cksum prints it) that a tap stage saw; PipelineError if it did not report."""
    m = _TAP_RE.search(result.stderr.get(name) or "")
    if not m:
        raise PipelineError(f"stage {name!r} did not report its byte count and checksum: the stream is not trusted.")
    return int(m[1]), m[2]


def _feed(source: Iterable[bytes], proc: subprocess.Popen, digest, counters, errors, progress, count) -> None:
    """Write every chunk of `source` to the first stage's stdin, hashing it; record failures."""
    stdin = proc.stdin
    try:
        for chunk in source:
            if digest is not None:
                digest.update(chunk)
            counters["in"] += len(chunk)
            progress.add(len(chunk))
            stdin.write(chunk)
    except BrokenPipeError:
        pass  # the stage stopped reading: its own exit status tells why
    except BaseException as exc:  # noqa: BLE001 - re-raised by run_pipeline in the main thread
        errors.append(exc)
    finally:
        try:
            stdin.close()
        except BrokenPipeError:
            pass


def _kill(procs: list[subprocess.Popen]) -> None:
    """Terminate whatever still runs (idempotent)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def iter_file(path: str, chunk: int = CHUNK) -> Iterator[bytes]:
    """Read a local file in chunks."""
    with open(path, "rb") as fh:
        while data := fh.read(chunk):
            yield data


def run_logged(argv: list[str], label: str, *, every: float = 0.0, host: Host = LOCAL) -> str:
    """Run a long command on `host`, logging its output lines live (at most one per `every` s); return
    the output."""
    start = time.monotonic()
    lines: list[str] = []
    last = 0.0
    proc = host.popen(Stage(label, argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.decode("utf-8", "replace").rstrip()
        lines.append(line)
        now = time.monotonic()
        if now - last >= every:
            last = now
            log.info("%s [%.0f s]: %s", label, now - start, line)
    code = proc.wait()
    if code != 0:
        tail = "\n".join(lines[-15:])
        where = f" on {host.name}" if host is not LOCAL else ""
        raise PipelineError(f"{label}: `{shlex.join(argv)}` exited with status {code}{where}; output ends with:\n{tail}")
    return "\n".join(lines)
