"""The dump worker: one snapshot connection in its own process, escaping rows into chunk files in C.

`lastline-tsvdump` (native/tsvdump.c, built by `make setup`) connects to the source with a 0600 option
file, opens its transaction when the coordinator says so, and streams each chunk query's rows, escaped
in one linear pass, into a pipe whose write end the coordinator hands over (SCM_RIGHTS) for each part.
The coordinator (Python) moves compressed bytes to storage where a pipe carries them (S3, SSH, pigz); each worker has
its own core and no interpreter lock. Into a local folder, with the worker compressing (zstd) or nothing to compress, the worker writes
each part's file itself through a descriptor it is handed (DirectPart): no pipe, no thread, no copy per part (at
10,000 tables a thread per part cost a quarter of the dump). See the C file for the message protocol.
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lastline.core import impact, stopping
from lastline.core.compression import codec
from lastline.core.errors import ConfigError, PipelineError, ServerError, StorageError
from lastline.core.option_files import option_file
from lastline.core.pipeline import widen_pipe
from lastline.core.servers import Server
from lastline.storage import Storage, Writer

BINARY = "lastline-tsvdump"
# compressions the worker does itself (libzstd level 1 with a content checksum, as `zstd -1` writes):
# the raw lines then never cross a pipe (`make bench-logical ARGS=--design` times both ways)
IN_WORKER = {"zstd"}
SOURCE = Path(__file__).resolve().parents[1] / "native" / "tsvdump.c"
READ_BLOCK = 1 << 20


def binary() -> str:
    """Path of the built worker: $LASTLINE_TSVDUMP, the venv's bin, or PATH."""
    for candidate in (os.environ.get("LASTLINE_TSVDUMP"), str(Path(sys.prefix) / "bin" / BINARY), shutil.which(BINARY)):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ConfigError(
        f"{BINARY} is not built: run `make setup` (it compiles {SOURCE.name} with gcc and libmariadb-dev), or set "
        "LASTLINE_TSVDUMP to its path."
    )


class WorkerError(Exception):
    """An error the worker reported from the server: (code, message) like a MySQLdb error's args."""


class WorkerWarning(WorkerError):
    """The server warned on a dump query (a value may have been cut or replaced): (0, the warnings)."""


@dataclass
class PartResult:
    """One part file written: rows, uncompressed bytes, the sum of the rows' hashes, what the file holds."""

    key: str
    rows: int
    raw_bytes: int
    checksum: int
    bytes: int
    sha256: str


@dataclass
class DumpResult:
    """A whole chunk query: its rows, the sum of their hashes, and its part files."""

    rows: int
    checksum: int
    parts: list[PartResult]


class PartWriter:
    """A pipe whose read end is compressed (or not) into `key` of storage; committed only by commit().

    The write end goes to the worker; the file is written through `<key>.partial` by the storage
    writer, and discarded by abort() (a part is never taken for complete unless the worker said so)."""

    def __init__(self, storage: Storage, key: str, compression: str, priority: str = "normal") -> None:
        self.storage, self.key = storage, key
        self.read_fd, self.write_fd = os.pipe()
        widen_pipe(self.write_fd)
        c = codec(compression)
        self.proc: subprocess.Popen | None = None
        source = self.read_fd
        if c.tool is not None and compression not in IN_WORKER:
            self.proc = subprocess.Popen(
                impact.prefix(priority) + c.compress_argv(1, fast=True), stdin=self.read_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
            os.close(self.read_fd)
            self.read_fd = -1
            assert self.proc.stdout is not None
            source = self.proc.stdout.fileno()
            widen_pipe(source)
        self.source = source
        self.decided = threading.Event()
        self.commit_ok = False
        self.bytes = 0
        self.sha256 = ""
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._drain, name=f"part-{key}", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        digest, n = hashlib.sha256(), 0
        try:
            with self.storage.writer(self.key, durable=False) as writer:  # made durable at once before the manifest
                while data := os.read(self.source, READ_BLOCK):
                    digest.update(data)
                    writer.write(data)
                    n += len(data)
                self.decided.wait()
                if not self.commit_ok:
                    raise PipelineError("part aborted")  # the writer discards what it wrote
                self.bytes, self.sha256 = n, digest.hexdigest()
        except BaseException as exc:  # noqa: BLE001 - reported by commit()
            self.error = exc

    def handed_over(self) -> None:
        """The worker has its own copy of the write end: close ours, so its close is the end of file."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def complete(self) -> None:
        """Wait for the end of file and check the compressor (the file stays uncommitted)."""
        self.handed_over()
        code = self.proc.wait() if self.proc else 0
        if code != 0 and self.proc is not None:
            tail = self.proc.stderr.read().decode(errors="replace").strip()[-500:] if self.proc.stderr else ""
            program = str(list(self.proc.args)[0]) if isinstance(self.proc.args, list | tuple) else str(self.proc.args)
            self.abort()
            raise PipelineError(f"compressing {self.key} failed ({program} exit {code}: {tail})")

    def commit(self) -> tuple[int, str]:
        """Commit the file (after complete()); returns (bytes, sha256)."""
        self.commit_ok = True
        self.decided.set()
        self.thread.join()
        self._close()
        if self.error is not None:
            raise self.error
        return self.bytes, self.sha256

    def abort(self) -> None:
        """Stop the compressor and discard the file."""
        self.handed_over()
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
        self.commit_ok = False
        self.decided.set()
        self.thread.join(timeout=60)
        if self.proc:
            self.proc.wait()
        self._close()

    def _close(self) -> None:
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1
        if self.proc:
            for f in (self.proc.stdout, self.proc.stderr):
                if f:
                    f.close()


class DirectPart:
    """A part the worker writes straight into its file under the destination (`<key>.partial`, made as the storage's
    writer makes it): the worker counts and hashes what it writes; commit() checks the file's size against that count
    and renames it. Same interface as PartWriter."""

    def __init__(self, key: str, writer: Writer, fd: int) -> None:
        self.key, self.writer, self.write_fd = key, writer, fd
        self.bytes, self.sha256 = -1, ""

    def handed_over(self) -> None:
        """Nothing: the worker writes through its own copy of the descriptor and closes it at the part's end; ours
        stays open for the commit."""

    def reported(self, fields: list[str]) -> None:
        """What the worker says it wrote into the file: the end of its PART answer (bytes, sha256)."""
        if len(fields) != 2 or not fields[0].isdigit() or not re.fullmatch(r"[0-9a-f]{64}", fields[1]):
            raise PipelineError(f"part {self.key}: the dump worker did not say what it wrote into the file ({fields!r}): an "
                                f"older {BINARY}? Run `make setup` (or rebuild the image) so that it is built from {SOURCE.name}.")
        self.bytes, self.sha256 = int(fields[0]), fields[1]

    def complete(self) -> None:
        """Nothing to wait for: the worker closed the file before it answered PART."""

    def write_failed(self, code: int, text: str) -> StorageError:
        """The error for the worker's failed write into the file (its WFAIL answer)."""
        hint = "the destination is full: free space or choose another destination" if code == errno.ENOSPC else "check the destination"
        return StorageError(f"cannot write {getattr(self.writer, 'tmp', self.key)}: {text} ({hint}).")

    def commit(self) -> tuple[int, str]:
        """Check the file holds what the worker wrote, then make it visible; returns (bytes, sha256)."""
        size = os.fstat(self.write_fd).st_size
        if size != self.bytes:
            self.abort()
            raise StorageError(f"part {self.key}: the file holds {size} bytes, the dump worker wrote {self.bytes}; "
                               "the backup is incomplete (no manifest is written) and the task retries.")
        self.writer.commit()
        return self.bytes, self.sha256

    def abort(self) -> None:
        """Discard the file (the worker, stopped or done, no longer writes to it)."""
        self.writer.abort()


Part = PartWriter | DirectPart


def open_part(storage: Storage, key: str, compression: str, priority: str = "normal") -> Part:
    """Where a part's bytes go: its own file, written by the worker, where the destination is a local folder and the
    worker writes the file's bytes as they are (it compresses with zstd, or there is nothing to compress); otherwise a
    PartWriter (a pipe drained into the storage's writer by a thread, through a compressor process if one is used).
    Parts are made durable all at once before the manifest (the storage's sync())."""
    if storage.local_files and (compression in IN_WORKER or codec(compression).tool is None):
        writer = storage.writer(key, durable=False)
        fd = writer.fileno()
        if fd is not None:
            return DirectPart(key, writer, fd)
        writer.abort()
    return PartWriter(storage, key, compression, priority)


class DumpWorker:
    """One `lastline-tsvdump` process with its own connection to `server` (see the module doc)."""

    def __init__(self, server: Server, name: str = "dump", priority: str = "normal", read_bytes_per_s: int = 0) -> None:
        """`priority`: core.impact's (the process's nice and ionice); `read_bytes_per_s`: this connection's read cap."""
        self.server, self.name = server, name
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        with option_file(server) as opt:
            try:
                self.proc = subprocess.Popen(
                    [*impact.prefix(priority), binary(), opt, str(theirs.fileno())], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, pass_fds=(theirs.fileno(),),
                )
            finally:
                theirs.close()
            first = self._recv()
        if not first.startswith("READY"):
            self.close()
            raise server.connect_error(*_error(first), via=f" from {BINARY}")
        _, conn_id, self.version = first.split(" ", 2)
        self.connection_id = int(conn_id)
        self._stop = [
            stopping.add(f"{name}: killed its process", stopping.kill_process(self.proc)),
            stopping.add(f"{name}: KILL QUERY {conn_id} on {server.describe()}", stopping.kill_query(server, self.connection_id)),
        ]
        if read_bytes_per_s:
            try:
                self.pace(read_bytes_per_s)
            except WorkerError:
                self.close()
                raise

    def pace(self, read_bytes_per_s: int) -> None:
        """Cap the rows this connection fetches at `read_bytes_per_s` (0: no cap) from its next dump on."""
        self.sock.send(f"R{int(read_bytes_per_s)}".encode())
        answer = self._recv()
        if answer != "OK":
            raise WorkerError(*_error(answer))

    def _recv(self) -> str:
        try:
            data = self.sock.recv(1 << 16)
        except OSError as exc:
            data = b""
            reason = str(exc)
        else:
            reason = "it exited"
        if not data:
            code = self.proc.poll() if hasattr(self, "proc") else None
            err = self.proc.stderr.read().decode(errors="replace")[-500:] if code is not None and self.proc.stderr else ""
            raise ServerError(f"the dump worker {self.name} stopped ({reason}, exit {code}) {err}".strip())
        return data.decode("utf-8", errors="replace")

    def execute(self, sql: str) -> None:
        """Run one statement on the worker's connection."""
        self.sock.send(b"E" + sql.encode())
        answer = self._recv()
        if answer != "OK":
            raise WorkerError(*_error(answer))

    def dump(self, sql: str, part_rows: int, new_part: Callable[[int], tuple[str, Part]], compression: str = "none") -> DumpResult:
        """Stream `sql` (its last column the row hash) into parts of at most `part_rows` rows;
        `new_part(index)` gives each part's storage key and writer (made for the same `compression`).
        Raises WorkerError on a server error and on any warning (nothing of the query is then taken as
        complete)."""
        mode = b"z" if compression in IN_WORKER else b"n"
        self.sock.send(b"D" + f"{part_rows:020d}".encode() + mode + sql.encode())
        parts: list[PartResult] = []
        current: tuple[str, Part] | None = None
        # the last finished part stays uncommitted until the query ends without an error or a warning
        # (the server reports warnings only then); earlier parts of a long query are committed as they end
        pending: tuple[str, Part, int, int, int] | None = None

        def commit_pending() -> None:
            nonlocal pending
            if pending is not None:
                key, writer, rows, raw, checksum = pending
                try:
                    nbytes, sha = writer.commit()
                except BaseException:
                    writer.abort()  # whatever failed: nothing of it stays (abort twice is harmless)
                    raise
                finally:
                    pending = None
                parts.append(PartResult(key, rows, raw, checksum, nbytes, sha))

        try:
            while True:
                answer = self._recv()
                verb, _, rest = answer.partition(" ")
                if verb == "NEED":
                    current = new_part(len(parts) + (pending is not None))
                    socket.send_fds(self.sock, [b"F" if isinstance(current[1], DirectPart) else b"O"], [current[1].write_fd])
                    current[1].handed_over()
                elif verb == "PART":
                    rows_, raw_, checksum_, *file = rest.split()
                    rows, raw, checksum = int(rows_), int(raw_), int(checksum_)
                    key, writer = current  # type: ignore[misc]
                    if isinstance(writer, DirectPart):
                        writer.reported(file)
                    writer.complete()
                    commit_pending()  # the part before: if it fails, `current` (this one) is still aborted
                    pending, current = (key, writer, rows, raw, checksum), None
                elif verb == "DONE":
                    rows, checksum = (int(x) for x in rest.split())
                    commit_pending()
                    return DumpResult(rows, checksum, parts)
                elif verb == "WFAIL" and current is not None and isinstance(current[1], DirectPart):
                    code, _, text = rest.partition(" ")
                    raise current[1].write_failed(int(code) if code.isdigit() else 0, text)
                elif verb == "WARN":
                    count, _, text = rest.partition(" ")
                    raise WorkerWarning(0, f"{count} warning(s): {text}")
                else:
                    raise WorkerError(*_error(answer))
        except BaseException:
            for item in (current, pending):
                if item is not None:
                    item[1].abort()
            raise

    def close(self) -> None:
        """End the worker: closing the socket ends its loop; a stuck one is killed."""
        for token in getattr(self, "_stop", []):
            stopping.remove(token)
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()

    def give_way(self) -> None:
        """Stop the dump in progress at its next row (SIGUSR1): it answers ERR 1317 and the worker stays usable."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGUSR1)

    def kill(self) -> None:
        """Stop the worker at once (its connection closes; the server ends its query). Safe from any
        thread: the thread driving the worker then gets a clear error from its next read."""
        if self.proc.poll() is None:
            self.proc.kill()


def _error(answer: str) -> tuple[int, str]:
    """(code, message) of an `ERR <code> <message>` answer."""
    _, _, rest = answer.partition(" ")
    code, _, msg = rest.partition(" ")
    return (int(code) if code.isdigit() else 0), msg or answer
