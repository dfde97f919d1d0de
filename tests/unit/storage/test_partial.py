"""storage.partial: a file written whole under `<key>.partial` and renamed on commit; writers of one key take turns
(the binlog stream and retention both write a chain), so each commit is one writer's whole file and none fails."""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time

import pytest

from lastline.storage.partial import FileWriter, locked_partial


def _body(writer: int, k: int) -> bytes:
    """A file that says whether it is whole: its sha256 of the rest first."""
    rest = f"writer {writer} write {k} ".encode() * (1 + (writer * 7 + k) % 400)
    return hashlib.sha256(rest).hexdigest().encode() + rest


def _whole(data: bytes) -> bool:
    return hashlib.sha256(data[64:]).hexdigest().encode() == data[:64]


def test_writers_of_one_key_at_once_each_commit_a_whole_file(tmp_path):
    path, errors, seen = str(tmp_path / "b" / "chain.json"), [], []
    stop = threading.Event()

    def write(n: int) -> None:
        try:
            for k in range(40):
                w = FileWriter(path, durable=False)
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


def test_the_second_writer_waits_for_the_first_to_commit_and_wins(tmp_path, caplog):
    path = str(tmp_path / "k")
    first = FileWriter(path)
    first.write(b"first")
    second: list[FileWriter] = []
    opener = threading.Thread(target=lambda: second.append(FileWriter(path)))
    with caplog.at_level(logging.WARNING, logger="lastline.storage.partial"):
        opener.start()
        time.sleep(0.3)
        assert not second  # waiting for the lock
        first.commit()
        opener.join(10)
    assert second
    with open(path, "rb") as fh:
        assert fh.read() == b"first"  # the first's file, renamed whole before the second wrote a byte
    second[0].write(b"second")
    second[0].commit()
    with open(path, "rb") as fh:
        assert fh.read() == b"second"
    assert sorted(os.listdir(tmp_path)) == ["k"]


def test_a_waiting_writer_says_so(tmp_path, caplog):
    tmp = str(tmp_path / "k.partial")
    held = locked_partial(tmp)
    fds: list[int] = []
    t = threading.Thread(target=lambda: fds.append(locked_partial(tmp, warn_every=0.1)))
    with caplog.at_level(logging.WARNING, logger="lastline.storage.partial"):
        t.start()
        time.sleep(0.4)
        os.close(held)
        t.join(10)
    assert fds
    os.close(fds[0])
    assert f"waiting for another writer of {tmp}" in caplog.text


def test_an_abort_while_another_waits_leaves_it_a_fresh_file(tmp_path):
    path = str(tmp_path / "k")
    first = FileWriter(path)
    first.write(b"cut short")
    second: list[FileWriter] = []
    t = threading.Thread(target=lambda: second.append(FileWriter(path)))
    t.start()
    time.sleep(0.2)
    first.abort()
    t.join(10)
    second[0].write(b"whole")
    second[0].commit()
    with open(path, "rb") as fh:
        assert fh.read() == b"whole"


def test_what_a_killed_writer_left_is_emptied_and_written_over(tmp_path):
    path = tmp_path / "k"
    (tmp_path / "k.partial").write_bytes(b"\0half a stream" * 1000)  # no lock: its writer is gone
    w = FileWriter(str(path))
    w.write(b"new")
    w.commit()
    assert path.read_bytes() == b"new" and not (tmp_path / "k.partial").exists()


def test_a_partial_that_is_a_symlink_is_never_written_through(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep")
    (tmp_path / "k.partial").symlink_to(target)
    with pytest.raises(OSError):
        FileWriter(str(tmp_path / "k"))
    assert target.read_bytes() == b"keep"
