"""Run commands and OS pipelines: every stage's exit status, byte counts, sha256, progress, stderr tails.

A pipeline is a list of :class:`Stage` connected stdout->stdin by the OS (no Python copy in between).
Python only touches the two ends: it may feed the first stage from a byte source and drain the last
stage into a sink, hashing and counting what passes. Server-side commands go through a
:class:`Host`; :class:`LocalHost` runs them here, and a remote host (SSH) plugs in behind the same
interface.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from lastline.errors import LastlineError, PipelineError

log = logging.getLogger(__name__)

CHUNK = 1 << 20  # 1 MiB reads at the pipeline's ends


@dataclass(frozen=True)
class Stage:
    """One command of a pipeline; `keep_stderr` returns its whole stderr in the result."""

    name: str
    argv: list[str]
    keep_stderr: bool = False
    cwd: str | None = None

    def display(self) -> str:
        """The command as a shell line (argv never holds secrets in lastline)."""
        return shlex.join(self.argv)


@dataclass
class StageResult:
    """How one stage ended."""

    name: str
    returncode: int
    stderr_tail: str
    stderr: str | None = None

    @property
    def sigpipe(self) -> bool:
        """True if the stage died only because a downstream stage stopped reading."""
        return self.returncode in (-signal.SIGPIPE, 128 + signal.SIGPIPE)


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
    """Where server-side commands run. Subclasses: LocalHost here; an SSH host in a later issue."""

    name = "local"

    def popen(self, stage: Stage, stdin, stdout, stderr) -> subprocess.Popen:
        """Start one stage of a pipeline."""
        raise NotImplementedError

    def run(self, argv: list[str], *, timeout: float | None = None, check: bool = True) -> subprocess.CompletedProcess:
        """Run one command to completion, output captured; raise with its stderr tail on failure."""
        raise NotImplementedError

    def shell(self, command: str, *, timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run a shell command line (a connection's service_start/service_stop)."""
        return self.run(["bash", "-c", command], timeout=timeout)


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

    def run(self, argv: list[str], *, timeout: float | None = None, check: bool = True) -> subprocess.CompletedProcess:
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except FileNotFoundError as exc:
            raise PipelineError(f"command {argv[0]!r} not found; run `make setup` or install it.") from exc
        except subprocess.TimeoutExpired as exc:
            raise PipelineError(f"`{shlex.join(argv)}` did not finish within {timeout} s.") from exc
        if check and proc.returncode != 0:
            tail = "\n".join(proc.stderr.decode("utf-8", "replace").strip().splitlines()[-15:])
            raise PipelineError(f"`{shlex.join(argv)}` exited with status {proc.returncode}:\n{tail}")
        return proc


LOCAL = LocalHost()


class SshHost(LocalHost):
    """Run commands on another host through the OpenSSH client: each stage is a local `ssh` process whose
    stdin/stdout are the remote command's, so streams go through the SSH channel itself (no buffering,
    no command timeout). Host keys are checked against a known_hosts file; the private key is a 0600
    file; neither secret reaches a command line (only their paths do)."""

    def __init__(self, name: str, host: str, port: int, user: str, key_file: str, known_hosts: str,
                 compress: bool = False) -> None:
        self.name, self.host, self.port, self.user = name, host, port, user
        self.key_file, self.known_hosts, self.compress = key_file, known_hosts, compress

    def ssh_argv(self, remote: str) -> list[str]:
        """The local `ssh` command that runs the shell command line `remote` on the host."""
        return [
            "ssh", "-F", "none", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", f"Compression={'yes' if self.compress else 'no'}", "-o", "ServerAliveInterval=15",
            "-o", "ServerAliveCountMax=4", "-i", self.key_file, "-p", str(self.port), "-l", self.user,
            self.host, "--", remote,
        ]

    def _remote(self, argv: list[str], cwd: str | None = None) -> list[str]:
        command = shlex.join(argv)
        return self.ssh_argv(f"cd {shlex.quote(cwd)} && {command}" if cwd else command)

    def popen(self, stage: Stage, stdin, stdout, stderr) -> subprocess.Popen:
        remote = Stage(stage.name, self._remote(stage.argv, stage.cwd), keep_stderr=stage.keep_stderr)
        return super().popen(remote, stdin, stdout, stderr)

    def run(self, argv: list[str], *, timeout: float | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return super().run(self._remote(argv), timeout=timeout, check=check)

    def shell(self, command: str, *, timeout: float | None = None) -> subprocess.CompletedProcess:
        return LocalHost.run(self, self.ssh_argv(command), timeout=timeout)


def host_for(ssh_conn_id: str | None) -> Host:
    """The Host a server's commands run on: here, or over SSH for connections with ssh_conn_id."""
    if not ssh_conn_id:
        return LOCAL
    from lastline.ssh import ssh_host

    return ssh_host(ssh_conn_id)


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

    Raises PipelineError naming the stage that failed first (stages killed by SIGPIPE only because a
    later stage stopped are not blamed), with its exit status and the tail of its stderr. Errors
    raised by `source` or `sink` (a read or a write that failed) stop every stage and rise as they are.
    `progress_every=None`: no progress lines (for the many small pipelines of a logical dump);
    `hash_source=False`: count the source's bytes but skip its sha256 (sha256_in is then None).
    """
    if not stages:
        raise LastlineError("empty pipeline")
    start = time.monotonic()
    procs: list[subprocess.Popen] = []
    errfiles: list[str] = []
    feed_error: list[BaseException] = []
    in_hash, out_hash = (hashlib.sha256() if hash_source else None), hashlib.sha256()
    counters = {"in": 0, "out": 0}
    progress = Progress(label, expected_bytes, progress_every or float("inf"))
    try:
        prev_stdout = subprocess.PIPE if source is not None else subprocess.DEVNULL
        for i, stage in enumerate(stages):
            fd, errpath = tempfile.mkstemp(prefix=f"lastline-{stage.name}-", suffix=".err")
            errfiles.append(errpath)
            last = i == len(stages) - 1
            stdout = subprocess.PIPE if (not last or sink is not None) else subprocess.DEVNULL
            with os.fdopen(fd, "wb") as errfh:
                proc = host.popen(stage, stdin=prev_stdout, stdout=stdout, stderr=errfh)
            if procs and procs[-1].stdout:
                procs[-1].stdout.close()  # the child holds it now; we must not, or SIGPIPE never comes
            procs.append(proc)
            prev_stdout = proc.stdout

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
        if feed_error:
            _kill(procs)
            raise feed_error[0]
        results = []
        for stage, errpath, code in zip(stages, errfiles, codes):
            text, tail = _tail(errpath)
            results.append(StageResult(stage.name, code, tail, text if stage.keep_stderr else None))
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
        _kill(procs)
        for path in errfiles:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


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


def run_logged(argv: list[str], label: str, *, every: float = 0.0) -> str:
    """Run a long command, logging its output lines live (at most one per `every` s); return the output."""
    start = time.monotonic()
    lines: list[str] = []
    last = 0.0
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise PipelineError(f"{label}: command {argv[0]!r} not found; run `make setup`.") from exc
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
        raise PipelineError(f"{label}: `{shlex.join(argv)}` exited with status {code}; output ends with:\n{tail}")
    return "\n".join(lines)
