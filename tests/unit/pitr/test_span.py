"""pitr.span: the bytes of the archive a replay applies, resolved before anything is touched: from the base's
position to the stop `until` names (a time, a GTID, latest), and the refusals: an until before the base, beyond a
hole, or past the archive's end. On a real local destination holding one archived binlog built with lastline's own
encoders (three transactions, one second apart)."""
from __future__ import annotations

import dataclasses
import hashlib

import pytest

from lastline.core.errors import IntegrityError, Refusal
from lastline.pitr import events
from lastline.pitr.chain import Entry
from lastline.pitr.span import Span, resolve
from lastline.pitr.window import PREFIX, Line, Until, utc
from lastline.storage.file import FileStorage

from .binlog import binlog, transaction

T0 = 1_795_882_472  # 2026-11-28T16:14:32Z
DATA = binlog(*(transaction(n, True, ts=T0 + n) for n in (1, 2, 3)), checksum=True)
TRX = events.scan(DATA).transactions


@pytest.fixture
def archive(tmp_path) -> FileStorage:
    store = FileStorage(str(tmp_path))
    store.write_bytes(f"{PREFIX}/b1/bin.000001/{0:012d}", DATA)
    return store


def entry(**kw) -> Entry:
    seg = {"offset": 0, "size": len(DATA), "sha256": hashlib.sha256(DATA).hexdigest(), "last_time": T0 + 3,
           "end_gtids": "0-1-3"}
    fields = dict(size=len(DATA), segments=[seg], closed=True, checksum=True, transactions=3, end_gtids="0-1-3",
                  first_time=T0 + 1, last_time=T0 + 3)
    return Entry("bin.000001", "", **{**fields, **kw})


def line(*more: Entry, covered: int | None = T0 + 10) -> Line:
    files = [("b1", entry()), *(("b1", e) for e in more)]
    last = files[-1][1]
    return Line("b1", files, {"file": last.name, "size": last.size, "time": covered} if covered else None)


@pytest.mark.parametrize(("until", "stop", "last", "not_applied"), [
    ("latest", None, "0-1-3", "nothing: the replay applies every archived transaction"),
    (utc(T0 + 2), TRX[2].start, "0-1-2", f"from GTID 0-1-3 ({utc(T0 + 3)}) on"),
    (utc(T0 + 5), None, "0-1-3", "nothing: the replay applies every archived transaction"),
    ("0-1-2", TRX[1].end, "0-1-2", f"from GTID 0-1-3 ({utc(T0 + 3)}) on"),
    ("0-1-3", TRX[2].end, "0-1-3", "what follows in the archive"),
], ids=["latest", "a-time-between-two", "a-time-after-the-last-within-the-covered-end", "a-gtid", "the-last-gtid"])
def test_resolve_from_the_bases_position(archive, until, stop, last, not_applied):
    span = resolve(archive, line(), "bin.000001", TRX[0].end, "0-1-1", Until.parse(until))
    (f,) = span.files
    assert (f.name, f.start, f.stop) == ("bin.000001", TRX[0].end, stop)
    assert span.last_gtid == last and span.not_applied == not_applied and span.base_gtid == "0-1-1"
    assert Span.of(span.to_dict()) == span  # through XCom and back


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(until="0-1-1"), "until GTID 0-1-1 is before the base"),
    (dict(until="0-2-2"), "is not a transaction of the archive: bin.000001 goes past its sequence number"),
    (dict(until="0-1-99"), "is not in the binlog archive after the base .* it is past the archive's end"),
    (dict(until="5-1-1"), "is not in the binlog archive after the base"),
    (dict(until=utc(T0)), "is before the base: the base backup already holds transactions of"),
    (dict(until=utc(T0 + 11)), "is past the binlog archive's end"),
    (dict(until="latest", position=len(DATA) + 1), "is past what the archive holds of that file"),
    (dict(until="latest", more=[Entry("bin.000002", "", missing=True)]), "lies beyond a hole in the binlog archive"),
    (dict(until="latest", first=dict(tail_missing=True), more=[dataclasses.replace(entry(), name="bin.000002")]),
     "the rest of bin.000001 after byte"),
    (dict(until="latest", more=[Entry("bin.000002", "", missing=True, lost_gtids="0-1-4..0-1-9")]),
     r"bin.000002 was purged on the source before it was archived \(the GTIDs 0-1-4..0-1-9 are missing\)"),
    (dict(until="latest", first=dict(tail_missing=True, lost_gtids="0-1-4"),
          more=[dataclasses.replace(entry(), name="bin.000002")]),
     r"the rest of bin.000001 after byte \d+ was purged on the source before it was archived \(the GTIDs 0-1-4 are "
     r"missing\) \(branch b1\)"),
], ids=["gtid-before-the-base", "gtid-of-another-server-id", "gtid-past-the-end", "gtid-of-another-domain", "time-before-the-base",
        "time-past-the-covered-end", "position-past-the-archived-bytes", "a-hole", "a-tail-purged",
        "a-hole-names-the-gtids-lost", "a-tail-names-the-gtids-lost"])
def test_resolve_refuses(archive, kwargs, message):
    files = [("b1", entry(**kwargs.get("first", {}))), *(("b1", e) for e in kwargs.get("more", []))]
    the_line = Line("b1", files, {"file": files[-1][1].name, "size": files[-1][1].size, "time": T0 + 10})
    with pytest.raises(Refusal, match=message):
        resolve(archive, the_line, "bin.000001", kwargs.get("position", TRX[0].end), "0-1-1", Until.parse(kwargs["until"]))


def test_a_damaged_segment_is_refused_when_read(archive):
    archive.write_bytes(f"{PREFIX}/b1/bin.000001/{0:012d}", DATA[:-1] + b"\0")
    with pytest.raises(IntegrityError, match="with another sha256 than its chain records"):
        resolve(archive, line(), "bin.000001", TRX[0].end, "0-1-1", Until.parse(utc(T0 + 2)))


def test_latest_reads_no_segment(archive):
    archive.delete_backup(PREFIX)
    span = resolve(archive, line(), "bin.000001", TRX[0].end, "0-1-1", Until.parse("latest"))
    assert span.files[0].stop is None and span.last_time == T0 + 3


def test_resolve_crosses_holes_proven_empty(archive):
    """A file's tail and a whole file purged before they were archived, proven to hold no transaction (the next file
    starts from the GTID state the archived bytes end at): the span goes on past them, reading no byte of the missing
    file, to the next file's transactions."""
    store = archive
    data = binlog(*(transaction(n, True, ts=T0 + n) for n in (4, 5)), checksum=True)
    store.write_bytes(f"{PREFIX}/b1/bin.000003/{0:012d}", data)
    seg = {"offset": 0, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "last_time": T0 + 5,
           "end_gtids": "0-1-5"}
    third = Entry("bin.000003", "0-1-3", size=len(data), segments=[seg], closed=True, checksum=True, transactions=2,
                  end_gtids="0-1-5", first_time=T0 + 4, last_time=T0 + 5)
    files = [("b1", entry(tail_missing=True, proven_empty="bin.000003")),
             ("b1", Entry("bin.000002", "", missing=True, closed=True, proven_empty="bin.000003")), ("b1", third)]
    the_line = Line("b1", files, {"file": "bin.000003", "size": len(data), "time": T0 + 10})
    span = resolve(store, the_line, "bin.000001", TRX[0].end, "0-1-1", Until.parse("latest"))
    assert [(f.name, f.start, f.stop) for f in span.files] == [("bin.000001", TRX[0].end, None), ("bin.000003", 0, None)]
    assert span.last_gtid == "0-1-5"
    span = resolve(store, the_line, "bin.000001", TRX[0].end, "0-1-1", Until.parse("0-1-4"))
    assert span.files[-1].name == "bin.000003" and span.last_gtid == "0-1-4"
