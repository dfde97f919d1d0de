"""pitr.report: the point-in-time restore's report: the point `until` resolved to, how the replay was verified by
its method, and the page with the window, the base, what was left out or left prepared."""
from __future__ import annotations

import pytest

from lastline.pitr.plans import PitrPlan, Replayed
from lastline.pitr.report import markdown, replayed_count, resolved, verdict, verified


def replayed(**kw) -> Replayed:
    fields = dict(method="parallel", transactions=3, bytes=12_345, seconds=1.5, until="latest", gtid_position="0-1-9",
                  last_gtid="0-1-9", last_time=1, last_time_utc="2026-11-28T16:14:32Z")
    return Replayed(**{**fields, **kw})


def plan(**kw) -> PitrPlan:
    fields = dict(kind="physical", base="20261128T161432Z-7c93b6", until="latest", branch="1-000001-abcdef01",
                  window={"from_time": "2026-11-28T10:00:00Z", "to_time": "2026-11-28T17:00:00Z", "to_gtid": "0-1-9",
                          "holes": []},
                  replay={"target_conn_id": "tgt", "span": {"base_gtid": "0-1-6"}, "threads": 4})
    return PitrPlan(**{**fields, **kw})


@pytest.mark.parametrize(("the_replayed", "text"), [
    (replayed(), "GTID 0-1-9, committed at 2026-11-28T16:14:32Z"),
    (replayed(last_gtid=None, transactions=0), "the base itself (no transaction to apply)"),
], ids=["a-transaction", "nothing-applied"])
def test_resolved(the_replayed, text):
    assert resolved(the_replayed) == text


@pytest.mark.parametrize(("n", "resumed", "text"), [
    (1, False, "1 transaction replayed"), (1200, False, "1,200 transactions replayed"),
    (0, True, "0 transactions replayed in this attempt"),
], ids=["one", "many", "resumed"])
def test_replayed_count(n, resumed, text):
    assert replayed_count(replayed(transactions=n, resumed=resumed)) == text


@pytest.mark.parametrize(("method", "n", "position", "text"), [
    ("parallel", 3, "0-1-9", "Verified: the target's GTID position (0-1-9) holds every transaction replayed"),
    ("pipe", 3, "0-1-9", "The pipe ended without error; lastline set the GTID position (0-1-9)"),
    ("pipe", 0, "", "Nothing to replay; the target's GTID position is empty."),
], ids=["parallel", "pipe", "pipe-nothing"])
def test_verified_says_what_the_method_proves(method, n, position, text):
    assert verified(replayed(method=method, transactions=n, gtid_position=position)).startswith(text)


def test_the_page_opens_with_the_verdict_and_names_what_is_left():
    logical = plan(kind="logical", until="GTID 0-1-9", archive="checked against the head Airflow recorded",
                   window={"holes": ["bin.000004"], "branch": "b2"})
    done = replayed(method="pipe", left_out=[{"gtid": "0-1-7", "statement": "DELETE FROM other.t"}], left_out_count=1,
                    prepared_xa=["'x1'", "X'00ff','b`q',7"], resumed=True, not_applied="from GTID 0-1-10 on")
    text = markdown(logical, done, "Verified: 2 tables.")
    lines = text.splitlines()
    assert lines[0] == ("# Point-in-time restore of tgt to GTID 0-1-9: 3 transactions replayed in this attempt, the last "
                        "GTID 0-1-9, committed at 2026-11-28T16:14:32Z")
    assert lines[2] == f"**{verdict(logical, done, 'tgt')}**"
    assert "applied through that transaction" in text and "holes: bin.000004" in text and "branch b2" in text
    assert "- **Left out:** 1 statement on other databases" in text and "0-1-7 `DELETE FROM other.t`" in text
    assert ("`` 'x1' ``; `` X'00ff','b`q',7 ``; end each on the target with `XA COMMIT <id>` or `XA ROLLBACK <id>`"
            in text)  # each id as XA COMMIT takes it, in a code span a backtick inside does not end
    assert "- **Not applied:** from GTID 0-1-10 on" in text
    assert "mariadb-binlog | mariadb (one session)" in text and "- **Archive:** checked" in text


def test_the_page_of_a_plain_roll_forward():
    text = markdown(plan(), replayed(), "Verified by the base's restore.")
    assert "resolved to the archive's end" in text and "no hole" in text and "(4 threads)" in text
    assert "Left out" not in text and "XA" not in text and "- **Not applied:** nothing the archive holds" in text
