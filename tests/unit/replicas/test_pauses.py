"""The record of every pause of a replica's SQL thread (lastline.replicas.pauses), on a real server (the suite's
shared target sandbox): what a pause writes, that it never reaches the binlog, and that it goes when the pause ends
or stays behind a session that died."""
from __future__ import annotations

import pytest

from lastline.core.sql import META_DB
from lastline.replicas import pauses

TABLE = f"`{META_DB}`.`{pauses.PAUSES}`"


def _rows(server) -> list[tuple]:
    return server.query(f"SELECT connection_name, what FROM {TABLE} ORDER BY connection_name")


def _binlog_position(server) -> tuple:
    return tuple(server.query("SHOW MASTER STATUS")[0][:2])


@pytest.mark.parametrize("names", [[""], ["east", "west"]], ids=["the default connection", "two named"])
def test_a_recorded_pause_is_a_row_per_connection_unlogged_and_goes_with_the_pause(target, names):
    server = target.server()
    what = "physical backup x" + "y" * 300
    with pauses.recorded(server, names, what):
        during = _rows(server)
    assert [name for name, _ in during] == sorted(names)
    assert all(len(text) == 255 and text.startswith("physical backup x") for _, text in during)  # `what` cut to its column
    assert _rows(server) == []  # the pause ended: its rows went


def test_the_record_never_reaches_the_binlog(target):
    server = target.server()
    with server.session() as cur:
        pauses.unlogged_table(cur)
    before = _binlog_position(server)
    with pauses.recorded(server, ["east"], "a backup"):
        pass
    assert _binlog_position(server) == before


def test_a_pause_whose_session_died_stays_recorded_and_nothing_resumes_where_no_thread_is_stopped(target):
    server = target.server()
    conn = server.connect()
    pauses.record(conn.cursor(), ["gone"], "a backup that died")
    conn.close()  # the worker died: its session is gone, its record stays
    assert ("gone", "a backup that died") in _rows(server)
    assert pauses.resume_abandoned(server) == []  # no such replication connection: nothing to start
    assert ("gone", "a backup that died") not in _rows(server)  # the abandoned record is cleared
