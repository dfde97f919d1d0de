"""Where backups live: one backend per URL scheme behind one small interface (see base.Storage)."""
from __future__ import annotations

import os
from urllib.parse import parse_qs, urlparse

from lastline.core.errors import ConfigError, StorageError
from lastline.storage.base import Storage, Writer

__all__ = ["Storage", "Writer", "allowed_roots", "canonical", "open_allowed", "open_storage", "place_name",
           "require_allowed"]
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


def _root_aws_conn(root: str) -> str | None:
    """The AWS connection an S3 root is bound to: its `?aws_conn_id=` (the deployment wrote it), else none (the
    worker's default credentials). Anything else in a root's query is a deployment error, said so."""
    query = parse_qs(urlparse(root).query, keep_blank_values=True)
    if set(query) - {"aws_conn_id"} or len(query.get("aws_conn_id", [])) > 1:
        raise ConfigError(f"LASTLINE_BACKUP_ROOTS entry {root!r}: an S3 root may carry one `?aws_conn_id=<connection>` "
                          "and nothing else in its query.")
    return (query.get("aws_conn_id") or [""])[0] or None


def _ssh_resolved(conn_id: str, paths: list[str]) -> list[list[str]]:
    """`paths` as the SSH host of `conn_id` resolves them (symlinks and `..`, a missing tail kept as written):
    a root is a place on that host, so a path is compared by what it is there, never by its text."""
    from lastline import connections

    host = connections.ssh_host(conn_id)
    out = host.sh('for p in "$@"; do r=$(realpath -m -- "$p") || exit 1; printf "%s\\0" "$r"; done', *paths)
    resolved = out.split("\0")[:-1]
    if len(resolved) != len(paths) or not all(r.startswith("/") for r in resolved):
        raise StorageError(f"cannot resolve {', '.join(paths)} on the SSH host of {conn_id!r} "
                           f"(it printed {out[:200]!r}): check `realpath` and the login shell there.")
    return [[p for p in r.split("/") if p] for r in resolved]


def require_allowed(url: str, what: str, aws_conn_id: str | None = None) -> str:
    """Refuse (ConfigError, nothing touched) a backup or destination URL outside every allowed root; return the URL
    to open. Segments are compared whole (`/backups` does not allow `/backups-old`); no `..` segment is ever allowed.
    A root is a (connection, resolved location) pair: a file path and an SSH path are compared as their host resolves
    them (an SSH URL is returned resolved, so a symlink swapped in later cannot move it); an S3 root admits only the
    AWS connection it names (`s3://bucket/prefix?aws_conn_id=...`; none named: the default credentials only). A root
    without a bucket or connection (`s3://`, `ssh://`) allows every one of that scheme. The URL returned is the
    place itself, one spelling for each (a file path resolved, no empty segment), which `canonical` keys records on."""
    if ".." in url.split("://", 1)[-1].split("/"):
        raise ConfigError(f"{what} {url!r}: a storage URL with `..` in it is refused.")
    if urlparse(url).query:
        raise ConfigError(f"{what} {url!r}: a storage URL has no query: the AWS connection is the field aws_conn_id.")
    scheme, place, segments = _parts(url)
    roots = [(root, *_parts(root.split("?", 1)[0])) for root in allowed_roots()]
    if scheme == "ssh" and place:  # the URL and the roots on its own host, resolved there in one round trip
        ssh_paths = ["/" + "/".join(segments)] + ["/" + "/".join(r) for _, r_scheme, r_place, r in roots
                                                  if r_scheme == "ssh" and r_place == place]
        if len(ssh_paths) > 1:
            resolved = _ssh_resolved(place, ssh_paths)
            segments, resolved_roots = resolved[0], iter(resolved[1:])
            roots = [(root, s, p, next(resolved_roots) if s == "ssh" and p == place else r) for root, s, p, r in roots]
            url = f"ssh://{place}/" + "/".join(segments)
    bound_elsewhere: list[str] = []
    for root, r_scheme, r_place, r_segments in roots:
        if r_scheme == scheme and (not r_place or r_place == place) and segments[:len(r_segments)] == r_segments:
            if scheme == "s3" and (aws_conn_id or None) != _root_aws_conn(root):
                bound_elsewhere.append(root)
                continue
            return f"{scheme}://{place}/" + "/".join(segments)
    if bound_elsewhere:
        raise ConfigError(
            f"{what} {url!r} with the AWS connection {aws_conn_id or '(none: the default credentials)'!r}: this deployment "
            f"allows that storage only through the connection its root names ({', '.join(bound_elsewhere)}), so that a "
            "run cannot point the same bucket name at another endpoint or account. Leave aws_conn_id as the root says. "
            "Nothing was touched.")
    raise ConfigError(
        f"{what} {url!r} is outside the storage this deployment allows ({', '.join(allowed_roots())}): a run's conf may "
        "name backups only under LASTLINE_BACKUP_ROOTS (URL prefixes separated by commas; unset: LASTLINE_DESTINATION). "
        "Nothing was touched."
    )


def place_name(place: str, aws_conn_id: str | None = None) -> str:
    """The name of a place require_allowed returned, with the S3 connection it is reached through."""
    return place + (f"?aws_conn_id={aws_conn_id}" if place.startswith("s3://") and aws_conn_id else "")


def canonical(url: str, aws_conn_id: str | None = None, what: str = "destination") -> str:
    """One name for one place in the deployment's storage, however a run's conf spells it (`file:///r/./x`, `/r//x`,
    `file://localhost/r/x`; an SSH path through a symlink), with the S3 connection it is reached through: the key of
    what Airflow records about it (the archive's head, the newest backup), so that another spelling cannot find no
    record."""
    return place_name(require_allowed(url, what, aws_conn_id), aws_conn_id)


def open_allowed(url: str, aws_conn_id: str | None = None, what: str = "destination") -> Storage:
    """open_storage for a URL a run's conf gave, after require_allowed (an SSH URL opened where it resolved)."""
    return open_storage(require_allowed(url, what, aws_conn_id), aws_conn_id)


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
