"""A backup named once and opened once per task.

`BackupRef` is where a backup is: its destination, id, kind and AWS connection, parsed once from a run's `backup`
Param; a preflight resolves `latest` and pins the manifest it read (its sha256), and every plan carries that ref as
its one `backup` field. `OpenedBackup` is what a task works from: the storage, the manifest checked against the
pinned sha256 (storage is untrusted: docs/trust-model.md), and for a logical backup schema.json checked against the
manifest, opened when the backup is encrypted (its seal: the data key the deployment's keys unwrap) and parsed;
`open_backup` makes it, once per task.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from typing import Any

from lastline.core.errors import ConfigError, IntegrityError
from lastline.core.plans import Conf, Typed
from lastline.manifest import (
    MANIFEST,
    MANIFEST_CLASSES,
    LogicalManifest,
    PhysicalManifest,
    read_manifest,
    resolve_backup,
    split_backup_url,
)
from lastline.storage import Storage, auth, control
from lastline.storage.encryption_keys import KEY_CONN_ENV as ENCRYPTION_ENV
from lastline.storage.encryption_keys import deployment_encryption_keys
from lastline.storage.envelope import BackupSeal, opened_seal


@dataclasses.dataclass(frozen=True)
class BackupRef(Typed):
    """One backup: `<destination>/<backup_id>` of `kind` (`latest` until a preflight resolved it), reached through
    `aws_conn_id`; `manifest_sha256`, once pinned, is the only manifest a task accepts."""

    destination: str
    backup_id: str
    kind: str
    aws_conn_id: str | None = None
    manifest_sha256: str = ""

    @classmethod
    def parse(cls, url: str, kind: str, aws_conn_id: str | None = None, manifest_sha256: str | None = None) -> BackupRef:
        """`<destination>/<backup_id>` or `<destination>/latest` as a ref of `kind`; nothing is opened (the id and the
        roots are checked when it is opened)."""
        if kind not in MANIFEST_CLASSES:
            raise ConfigError(f"backup {url!r}: kind {kind!r} is not one of {', '.join(MANIFEST_CLASSES)}.")
        destination, backup_id = split_backup_url(url)
        return cls(destination, backup_id, kind, aws_conn_id or None, manifest_sha256 or "")

    @classmethod
    def param(cls, params: Conf, kind: str) -> BackupRef:
        """The run's `backup` Param (with its `aws_conn_id`, and the `manifest_sha256` a staging refresh, a drill or a
        point-in-time restore pins for the restore it runs)."""
        return cls.parse(params.required("backup"), kind, params.text("aws_conn_id"), params.text("manifest_sha256"))

    @property
    def url(self) -> str:
        """`<destination>/<backup_id>`: the backup as a Param names it."""
        return f"{self.destination}/{self.backup_id}"

    def params(self) -> dict[str, Any]:
        """The Params naming this very backup, for a restore another pipeline runs (its manifest pinned)."""
        return {"backup": self.url, "aws_conn_id": self.aws_conn_id, "manifest_sha256": self.manifest_sha256}


def backup_seal(storage: Storage, manifest: LogicalManifest | PhysicalManifest) -> BackupSeal | None:
    """What opens an encrypted backup's files (the deployment's keys opening the envelope its manifest records), None
    when they are not sealed; refused (ConfigError), naming the key ids it needs, when the deployment holds none."""
    if manifest.encryption is None:
        return None
    where = storage.location(f"{manifest.backup_id}/{MANIFEST}")
    # a key only a recipient's wrapping opens is taken from an authenticated manifest alone (envelope.open_data_key)
    authenticated = bool(getattr(getattr(manifest, "authenticity", None), "ok", False)) or auth.storage_trusted()
    return opened_seal(manifest.encryption, deployment_encryption_keys(), manifest.backup_id, where, authenticated)


def require_sealed_or_authenticated(storage: Storage, manifest: LogicalManifest | PhysicalManifest,
                                    found: auth.Authenticity) -> None:
    """Refuse (IntegrityError) a backup without an envelope where the deployment encrypts (it holds an encryption key
    connection), unless its manifest is authenticated or the storage declared trusted (auth.accepted): else whoever
    can write storage could put plain files and a manifest of their own in an encrypted backup's place. A backup with
    an envelope is authenticated by its data key opening under a KEK (backup_seal: a recipient's needs the MAC)."""
    if manifest.encryption is not None or auth.accepted(found) or deployment_encryption_keys() is None:
        return
    where = storage.location(f"{manifest.backup_id}/{MANIFEST}")
    raise IntegrityError(
        f"backup {manifest.backup_id} is not encrypted, and this deployment encrypts its backups ({ENCRYPTION_ENV}), "
        f"while its manifest {where} is {found.describe()}: nothing shows that lastline wrote it (whoever can write the "
        "storage can put plain files and a manifest of their own in a backup's place). Nothing was touched. Restore an "
        f"encrypted backup, or one whose manifest is signed with the storage key ({auth.KEY_CONN_ENV}: set it if this "
        f"one was signed); if only lastline can write this storage, the deployment may declare it trusted "
        f"({auth.TRUSTED_ENV}=true)."
    )


def checked_schema(storage: Storage, manifest: LogicalManifest, seal: BackupSeal | None = None) -> dict:
    """schema.json, used only if the sha256 of its bytes as stored is the manifest's (a backup folder is untrusted
    input), then opened when the backup is encrypted (`seal`, or backup_seal's) and parsed."""
    key = f"{manifest.backup_id}/{manifest.schema_file}"
    data = control.read_bytes(storage, key)  # bounded: never read whole
    sha = hashlib.sha256(data).hexdigest()
    if sha != manifest.schema_sha256:
        raise IntegrityError(
            f"{storage.location(key)} has sha256 {sha}, the manifest says {manifest.schema_sha256}: the file was changed "
            "after the backup. Nothing was restored from it; restore another backup."
        )
    opener = seal if seal is not None else backup_seal(storage, manifest)
    if opener is not None:
        data = opener.opened(data, key)
    return control.parse(data, storage.location(key))


@dataclasses.dataclass(frozen=True)
class OpenedBackup:
    """A backup opened for one task: `ref` resolved (its id named, its manifest's sha256 pinned), its storage, and its
    manifest as read and checked. schema.json is read and checked against the manifest the first time it is asked for."""

    ref: BackupRef
    storage: Storage
    manifest: PhysicalManifest | LogicalManifest
    authenticity: auth.Authenticity  # whether the storage key authenticated the manifest (every report says it)

    @property
    def logical(self) -> LogicalManifest:
        """The manifest of a logical backup."""
        if not isinstance(self.manifest, LogicalManifest):
            raise IntegrityError(f"{self.ref.url} is a {self.manifest.kind} backup, not a logical one.")
        return self.manifest

    @property
    def physical(self) -> PhysicalManifest:
        """The manifest of a physical backup."""
        if not isinstance(self.manifest, PhysicalManifest):
            raise IntegrityError(f"{self.ref.url} is a {self.manifest.kind} backup, not a physical one.")
        return self.manifest

    @functools.cached_property
    def seal(self) -> BackupSeal | None:
        """What opens the backup's files when it is encrypted (backup_seal: refused without a key), once."""
        return backup_seal(self.storage, self.manifest)

    @functools.cached_property
    def schema(self) -> dict:
        """A logical backup's schema.json, checked against its manifest's sha256, opened and parsed (once)."""
        return checked_schema(self.storage, self.logical, self.seal)


def open_backup(ref: BackupRef, *, storage: Storage | None = None, require: str | bool | None = None) -> OpenedBackup:
    """Open `ref`: its storage (under the deployment's roots; `storage`: one a caller opened there already), `latest`
    resolved, its manifest read once and, when the ref pins one, refused unless it is the very manifest pinned
    (read_manifest; `require`: a use that refuses an unauthenticated manifest), and where the deployment encrypts, a
    plain backup refused unless authenticated (require_sealed_or_authenticated). The result's ref is resolved and
    pinned: what a preflight puts in its plan."""
    if storage is None:
        storage, backup_id = resolve_backup(ref.url, ref.aws_conn_id, ref.kind)
    else:
        backup_id = ref.backup_id
    manifest = read_manifest(storage, backup_id, ref.kind, sha256=ref.manifest_sha256 or None, require=require)
    require_sealed_or_authenticated(storage, manifest, manifest.authenticity)  # every restore path opens it here
    pinned = dataclasses.replace(ref, destination=storage.url, backup_id=backup_id, manifest_sha256=manifest.read_sha256)
    return OpenedBackup(pinned, storage, manifest, manifest.authenticity)
