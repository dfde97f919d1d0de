"""The binlog archive's chain, as pure logic: exactly once and in order, holes named, forks where the source's
history is no longer the archive's (issue 29's first step; the shipping and the DAG build on it)."""
from __future__ import annotations

import pytest

from lastline.core.errors import IntegrityError
from lastline.pitr.chain import Branch, Entry, SourceFile, branch_id, plan, split_name

A = "0-1-100"  # GTID states the files start from


def f(seq: int, size: int, start: str = "", server_id: int = 1) -> SourceFile:
    return SourceFile(f"mariadb-bin.{seq:06d}", size, start or f"0-{server_id}-{seq * 10}", server_id)


def archived(*files: SourceFile, open_last: bool = True) -> Branch:
    entries = [Entry(x.name, x.start_gtids, x.size, [{"offset": 0, "size": x.size, "sha256": "s"}], closed=True) for x in files]
    if open_last and entries:
        entries[-1].closed = False
    return Branch("1-000001-x", entries)


def kinds(steps) -> list[tuple]:
    return [(s.kind, s.name, s.offset, s.upto, s.closes) if s.kind == "ship" else (s.kind, s.name) for s in steps]


def test_an_empty_archive_ships_every_file_in_order_the_last_one_open():
    steps = plan(None, [f(3, 300), f(1, 100), f(2, 200)])
    assert kinds(steps) == [("ship", "mariadb-bin.000001", 0, 100, True), ("ship", "mariadb-bin.000002", 0, 200, True),
                            ("ship", "mariadb-bin.000003", 0, 300, False)]


def test_each_byte_is_shipped_once_a_growing_file_resumes_and_a_rotation_closes_it():
    branch = archived(f(1, 100), f(2, 200))
    assert plan(branch, [f(1, 100), f(2, 200)]) == []  # nothing new: nothing to do
    assert kinds(plan(branch, [f(1, 100), f(2, 250)])) == [("ship", "mariadb-bin.000002", 200, 250, False)]
    assert kinds(plan(branch, [f(2, 260), f(3, 40)])) == [("ship", "mariadb-bin.000002", 200, 260, True),
                                                         ("ship", "mariadb-bin.000003", 0, 40, False)]
    # FLUSH BINARY LOGS right after the last ship: the file does not grow, but it is closed now
    assert kinds(plan(branch, [f(2, 200), f(3, 0)])) == [("ship", "mariadb-bin.000002", 200, 200, True),
                                                        ("ship", "mariadb-bin.000003", 0, 0, False)]


def test_files_purged_before_they_were_archived_are_holes_named_in_order():
    branch = archived(f(1, 100), f(2, 200), open_last=False)
    steps = plan(branch, [f(5, 50), f(6, 10)])
    assert kinds(steps) == [("hole", "mariadb-bin.000003"), ("hole", "mariadb-bin.000004"),
                            ("ship", "mariadb-bin.000005", 0, 50, True), ("ship", "mariadb-bin.000006", 0, 10, False)]
    assert "purged on the source" in steps[0].reason
    # the open file itself purged: its tail after what was archived is the hole
    steps = plan(archived(f(1, 100), f(2, 200)), [f(3, 30)])
    assert kinds(steps) == [("hole", "mariadb-bin.000002"), ("ship", "mariadb-bin.000003", 0, 30, False)]
    assert steps[0].offset == 200 and "after byte 200" in steps[0].reason


def test_a_restored_server_reusing_the_names_forks_the_chain_and_never_overwrites():
    branch = archived(f(1, 100), f(2, 200), f(3, 300))
    reused = [f(1, 100), f(2, 200, start="0-1-999"), f(3, 20, start="0-1-1000")]  # history differs from file 2 on
    steps = plan(branch, reused)
    assert steps[0].kind == "fork" and steps[0].name == branch_id(reused[1])
    assert "mariadb-bin.000002 now starts from" in steps[0].reason and "shares the files up to mariadb-bin.000001" in steps[0].reason
    assert kinds(steps[1:]) == [("ship", "mariadb-bin.000002", 0, 200, True), ("ship", "mariadb-bin.000003", 0, 20, False)]
    # names going back (a reset or a new server starting at 000001) with other history: a branch from scratch
    fresh = [f(1, 50, start="", server_id=2)]
    steps = plan(branch, fresh)
    assert steps[0].kind == "fork" and steps[0].name.startswith("2-000001-") and kinds(steps[1:]) == [
        ("ship", "mariadb-bin.000001", 0, 50, False)]
    # a file that shrank is not the archived one
    assert plan(archived(f(1, 100)), [f(1, 60)])[0].kind == "fork"


def test_a_source_showing_a_prefix_of_the_branch_byte_for_byte_waits_and_other_names_are_refused():
    branch = archived(f(1, 100), f(2, 200), f(3, 300), open_last=False)
    assert plan(branch, [f(1, 100), f(2, 200)]) == []
    with pytest.raises(IntegrityError, match="several bases"):
        plan(branch, [f(1, 100), SourceFile("other-bin.000002", 1, "x")])
    with pytest.raises(IntegrityError, match="not a binlog file name"):
        split_name("../mariadb-bin.000001")
    assert plan(branch, [SourceFile("other-bin.000001", 5, "0-1-1")])[0].kind == "fork"


def test_a_file_that_cannot_follow_the_archived_end_forks_even_under_new_names():
    """A promoted replica whose file numbers lie past the archive's newest: its first file starts from a GTID state
    behind what the archive already holds, so it is another history (a fork), not a continuation with holes."""
    last = Entry("mariadb-bin.000005", "0-1-40", 500, [{"offset": 0, "size": 500, "sha256": "s"}], closed=False,
                 end_gtids="0-1-50")
    branch = Branch("1-000001-x", [last])
    other = SourceFile("mariadb-bin.000009", 90, "0-1-45", 2)  # behind 0-1-50: written by a server that had less
    steps = plan(branch, [other])
    assert steps[0].kind == "fork" and "behind the archived mariadb-bin.000005's end" in steps[0].reason
    ahead = SourceFile("mariadb-bin.000009", 90, "0-1-70", 1)  # ahead: files purged in between, named as holes
    assert [s.kind for s in plan(branch, [ahead])] == ["hole", "hole", "hole", "hole", "ship"]
