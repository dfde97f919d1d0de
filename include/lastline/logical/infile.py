"""lastline's `LOAD DATA LOCAL INFILE` handler on a loader's MySQLdb connection (native/infile.c).

With it, a zstd chunk's *compressed* bytes go into the FIFO and libzstd decompresses them inside the client
library, straight into what it sends: no decompressor process, and the raw bytes never cross a pipe that
the server-paced client drains 4 KiB at a time (measured in bench/restore_cpu_bench.py). The connection
then opens only the path offered for its next statement. Without the built library (`make setup` builds
it) the loader keeps the decompressor process: same bytes, more CPU.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
from pathlib import Path
from typing import Any

LIBRARY = "liblastline-infile.so"
SOURCE = Path(__file__).resolve().parent / "native" / "infile.c"
COMPRESSIONS = {"zstd", "zstd-fast"}  # what the handler decompresses (it reads zstd only)
ERROR_PREFIX = "lastline-infile: "

log = logging.getLogger(__name__)


def library_path() -> str | None:
    """The built handler: $LASTLINE_INFILE_LIB or the venv's lib folder; None if neither exists, or if
    LASTLINE_INFILE_LIB is `off` (the decompressor process then feeds the FIFO: to compare the two)."""
    if os.environ.get("LASTLINE_INFILE_LIB") == "off":
        return None
    for candidate in (os.environ.get("LASTLINE_INFILE_LIB"), str(Path(sys.prefix) / "lib" / LIBRARY)):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


@functools.cache
def _library() -> Any:
    path = library_path()
    if path is None:
        log.info("%s is not built (`make setup` builds it from %s) or is switched off: zstd chunks go through a zstd "
                 "process", LIBRARY, SOURCE.name)
        return None
    lib = ctypes.CDLL(path)
    lib.lastline_infile_install.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.lastline_infile_install.restype = None
    lib.lastline_infile_path_len.argtypes = []
    lib.lastline_infile_path_len.restype = ctypes.c_size_t
    api = ctypes.pythonapi  # to read the MYSQL* out of mysqlclient's capsule
    api.PyCapsule_GetName.restype, api.PyCapsule_GetName.argtypes = ctypes.c_char_p, [ctypes.py_object]
    api.PyCapsule_GetPointer.restype, api.PyCapsule_GetPointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return lib


def _native_pointer(conn: Any) -> int:
    """The MYSQL* behind a MySQLdb connection (mysqlclient hands it out as a capsule; see _library)."""
    capsule = conn._get_native_connection()
    return int(ctypes.pythonapi.PyCapsule_GetPointer(capsule, ctypes.pythonapi.PyCapsule_GetName(capsule)))


class Handler:
    """The handler installed on one connection; `offer(path)` names the one file its next statement may send."""

    def __init__(self, lib: Any, conn: Any) -> None:
        self.conn = conn  # the slot must live as long as the connection that points at it
        self.slot = ctypes.create_string_buffer(lib.lastline_infile_path_len())
        lib.lastline_infile_install(_native_pointer(conn), self.slot)

    def offer(self, path: str) -> None:
        raw = os.fsencode(path)
        if len(raw) >= len(self.slot):
            raise ValueError(f"path too long for the LOAD DATA handler: {path}")
        self.slot.value = raw


def install(conn: Any, compression: str) -> Handler | None:
    """Install the handler on `conn` if it can decompress `compression` and is built; else None."""
    lib = _library() if compression in COMPRESSIONS else None
    return Handler(lib, conn) if lib is not None else None
