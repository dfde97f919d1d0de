"""pitr.chain: what the archiver ships next from what the archive holds and what the source shows: a file shipped
from where the archive stopped, holes named, and a fork wherever the source's history is no longer the branch's."""
from __future__ import annotations

import pytest

from lastline.core.errors import IntegrityError
from lastline.pitr.chain import BRANCH_ID, Branch, Entry, SourceFile, Step, branch_id, gap, plan, split_name


@pytest.mark.parametrize(("name", "expected"), [
    ("mariadb-bin.000007", ("mariadb-bin", 7)), ("a.b_c.1234567", ("a.b_c", 1234567)), ("bin.000000", ("bin", 0)),
], ids=["usual", "dots-in-base-seven-digits", "zero"])
def test_split_name(name, expected):
    assert split_name(name) == expected


@pytest.mark.parametrize("name", ["bin.00001", "bin", "bin.000001.idx", "bin 1.000001", "`bin`.000001", ""],
                         ids=["five-digits", "no-number", "suffix", "space", "backticks", "empty"])
def test_split_name_refuses(name):
    with pytest.raises(IntegrityError, match="is not a binlog file name"):
        split_name(name)


def test_branch_id_names_the_server_file_and_start_state():
    a = branch_id(SourceFile("bin.000003", 10, "0-1-5", server_id=12))
    assert a.startswith("12-000003-") and BRANCH_ID.match(a)
    assert branch_id(SourceFile("bin.000003", 99, "0-1-5", server_id=12)) == a  # the size is not part of it
    assert branch_id(SourceFile("bin.000003", 10, "0-1-6", server_id=12)) != a  # another history, another branch


def src(seq: int, size: int = 100, start: str | None = None, same_tail: bool = True) -> SourceFile:
    return SourceFile(f"bin.{seq:06d}", size, start if start is not None else f"0-1-{seq * 10}", 1, same_tail)


def arc(seq: int, size: int = 100, closed: bool = True, start: str | None = None, missing: bool = False) -> Entry:
    return Entry(f"bin.{seq:06d}", start if start is not None else f"0-1-{seq * 10}", size=size, closed=closed,
                 missing=missing, end_gtids=f"0-1-{seq * 10 + 9}")


PROVEN = ("proven empty: bin.000002 starts from the GTID state the archived bytes end at, so no transaction was lost "
          "(a roll-forward crosses it)")


def ship(seq: int, offset: int = 0, upto: int = 100, closes: bool = True) -> Step:
    return Step("ship", f"bin.{seq:06d}", offset, upto, closes=closes, start_gtids=f"0-1-{seq * 10}")


@pytest.mark.parametrize(("entries", "files", "steps"), [
    (None, [], []),
    (None, [src(1)], [ship(1, closes=False)]),
    (None, [src(2), src(1)], [ship(1), ship(2, closes=False)]),
    (None, [src(1), src(3)], [ship(1), Step("hole", "bin.000002", reason="purged on the source before it was archived"),
                              ship(3, closes=False)]),
    ([arc(1, 100, closed=False)], [src(1, 100)], []),
    ([arc(1, 60, closed=False)], [src(1, 100)], [ship(1, 60, 100, closes=False)]),
    ([arc(1, 100, closed=False)], [src(1, 100), src(2, 40)], [ship(1, 100, 100), ship(2, 0, 40, closes=False)]),
    ([arc(1, 100)], [src(1), src(2, 40)], [ship(2, 0, 40, closes=False)]),
    ([arc(1, 100)], [src(2, 40)], [ship(2, 0, 40, closes=False)]),
    ([arc(1, 60, closed=False)], [src(2, 40)],
     [Step("hole", "bin.000001", 60, reason="purged on the source after byte 60 was archived; the GTIDs 0-1-20 are "
           "missing", lost="0-1-20"), ship(2, 0, 40, closes=False)]),
    ([arc(1), arc(2, missing=True), arc(3, closed=False)], [src(3)], []),
    ([arc(1, 60, closed=False)], [src(2, 40, start="0-1-19")],
     [Step("hole", "bin.000001", 60, reason=f"purged on the source after byte 60 was archived; {PROVEN}",
           proven="bin.000002"), Step("ship", "bin.000002", 0, 40, start_gtids="0-1-19")]),
    ([arc(1, 60, closed=False)], [src(3, 40, start="0-1-19")],
     [Step("hole", "bin.000001", 60, reason=f"purged on the source after byte 60 was archived; {PROVEN}".replace(
         "bin.000002", "bin.000003"), proven="bin.000003"),
      Step("hole", "bin.000002", reason=f"purged on the source before it was archived; {PROVEN}".replace(
          "bin.000002", "bin.000003"), proven="bin.000003"), Step("ship", "bin.000003", 0, 40, start_gtids="0-1-19")]),
    ([arc(1, 100)], [src(3, 40, start="0-1-25")],
     [Step("hole", "bin.000002", reason="purged on the source before it was archived; the GTIDs 0-1-20..0-1-25 are "
           "missing", lost="0-1-20..0-1-25"), Step("ship", "bin.000003", 0, 40, start_gtids="0-1-25")]),
], ids=["nothing-on-the-source", "first-file", "sorted-by-number", "gap-is-a-hole", "up-to-date", "resumes-a-file",
        "closes-the-grown-file", "next-file-only", "the-archived-one-purged-since", "purged-mid-file",
        "an-archived-hole-is-not-shipped", "only-the-rotate-lost-is-proven-empty",
        "a-tail-and-a-whole-file-proven-empty-together", "a-whole-file-with-transactions-names-them"])
def test_plan_ships_exactly_once(entries, files, steps):
    branch = None if entries is None else Branch("b", entries)
    assert plan(branch, files) == steps


@pytest.mark.parametrize(("entries", "files", "why", "shares"), [
    ([arc(1), arc(2, closed=False)], [src(1), src(2, start="0-1-999")], "bin.000002 now starts from GTID state", "bin.000001"),
    ([arc(1, 100, closed=False)], [src(1, 50)], "bin.000001 is 50 bytes on the source, 100 archived", None),
    ([arc(1, 100, closed=False)], [src(1, 120, same_tail=False)], "bytes before byte 100 differ", None),
    ([arc(5)], [src(1)], "its names went back", None),
    ([arc(1, 100)], [src(2, start="0-1-3")], "behind the archived bin.000001's end", None),
], ids=["same-name-other-start", "file-shrank", "bytes-rewritten", "names-went-back", "next-file-behind-the-archive"])
def test_plan_forks_where_the_history_is_another(entries, files, why, shares):
    steps = plan(Branch("b", entries), files)
    assert steps[0].kind == "fork" and why in steps[0].reason and BRANCH_ID.match(steps[0].name)
    assert steps[0].shares == shares
    shipped = [s.name for s in steps[1:] if s.kind == "ship"]
    assert shipped == [f.name for f in sorted(files, key=lambda f: f.seq) if f.name != shares]
    assert all(s.offset == 0 for s in steps[1:])  # a new branch ships its files whole


def test_plan_forks_when_the_base_name_changes():
    steps = plan(Branch("b", [arc(1)]), [SourceFile("other.000001", 10, "0-1-10")])
    assert steps[0].kind == "fork" and "the source now writes other.*, the archive holds bin.*" in steps[0].reason
    assert steps[1] == Step("ship", "other.000001", 0, 10, closes=False, start_gtids="0-1-10")


def test_a_source_showing_a_prefix_of_the_branch_byte_for_byte_needs_nothing():
    """Names went back but every file it shows is archived alike: nothing new until the source writes."""
    assert plan(Branch("b", [arc(1), arc(2), arc(3)]), [src(1), src(2)]) == []


def test_plan_refuses_two_bases_on_one_source():
    with pytest.raises(IntegrityError, match="several bases"):
        plan(None, [src(1), SourceFile("other.000002", 1, "")])


@pytest.mark.parametrize(("end", "start", "expected"), [
    ("0-1-19", "0-1-19", ("bin.000002", "")),
    ("0-1-19,3-1-4", "0-7-12,0-1-19,3-1-4", ("bin.000002", "")),  # an older server id listed first: the last agrees
    ("0-1-19", "0-1-20", ("", "0-1-20")),
    ("0-1-19,3-1-4", "0-1-19,3-1-9", ("", "3-1-5..3-1-9")),
    ("0-1-19", "0-2-19", ("", "those between 0-1-19 and 0-2-19")),  # same number, another server: not the same GTID
    ("0-1-19", "0-1-19,5-1-2", ("", "domain 5's up to 5-1-2")),
    ("0-1-19,5-1-2", "0-1-19", ("", "those between 0-1-19,5-1-2 and 0-1-19")),  # a domain gone: not proven
    ("", "0-1-19", ("", "domain 0's up to 0-1-19")),
], ids=["equal", "older-server-ids-listed-before", "one-transaction-lost", "a-range-in-one-domain", "another-server-id",
        "a-new-domain", "a-domain-gone", "nothing-archived"])
def test_gap_proves_a_hole_empty_only_when_the_next_file_starts_where_the_archive_ends(end, start, expected):
    assert gap(end, src(2, start=start)) == expected


def test_entry_unusable_says_why():
    assert Entry("bin.000001", "").unusable == ""
    assert "purged on the source" in Entry("bin.000001", "", missing=True).unusable
    assert "the GTIDs 0-1-5 are missing" in Entry("bin.000001", "", missing=True, lost_gtids="0-1-5").unusable
    empty = Entry("bin.000001", "", missing=True, proven_empty="bin.000002")
    assert empty.unusable == "" and not empty.hole and not empty.tail_hole
    assert Entry("bin.000001", "", tail_missing=True).tail_hole
    assert not Entry("bin.000001", "", tail_missing=True, proven_empty="bin.000002").tail_hole
    assert "deleted by retention" in Entry("bin.000001", "", pruned=True).unusable
    assert src(7).seq == 7 and arc(8).seq == 8
