"""storage.file: a local backup folder read by descriptor, never through a link: writes appear only on commit (0600
files, 0700 folders), keys that leave the root are refused, links, FIFOs and folders where a file should be are
refused by name, and a control file's size is capped before it is read."""
from __future__ import annotations

import os
import stat

import pytest

from lastline.core.errors import IntegrityError, StorageError
from lastline.storage.base import Unreadable
from lastline.storage.file import FileStorage, filesystem_type, private_dirs

MIB = 1 << 20


@pytest.fixture
def store(tmp_path) -> FileStorage:
    return FileStorage(str(tmp_path / "dest") + "/")


@pytest.mark.parametrize("size", [0, 1, MIB - 1, MIB, MIB + 1], ids=["empty", "one", "under-a-chunk", "a-chunk", "over-a-chunk"])
def test_written_bytes_read_back_in_chunks(store, size):
    data = os.urandom(size)
    store.write_bytes("b1/part.zst", data)
    assert store.exists("b1/part.zst") and store.size("b1/part.zst") == size == store.size_if_exists("b1/part.zst")
    assert b"".join(store.reader("b1/part.zst", chunk=MIB)) == data
    assert all(len(c) <= MIB for c in store.reader("b1/part.zst", chunk=MIB))


def test_a_write_appears_on_commit_private_and_leaves_nothing_on_abort(store, tmp_path):
    w = store.writer("b1/sub/x")
    w.write(b"abc")
    assert not store.exists("b1/sub/x")
    w.commit()
    path = tmp_path / "dest" / "b1" / "sub" / "x"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with pytest.raises(RuntimeError), store.writer("b1/sub/y") as w2:
        w2.write(b"half")
        raise RuntimeError("cut")
    assert sorted(os.listdir(path.parent)) == ["x"]  # no y, no y.partial


@pytest.mark.parametrize("checked_first", [True, False], ids=["root made by check_writable", "root made by the writer"])
def test_a_deferred_writer_is_made_durable_by_sync(store, checked_first):
    if checked_first:
        store.check_writable()
    with store.writer("b1/a", durable=False) as w:
        w.write(b"a")
    store.sync()
    store.sync()  # nothing left: a no-op
    assert store.read_bytes("b1/a") == b"a"


@pytest.mark.parametrize("key", ["", "/etc/passwd", "a/../b", "a//b", "./a", "a/.", "a\x00b"],
                         ids=["empty", "absolute", "dot-dot", "empty-segment", "leading-dot", "trailing-dot", "nul"])
def test_keys_that_leave_the_root_are_refused(store, key):
    with pytest.raises(IntegrityError, match="refusing storage key"):
        store.exists(key)


@pytest.mark.parametrize("key", ["b 1/t`x`.sql", "b.1/my.db.t.sql", "b1/ünï.csv"], ids=["spaces-backticks", "dots", "unicode"])
def test_names_as_a_manifest_gives_them_are_kept(store, key):
    store.write_bytes(key, b"x")
    assert store.read_bytes(key) == b"x"


@pytest.mark.parametrize(("make", "kind"), [
    (lambda p, o: p.symlink_to(o), "a symlink"),
    (lambda p, o: os.mkfifo(p), "a FIFO"),
    (lambda p, o: p.mkdir(), "a folder"),
], ids=["symlink", "fifo", "folder"])
def test_what_is_not_a_regular_file_is_refused_by_name(store, tmp_path, make, kind):
    store.write_bytes("b1/real", b"secret")
    make(tmp_path / "dest" / "b1" / "x", tmp_path / "dest" / "b1" / "real")
    for read in (store.exists, store.size, store.open_file, lambda k: b"".join(store.reader(k))):
        with pytest.raises(IntegrityError, match=f"b1/x: it is {kind}; backups are read without following links"):
            read("b1/x")


def test_a_linked_folder_on_the_way_is_refused(store, tmp_path):
    store.write_bytes("real/f", b"x")
    (tmp_path / "dest" / "linked").symlink_to(tmp_path / "dest" / "real")
    with pytest.raises(IntegrityError, match="its folder linked is a symlink"):
        store.read_bytes("linked/f")
    assert store.list_backups() == ["real"]  # a linked folder is no backup of this destination


def test_missing_keys(store):
    assert not store.exists("nope/x") and store.size_if_exists("nope/x") is None
    with pytest.raises(StorageError, match="does not exist"):
        store.size("nope/x")
    with pytest.raises(StorageError, match="does not exist"):
        store.open_file("nope/x")


@pytest.mark.parametrize(("size", "limit", "refused"), [
    (0, 0, False), (10, 10, False), (11, 10, True), (MIB + 1, MIB, True),
], ids=["empty-at-zero", "at-the-limit", "one-over", "one-over-a-mib"])
def test_read_bytes_caps_a_control_file(store, size, limit, refused):
    store.write_bytes("b1/manifest.json", b"x" * size)
    if refused:
        with pytest.raises(Unreadable, match=f"over the {limit:,} bytes a control file may have"):
            store.read_bytes("b1/manifest.json", limit=limit)
    else:
        assert len(store.read_bytes("b1/manifest.json", limit=limit)) == size


def test_list_and_delete_backups(store):
    assert store.list_backups() == []  # no root yet
    for b in ("2026-02", "2026-01", ".hidden"):
        store.write_bytes(f"{b}/m", b"x")
    store.write_bytes("loose-file", b"x")
    assert store.list_backups() == ["2026-01", "2026-02"]
    store.delete_backup("2026-01")
    assert store.list_backups() == ["2026-02"]


def test_check_writable_and_free_space(store, tmp_path):
    store.check_writable()
    assert not os.path.exists(tmp_path / "dest" / ".lastline-write-probe")
    assert store.free_bytes() > 0
    store.require_free(1, "a backup")
    with pytest.raises(StorageError, match="GB free; a backup may need"):
        store.require_free(1 << 62, "a backup")


def test_a_partial_that_is_a_link_is_never_written_through(store, tmp_path):
    (tmp_path / "dest" / "b1").mkdir(parents=True)
    target = tmp_path / "elsewhere"
    (tmp_path / "dest" / "b1" / "x.partial").symlink_to(target)
    with pytest.raises(IntegrityError, match="its .partial is a symlink"):
        store.writer("b1/x")
    assert not target.exists()


def test_private_dirs_and_urls(tmp_path):
    private_dirs(str(tmp_path / "a" / "b"))
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700
    store = FileStorage(str(tmp_path) + "///")
    assert store.url == f"file://{tmp_path}" and store.location("b/k") == f"file://{tmp_path}/b/k"
    assert filesystem_type(str(tmp_path)) is not None
