"""A backup taken from a replica (lastline.replicas.backup_source): what it reads of the replica; no server."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from lastline.core.errors import ReplicationError
from lastline.replicas import backup_source

COLUMNS = ["Connection_name", "Master_Host", "Master_Port", "Slave_IO_Running", "Slave_SQL_Running",
           "Relay_Master_Log_File", "Exec_Master_Log_Pos"]


def _statuses(*rows: tuple) -> list[dict]:
    return [dict(zip(COLUMNS, row)) for row in rows]


@pytest.mark.parametrize("gtid, rows, file, position", [
    ("0-1-42", [("", "p", 3306, "Yes", "No", "b.000003", 120)], "b.000003", 120),
    ("0-1-42,1-1-7", [("", "p", 3306, "Yes", "No", "b.000003", 120)], None, None),
    ("0-1-42", [("a", "p", 3306, "Yes", "No", "b.000003", 120), ("b", "q", 3306, "Yes", "No", "c.000001", 4)], None, None),
], ids=["one connection, one domain", "two domains", "two connections"])
def test_coordinates(gtid, rows, file, position):
    found = backup_source.coordinates(gtid, _statuses(*rows), paused=[r[0] for r in rows])
    assert found["gtid"] == gtid and (found["binlog_file"], found["binlog_position"]) == (file, position)
    assert [c["name"] for c in found["connections"]] == [r[0] for r in rows]


def test_coordinates_refuse_a_thread_started_again():
    with pytest.raises(ReplicationError, match="started again"):
        backup_source.coordinates("0-1-42", _statuses(("", "p", 3306, "Yes", "Yes", "b.000003", 120)), paused=[""])


@pytest.mark.parametrize("asked, extra, wanted", [(False, False, False), (True, False, True), (False, True, True)],
                         ids=["a primary", "the param", "the connection's extra"])
def test_wanted(asked, extra, wanted):
    assert backup_source.wanted(SimpleNamespace(replica=extra), asked) is wanted


@pytest.mark.parametrize("replica, result", [(None, None), ({"sql_running": [""]}, {"done": True})],
                         ids=["a primary", "a stream that returned"])
def test_resume_unless_done_does_nothing_without_need(replica, result):
    assert backup_source.resume_unless_done("no_such_conn", replica, result) == []
