"""The dump worker: one snapshot connection in its own process, escaping rows into chunk files in C.

`lastline-tsvdump` (native/tsvdump.c, built by `make setup`) connects to the source with a 0600 option
file, opens its transaction when the coordinator says so, and streams each chunk query's rows, escaped
in one linear pass, into a descriptor the coordinator hands over (SCM_RIGHTS) for each part: the part's own file
in a local folder, else a pipe to the storage's writer (logical.backup.parts); an encrypted backup's part is sealed by
the worker, handed the part's AEAD key and header with the descriptor. Each worker has its own core and no
interpreter lock. See the C file for the message protocol.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lastline.core import impact, stopping
from lastline.core.child_env import child_env
from lastline.core.errors import ConfigError, PipelineError, ServerError
from lastline.core.option_files import option_file
from lastline.core.servers import Server
from lastline.logical.backup.parts import BUILT_FROM, IN_WORKER, DirectPart, Part

BINARY = "lastline-tsvdump"
SOURCE = Path(__file__).resolve().parents[1] / "native" / "tsvdump.c"
NO_OUTPUT = "ERR 0 expected an output for the next part"  # a worker's answer to a NEED's answer it does not know


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
                    stderr=subprocess.PIPE, pass_fds=(theirs.fileno(),), env=child_env(),
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
        sealed = False  # the current part is sealed by the worker

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
                    handover = current[1].handover()
                    sealed = handover.startswith(b"S")
                    socket.send_fds(self.sock, [handover], [current[1].write_fd])
                    del handover  # a sealed part's key: not left for a traceback's locals
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
                elif answer == NO_OUTPUT and sealed:
                    raise PipelineError(f"the dump worker does not seal parts (it refused the part's key): an older "
                                        f"{BUILT_FROM}? Run `make setup` (or rebuild the image) to build it again.")
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
