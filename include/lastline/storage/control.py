"""The one reader of the JSON control files lastline keeps beside backups (manifests, schema.json, the binlog
archive's branches.json, chain.json and status.json).

A backup folder is untrusted input, so a control file is read within bounds: at most `max_bytes()` bytes are ever
read (a bigger one is refused from its size, or as soon as more arrives), its nesting at most MAX_DEPTH deep, and
any failure to parse it (bad UTF-8, bad JSON, recursion, memory) makes it `Unreadable`: `latest` and prune pass
over it, a restore that names it is refused. Its MAC (storage.auth) is checked on the bytes read, before any of
them is used.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from lastline.storage import auth
from lastline.storage.base import Storage, Unreadable

__all__ = ["Control", "Unreadable", "max_bytes", "parse", "read", "read_bytes", "write"]

MAX_DEPTH = 32  # lastline's own files nest 6 deep at most (a chunk's key bounds in a table of a manifest)
DEFAULT_MAX_MB = 64  # a logical manifest of 20,000 tables is a few MB


def max_bytes() -> int:
    """The deployment's cap on a control file's size (LASTLINE_CONTROL_FILE_MAX_MB, default 64)."""
    try:
        mb = float(os.environ.get("LASTLINE_CONTROL_FILE_MAX_MB", DEFAULT_MAX_MB))
    except ValueError:
        mb = DEFAULT_MAX_MB
    return max(1, int(mb * (1 << 20)))


@dataclass(frozen=True)
class Control:
    """A control file as read: its data (the MAC field removed), the sha256 of its bytes, and its authenticity."""

    data: Any
    sha256: str
    auth: auth.Authenticity


def read_bytes(storage: Storage, key: str, cap: int | None = None) -> bytes:
    """The bytes of `key`, refused (Unreadable) beyond `cap` bytes (max_bytes()): never more than cap + 1 are read."""
    return storage.read_bytes(key, max_bytes() if cap is None else cap)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests more than `limit` lists or objects deep: walked a level at a time, without recursion
    (a fifth of json.loads' own time on a manifest of 20,000 tables)."""
    level, depth = [value], 1
    while level:
        if depth > limit:
            return True
        dicts = [x for x in level if type(x) is dict]
        lists = [x for x in level if type(x) is list]
        level = [y for d in dicts for y in d.values() if type(y) is dict or type(y) is list]
        level += [y for seq in lists for y in seq if type(y) is dict or type(y) is list]
        depth += 1
    return False


def parse(data: bytes, where: str) -> Any:
    """`data` as JSON, or Unreadable naming `where` and why (bad UTF-8, not JSON, nested past MAX_DEPTH, memory)."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError, MemoryError, TypeError) as exc:
        why = "nested too deep" if isinstance(exc, RecursionError) else f"{type(exc).__name__}: {str(exc)[:120]}"
        raise Unreadable(where, why) from None
    if _deeper_than(value, MAX_DEPTH):
        raise Unreadable(where, f"nested more than {MAX_DEPTH} deep, which lastline never writes")
    return value


def read(storage: Storage, key: str, cap: int | None = None) -> Control:
    """Read, authenticate (storage.auth.check, on the bytes as read) and parse the control file `key`."""
    raw = read_bytes(storage, key, cap)
    data = parse(raw, storage.location(key))
    found = auth.check(key, raw, data)
    if isinstance(data, dict):
        data.pop(auth.FIELD, None)
    return Control(data, hashlib.sha256(raw).hexdigest(), found)


def write(storage: Storage, key: str, text: str) -> int:
    """Write the control file `key` (`text`: a JSON object), signed with the deployment's key when it has one;
    returns the bytes written."""
    return len(_write(storage, key, text))


def write_hashed(storage: Storage, key: str, text: str) -> str:
    """write, returning the sha256 of the bytes written (what a later read's Control.sha256 is if no one wrote since)."""
    return hashlib.sha256(_write(storage, key, text)).hexdigest()


def _write(storage: Storage, key: str, text: str) -> bytes:
    data = auth.sign(key, text.encode())
    storage.write_bytes(key, data)
    return data
