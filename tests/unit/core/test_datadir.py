"""core.datadir: a data directory's state and restore marker, cleared, moved aside (never reusing a folder), its size
and free space, and what a restore does to it first. Run on this host (LocalHost) in a temporary folder: the same
scripts run over SSH in the end-to-end tests."""
from __future__ import annotations

import os

import pytest

from lastline.core import datadir
from lastline.core.errors import PreflightError
from lastline.core.hosts import LOCAL


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "data dir")  # a space: every script quotes its arguments


@pytest.mark.parametrize(("files", "state"), [
    (None, "missing"), ([], "empty"), (["lost+found/"], "empty"), (["ibdata1"], "data"),
    (["ibdata1", datadir.MARKER], "partial"), ([".hidden"], "data"),
], ids=["missing", "empty", "lost-and-found-only", "data", "marked", "a-hidden-file"])
def test_state(path, files, state):
    if files is not None:
        os.mkdir(path)
        for name in files:
            os.mkdir(os.path.join(path, name)) if name.endswith("/") else open(os.path.join(path, name), "w").close()
    assert datadir.state(LOCAL, path) == state


def test_marker_written_read_and_removed(path):
    assert datadir.read_marker(LOCAL, path) == {}
    datadir.write_marker(LOCAL, path, {"backup_id": "b`1 x", "aside": None})
    assert datadir.read_marker(LOCAL, path) == {"backup_id": "b`1 x", "aside": None}
    datadir.remove_marker(LOCAL, path + "/")
    assert datadir.state(LOCAL, path) == "empty"
    with open(os.path.join(path, datadir.MARKER), "w") as fh:
        fh.write("{not json")
    assert datadir.read_marker(LOCAL, path) == {}


def test_prepare_for_restore_through_each_state(path):
    assert datadir.prepare_for_restore(LOCAL, path, force=False, backup_id="b1") is None  # missing: created
    assert datadir.state(LOCAL, path) == "partial"
    open(os.path.join(path, "half-extracted"), "w").close()
    assert datadir.prepare_for_restore(LOCAL, path, force=False, backup_id="b2") is None  # partial: cleared
    assert sorted(os.listdir(path)) == [datadir.MARKER] and datadir.read_marker(LOCAL, path)["backup_id"] == "b2"
    datadir.remove_marker(LOCAL, path)
    open(os.path.join(path, "ibdata1"), "w").close()
    os.mkdir(os.path.join(path, "lost+found"))
    with pytest.raises(PreflightError, match="is not empty and force is off"):
        datadir.prepare_for_restore(LOCAL, path, force=False, backup_id="b3")
    aside = datadir.prepare_for_restore(LOCAL, path, force=True, backup_id="b3")
    assert aside is not None and os.listdir(aside) == ["ibdata1"]
    assert sorted(os.listdir(path)) == sorted([datadir.MARKER, "lost+found"])  # lost+found stays with the filesystem
    open(os.path.join(path, "again"), "w").close()
    assert datadir.prepare_for_restore(LOCAL, path, force=False, backup_id="b4") == aside  # a retry keeps it


def test_move_aside_never_reuses_a_folder(path):
    os.mkdir(path)
    found = []
    for name in ("one", "two", "three"):
        open(os.path.join(path, name), "w").close()
        found.append(datadir.move_aside(LOCAL, path))
    assert len(set(found)) == 3  # within one second: base, base-2, base-3 (or a new second)
    assert sorted(name for a in found for name in os.listdir(a)) == ["one", "three", "two"]


def test_sizes(path):
    os.makedirs(os.path.join(path, "db"))
    with open(os.path.join(path, "db", "t.ibd"), "wb") as fh:
        fh.write(b"x" * 100_000)
    assert datadir.used_bytes(LOCAL, path) >= 100_000
    assert datadir.free_bytes(LOCAL, os.path.join(path, "not", "yet")) > 0  # its nearest existing parent
    datadir.require_room(LOCAL, path, 1, "the restore")
    with pytest.raises(PreflightError, match="free; the restore needs about .* free space on the target's datadir"):
        datadir.require_room(LOCAL, path, 1 << 62, "the restore")
    datadir.clear(LOCAL, path)
    assert os.listdir(path) == []
    datadir.remove(LOCAL, path)
    assert not os.path.exists(path)


@pytest.mark.parametrize(("n", "text"), [(0, "0.0 MB"), (12_345_678, "12.3 MB"), (999_999_999, "1000.0 MB"), (1e9, "1.00 GB")],
                         ids=["zero", "megabytes", "just-under-a-gb", "a-gb"])
def test_size_text(n, text):
    assert datadir.size_text(n) == text


def test_as_owner_runs_as_is_on_a_folder_of_the_same_user(path):
    os.mkdir(path)
    if os.geteuid() == 0 and os.stat(path).st_uid != 0:
        pytest.skip("a root-owned folder is what this checks")
    assert datadir.as_owner(LOCAL, path) == []
    assert datadir.as_owner(LOCAL, path + "-missing") == []
