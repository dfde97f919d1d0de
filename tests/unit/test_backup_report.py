"""backup_report: a backup run's report built from its manifest and the complete backups of its kind before it in a
real local destination: the figures, the change against the median of the recent ones, the verdict, the Markdown,
JSON and SVG files."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from lastline import backup_report
from lastline import manifest as mf
from lastline.storage.file import FileStorage


@pytest.fixture
def store(tmp_path) -> FileStorage:
    """A local destination; its manifests signed with the tests' storage key (tests/conftest.py), as a run signs them."""
    return FileStorage(str(tmp_path))


def physical(day: int, size: int, seconds: float = 10.0, **kw) -> mf.PhysicalManifest:
    fields = dict(backup_id=f"202611{day:02d}T000000Z-7c93b6", source_conn_id="src", server_version="11.4.2",
                  tool_version="11.4.2", artifact="backup.mbstream.zst", compression="zstd", bytes=size, sha256="0" * 64,
                  started_at="a", finished_at="b", seconds=seconds, mb_per_s=size / 1e6 / seconds, parallel=2,
                  datadir_bytes=4 * size, tables=[mf.TableInfo("shop", "orders", "InnoDB", 5, 16384),
                                                  mf.TableInfo("a b", "`t`.x", "InnoDB", 7, 16384)])
    return mf.PhysicalManifest(**{**fields, **kw})


@pytest.mark.parametrize(("now", "before", "text"), [
    (112, 100, "+12%"), (97, 100, "-3%"), (100.4, 100, "same"), (5, 0, ""), (0, 100, "-100%"),
], ids=["up", "down", "within-half-a-percent", "nothing-to-compare", "to-zero"])
def test_change(now, before, text):
    assert backup_report._change(now, before) == text


def test_the_first_backup_is_compared_with_nothing(store):
    m = physical(1, 1_000_000, gtid="0-1-5", binlog_file="bin.000003", binlog_position=42)
    report = backup_report.build(store, m, "physical", "file:///b", "Point in time: no binlog archive")
    assert report["summary"] == ("Physical backup 20261101T000000Z-7c93b6: 2 tables, ~12 rows, 1,000,000 bytes "
                                 "(4.0x compressed) in 10.0 s (0.1 MB/s)")
    assert report["ratio"] == 4.0 and report["rows"] == 12 and not report["rows_exact"]
    assert report["recent"] == [] and set(report["compared"].values()) == {""}
    assert report["verdict"].startswith("Backed up src (11.4.2), complete: its manifest, written last, records the artifact's")
    text = backup_report.markdown(report)
    assert "binlog `bin.000003:42`, GTID `0-1-5`" in text and "(InnoDB's estimates)" in text
    assert "## The backups before it" not in text and "against" not in text


def test_a_backup_against_the_median_of_the_ones_before_it(store):
    for day, size in ((1, 1_000_000), (2, 3_000_000), (3, 2_000_000)):
        mf.write_manifest(store, physical(day, size))
    store.write_bytes("20261104T000000Z-7c93b6/backup.mbstream.zst", b"incomplete: no manifest")
    m = physical(5, 2_400_000, primary={"gtid": "0-9-77"})
    report = backup_report.build(store, m, "physical", "file:///b", "window")
    assert [r["backup_id"][:8] for r in report["recent"]] == ["20261101", "20261102", "20261103"]  # oldest first
    assert report["compared"]["bytes"] == "+20%"  # against the median, 2,000,000
    assert report["compared"]["seconds"] == "same"
    text = backup_report.markdown(report)
    assert "4.0x; +20% size against the median of the 3 backups before it" in text
    assert "no binlog position (the source writes no binlog); its primary's GTID `0-9-77`" in text
    table = [line for line in text.splitlines() if line.startswith("| 2026")]
    assert [row.split("|")[1].strip()[:8] for row in table] == ["20261103", "20261102", "20261101"]  # newest first


def test_the_report_files(store):
    report = backup_report.build(store, physical(1, 1_000_000), "physical", "file:///b", "window")
    files = backup_report.files(report)
    assert list(files) == ["backup.md", "backup.svg", "backup.json"]
    assert files["backup.md"].startswith(f"# {report['summary']}\n")
    assert json.loads(files["backup.json"]) == report
    svg = ET.fromstring(files["backup.svg"])
    texts = [t.text for t in svg.iter() if t.tag.endswith("text")]
    assert "size of each backup" in texts and "time each backup took" in texts


@pytest.mark.parametrize(("kind", "proof"), [("logical", "each table's row hashes"), ("physical", "the artifact's sha256")],
                         ids=["logical", "physical"])
def test_verdict_names_what_proves_the_bytes(kind, proof):
    text = backup_report.verdict({"kind": kind, "server_version": "11.4", "source_conn_id": None, "authenticity": ""})
    assert text.startswith("Backed up the source (11.4), complete") and proof in text
    assert "not checked for authenticity" in text
