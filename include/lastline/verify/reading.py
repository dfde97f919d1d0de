"""One stored object read back against what a signed manifest or chain says of it: its presence, its size (asked of
the storage first: a file of another size is never read), then its sha256 over the bytes as they stream (never more
than its size is taken in, never the whole object held) and, where it is sealed and the deployment holds a key that
opens it, every sealed chunk authenticated from the very same stream (each byte read once, the plaintext dropped);
how a backup's (or an archive's) sealed objects are read (`opening`: with the seal a restore would use, or not opened
and why); and a control file's MAC judged as a restore would."""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Generator
from dataclasses import dataclass

from lastline.core.errors import ConfigError, IntegrityError
from lastline.storage import Storage, auth
from lastline.storage.base import checked_key
from lastline.storage.encryption_keys import KEY_CONN_ENV, deployment_encryption_keys
from lastline.storage.envelope import BackupSeal, Envelope
from lastline.storage.sealing import SealError
from lastline.verify.plans import Finding

CHUNK = 4 << 20  # bytes per read: the digest keeps up with a disk or a bucket, memory stays flat


def digest(storage: Storage, key: str, limit: int, seal: BackupSeal | None = None) -> tuple[str, int, SealError | None]:
    """(sha256, bytes read, why a sealed chunk did not open or None) of `key`, streamed, reading no further once more
    than `limit` bytes arrived. With `seal`, the bytes hashed are opened as they pass (sealed object `key`: header and
    every chunk authenticated, the plaintext dropped, never written); after a chunk that does not open, the rest is
    still hashed. Memory: about two seal chunks."""
    sha, n = hashlib.sha256(), 0
    chunks = storage.reader(key, CHUNK)

    def hashed() -> Generator[bytes, None, None]:
        nonlocal n
        for chunk in chunks:
            sha.update(chunk)
            n += len(chunk)
            yield chunk
            if n > limit:
                return

    stored, failed = hashed(), None
    try:
        if seal is not None:
            try:
                seal.authenticate(stored, key)
            except SealError as exc:
                failed = exc
        for _ in stored:  # all of it without a seal; what a failed opening left unread
            pass
    finally:
        stored.close()
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # the backend's stream ends at once (an S3 body, an ssh process)
    return sha.hexdigest(), n, failed


def check_object(storage: Storage, key: str, size: int, sha256: str, name: str,
                 seal: BackupSeal | None = None) -> tuple[Finding | None, int]:
    """Whether `key` is there with `size` bytes (size < 0: not known) and `sha256`, and with `seal` whether every sealed
    chunk of it authenticates: (what differs or None, bytes read). A link or a non-file is `unreadable` (the storage
    refuses it); another digest is named as such, before a chunk that does not open (`sealed`: the manifest's sha256
    was rewritten with the bytes, or the object was sealed wrong); a transient storage error is raised."""
    try:
        checked_key(key, storage.url)
        found = storage.size_if_exists(key)
        if found is None:
            return Finding(name, "missing", f"{max(size, 0):,} bytes", "no such file"), 0
        if size >= 0 and found != size:
            return Finding(name, "size", f"{size:,} bytes", f"{found:,} bytes"), 0
        got, n, failed = digest(storage, key, found, seal)
    except IntegrityError as exc:
        return Finding(name, "unreadable", "a regular file", str(exc)[:300]), 0
    if n != found:
        return Finding(name, "size", f"{found:,} bytes", f"{n:,} bytes as read (it changed while read)"), n
    if got != sha256:
        return Finding(name, "digest", f"sha256 {sha256}", f"sha256 {got}"), n
    if failed is not None:
        return sealed_finding(name, failed, whole=size >= 0), n
    return None, n


def sealed_finding(name: str, exc: SealError, whole: bool = False) -> Finding:
    """A sealed object that does not open, as a finding naming the chunk (or its header) and the reason (`whole`: its
    size is the recorded one, so a final chunk that does not open was changed, not cut)."""
    where = "its header" if exc.chunk is None else f"chunk {exc.chunk}"
    reason = "changed" if whole and exc.reason == "cut_or_changed" else exc.reason
    return Finding(name, "sealed", "every chunk authenticated by the data key", f"{where}: {reason} ({exc.detail})")


@dataclass(frozen=True)
class Opening:
    """How sealed objects are read back: with `seal`; or not opened, with a `note` (no key connection here: not
    damage) or a `finding` (the deployment holds keys and none opens it, or the envelope is not one lastline writes)."""

    seal: BackupSeal | None = None
    note: str = ""
    finding: Finding | None = None


def opening(recorded: object, opened: Callable[[], BackupSeal | None], where: str, name: str) -> Opening:
    """How the objects of a backup (or archive) whose manifest (`name`, at `where`) records the envelope `recorded`
    (None: nothing is sealed) are read back: `opened` gives the seal under the very rules a restore uses
    (backups.backup_seal: a KEK wrapping preferred, a recipient-only key from an authenticated manifest alone) or
    refuses. Without an encryption key connection, a note naming the keys needed; with one that opens none, a `key`
    finding: a restore here would be refused. A key connection that is itself wrong raises its ConfigError."""
    if recorded is None:
        return Opening()
    try:
        needs = Envelope.from_json(recorded, where).needs()
    except IntegrityError as exc:
        return Opening(finding=Finding(name, "unreadable", "an encryption envelope lastline writes", str(exc)[:300]))
    if deployment_encryption_keys() is None:
        return Opening(note=f"sealed, not opened: this deployment has no encryption key connection ({KEY_CONN_ENV}); "
                            f"one of the keys {needs} opens it")
    try:
        return Opening(opened())
    except (ConfigError, IntegrityError) as exc:
        return Opening(finding=Finding(name, "key", f"one of the keys {needs}", str(exc)[:400]))


def mac_finding(found: auth.Authenticity, name: str) -> Finding | None:
    """A control file's authenticity as a finding: its MAC fails, or its key is unknown, or it carries none where the
    deployment signs (and does not declare its storage trusted). Without a storage key nothing can be checked:
    no finding (the verdict's authenticity says so)."""
    if found.ok or found.state == "nokey":
        return None
    if found.state == "unsigned" and (auth.deployment_keys() is None or auth.storage_trusted()):
        return None
    return Finding(name, "mac", "a MAC of the deployment's storage key", found.problem)
