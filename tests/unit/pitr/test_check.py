"""pitr.check: how far the binlog archive rolls a base forward (to the end of the last file before the first hole,
or to the time the archive covers), the problems the check raises (an empty archive, one fallen behind), the alert
that goes out only when they change, and the report page. On a real local destination holding a signed chain."""
from __future__ import annotations

import pytest

from lastline.pitr.catalog import write_branch, write_branches
from lastline.pitr.chain import Branch, Entry
from lastline.pitr.check import base_window, changed, check, markdown, reach
from lastline.pitr.window import Line, utc
from lastline.storage.file import FileStorage

T0 = 1_795_882_472
BID = "1-000001-0a1b2c3d"


def files(**changes: dict) -> list[Entry]:
    """Three archived files, 0-1-1..3, 0-1-4..5 and 0-1-6, each transaction a second apart; `changes` by file name."""
    out = [
        Entry("bin.000001", "0-1-0", size=100, segments=[{"offset": 0, "size": 100, "sha256": "a" * 64}], closed=True,
              transactions=3, end_gtids="0-1-3", first_time=T0 + 1, last_time=T0 + 3),
        Entry("bin.000002", "0-1-3", size=100, segments=[{"offset": 0, "size": 100, "sha256": "b" * 64}], closed=True,
              transactions=2, end_gtids="0-1-5", first_time=T0 + 4, last_time=T0 + 5),
        Entry("bin.000003", "0-1-5", size=50, segments=[{"offset": 0, "size": 50, "sha256": "c" * 64}],
              transactions=1, end_gtids="0-1-6", first_time=T0 + 6, last_time=T0 + 6),
    ]
    for e in out:
        for k, v in changes.get(e.name, {}).items():
            setattr(e, k, v)
    return out


COVERED = {"file": "bin.000003", "size": 50, "time": T0 + 30}


@pytest.mark.parametrize(("changes", "covered", "base", "to_time", "to_gtid", "hole"), [
    ({}, COVERED, ("bin.000001", "0-1-1"), T0 + 30, "0-1-6", None),
    ({}, None, ("bin.000002", "0-1-4"), T0 + 6, "0-1-6", None),
    ({"bin.000002": {"missing": True, "segments": []}}, COVERED, ("bin.000001", "0-1-2"), T0 + 3, "0-1-3", "bin.000002"),
    ({"bin.000003": {"pruned": True}}, COVERED, ("bin.000002", "0-1-4"), T0 + 5, "0-1-5", "bin.000003"),
    ({"bin.000002": {"tail_missing": True}}, COVERED, ("bin.000001", "0-1-1"), T0 + 5, "0-1-5", "bin.000002"),
    ({}, COVERED, (None, "0-1-4"), T0 + 30, "0-1-6", None),
    ({"bin.000002": {"missing": True, "segments": [], "proven_empty": "bin.000003"}}, COVERED, ("bin.000001", "0-1-2"),
     T0 + 30, "0-1-6", None),
    ({"bin.000002": {"tail_missing": True, "proven_empty": "bin.000003"}}, COVERED, ("bin.000001", "0-1-1"), T0 + 30,
     "0-1-6", None),
], ids=["whole-line-to-the-covered-time", "no-covered-time-ends-at-the-last-transaction", "a-hole-after-the-base",
        "a-pruned-file", "a-file-cut-at-its-tail", "base-known-by-gtid-only", "a-hole-proven-empty-is-crossed",
        "a-tail-proven-empty-is-crossed"])
def test_reach(changes, covered, base, to_time, to_gtid, hole):
    line = Line(BID, [(BID, e) for e in files(**changes)], covered)
    got = reach(line, *base)
    assert (got["to_time"], got["to_gtid"], got["hole"]) == (utc(to_time), to_gtid, hole)
    assert got["note"] == (f"stops at the hole {hole}" if hole else "")


@pytest.mark.parametrize("base", [("bin.000009", "0-1-40"), ("bin.000002", "0-1-1")],
                         ids=["a-file-not-archived", "a-state-before-the-files-start"])
def test_reach_of_a_base_the_archive_does_not_reach_back_to(base):
    got = reach(Line(BID, [(BID, e) for e in files()], COVERED), *base)
    assert got["to_gtid"] is None and got["note"] == "the archive does not reach back to this backup"


@pytest.fixture
def archive(tmp_path) -> FileStorage:
    store = FileStorage(str(tmp_path))
    write_branch(store, Branch(BID, files(), covered=COVERED))
    write_branches(store, [{"id": BID}])
    return store


def test_an_empty_archive_is_a_problem(tmp_path):
    result = check(FileStorage(str(tmp_path)), 600, now=T0)
    assert result["windows"] == [] and result["bases"] == []
    assert result["problems"] == ["the binlog archive is empty: no base backup can be rolled forward"]


@pytest.mark.parametrize(("now", "behind"), [(T0 + 30, False), (T0 + 630, False), (T0 + 631, True)],
                         ids=["current", "at-the-threshold", "one-second-past"])
def test_an_archive_behind_its_threshold_is_a_problem(archive, now, behind):
    result = check(archive, 600, now=now)
    assert result["checked_at"] == utc(now)
    assert [w["to_time"] for w in result["windows"]] == [utc(T0 + 30)]
    assert bool(result["problems"]) is behind
    if behind:
        assert result["problems"][0].startswith("the binlog archive is 601 s behind")


def test_an_alert_goes_out_only_when_the_problems_change(archive):
    assert changed(archive, ["a"]) is True
    assert changed(archive, ["a"]) is False
    assert changed(archive, ["a", "b"]) is True
    assert changed(archive, []) is True
    assert changed(archive, []) is False


def test_base_window_without_an_archive(tmp_path):
    assert base_window(FileStorage(str(tmp_path)), "20261128T161432Z-7c93b6").startswith(
        "Point-in-time: no binlog archive in this destination")


def test_markdown_names_the_window_the_problems_and_each_base():
    result = {"checked_at": utc(T0 + 60), "problems": ["the binlog archive is 999 s behind"],
              "windows": [{"branch": BID, "from_time": utc(T0 + 1), "to_time": utc(T0 + 30), "to_gtid": "0-1-6",
                           "holes": ["bin.000002"], "proven_empty": ["bin.000001"]}],
              "bases": [{"backup_id": "20261128T161432Z-7c93b6", "kind": "physical", "to_time": utc(T0 + 30),
                         "to_gtid": "0-1-6", "note": ""},
                        {"backup_id": "20261128T160000Z-000000", "kind": "logical", "to_time": None, "to_gtid": None,
                         "note": "the archive does not reach back to this backup"}]}
    page = markdown(result).splitlines()
    assert page[0] == (f"# Binlog archive, checked {utc(T0 + 60)}: recoverable to {utc(T0 + 30)} (GTID 0-1-6) on branch "
                       f"{BID}, 1 base backup it rolls forward; 1 problem")
    assert "**Problem:** the binlog archive is 999 s behind" in page
    assert f"| {BID} | {utc(T0 + 1)} | {utc(T0 + 30)} | 0-1-6 | bin.000002 (crossed, proven empty: bin.000001) |" in page
    assert "| 20261128T160000Z-000000 | logical | - | - | the archive does not reach back to this backup |" in page


def test_markdown_of_an_empty_archive():
    page = markdown({"checked_at": utc(T0), "problems": [], "windows": [], "bases": []})
    assert page.startswith(f"# Binlog archive, checked {utc(T0)}: nothing recoverable yet\n")
    assert "**No problem: the chain is whole and current.**" in page
