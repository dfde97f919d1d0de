"""Where backups live: one backend per URL scheme behind one small interface (see base.Storage)."""
from __future__ import annotations

from urllib.parse import urlparse

from lastline.errors import StorageError
from lastline.storage.base import Storage, Writer

__all__ = ["Storage", "Writer", "open_storage"]


def open_storage(url: str, aws_conn_id: str | None = None) -> Storage:
    """The backend for `url`: `file:///dir`, a plain absolute path, or `s3://bucket/prefix`."""
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
    raise StorageError(
        f"destination {url!r}: unknown scheme {parsed.scheme!r}; use file:///dir or s3://bucket/prefix."
    )
