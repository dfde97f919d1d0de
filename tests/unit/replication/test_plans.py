"""replication.plans: the rebuild's and the detach's plans and results cross XCom as plain dicts and come back the
same, and a stream's coordinates are where the replica starts applying."""
from __future__ import annotations

import pytest

from lastline.core.plans import Plan
from lastline.replication.plans import (
    Attached,
    CaughtUp,
    Detached,
    DetachPlan,
    Marker,
    ReadOnly,
    RebuildPlan,
    StillDetached,
    Streamed,
)

REBUILD = RebuildPlan(source_conn_id="s", target_conn_id="t", replication_conn_id="r", compression="zstd", parallel=2,
                      use_memory=1 << 30, source_datadir="/var/lib/mysql", datadir="/srv/mysql", datadir_state="empty",
                      source_version="11.4.2-MariaDB")


@pytest.mark.parametrize("value", [
    REBUILD,
    RebuildPlan(**{**REBUILD.to_dict(), "force": True, "gtid": False, "max_mb_per_s": 20.0, "priority": "normal",
                   "at_risk": {"replaces": ["shop"]}}),
    DetachPlan(target_conn_id="t", flavour="mariadb", connections=["", "east"], statements=["STOP ALL SLAVES"]),
    Streamed(bytes=10, crc32="0badf00d", seconds=1.0, mb_per_s=10.0, binlog_file="bin.000003", binlog_position=385,
             gtid="0-1-7", aside="/srv/mysql.aside"),
    Attached(seconds=0.2, gtid=True, attached_at=1_700_000_000.5, position="0-1-7"),
    CaughtUp(seconds=3.0),
    Marker(marker="lastline-rebuild-x", seconds=0.4),
    Detached(statements=["STOP SLAVE", "RESET SLAVE ALL"]),
    StillDetached(restarted=True, restart_seconds=4.5),
    ReadOnly(read_only="OFF"),
], ids=["rebuild-plan", "rebuild-plan-every-field", "detach-plan", "streamed", "attached", "caught-up", "marker",
        "detached", "still-detached", "read-only"])
def test_round_trip_through_a_dict(value: Plan) -> None:
    assert type(value).of(value.to_dict()) == value


def test_the_plans_defaults() -> None:
    assert (REBUILD.force, REBUILD.gtid, REBUILD.catch_up_timeout, REBUILD.max_mb_per_s, REBUILD.priority) == (
        False, True, 3600.0, 0.0, "low")
    detach = DetachPlan(target_conn_id="t", flavour="mysql")
    assert (detach.connections, detach.statements, detach.restart, detach.read_only_off) == ([], [], True, False)
    assert detach.connections is not DetachPlan(target_conn_id="t", flavour="mysql").connections  # not shared


@pytest.mark.parametrize(("streamed", "coordinates"), [
    (Streamed(bytes=1, crc32="0", seconds=1.0, mb_per_s=1.0, binlog_file="bin.000003", binlog_position=385,
              gtid="0-1-7"), {"binlog_file": "bin.000003", "binlog_position": 385, "gtid": "0-1-7"}),
    (Streamed(bytes=1, crc32="0", seconds=1.0, mb_per_s=1.0, binlog_file="bin.000001", binlog_position=4),
     {"binlog_file": "bin.000001", "binlog_position": 4, "gtid": None}),
], ids=["with-gtid", "file-position-only"])
def test_coordinates(streamed, coordinates) -> None:
    assert streamed.coordinates() == coordinates
