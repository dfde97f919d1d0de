"""pitr.window: a restore's `until` parsed, and a line of history's recoverable window (from the first file after its
last hole to the end the archive covers, the holes named). Reading branches from storage and resolving bytes are left
to the end-to-end tests of the archive."""
from __future__ import annotations

import pytest

from lastline.core.errors import ConfigError
from lastline.pitr.chain import Entry
from lastline.pitr.window import Line, Until, line_window, utc

T0 = 1_795_882_472  # 2026-11-28T16:14:32Z


@pytest.mark.parametrize(("seconds", "text"), [(T0, "2026-11-28T16:14:32Z"), (T0 + 0.9, "2026-11-28T16:14:32Z"), (0, None), (None, None)],
                         ids=["whole-second", "fraction-cut", "zero-is-none", "none"])
def test_utc(seconds, text):
    assert utc(seconds) == text


@pytest.mark.parametrize(("text", "until", "described"), [
    (None, Until("latest"), "latest"),
    ("  latest ", Until("latest"), "latest"),
    ("0-1-42", Until("gtid", gtid="0-1-42"), "GTID 0-1-42"),
    ("2026-11-28T16:14:32Z", Until("time", time=T0), "2026-11-28T16:14:32Z"),
], ids=["empty-is-latest", "latest-stripped", "gtid", "time"])
def test_until_parse(text, until, described):
    parsed = Until.parse(text)
    assert parsed == until
    assert parsed.describe() == described


@pytest.mark.parametrize("text", ["2026-11-28 16:14:32", "yesterday", "0-1", "2026-11-28T16:14:32+01:00"],
                         ids=["no-T-and-Z", "a-word", "gtid-without-seq", "offset-not-utc"])
def test_until_parse_refuses(text):
    with pytest.raises(ConfigError, match="expected a UTC time YYYY-MM-DDTHH:MM:SSZ, a GTID"):
        Until.parse(text)


def entry(seq: int, first: int = 0, last: int = 0, size: int = 100, **kw) -> tuple[str, Entry]:
    return "b1", Entry(f"bin.{seq:06d}", "", size=size, transactions=1 if first else 0, first_time=first, last_time=last,
                       end_gtids=f"0-1-{seq}", **kw)


@pytest.mark.parametrize(("covered", "expected"), [
    ({"file": "bin.000002", "size": 100, "time": T0 + 999}, T0 + 999),
    ({"file": "bin.000002", "size": 50, "time": T0 + 999}, None),
    ({"file": "bin.000001", "size": 100, "time": T0 + 999}, None),
    (None, None),
], ids=["at-the-line-end", "size-moved-on", "an-older-file", "never-recorded"])
def test_covered_time_counts_only_at_the_line_end(covered, expected):
    line = Line("b1", [entry(1, T0, T0 + 10), entry(2, T0 + 20, T0 + 30)], covered)
    assert line.covered_time() == expected


@pytest.mark.parametrize(("files", "covered", "window"), [
    ([entry(1, T0, T0 + 10), entry(2, T0 + 20, T0 + 30)], None,
     {"from_file": "bin.000001", "from_time": utc(T0), "to_time": utc(T0 + 30), "to_gtid": "0-1-2", "to_file": "bin.000002:100", "holes": []}),
    ([entry(1, T0, T0 + 10), entry(2, missing=True), entry(3, T0 + 40, T0 + 50)], None,
     {"from_file": "bin.000003", "from_time": utc(T0 + 40), "to_time": utc(T0 + 50), "to_gtid": "0-1-3", "to_file": "bin.000003:100",
      "holes": ["bin.000002"]}),
    ([entry(1, T0, T0 + 10), entry(2, T0 + 20, T0 + 30, tail_missing=True), entry(3, T0 + 40, T0 + 50)], None,
     {"from_file": "bin.000003", "from_time": utc(T0 + 40), "to_time": utc(T0 + 50), "to_gtid": "0-1-3", "to_file": "bin.000003:100",
      "holes": ["bin.000002"]}),
    ([entry(1, T0, T0 + 10, pruned=True), entry(2, T0 + 20, T0 + 30)], None,
     {"from_file": "bin.000002", "from_time": utc(T0 + 20), "to_time": utc(T0 + 30), "to_gtid": "0-1-2", "to_file": "bin.000002:100",
      "holes": []}),
    ([entry(1), entry(2, T0 + 20, T0 + 30)], {"file": "bin.000002", "size": 100, "time": T0 + 600},
     {"from_file": "bin.000001", "from_time": utc(T0 + 20), "to_time": utc(T0 + 600), "to_gtid": "0-1-2", "to_file": "bin.000002:100",
      "holes": []}),
    ([entry(1), entry(2, missing=True)], None,
     {"from_file": None, "from_time": None, "to_time": None, "to_gtid": None, "to_file": None, "holes": ["bin.000002"]}),
    ([entry(1, T0, T0 + 10, tail_missing=True, proven_empty="bin.000003"),
      entry(2, missing=True, proven_empty="bin.000003"), entry(3, T0 + 40, T0 + 50)], None,
     {"from_file": "bin.000001", "from_time": utc(T0), "to_time": utc(T0 + 50), "to_gtid": "0-1-3",
      "to_file": "bin.000003:100", "holes": [], "proven_empty": ["bin.000001", "bin.000002"]}),
    ([entry(1, T0, T0 + 10, tail_missing=True, proven_empty="bin.000002"), entry(2, T0 + 20, T0 + 30),
      entry(3, missing=True, lost_gtids="0-1-3"), entry(4, T0 + 40, T0 + 50)], None,
     {"from_file": "bin.000004", "holes": ["bin.000003"], "proven_empty": ["bin.000001"]}),
], ids=["whole", "after-a-hole", "after-a-purged-tail", "pruned-is-not-crossed-but-not-a-hole", "covered-up-to-the-last-run",
        "ends-in-a-hole", "holes-proven-empty-are-crossed", "a-real-hole-after-one-proven-empty"])
def test_line_window(files, covered, window):
    found = line_window(Line("b1", files, covered))
    assert {k: found[k] for k in window} == window
    assert (found["branch"], found["files"]) == ("b1", len(files))
