"""The deployment's storage roots are (connection, resolved location) pairs: an SSH path is compared as its host
resolves it, an S3 root admits only the AWS connection it names. Each attack below got through when roots were
compared as text."""
from __future__ import annotations

import pytest

from lastline.core.errors import ConfigError
from lastline.storage import open_allowed, require_allowed

S3_ROOTS = "s3://backups/nightly?aws_conn_id=aws_backups, s3://scratch/lastline, file:///var/backups/lastline"


@pytest.mark.parametrize(("name", "url", "aws_conn_id"), [
    ("the root's own connection", "s3://backups/nightly/20261128T000000Z", "aws_backups"),
    ("the root itself", "s3://backups/nightly", "aws_backups"),
    ("an unbound root with the default credentials", "s3://scratch/lastline/x", None),
    ("an empty connection field is the default credentials", "s3://scratch/lastline/x", ""),
])
def test_an_s3_url_is_allowed_through_the_connection_its_root_names(monkeypatch, name, url, aws_conn_id):
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", S3_ROOTS)
    assert require_allowed(url, "destination", aws_conn_id) == url


@pytest.mark.parametrize(("name", "url", "aws_conn_id", "says"), [
    ("the bucket through another connection (another endpoint or account)", "s3://backups/nightly/x", "aws_elsewhere",
     "only through the connection its root names"),
    ("the bound bucket with the default credentials", "s3://backups/nightly/x", None, "only through the connection"),
    ("an unbound root through a named connection", "s3://scratch/lastline/x", "aws_backups", "only through the connection"),
    ("a connection smuggled in the URL's query", "s3://backups/nightly/x?aws_conn_id=aws_backups", "aws_elsewhere",
     "has no query"),
    ("a bucket no root names", "s3://other/nightly", "aws_backups", "outside the storage"),
])
def test_an_s3_url_through_any_other_connection_is_refused(monkeypatch, name, url, aws_conn_id, says):
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", S3_ROOTS)
    with pytest.raises(ConfigError, match=says):
        require_allowed(url, "destination", aws_conn_id)


def test_a_root_with_anything_else_in_its_query_is_a_deployment_error(monkeypatch):
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", "s3://backups?endpoint_url=http://elsewhere")
    with pytest.raises(ConfigError, match="one `\\?aws_conn_id=<connection>` and nothing else"):
        require_allowed("s3://backups/x", "destination", None)


@pytest.mark.e2e
def test_an_ssh_destination_cannot_leave_its_root_through_a_symlink(sshd, tmp_path, monkeypatch):
    """`ssh://t_ssh/<root>/escape` where `escape` is a symlink to a folder outside the root: inside by its text, outside
    by what it is on the host; refused for every use, and a path inside is opened where it resolves."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "real").mkdir(parents=True)
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    (root / "inner").symlink_to(root / "real")
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", f"ssh://t_ssh{root}")
    for url in (f"ssh://t_ssh{root}/escape", f"ssh://t_ssh{root}/escape/nightly", f"ssh://t_ssh{root}/escape/new/deeper"):
        with pytest.raises(ConfigError, match="outside the storage this deployment allows"):
            open_allowed(url, None, "destination")
    assert not any(outside.iterdir())
    # a symlink that stays inside is followed to where it lands, and the storage is opened there
    assert require_allowed(f"ssh://t_ssh{root}/inner/nightly", "destination") == f"ssh://t_ssh{root}/real/nightly"
    storage = open_allowed(f"ssh://t_ssh{root}/inner/nightly", None, "destination")
    writer = storage.writer("b/file")
    writer.write(b"x")
    writer.commit()
    assert (root / "real" / "nightly" / "b" / "file").read_bytes() == b"x"
    # another connection's paths are not this root's, whatever their text
    with pytest.raises(ConfigError, match="outside the storage"):
        require_allowed(f"ssh://t_other{root}/real", "destination")


@pytest.mark.e2e
def test_an_ssh_root_that_is_itself_a_symlink_allows_what_it_points_to(sshd, tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", f"ssh://t_ssh{tmp_path}/link")
    assert require_allowed(f"ssh://t_ssh{real}/nightly", "destination") == f"ssh://t_ssh{real}/nightly"
    assert require_allowed(f"ssh://t_ssh{tmp_path}/link/nightly", "destination") == f"ssh://t_ssh{real}/nightly"
    with pytest.raises(ConfigError, match="outside the storage"):
        require_allowed(f"ssh://t_ssh{tmp_path}", "destination")


@pytest.mark.parametrize(("name", "spelling"), [
    ("as written", "file://{r}/arch"),
    ("a trailing dot segment", "file://{r}/arch/."),
    ("a doubled slash", "file://{r}//arch"),
    ("a plain path", "{r}/arch"),
    ("four slashes", "file:///{r}/arch"),
    ("a host of localhost", "file://localhost{r}/arch"),
    ("through a symlink", "file://{r}/link"),
])
def test_every_spelling_of_one_folder_has_one_canonical_name(tmp_path, monkeypatch, name, spelling):
    """A review: the archive's head was recorded under the destination as spelled, so `file:///r/./arch` found no
    record and anti-rollback only warned. Records are keyed on the place itself."""
    from lastline.storage import canonical

    (tmp_path / "arch").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "arch")
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", f"file://{tmp_path}")
    assert canonical(spelling.format(r=tmp_path)) == f"file://{tmp_path}/arch"


def test_an_s3_place_is_named_with_its_connection(monkeypatch):
    from lastline.storage import canonical

    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", "s3://b/x?aws_conn_id=aws1")
    assert canonical("s3://b//x/y/", "aws1") == "s3://b/x/y?aws_conn_id=aws1"
