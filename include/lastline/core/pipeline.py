"""Run commands and OS pipelines: every stage's exit status, byte counts, sha256, progress, stderr tails.

(Over 300 lines on purpose: run_pipeline is one algorithm, start, feed, drain, reap and blame, whose
failure paths must be read together; the hosts and progress lines it uses live in hosts.py and progress.py.)

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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from lastline.core import stopping
from lastline.core.child_env import child_env
from lastline.core.errors import LastlineError, PipelineError
from lastline.core.hosts import LOCAL, Host, Stage, split_group_stderr
from lastline.core.progress import Progress

log = logging.getLogger(__name__)

CHUNK = 1 << 20  # 1 MiB reads at the pipeline's ends
F_SETPIPE_SZ = 1031  # fcntl: a pipe's buffer size (Linux)
PIPE_BYTES = 1 << 20  # 1 MiB pipes between stages (64 KiB by default): fewer switches, a few % faster streams


def widen_pipe(fd: int) -> None:
    """Give a pipe PIPE_BYTES of buffer where the system allows it (else keep the default)."""
    try:
        fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass


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


def _tail(path: str, lines: int = 15) -> tuple[str, str]:
    """The whole text of a stderr file and its last `lines` lines."""
    with open(path, "rb") as fh:
        text = fh.read().decode("utf-8", "replace")
    return text, "\n".join(text.strip().splitlines()[-lines:])


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
    hash_sink: bool = True,
) -> PipelineResult:
    """Run `stages` as one OS pipeline; feed `source` into the first, drain the last into `sink`.

    Each stage runs on `stage.host`, else on `host`. Raises PipelineError naming the stage that failed
    first (stages killed by SIGPIPE only because a later stage stopped are not blamed; a cut SSH link is
    named as such), with its exit status and the tail of its stderr. Errors raised by `source` or `sink`
    (a read or a write that failed) stop every stage and rise as they are.
    `progress_every=None`: no progress lines (for the many small pipelines of a logical dump);
    `hash_source=False`, `hash_sink=False`: count the source's (the sink's) bytes but skip their sha256 (sha256_in,
    sha256_out is then None): for a caller that hashes other bytes (a sealed stream's, as stored).
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
    in_hash, out_hash = (hashlib.sha256() if hash_source else None), (hashlib.sha256() if hash_sink else None)
    counters = {"in": 0, "out": 0}
    progress = Progress(label, expected_bytes, progress_every or float("inf"))
    watch_stop = threading.Event()
    try:
        _start(groups, procs, stop_tokens, errfiles, label, piped_in=source is not None, piped_out=sink is not None)
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
                _drain(procs[-1], sink, out_hash, counters, progress if source is None else None)
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
        _blame(results, label)
        if progress_every:
            log.info("%s", progress.line())
        return PipelineResult(
            stages=results,
            seconds=time.monotonic() - start,
            bytes_in=counters["in"],
            sha256_in=in_hash.hexdigest() if source is not None and in_hash is not None else None,
            bytes_out=counters["out"],
            sha256_out=out_hash.hexdigest() if sink is not None and out_hash is not None else None,
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


def _start(groups: list[tuple[Host, list[Stage]]], procs: list[subprocess.Popen], stop_tokens: list[int],
           errfiles: list[str], label: str, *, piped_in: bool, piped_out: bool) -> None:
    """Start each group of stages on its host, each reading the one before, appending as it goes (so the caller's
    cleanup sees what started when one fails to): the processes, their stop tokens, their stderr files."""
    prev_stdout: Any = subprocess.PIPE if piped_in else subprocess.DEVNULL
    for i, (where, group) in enumerate(groups):
        fd, errpath = tempfile.mkstemp(prefix=f"lastline-{group[0].name}-", suffix=".err")
        errfiles.append(errpath)
        last = i == len(groups) - 1
        stdout = subprocess.PIPE if (not last or piped_out) else subprocess.DEVNULL
        with os.fdopen(fd, "wb") as errfh:
            proc = where.start(group, stdin=prev_stdout, stdout=stdout, stderr=errfh)
        if procs and procs[-1].stdout:
            procs[-1].stdout.close()  # the child holds it now; we must not, or SIGPIPE never comes
        if proc.stdout is not None:
            widen_pipe(proc.stdout.fileno())
        procs.append(proc)
        stop_tokens.append(stopping.add(f"{label}: killed {group[0].name}", stopping.kill_process(proc)))
        prev_stdout = proc.stdout


def _drain(last: subprocess.Popen, sink: Callable[[bytes], None], out_hash: Any, counters: dict[str, int],
           progress: Progress | None) -> None:
    """The last stage's output into `sink`, hashed and counted (and into `progress` when no source counts)."""
    out = last.stdout
    assert out is not None  # a PIPE: sink is set
    # what one read returns (a buffered pipe's read1): read() gathers CHUNK in copies, 2x the system CPU
    read = getattr(out, "read1", out.read)
    while True:
        chunk = read(CHUNK)
        if not chunk:
            break
        if out_hash is not None:
            out_hash.update(chunk)
        counters["out"] += len(chunk)
        if progress is not None:
            progress.add(len(chunk))
        sink(chunk)


def _blame(results: list[StageResult], label: str) -> None:
    """A PipelineError naming the first stage that failed of itself (not one a later stage's exit SIGPIPEd)."""
    failed = [r for r in results if r.returncode != 0]
    if failed:
        blamed = next((r for r in failed if not r.sigpipe), failed[0])
        others = ", ".join(f"{r.name}={r.returncode}" for r in results)
        raise PipelineError(
            f"{label}: stage {blamed.name!r} failed with exit status {blamed.returncode} "
            f"(all stages: {others}). Its stderr ends with:\n{blamed.stderr_tail or '(empty)'}"
        )


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
    assert stdin is not None  # a PIPE: source is set
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


def filtered(argv: list[str], source: Iterable[bytes], name: str) -> Iterator[bytes]:
    """The output of one local command fed `source` on a thread, as a generator (a pipeline pulled from its
    end: memory stays bounded by the pipes). Errors of `source` rise as they are; a non-zero exit is a
    PipelineError with the command's stderr tail."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    errors: list[BaseException] = []
    feeder = threading.Thread(target=_feed, args=(source, proc, None, {"in": 0}, errors, Progress(name, every=float("inf")), False),
                              name=f"{name}-feed", daemon=True)
    feeder.start()
    try:
        assert proc.stdout is not None and proc.stderr is not None
        while data := proc.stdout.read(CHUNK):
            yield data
        code = proc.wait()
        feeder.join()
        if errors:
            raise errors[0]
        if code != 0:
            tail = proc.stderr.read().decode(errors="replace").strip()[-500:]
            raise PipelineError(f"{name}: `{shlex.join(argv)}` exited with status {code}: {tail}")
    finally:
        _kill([proc])
        feeder.join(timeout=10)


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
