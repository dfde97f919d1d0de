"""storage.ssh: a backup folder on another host, reached through the sshd sandbox on loopback: writes appear only on
commit (private, fsynced, renamed), an aborted write is never committed, reads stream back byte exact, sizes and listings
are answered on the host, keys that leave the root are refused, links and non-files are refused by name, and a
folder that cannot be written is named."""
from __future__ import annotations

import os
import stat

import pytest

from lastline.core.errors import IntegrityError, StorageError
from lastline.storage.ssh import SshStorage

MIB = 1 << 20


@pytest.fixture
def store(sshd, tmp_path) -> SshStorage:
    return SshStorage("t_ssh", str(tmp_path / "dest") + "/")


@pytest.mark.parametrize("size", [0, 1, MIB + 1], ids=["empty", "one-byte", "over-a-chunk"])
def test_written_bytes_read_back(store, tmp_path, size):
    data = os.urandom(size)
    w = store.writer("20260101T000000Z/part")
    w.write(data)
    assert not (tmp_path / "dest" / "20260101T000000Z" / "part").exists()  # only its `.partial` until commit
    w.commit()
    path = tmp_path / "dest" / "20260101T000000Z" / "part"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and not path.with_name("part.partial").exists()
    assert store.size("20260101T000000Z/part") == size == store.size_if_exists("20260101T000000Z/part")
    assert b"".join(store.reader("20260101T000000Z/part", chunk=MIB)) == data


def test_an_aborted_write_is_never_committed(store, tmp_path):
    with pytest.raises(RuntimeError), store.writer("20260101T000000Z/part") as w:
        w.write(b"half")
        raise RuntimeError("cut")
    assert not store.exists("20260101T000000Z/part") and not (tmp_path / "dest" / "20260101T000000Z" / "part").exists()


def test_missing_files(store):
    assert store.size_if_exists("20260101T000000Z/none") is None and not store.exists("20260101T000000Z/none")
    with pytest.raises(StorageError, match=r"ssh://t_ssh.*/dest/20260101T000000Z/none does not exist"):
        store.size("20260101T000000Z/none")
    with pytest.raises(StorageError, match="cannot read"):
        store.read_bytes("20260101T000000Z/none")


def test_backups_are_listed_and_deleted_on_the_host(store):
    assert store.list_backups() == []  # no root yet: nothing, not an error
    for key in ("20260102T000000Z/a", "20260101T000000Z/a", ".lastline/state"):
        store.write_bytes(key, b"x")
    assert store.list_backups() == ["20260101T000000Z", "20260102T000000Z"]
    store.delete_backup("20260101T000000Z")
    assert store.list_backups() == ["20260102T000000Z"]


@pytest.mark.parametrize("key", ["/etc/passwd", "a/../b", "a//b", "./a"], ids=["absolute", "dot-dot", "empty-segment",
                                                                             "leading-dot"])
def test_keys_that_leave_the_root_are_refused(store, key):
    with pytest.raises(IntegrityError, match="refusing storage key"):
        store.exists(key)


@pytest.mark.parametrize(("make", "why"), [
    (lambda p, o: p.symlink_to(o), "it is a symlink"),
    (lambda p, o: os.mkfifo(p), "it is not a regular file"),
    (lambda p, o: p.mkdir(), "it is not a regular file"),
], ids=["symlink", "fifo", "folder"])
def test_what_is_not_a_regular_file_is_refused_by_name(store, tmp_path, make, why):
    store.write_bytes("b1/real", b"secret")
    make(tmp_path / "dest" / "b1" / "x", tmp_path / "dest" / "b1" / "real")
    for read in (store.exists, store.read_bytes):
        with pytest.raises(IntegrityError, match=f"b1/x: .*{why}"):
            read("b1/x")


def test_check_writable(store, sshd, tmp_path):
    store.check_writable()
    assert os.listdir(tmp_path / "dest") == []  # the probe is gone
    (tmp_path / "a-file").write_bytes(b"")
    with pytest.raises(StorageError, match=r"destination ssh://t_ssh.*/a-file/dest is not writable"):
        SshStorage("t_ssh", str(tmp_path / "a-file" / "dest")).check_writable()


def test_a_relative_root_is_refused():
    with pytest.raises(StorageError, match="the path must be absolute"):
        SshStorage("t_ssh", "backups")


def test_a_root_some_folders_deep_that_does_not_exist_yet_is_made(sshd, tmp_path):
    deep = SshStorage("t_ssh", str(tmp_path / "a" / "b" / "c"))
    deep.write_bytes("b1/part", b"x")
    assert (tmp_path / "a" / "b" / "c" / "b1" / "part").read_bytes() == b"x"


def test_two_writers_of_one_key_each_write_their_own_file_and_the_last_commit_wins(store, tmp_path):
    first, second = store.writer("b1/chain.json"), store.writer("b1/chain.json")
    first.write(b"first")
    second.write(b"second")
    second.commit()
    first.commit()
    assert store.read_bytes("b1/chain.json") == b"first"
    assert sorted(os.listdir(tmp_path / "dest" / "b1")) == ["chain.json"]


def test_what_a_dead_writer_left_an_hour_ago_goes_at_the_next_write_of_its_key(store, tmp_path):
    store.write_bytes("b1/part", b"x")
    folder = tmp_path / "dest" / "b1"
    old, young = folder / "part.0123456789abcdef.partial", folder / "part.fedcba9876543210.partial"
    for p in (old, young, folder / "part.partial"):
        p.write_bytes(b"half a stream")
    for p in (old, folder / "part.partial"):
        os.utime(p, (os.path.getmtime(p) - 3700,) * 2)
    store.write_bytes("b1/part", b"y")
    assert sorted(os.listdir(folder)) == ["part", young.name]  # the young one may be a live writer's


def test_a_folder_link_takes_no_write_or_delete_elsewhere(store, tmp_path):
    victim = tmp_path / "victim"
    (victim / "x").mkdir(parents=True)
    (victim / "x" / "keep").write_bytes(b"someone's")
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "b1").symlink_to(victim)
    with pytest.raises(IntegrityError, match="a folder on its path is a symlink; lastline never writes through one"):
        store.write_bytes("b1/x/part", b"data")
    for delete in (lambda: store.delete_backup("b1/x"), lambda: store.delete_objects(["b1/x/keep"])):
        with pytest.raises(IntegrityError, match="symlink; nothing was deleted through it"):
            delete()
    store.delete_backup("b1")  # the link itself: removed as a link, never followed
    assert not (tmp_path / "dest" / "b1").is_symlink()
    assert sorted(os.listdir(victim / "x")) == ["keep"] and (victim / "x" / "keep").read_bytes() == b"someone's"
    store.delete_objects(["none/a", "b"])  # nothing there: no error
    SshStorage("t_ssh", str(tmp_path / "not-yet")).delete_backup("b1")


@pytest.mark.parametrize("name", ["a*", "[x]", "sp ace", "q?"], ids=["star", "brackets", "space", "question"])
def test_a_name_with_pattern_characters_sweeps_only_its_own_leftovers(store, tmp_path, name):
    folder = tmp_path / "dest" / "b1"
    folder.mkdir(parents=True)
    others = [folder / "ab.0123456789abcdef.partial", folder / "x.partial", folder / f"{name}.partial.keep"]
    mine = folder / f"{name}.0123456789abcdef.partial"
    for p in (*others, mine):
        p.write_bytes(b"old")
        os.utime(p, (os.path.getmtime(p) - 3700,) * 2)
    store.write_bytes(f"b1/{name}", b"new")
    assert not mine.exists() and all(p.exists() for p in others)
    assert store.read_bytes(f"b1/{name}") == b"new"
