"""storage (the package): which URLs a run may name (the deployment's roots, compared segment by segment on the
resolved path, S3 roots bound to their AWS connection), one spelling per place, and the backend per scheme. SSH roots
resolve on their host, so they are left to the end-to-end tests."""
from __future__ import annotations

import pytest

from lastline.core.errors import ConfigError, StorageError
from lastline.storage import allowed_roots, canonical, open_storage, place_name, require_allowed
from lastline.storage.file import FileStorage


@pytest.fixture
def roots(monkeypatch, tmp_path):
    """Two file roots under tmp_path (one through a symlink) and S3 roots bound to connections."""
    (tmp_path / "backups").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "backups")
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", f"file://{tmp_path}/backups, s3://bucket/prod?aws_conn_id=aws_prod,s3://open")
    return tmp_path


@pytest.mark.parametrize(("env", "expected"), [
    ({"LASTLINE_BACKUP_ROOTS": "file:///a, s3://b ,,", "LASTLINE_DESTINATION": "file:///d"}, ["file:///a", "s3://b"]),
    ({"LASTLINE_BACKUP_ROOTS": " ", "LASTLINE_DESTINATION": "file:///d"}, ["file:///d"]),
    ({}, ["file:///var/backups/lastline"]),
], ids=["roots-split-and-stripped", "destination-when-no-roots", "default"])
def test_allowed_roots(monkeypatch, env, expected):
    monkeypatch.delenv("LASTLINE_BACKUP_ROOTS", raising=False)
    monkeypatch.delenv("LASTLINE_DESTINATION", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert allowed_roots() == expected


@pytest.mark.parametrize(("url", "conn", "place"), [
    ("file://{tmp}/backups/x", None, "file:///{tmp}/backups/x"),
    ("{tmp}/backups//x/./y", None, "file:///{tmp}/backups/x/y"),
    ("file://{tmp}/link/x", None, "file:///{tmp}/backups/x"),
    ("{tmp}/backups", None, "file:///{tmp}/backups"),
    ("s3://bucket/prod/daily", "aws_prod", "s3://bucket/prod/daily"),
    ("s3://open/any/where", None, "s3://open/any/where"),
], ids=["file-url", "plain-path-normalised", "symlink-resolved", "the-root-itself", "s3-under-its-connection", "s3-root-without-conn"])
def test_allowed_urls_come_back_in_one_spelling(roots, url, conn, place):
    tmp = str(roots).lstrip("/")
    assert require_allowed(url.format(tmp="/" + tmp), "destination", conn) == place.format(tmp=tmp)


@pytest.mark.parametrize(("url", "conn", "message"), [
    ("{tmp}/backups-old/x", None, "outside the storage this deployment allows"),
    ("{tmp}/backups/../etc", None, "with `..` in it is refused"),
    ("{tmp}/other", None, "outside the storage"),
    ("s3://bucket/prod/x", None, "only through the connection its root names"),
    ("s3://bucket/prod/x", "aws_other", "only through the connection its root names"),
    ("s3://bucket/staging", "aws_prod", "outside the storage"),
    ("s3://bucket/prod?aws_conn_id=aws_prod", "aws_prod", "has no query"),
    ("ssh://host/{tmp}/backups", None, "outside the storage"),
], ids=["segment-not-prefix", "dot-dot", "elsewhere", "s3-default-credentials", "s3-other-connection", "s3-other-prefix",
        "query-in-url", "other-scheme"])
def test_urls_outside_the_roots_are_refused(roots, url, conn, message):
    with pytest.raises(ConfigError, match=message):
        require_allowed(url.format(tmp=roots), "backup", conn)


def test_a_root_with_more_than_its_connection_in_its_query_is_a_deployment_error(monkeypatch):
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", "s3://b?aws_conn_id=x&region=eu")
    with pytest.raises(ConfigError, match="one `\\?aws_conn_id=<connection>` and nothing else"):
        require_allowed("s3://b/p", "destination", "x")


@pytest.mark.parametrize(("place", "conn", "name"), [
    ("s3://b/p", "aws1", "s3://b/p?aws_conn_id=aws1"), ("s3://b/p", None, "s3://b/p"), ("file:///r", "aws1", "file:///r")],
    ids=["s3-with-connection", "s3-default", "file-ignores-connection"])
def test_place_name(place, conn, name):
    assert place_name(place, conn) == name


def test_canonical_is_one_key_for_every_spelling(roots):
    spellings = [f"file://{roots}/backups/x", f"{roots}/backups//x", f"file://{roots}/link/./x"]
    assert len({canonical(s) for s in spellings}) == 1


@pytest.mark.parametrize(("url", "message"), [
    ("relative/dir", "needs an absolute path"), ("s3:///prefix", "needs a bucket"), ("ssh:///path", "needs a connection"),
    ("ftp://host/x", "unknown scheme 'ftp'")],
    ids=["relative-file", "s3-without-bucket", "ssh-without-connection", "unknown-scheme"])
def test_open_storage_refuses_what_it_cannot_open(url, message):
    with pytest.raises(StorageError, match=message):
        open_storage(url)


@pytest.mark.parametrize("spelling", ["file://{tmp}", "{tmp}"], ids=["file-url", "plain-path"])
def test_open_storage_opens_a_folder(tmp_path, spelling):
    assert isinstance(open_storage(spelling.format(tmp=tmp_path)), FileStorage)
