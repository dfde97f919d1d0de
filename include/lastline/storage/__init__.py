"""Where backups live: one backend per URL scheme behind one small interface (see base.Storage)."""
from __future__ import annotations

import os
from urllib.parse import urlparse

from lastline.core.errors import ConfigError, StorageError
from lastline.storage.base import Storage, Writer

__all__ = ["Storage", "Writer", "allowed_roots", "open_allowed", "open_storage", "require_allowed"]
DEFAULT_DESTINATION = "file:///var/backups/lastline"


def allowed_roots() -> list[str]:
    """Where a run may read or write backups: the deployment's LASTLINE_BACKUP_ROOTS (URL prefixes separated by
    commas), or, when it is unset, its one destination LASTLINE_DESTINATION. A run's conf cannot widen it."""
    roots = [r.strip() for r in os.environ.get("LASTLINE_BACKUP_ROOTS", "").split(",") if r.strip()]
    return roots or [os.environ.get("LASTLINE_DESTINATION", DEFAULT_DESTINATION)]


def _parts(url: str) -> tuple[str, str, list[str]]:
    """(scheme, place, path segments) of a storage URL; a file path is resolved (symlinks, `..`) first."""
    parsed = urlparse(url)
    scheme = parsed.scheme or "file"
    path = parsed.path if parsed.scheme else url
    if scheme == "file":
        return scheme, "", [p for p in os.path.realpath(path or "/").split("/") if p]
    return scheme, parsed.netloc, [p for p in path.split("/") if p]


def require_allowed(url: str, what: str) -> None:
    """Refuse (ConfigError, nothing touched) a backup or destination URL outside every allowed root. Segments
    are compared whole (`/backups` does not allow `/backups-old`); a root without a bucket or connection
    (`s3://`) allows every one of that scheme; no `..` segment is ever allowed."""
    if ".." in url.split("://", 1)[-1].split("/"):
        raise ConfigError(f"{what} {url!r}: a storage URL with `..` in it is refused.")
    scheme, place, segments = _parts(url)
    for root in allowed_roots():
        r_scheme, r_place, r_segments = _parts(root)
        if r_scheme == scheme and (not r_place or r_place == place) and segments[:len(r_segments)] == r_segments:
            return
    raise ConfigError(
        f"{what} {url!r} is outside the storage this deployment allows ({', '.join(allowed_roots())}): a run's conf may "
        "name backups only under LASTLINE_BACKUP_ROOTS (URL prefixes separated by commas; unset: LASTLINE_DESTINATION). "
        "Nothing was touched."
    )


def open_allowed(url: str, aws_conn_id: str | None = None, what: str = "destination") -> Storage:
    """open_storage for a URL a run's conf gave, after require_allowed."""
    require_allowed(url, what)
    return open_storage(url, aws_conn_id)


def open_storage(url: str, aws_conn_id: str | None = None) -> Storage:
    """The backend for `url`: `file:///dir`, a plain absolute path, `s3://bucket/prefix`, or
    `ssh://<ssh_conn_id>/<path>` (a folder on another host, through an Airflow SSH connection)."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        from lastline.storage.file import FileStorage

        path = parsed.path if parsed.scheme else url
        if not path.startswith("/"):
            raise StorageError(f"destination {url!r}: a file destination needs an absolute path (file:///dir).")
        return FileStorage(path)
    if parsed.scheme == "s3":
        from lastline.storage.s3 import S3Storage

        if not parsed.netloc:
            raise StorageError(f"destination {url!r}: an S3 destination needs a bucket (s3://bucket/prefix).")
        return S3Storage(parsed.netloc, parsed.path.strip("/"), aws_conn_id)
    if parsed.scheme == "ssh":
        from lastline.storage.ssh import SshStorage

        if not parsed.netloc:
            raise StorageError(f"destination {url!r}: an SSH destination needs a connection (ssh://<ssh_conn_id>/<path>).")
        return SshStorage(parsed.netloc, parsed.path)
    raise StorageError(
        f"destination {url!r}: unknown scheme {parsed.scheme!r}; use file:///dir, s3://bucket/prefix "
        "or ssh://<ssh_conn_id>/<path>."
    )
