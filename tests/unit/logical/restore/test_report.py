"""logical.restore.report: a split table's units add up to one row, the timeline puts stages one after another and
each lane's units where they ran, the verification reads as words (one object, many, none; old backups), and the
report saved for the UI holds a summary, a well-formed SVG chart and the JSON."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree

import pytest

from lastline.backups import BackupRef
from lastline.logical.restore import report
from lastline.logical.restore.plans import RestorePlan


def unit(name: str, started: float, finished: float, tables: dict[str, tuple[int, int, float]], **kw) -> dict:
    return {"unit": name, "started_at": started, "finished_at": finished, "rows": sum(t[0] for t in tables.values()),
            "bytes": sum(t[1] for t in tables.values()), "table_count": len(tables),
            "tables": {n: {"rows": r, "bytes": b, "seconds": s, "chunks": 1, "skipped": 0} for n, (r, b, s) in tables.items()},
            **kw}


@pytest.mark.parametrize(("loads", "rows"), [
    ([], []),
    ([unit("u", 0, 1, {"db.t": (10, 2_000_000, 1.0)})], [("db.t", 10, 2_000_000, 1.0, 2.0)]),
    ([unit("u1", 0, 2, {"db.big": (5, 3_000_000, 2.0)}), unit("u2", 0, 1, {"db.big": (5, 1_000_000, 1.0)}),
      unit("u3", 0, 1, {"db.small": (1, 10, 0.5), "db.`odd name`": (0, 0, 0.0)})],
     [("db.big", 10, 4_000_000, 3.0, 1.33), ("db.small", 1, 10, 0.5, 0.0), ("db.`odd name`", 0, 0, 0.0, 0.0)]),
], ids=["no-unit", "one-table", "a-split-table-adds-up-slowest-first"])
def test_table_rows(loads, rows):
    got = report.table_rows(loads)
    assert [(t["table"], t["rows"], t["bytes"], t["seconds"], t["mb_per_s"]) for t in got] == rows


def test_the_timeline_runs_the_stages_one_after_another_and_the_units_where_they_ran():
    stages = {"tune": 1.0, "create_schema": 2.0, "load": 5.0, "verify": 1.5}
    lanes = [[unit("a", 100.0, 103.0, {}), unit("b", 103.0, 105.0, {})], [unit("c", 101.0, 104.5, {})]]
    got = [(t["label"], t["start"], t["seconds"], t["kind"]) for t in report.timeline(stages, lanes)]
    assert got == [("tune", 0.0, 1.0, "stage"), ("create_schema", 1.0, 2.0, "stage"),
                   ("lane 1: a", 3.0, 3.0, "unit"), ("lane 1: b", 6.0, 2.0, "unit"), ("lane 2: c", 4.0, 3.5, "unit"),
                   ("verify", 8.0, 1.5, "stage")]


@pytest.mark.parametrize(("verified", "words"), [
    ({}, ["all 0 restored tables hold exactly the backup's 0 rows", "row hashes"]),
    ({"tables": 1234, "rows": 5_000_000, "objects": {"views": 1, "triggers": 2, "events": 0}},
     ["all 1,234 restored tables", "5,000,000 rows", "1 view, 2 triggers present", "as it was before the restore"]),
    ({"tables": 1, "rows": 1, "row_hashes": False}, ["an old backup: over the dump's own text"]),
], ids=["nothing", "one-object-and-many", "an-old-backup"])
def test_verification_in_words(verified, words):
    text = report.verification(verified)
    assert all(w in text for w in words), text
    assert "events" not in text


def test_build_chart_summary_and_write(tmp_path, monkeypatch):
    monkeypatch.delenv("LASTLINE_REPORTS", raising=False)
    monkeypatch.setenv("LASTLINE_REPORT_DIR", str(tmp_path))
    plan = RestorePlan("t_target", BackupRef("file:///backups", "20261128T000000Z", "logical"), ["db"], parallel=2,
                       authenticity="signed by k1")
    steps = {"tune": {"seconds": 1.0}, "verify": {"seconds": 2.0, "tables": 2, "rows": 11}, "create_schema": {"seconds": 0.5},
             "finalize": {"seconds": 1.0, "steps": {"indexes": 0.75}}}
    lanes = [[unit("db.big [chunks 0-1 of 4]", 10.0, 14.0, {"db.big": (10, 8_000_000, 4.0)})],
             [unit("db.t +1 tables", 10.0, 12.0, {"db.t": (1, 100, 1.0)})]]
    built = report.build(plan, steps, lanes)
    assert list(built["stages"]) == ["tune", "create_schema", "load", "finalize", "verify"]  # as they run
    assert (built["units"], built["rows"], built["bytes"], built["load_seconds"], built["load_mb_per_s"]) == (
        2, 11, 8_000_100, 4.0, 2.0)
    assert built["backup"] == "file:///backups/20261128T000000Z" and built["finalize_steps"] == {"indexes": 0.75}
    ElementTree.fromstring(report.chart(built))  # well-formed SVG

    saved = report.write(plan, steps, lanes, "lastline_logical_restore", "manual__2026-11-28T00:00:00+00:00")
    folder = tmp_path / "lastline_logical_restore" / "manual__2026-11-28T00_00_00+00_00"
    assert json.loads((folder / "logical_restore.json").read_text())["rows"] == 11
    summary = (folder / "summary.md").read_text()
    assert summary.startswith("# Logical restore of file:///backups/20261128T000000Z into t_target: verified, 11 rows")
    assert "**Verified: all 2 restored tables hold exactly the backup's 11 rows" in summary
    assert "signed by k1" in summary and "2 work units on 2 lanes" in summary
    assert saved["chart"].endswith("/logical_restore.svg") and ElementTree.parse(folder / "logical_restore.svg")


def test_an_empty_restore_still_reports():
    plan = RestorePlan("t_target", BackupRef("file:///backups", "b", "logical"))
    built = report.build(plan, {"verify": {"seconds": 0.1}}, [])
    assert (built["units"], built["load_seconds"], built["load_mb_per_s"], built["tables"]) == (0, 0.0, 0.0, [])
    ElementTree.fromstring(report.chart(built))
