"""Where backups live: one backend per URL scheme behind one small interface (see base.Storage)."""
from __future__ import annotations

from urllib.parse import urlparse

from lastline.core.errors import StorageError
from lastline.storage.base import Storage, Writer

__all__ = ["Storage", "Writer", "open_storage"]


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
