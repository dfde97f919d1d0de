"""core.progress: the one progress line of every long step (counts, MB, rate, ETA) and a pipeline's closing report."""
from __future__ import annotations

import logging

import pytest

from lastline.core.progress import Progress, plural, step_report


@pytest.mark.parametrize(("n", "noun", "text"), [
    (0, "table", "0 tables"), (1, "work unit", "1 work unit"), (2, "table", "2 tables"), (1024, "table", "1,024 tables"),
], ids=["zero", "one", "two", "thousands"])
def test_plural(n, noun, text):
    assert plural(n, noun) == text


def test_step_report_lists_each_step_then_the_total():
    text, total = step_report("restore", {"load": {"seconds": 4.0, "bytes": 8_000_000}, "verify": {"seconds": 1.0}},
                              total_bytes=10_000_000)
    lines = text.splitlines()
    assert total == 5.0
    assert lines[0] == "restore"
    assert lines[1].split() == ["load", "4.0", "s,", "8.0", "MB,", "2.0", "MB/s"]
    assert lines[2].split() == ["verify", "1.0", "s"]
    assert lines[3].split() == ["total", "5.0", "s,", "10.0", "MB,", "2.0", "MB/s"]


def test_step_report_of_no_step():
    text, total = step_report("nothing", {})
    assert total == 0 and text.splitlines()[1].split() == ["total", "0.0", "s"]


def at(progress: Progress, seconds: float) -> str:
    return progress.line(progress.start + seconds)


def test_line_with_a_byte_total_has_percent_and_eta():
    p = Progress("dump", total=100_000_000)
    p.done = 25_000_000
    assert at(p, 10) == "dump: 25.0 MB / 100.0 MB (25%), 2.5 MB/s, ETA 30 s"
    assert p.line(p.start + 10, final=True) == "dump: 25.0 MB / 100.0 MB (25%), 2.5 MB/s"


def test_line_with_counts_bytes_counts_and_eta_by_a_count():
    p = Progress("load", counts={"chunks": 4, "tables": None, "read_bytes": None}, eta_by="chunks")
    p.count(chunks=1, tables=3, read_bytes=2_000_000)
    assert at(p, 10) == "load: 1/4 chunks, 3 tables, 2.0 MB read, 0.0 MB, 0.0 MB/s, ~30 s left (estimated chunks)"
    p.count(chunks=3)
    assert "left" not in at(p, 10)  # every chunk done: no estimate


def test_a_count_not_declared_is_added():
    p = Progress("x")
    p.count(rows=1_000_000)
    assert at(p, 1).startswith("x: 1,000,000 rows, 0.0 MB")


def test_tick_logs_at_most_every_interval(caplog):
    p = Progress("copy", every=3600)
    with caplog.at_level(logging.INFO, logger="lastline.core.progress"):
        p.add(5)
        assert not caplog.records
        p.every = 0
        p.add(5)
    assert p.done == 10 and caplog.records[-1].getMessage().startswith("copy: 0.0 MB")
