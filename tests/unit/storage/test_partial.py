"""storage.partial: a file written whole under a `.partial` name of its own writer's and renamed on commit; writers of
one key at once (the binlog stream and retention both write a chain) never share a file and the last commit wins;
what dead writers left is swept, what a live one holds never is, and a link at such a name is refused."""
from __future__ import annotations

import errno
import hashlib
import os
import threading
import time

import pytest

from lastline.core.errors import IntegrityError, StorageError
from lastline.storage import partial
from lastline.storage.partial import FRESH, STALE_AFTER, FileWriter, refuse_planted, sweep


def _folder(path) -> int:
    os.makedirs(path, exist_ok=True)
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def _writer(path: str, durable: bool = True) -> FileWriter:
    return FileWriter(_folder(os.path.dirname(path)), os.path.basename(path), path, durable)


def _sweep(folder, **kw) -> list[str]:
    fd = _folder(folder)
    try:
        return sweep(fd, str(folder), **kw)
    finally:
        os.close(fd)


def _body(writer: int, k: int) -> bytes:
    """A file that says whether it is whole: its sha256 of the rest first."""
    rest = f"writer {writer} write {k} ".encode() * (1 + (writer * 7 + k) % 400)
    return hashlib.sha256(rest).hexdigest().encode() + rest


def _whole(data: bytes) -> bool:
    return hashlib.sha256(data[64:]).hexdigest().encode() == data[:64]


def _age(path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_writers_of_one_key_at_once_each_commit_a_whole_file(tmp_path):
    path, errors, seen = str(tmp_path / "b" / "chain.json"), [], []
    stop = threading.Event()

    def write(n: int) -> None:
        try:
            for k in range(40):
                w = _writer(path, durable=False)
                w.write(_body(n, k)[:50])
                w.write(_body(n, k)[50:])
                w.commit()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def read() -> None:
        while not stop.is_set():
            try:
                with open(path, "rb") as fh:
                    seen.append(_whole(fh.read()))
            except FileNotFoundError:
                pass

    reader = threading.Thread(target=read)
    reader.start()
    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stop.set()
    reader.join(10)
    assert errors == []
    assert seen and all(seen)  # every read found one writer's whole file, never a mix or a cut
    with open(path, "rb") as fh:
        assert _whole(fh.read())
    assert sorted(os.listdir(tmp_path / "b")) == ["chain.json"]


def test_two_writers_of_a_key_write_files_of_their_own_and_the_last_commit_wins(tmp_path):
    path = str(tmp_path / "k")
    first, second = _writer(path), _writer(path)
    assert first.tmp != second.tmp and first.tmp.endswith(".partial")
    first.write(b"first")
    second.write(b"second")
    second.commit()
    first.commit()
    assert (tmp_path / "k").read_bytes() == b"first"
    assert sorted(os.listdir(tmp_path)) == ["k"]


def test_what_a_dead_writer_left_is_swept_and_what_a_live_one_holds_is_not(tmp_path):
    dead = tmp_path / "a.0123456789abcdef.partial"
    dead.write_bytes(b"\0half a stream" * 1000)  # its writer was killed: no lock held
    legacy = tmp_path / "b.partial"  # what an earlier lastline's writer left
    legacy.write_bytes(b"old")
    live = _writer(str(tmp_path / "c"))
    live.write(b"still writing")
    young = tmp_path / "d.fedcba9876543210.partial"  # made a moment ago: its writer may not hold its lock yet
    young.write_bytes(b"")
    for p in (dead, live.tmp):
        _age(p, 2 * FRESH)  # the legacy name is no writer's of today: removed however young
    assert sorted(_sweep(tmp_path)) == sorted([dead.name, legacy.name])
    assert young.exists() and os.path.exists(live.tmp)
    live.commit()
    assert (tmp_path / "c").read_bytes() == b"still writing"
    assert _sweep(tmp_path / "empty") == []


def test_without_locks_a_partial_is_dead_once_unchanged_for_an_hour(tmp_path, monkeypatch):
    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(partial.fcntl, "flock", no_locks)
    writer = _writer(str(tmp_path / "k"))  # writes on, unlocked
    writer.write(b"x")
    old = tmp_path / "o.0123456789abcdef.partial"
    old.write_bytes(b"left")
    _age(old, STALE_AFTER + 1)
    _age(writer.tmp, STALE_AFTER / 2)
    assert _sweep(tmp_path) == [old.name]
    writer.commit()
    assert (tmp_path / "k").read_bytes() == b"x"


def test_a_writer_whose_file_was_removed_fails_its_commit_and_publishes_nothing(tmp_path):
    (tmp_path / "k").write_bytes(b"as it was")
    w = _writer(str(tmp_path / "k"))
    w.write(b"new")
    os.unlink(w.tmp)
    with pytest.raises(StorageError, match="it was removed while written"):
        w.commit()
    assert (tmp_path / "k").read_bytes() == b"as it was"


def test_a_link_at_a_partial_name_is_never_followed_and_refused_for_its_own_key(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep")
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "k.partial").symlink_to(target)
    (tmp_path / "dest" / "j.partial").symlink_to(target)
    _age(target, 2 * FRESH)
    assert _sweep(tmp_path / "dest") == []  # links are left alone, logged, never followed
    assert target.read_bytes() == b"keep" and (tmp_path / "dest" / "k.partial").is_symlink()
    fd = _folder(tmp_path / "dest")
    try:
        with pytest.raises(IntegrityError, match="its .partial is a symlink, and lastline never writes through one"):
            refuse_planted(fd, "k", str(tmp_path / "dest" / "k"))
        refuse_planted(fd, "x", str(tmp_path / "dest" / "x"))  # another key's name: nothing planted there
    finally:
        os.close(fd)
    w = _writer(str(tmp_path / "dest" / "j"))  # its own name: the link is never opened
    w.write(b"new")
    w.commit()
    assert target.read_bytes() == b"keep" and (tmp_path / "dest" / "j").read_bytes() == b"new"


def test_a_writer_that_fails_as_it_starts_leaves_no_descriptor_or_file(tmp_path, monkeypatch):
    def broken(*args, **kw):
        raise MemoryError("as it starts")

    before = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(partial.os, "fdopen", broken)
    with pytest.raises(MemoryError):
        _writer(str(tmp_path / "k"))
    monkeypatch.undo()
    assert len(os.listdir("/proc/self/fd")) == before and os.listdir(tmp_path) == []


def test_a_folder_link_takes_no_write_sweep_or_delete_elsewhere(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "download.partial").write_bytes(b"someone's")
    _age(victim / "download.partial", STALE_AFTER + 1)
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "b").symlink_to(victim)
    from lastline.storage.file import FileStorage

    store = FileStorage(str(tmp_path / "dest"))
    with pytest.raises(IntegrityError, match="its folder b is a symlink"):
        store.writer("b/chain.json")
    store.delete_backup("b")  # a link: nothing deleted through it
    assert (victim / "download.partial").read_bytes() == b"someone's" and not (victim / "chain.json").exists()
