"""lastline's `LOAD DATA LOCAL INFILE` handler on a loader's MySQLdb connection (native/infile.c).

Mandatory: every LOAD DATA LOCAL of the loader goes through it, whatever the backup's compression. Before each
statement the loader offers the one file it may open, its codec and the most bytes it may give (the chunk's
raw size in the manifest); a server asking for any other file gets an error, and a chunk that decompresses to
more fails its statement. libmariadb's own handler would send any file the server names, so without the built
library (`make setup`, or LASTLINE_INFILE_LIB naming it) the loader refuses to start.

A chunk's *compressed* bytes go into the FIFO and the handler decompresses them inside the client library
(zstd with libzstd, pigz's gzip with zlib, none copied), straight into what it sends: no decompressor process,
and the raw bytes never cross a pipe that the server-paced client drains 4 KiB at a time (measured in
bench/restore_cpu_bench.py). LASTLINE_INFILE_LIB=off keeps the library (found in the venv) but has a zstd or
pigz process decompress into the FIFO, which the handler then reads as codec none: the benchmarks compare
the two.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from lastline.core.errors import ConfigError, IntegrityError

log = logging.getLogger(__name__)

LIBRARY = "liblastline-infile.so"
SOURCE = Path(__file__).resolve().parents[1] / "native" / "infile.c"
# the manifest's compression -> the handler's codec (native/infile.c: CODEC_NONE, CODEC_ZSTD, CODEC_GZIP)
CODECS = {"none": 0, "zstd": 1, "zstd-fast": 1, "pigz": 2, "pigz-fast": 2}
ERROR_PREFIX = "lastline-infile: "
PATH_LEN = 4096  # native/infile.c's PATH_LEN


def in_client() -> bool:
    """Whether chunks are decompressed inside the client library (False: LASTLINE_INFILE_LIB=off, a
    decompressor process feeds the FIFO and the handler reads it as codec none)."""
    return os.environ.get("LASTLINE_INFILE_LIB") != "off"


def library_path() -> str | None:
    """The built handler: $LASTLINE_INFILE_LIB if it names a file, else the venv's lib folder; None if absent."""
    named = os.environ.get("LASTLINE_INFILE_LIB")
    if named and named != "off":
        return named if os.path.exists(named) else None
    default = Path(sys.prefix) / "lib" / LIBRARY
    return str(default) if default.exists() else None


def codec_of(compression: str) -> int:
    """The handler's codec for a backup's compression (ConfigError for one it cannot read)."""
    try:
        return CODECS[compression]
    except KeyError:
        raise ConfigError(f"compression {compression!r}: lastline's LOAD DATA handler reads {', '.join(CODECS)} only.") from None


class _Slot(ctypes.Structure):
    """native/infile.c's infile_slot (its size is checked against the library's)."""

    _fields_ = [("expected", ctypes.c_char * PATH_LEN), ("codec", ctypes.c_int), ("max_bytes", ctypes.c_ulonglong),
                ("fd", ctypes.c_int), ("check", ctypes.c_int), ("sha256", ctypes.c_ubyte * 32), ("verified", ctypes.c_int),
                ("verdict", ctypes.c_char * 512)]


@functools.cache
def _library() -> Any:
    path = library_path()
    if path is None:
        named = os.environ.get("LASTLINE_INFILE_LIB")
        where = (f"LASTLINE_INFILE_LIB={named} does not exist" if named and named != "off"
                 else f"{Path(sys.prefix) / 'lib' / LIBRARY} does not exist")
        raise ConfigError(
            f"lastline's LOAD DATA LOCAL handler is not built ({where}): run `make setup` (it builds {SOURCE.name}), or "
            "set LASTLINE_INFILE_LIB to the built library. The loader never uses the client library's own handler, "
            "which would send the server any file it asks for; nothing was loaded."
        )
    lib = ctypes.CDLL(path)
    lib.lastline_infile_install.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.lastline_infile_install.restype = None
    lib.lastline_infile_path_len.argtypes = []
    lib.lastline_infile_path_len.restype = ctypes.c_size_t
    try:
        lib.lastline_infile_slot_size.restype = ctypes.c_size_t
        lib.lastline_infile_measure.restype = ctypes.c_longlong
    except AttributeError as exc:  # a library built from an older infile.c
        raise ConfigError(f"{path} is out of date (built from an older {SOURCE.name}): run `make setup` again.") from exc
    lib.lastline_infile_measure.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_char_p, ctypes.c_size_t]
    if lib.lastline_infile_slot_size() != ctypes.sizeof(_Slot) or lib.lastline_infile_path_len() != PATH_LEN:
        raise ConfigError(f"{path} does not match {SOURCE.name} (its slot differs): run `make setup` again.")
    api = ctypes.pythonapi  # to read the MYSQL* out of mysqlclient's capsule
    api.PyCapsule_GetName.restype, api.PyCapsule_GetName.argtypes = ctypes.c_char_p, [ctypes.py_object]
    api.PyCapsule_GetPointer.restype, api.PyCapsule_GetPointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return lib


def _native_pointer(conn: Any) -> int:
    """The MYSQL* behind a MySQLdb connection (mysqlclient hands it out as a capsule; see _library)."""
    capsule = conn._get_native_connection()
    return int(ctypes.pythonapi.PyCapsule_GetPointer(capsule, ctypes.pythonapi.PyCapsule_GetName(capsule)))


class Handler:
    """The handler installed on one connection; `offer` names the one file its next statement may send."""

    def __init__(self, lib: Any, conn: Any) -> None:
        self.conn = conn  # the slot must live as long as the connection that points at it
        self.slot = _Slot()
        self.slot.fd = -1
        self.offers = 0
        lib.lastline_infile_install(_native_pointer(conn), ctypes.byref(self.slot))

    def offer(self, path: str, compression: str, max_bytes: int) -> None:
        """Let the next LOAD DATA LOCAL open `path` (once), read it as `compression` (a manifest's name:
        zstd, pigz, none...) and give at most `max_bytes` bytes (more fails the statement)."""
        raw = os.fsencode(path)
        if len(raw) >= PATH_LEN or b"\0" in raw:
            raise ValueError(f"path unfit for the LOAD DATA handler: {path!r}")
        self.slot.codec = codec_of(compression)
        self.slot.max_bytes = max(0, int(max_bytes))
        self.slot.fd, self.slot.check, self.slot.verified, self.slot.verdict = -1, 0, 0, b""
        self.slot.expected = raw

    def offer_fd(self, fd: int, compression: str, max_bytes: int, sha256: str) -> str:
        """Let the next LOAD DATA LOCAL read the regular file open on `fd` (once; the handler reads a duplicate),
        as `compression`, giving at most `max_bytes` bytes and failing the statement at the file's end unless its
        bytes hash to `sha256`; returns the name the statement must give (a token: no path is opened). Withdraw
        the offer once the statement ran (the descriptor's number may serve another file later)."""
        if not re.fullmatch(r"[0-9a-f]{64}", sha256) or not isinstance(fd, int) or fd < 0:
            raise IntegrityError(f"cannot offer descriptor {fd!r} with sha256 {sha256!r} to the LOAD DATA handler: the "
                                 "manifest's sha256 must be 64 lowercase hex digits; nothing was loaded.")
        self.offers += 1
        token = f"lastline-chunk-{self.offers}"
        self.slot.codec = codec_of(compression)
        self.slot.max_bytes = max(0, int(max_bytes))
        self.slot.sha256 = (ctypes.c_ubyte * 32)(*bytes.fromhex(sha256))
        self.slot.check, self.slot.fd, self.slot.verified, self.slot.verdict = 1, fd, 0, b""
        self.slot.expected = token.encode()
        return token

    @property
    def verified(self) -> bool:
        """Whether the last statement's file hashed to the sha256 offered with it (read to its end)."""
        return bool(self.slot.verified)

    def refusal(self, exc: BaseException, where: str) -> IntegrityError | None:
        """refusal() of a failed statement, or else the handler's own verdict on it (a server error that followed
        the handler's refusal replaces its message in the client library, not the fact that the file was refused)."""
        return refusal(exc, where) or _refused(self.slot.verdict.decode(errors="replace"), where)

    def withdraw(self) -> None:
        """Whatever the last offer left unused goes: no later statement can be given it."""
        self.slot.expected = b""
        self.slot.fd, self.slot.check, self.slot.verified, self.slot.verdict = -1, 0, 0, b""


def install(conn: Any) -> Handler:
    """Install lastline's handler on `conn` (ConfigError if the library is not built: see _library)."""
    return Handler(_library(), conn)


def refusal(exc: BaseException, where: str) -> IntegrityError | None:
    """The handler's own error in a failed statement (what it found in the chunk `where` names), as an
    IntegrityError; None for any other error."""
    return _refused(str(exc.args[1]) if len(getattr(exc, "args", ())) > 1 else str(exc), where)


def _refused(message: str, where: str) -> IntegrityError | None:
    """The IntegrityError for a message holding the handler's refusal; None for any other message."""
    if ERROR_PREFIX not in message:
        return None
    return IntegrityError(f"chunk {where} {message.split(ERROR_PREFIX, 1)[1]}; nothing of it was loaded.")


def measure(path: str, compression: str, max_bytes: int, where: str) -> int:
    """Decompress the file at `path` to nowhere with the handler's own reader: its raw size, or IntegrityError
    naming `where` if it cannot be decompressed or gives more than `max_bytes`."""
    msg = ctypes.create_string_buffer(512)
    size = _library().lastline_infile_measure(os.fsencode(path), codec_of(compression), max(0, int(max_bytes)), msg, len(msg))
    if size < 0:
        detail = msg.value.decode(errors="replace").removeprefix(ERROR_PREFIX)
        raise IntegrityError(f"chunk {where} {detail}; nothing of it was loaded. Restore another backup.")
    return int(size)


def measure_fd(fd: int, compression: str, max_bytes: int, where: str) -> int:
    """measure() of the file open on `fd` (an anonymous file has no path, and the reader opens no link such as
    /proc/self/fd/N): fed to the reader through a FIFO by a thread that reads the descriptor at offsets of its own,
    leaving the descriptor's offset as it was."""
    def write(out: BinaryIO) -> None:
        offset = 0
        while data := os.pread(fd, 1 << 20, offset):
            out.write(data)
            offset += len(data)

    with fed_fifo(write, "measure-chunk") as (fifo, errors):
        size = measure(fifo, compression, max_bytes, where)
    if errors:  # the reader saw the end of what the writer gave, not of the file
        raise errors[0]
    return size


def require() -> None:
    """ConfigError unless the handler is built (see _library): before a loader connects."""
    _library()


RELEASE_SECONDS = 30  # how long a failed statement waits for its FIFO's writer to let go


def unblock(fifo: str) -> None:
    """Open and close the FIFO's read end so a writer blocked in open() or write() gives up."""
    try:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    except OSError:
        pass


@contextlib.contextmanager
def fed_fifo(write: Callable[[BinaryIO], None], label: str) -> Iterator[tuple[str, list[BaseException]]]:
    """A FIFO in a private (0700) temporary folder, written by `write(fh)` in a thread of its own while the block
    runs the LOAD DATA LOCAL that reads it: yields its path and the list that collects the writer's error (the
    caller decides what it means). On the way out the writer is joined; if the block failed before the
    statement read the FIFO, the writer is let go first."""
    with tempfile.TemporaryDirectory(prefix="lastline-load-") as folder:
        fifo = os.path.join(folder, "fifo")
        os.mkfifo(fifo, 0o600)
        errors: list[BaseException] = []

        def pump() -> None:
            try:
                with open(fifo, "wb") as fh:
                    write(fh)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                errors.append(exc)

        writer = threading.Thread(target=pump, name=label, daemon=True)
        writer.start()
        try:
            yield fifo, errors
        except BaseException:
            deadline = time.monotonic() + RELEASE_SECONDS
            while writer.is_alive() and time.monotonic() < deadline:  # again: a writer not yet in open() misses an early one
                unblock(fifo)
                writer.join(0.05)
            if writer.is_alive():  # still reading its source (a stalled S3 or SSH read): left to end on its own
                log.warning("%s: the chunk's writer did not stop within %d s of the statement's failure; left behind "
                            "(a daemon thread: it ends with the task)", label, RELEASE_SECONDS)
            raise
        writer.join()
