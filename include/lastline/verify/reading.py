"""One stored object read back against what a signed manifest or chain says of it: its presence, its size (asked of
the storage first: a file of another size is never read), then its sha256 over the bytes as they stream (never more
than its size is taken in, never the whole object held), and a control file's MAC judged as a restore would."""
from __future__ import annotations

import hashlib

from lastline.core.errors import IntegrityError
from lastline.storage import Storage, auth
from lastline.storage.base import checked_key
from lastline.verify.plans import Finding

CHUNK = 4 << 20  # bytes per read: the digest keeps up with a disk or a bucket, memory stays flat


def digest(storage: Storage, key: str, limit: int) -> tuple[str, int]:
    """(sha256, bytes read) of `key`, streamed, reading no further once more than `limit` bytes arrived."""
    sha, n = hashlib.sha256(), 0
    chunks = storage.reader(key, CHUNK)
    try:
        for chunk in chunks:
            sha.update(chunk)
            n += len(chunk)
            if n > limit:
                break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # the backend's stream ends at once (an S3 body, an ssh process)
    return sha.hexdigest(), n


def check_object(storage: Storage, key: str, size: int, sha256: str, name: str) -> tuple[Finding | None, int]:
    """Whether `key` is there with `size` bytes (size < 0: not known) and `sha256`: (what differs or None, bytes
    read). A link or a non-file is `unreadable` (the storage refuses it); a transient storage error is raised."""
    try:
        checked_key(key, storage.url)
        found = storage.size_if_exists(key)
        if found is None:
            return Finding(name, "missing", f"{max(size, 0):,} bytes", "no such file"), 0
        if size >= 0 and found != size:
            return Finding(name, "size", f"{size:,} bytes", f"{found:,} bytes"), 0
        got, n = digest(storage, key, found)
    except IntegrityError as exc:
        return Finding(name, "unreadable", "a regular file", str(exc)[:300]), 0
    if n != found:
        return Finding(name, "size", f"{found:,} bytes", f"{n:,} bytes as read (it changed while read)"), n
    if got != sha256:
        return Finding(name, "digest", f"sha256 {sha256}", f"sha256 {got}"), n
    return None, n


def mac_finding(found: auth.Authenticity, name: str) -> Finding | None:
    """A control file's authenticity as a finding: its MAC fails, or its key is unknown, or it carries none where the
    deployment signs (and does not declare its storage trusted). Without a storage key nothing can be checked:
    no finding (the verdict's authenticity says so)."""
    if found.ok or found.state == "nokey":
        return None
    if found.state == "unsigned" and (auth.deployment_keys() is None or auth.storage_trusted()):
        return None
    return Finding(name, "mac", "a MAC of the deployment's storage key", found.problem)
