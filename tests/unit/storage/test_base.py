"""storage.base: what every backend inherits: keys checked before any use, a writer that commits only on a clean exit,
free space required, and a control file read with a cap (refused by its size where the backend tells it, else after
limit + 1 bytes). A backend in memory stands in for one that cannot tell a size first (the file backend is
tests/unit/storage/test_file.py)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from lastline.core.errors import IntegrityError, StorageError
from lastline.storage.base import Storage, Unreadable, Writer, checked_key, refusal


class MemoryWriter(Writer):
    def __init__(self, store: MemoryStorage, key: str) -> None:
        self.store, self.key, self.data = store, key, b""

    def write(self, data: bytes | memoryview) -> None:
        self.data += bytes(data)

    def commit(self) -> None:
        self.store.objects[self.key] = self.data

    def abort(self) -> None:
        self.store.aborted.append(self.key)


class MemoryStorage(Storage):
    """Objects in a dict; its size is only known by reading (the inherited size_if_exists is used)."""

    url = "memory://test/"

    def __init__(self, free: int | None = None) -> None:
        self.objects: dict[str, bytes] = {}
        self.aborted: list[str] = []
        self.read: list[int] = []
        self.free = free

    def writer(self, key: str, durable: bool = True) -> Writer:
        return MemoryWriter(self, checked_key(key, self.url))

    def reader(self, key: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        data = self.objects[key]
        for i in range(0, len(data), chunk):
            self.read.append(chunk)
            yield data[i:i + chunk]

    def exists(self, key: str) -> bool:
        return key in self.objects

    def size(self, key: str) -> int:
        return len(self.objects[key])

    def list_backups(self) -> list[str]:
        return sorted({k.split("/")[0] for k in self.objects})

    def delete_backup(self, backup_id: str) -> None:
        self.objects = {k: v for k, v in self.objects.items() if not k.startswith(backup_id + "/")}

    def delete_objects(self, keys: list[str]) -> None:
        for key in keys:
            self.objects.pop(checked_key(key, self.url), None)

    def check_writable(self) -> None:
        pass

    def free_bytes(self) -> int | None:
        return self.free


@pytest.mark.parametrize("key", ["a", "b1/manifest.json", "b 1/`t`.sql", "b1/a.b.c", "b1/x/y/z"],
                         ids=["one-segment", "usual", "spaces-backticks", "dots", "deep"])
def test_checked_key_accepts_relative_keys(key):
    assert checked_key(key, "here") == key


@pytest.mark.parametrize("key", ["", "/a", "a/", "a//b", ".", "..", "a/./b", "a/../b", "a\x00"],
                         ids=["empty", "absolute", "trailing-slash", "empty-segment", "dot", "dot-dot", "inner-dot",
                              "inner-dot-dot", "nul"])
def test_checked_key_refuses(key):
    with pytest.raises(IntegrityError, match="keys are relative paths inside here"):
        checked_key(key, "here")


def test_a_writer_commits_on_a_clean_exit_and_aborts_on_an_error():
    store = MemoryStorage()
    store.write_bytes("b1/ok", b"data")
    with pytest.raises(ValueError), store.writer("b1/bad") as w:
        w.write(b"half")
        raise ValueError
    assert store.objects == {"b1/ok": b"data"} and store.aborted == ["b1/bad"]
    assert w.fileno() is None  # not a local file


@pytest.mark.parametrize(("size", "limit", "refused"), [
    (0, 0, False), (5, 5, False), (6, 5, True), ((1 << 20) + 1, 1 << 20, True),
], ids=["empty", "at-the-limit", "one-over", "over-a-mib"])
def test_read_bytes_with_a_limit_reads_at_most_limit_plus_one(size, limit, refused):
    store = MemoryStorage()
    store.objects["b1/c.json"] = b"x" * size
    store.size_if_exists = lambda key: None  # type: ignore[method-assign]  # a backend that cannot tell first
    if refused:
        with pytest.raises(Unreadable, match="read no further"):
            store.read_bytes("b1/c.json", limit)
        assert sum(store.read) <= 2 * (limit + 1)
    else:
        assert store.read_bytes("b1/c.json", limit) == b"x" * size


def test_read_bytes_refuses_by_size_without_reading():
    store = MemoryStorage()
    store.objects["b1/c.json"] = b"x" * 100
    with pytest.raises(Unreadable, match="100 bytes, over the 10 bytes a control file may have") as caught:
        store.read_bytes("b1/c.json", 10)
    assert store.read == [] and caught.value.location == "memory://test/b1/c.json"


@pytest.mark.parametrize(("free", "need", "refused"), [(None, 1 << 60, False), (100, 100, False), (99, 100, True)],
                         ids=["unknown-passes", "exactly-enough", "one-short"])
def test_require_free(free, need, refused):
    store = MemoryStorage(free)
    if refused:
        with pytest.raises(StorageError, match="destination memory://test/ has 0.00 GB free; a dump may need"):
            store.require_free(need, "a dump")
    else:
        store.require_free(need, "a dump")


def test_defaults_of_a_backend_without_local_files():
    store = MemoryStorage()
    assert not store.local_files and store.size_if_exists("x") is None
    store.sync()
    with pytest.raises(NotImplementedError, match="memory://test/ holds no local files"):
        store.open_file("x")
    assert "restore another backup" in str(refusal("file:///b/x", "it is a symlink"))
