"""Backups taken from a replica, on real servers: a primary under writes and its GTID replica. The backup checks
the lag first, pauses the SQL thread only for the snapshot (never while a replicated temporary table is open),
starts it again always, and records the primary's coordinates: a restore of it, attached to the primary at
those coordinates (binlog file/position for the logical backup, GTID for the physical one), replays to exactly
the primary's data."""
from __future__ import annotations

import threading
import time

import pytest

from conftest import attach_replica, set_conn
from lastline.core.errors import PreflightError, ReplicationError
from lastline.logical.backup import stages as logical_backup
from lastline.logical.backup.plans import DumpResult
from lastline.manifest import read_manifest
from lastline.physical import backup as physical_backup
from lastline.replicas import backup_source as replica_source
from lastline.replicas import flavour
from lastline.storage import open_storage
from lastline_dev.compare import table_checksums
from lastline_dev.sandbox import Instance

pytestmark = pytest.mark.e2e

DB = "shop"


@pytest.fixture(scope="module")
def pair(sandbox_root):
    """(primary, replica): `shop` written on the primary, replicated by GTID; the replica's connection says so."""
    primary, replica = Instance(sandbox_root, "rprimary"), Instance(sandbox_root, "rreplica")
    try:
        primary.create()
        replica.create()
        attach_replica(replica, primary)
        p = primary.server()
        with p.session() as cur:
            cur.execute(f"CREATE DATABASE {DB}")
            cur.execute(f"USE {DB}")
            cur.execute(f"CREATE TABLE {DB}.orders (id INT AUTO_INCREMENT PRIMARY KEY, n INT NOT NULL, note VARCHAR(200))")
            cur.execute(f"CREATE TABLE {DB}.stock (sku INT PRIMARY KEY, qty INT NOT NULL) ENGINE=InnoDB")
            cur.execute(f"INSERT INTO {DB}.stock SELECT seq, 1000 FROM seq_1_to_500")
            cur.execute(f"INSERT INTO {DB}.orders (n, note) SELECT seq % 500 + 1, REPEAT('x', seq % 200) FROM seq_1_to_20000")
            cur.connection.commit()
        set_conn("t_rprimary", primary)
        set_conn("t_rreplica", replica, replica=True)
        flavour.wait_for(p, replica.server(), 60)
        yield primary, replica
    finally:
        replica.destroy()
        primary.destroy()


class Shop:
    """The application on the primary: an order and a stock update per transaction, as fast as it goes."""

    def __init__(self, primary: Instance) -> None:
        self.server = primary.server()
        self.done = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = self.server.connect()
        cur = conn.cursor()
        while not self._stop.is_set():
            sku = self.done % 500 + 1
            cur.execute(f"INSERT INTO {DB}.orders (n, note) VALUES (%s, 'live')", (sku,))
            cur.execute(f"UPDATE {DB}.stock SET qty = qty - 1 WHERE sku = %s", (sku,))
            conn.commit()
            self.done += 1
            time.sleep(0.002)
        conn.close()

    def __enter__(self) -> Shop:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(timeout=60)


def _sql_running(inst: Instance) -> str:
    with inst.server().session() as cur:
        return flavour.running(flavour.replica_status(cur)[0])[1]


def _replays_to_the_primary(target, primary: Instance, coords: dict, use_gtid: bool) -> None:
    """Attach the restored `target` to the primary at `coords`, let it catch up, and compare `shop` table by table."""
    p = primary.server()
    try:
        flavour.attach(target, p, coords, use_gtid)
        flavour.wait_for(p, target, 120)
        want, got = table_checksums(p), table_checksums(target)
        mine = {k: v for k, v in want.items() if k.startswith(f"{DB}.")}
        assert mine and mine == {k: v for k, v in got.items() if k.startswith(f"{DB}.")}
    finally:
        flavour.detach(target)


def test_a_logical_backup_of_the_replica_replays_exactly_from_the_primary_coordinates(run_dag, pair, logical_target, tmp_path):
    primary, replica = pair
    with Shop(primary) as shop:
        time.sleep(0.5)
        plan = logical_backup.preflight({"source_conn_id": "t_rreplica", "destination": f"file://{tmp_path}", "databases": [DB]})
        assert plan.replica["sql_running"] == [""] and plan.replica["lag_seconds"] is not None
        logical_backup.dump(plan)
        assert _sql_running(replica) == "Yes", "the SQL thread runs again after the snapshot"
        time.sleep(0.5)
    assert shop.done > 50
    manifest = read_manifest(open_storage(f"file://{tmp_path}"), plan.backup_id, "logical")
    prim = manifest.primary
    assert prim["gtid"] and prim["binlog_file"] and prim["binlog_position"] > 0, prim
    assert prim["connections"][0]["port"] == primary.meta()["port"]
    assert prim["gtid"].split("-")[1] == str(primary.meta()["server_id"])  # the primary's, not the replica's
    state, tis, _ = run_dag("logical_restore", {"target_conn_id": "t_ltarget", "backup": f"file://{tmp_path}/latest",
                                                "databases": [DB], "force": True, "parallel": 2})
    assert state == "success", tis
    try:
        # by file and position: a transaction off by one would fail on a duplicate key or a missing row
        _replays_to_the_primary(logical_target.server(), primary, prim, use_gtid=False)
    finally:
        logical_target.server().query(f"DROP DATABASE IF EXISTS {DB}")


def test_a_physical_backup_of_the_replica_replays_exactly_from_the_primary_gtid(run_dag, pair, target, tmp_path):
    primary, replica = pair
    with Shop(primary) as shop:
        time.sleep(0.5)
        plan = physical_backup.preflight({"source_conn_id": "t_rreplica", "destination": f"file://{tmp_path}", "compression": "zstd"})
        stats = physical_backup.stream(plan)
        physical_backup.finish(plan, stats)
        assert _sql_running(replica) == "Yes"
        time.sleep(0.5)
    assert shop.done > 50
    prim = read_manifest(open_storage(f"file://{tmp_path}"), plan.backup_id, "physical").primary
    assert prim["gtid"] and prim["gtid"].split("-")[1] == str(primary.meta()["server_id"]), prim
    state, tis, _ = run_dag("physical_restore", {"target_conn_id": "t_target", "backup": f"file://{tmp_path}/latest",
                                                 "force": True})
    assert state == "success", tis
    _replays_to_the_primary(target.server(), primary, prim, use_gtid=True)


def test_a_lagging_or_stopped_replica_is_refused_and_a_stopped_sql_thread_comes_back(pair, tmp_path, monkeypatch):
    primary, replica = pair
    conf = {"source_conn_id": "t_rreplica", "destination": f"file://{tmp_path}", "databases": [DB]}
    r = replica.server()
    plan = logical_backup.preflight(conf)
    r.query("STOP SLAVE SQL_THREAD")
    try:
        with pytest.raises(PreflightError, match="not within 300 s of its primary"):
            logical_backup.preflight(conf)
        monkeypatch.setenv("LASTLINE_MAX_REPLICA_LAG", "0")  # the deployment lets a run back up a stopped replica
        assert logical_backup.preflight({**conf, "max_replica_lag": 0}).replica["sql_running"] == []
        # a thread someone else stopped stays stopped through a snapshot's pause, and no coordinates are read twice
        with replica_source.paused(r) as paused:
            assert paused["read"]()["gtid"]
        assert _sql_running(replica) == "No"
        # after a dump that completed, the teardown does nothing; after one killed while the SQL thread stood
        # still (no result), it starts it again
        done = DumpResult(manifest="m", tables=0, rows=0, bytes=0, seconds=0, lock_method="ftwrl", commits_held_seconds=0,
                             ddl_held_seconds=0, ddl_yields=0)
        assert logical_backup.resume_replica(plan, done) == [] and _sql_running(replica) == "No"
        assert logical_backup.resume_replica(plan) == ["default"] and _sql_running(replica) == "Yes"
        assert logical_backup.resume_replica(plan) == []
    finally:
        r.query("START SLAVE SQL_THREAD")
    with pytest.raises(PreflightError, match="not a replica"):
        logical_backup.preflight({**conf, "source_conn_id": "t_rprimary", "from_replica": True})
    assert logical_backup.preflight({**conf, "source_conn_id": "t_rprimary"}).replica is None


def test_the_snapshot_waits_while_a_replicated_temporary_table_is_open(pair):
    """Statement-based temporary tables live in the replica's SQL thread: a snapshot taken while one is open would
    replay into nothing. The pause lets the SQL thread run until none is open, and gives up naming them."""
    primary, replica = pair
    conn = primary.server().connect()
    cur = conn.cursor()
    cur.execute("SET SESSION binlog_format = 'STATEMENT'")
    cur.execute(f"CREATE TEMPORARY TABLE {DB}.batch_ids (id INT)")
    cur.execute(f"INSERT INTO {DB}.batch_ids VALUES (1)")
    conn.commit()
    r = replica.server()
    assert replica_source.check(r, 300)["sql_running"] == [""]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and r.query("SHOW GLOBAL STATUS LIKE 'Slave_open_temp_tables'")[0][1] == "0":
        time.sleep(0.1)
    with pytest.raises(ReplicationError, match="1 replicated temporary table"):
        with replica_source.paused(r, timeout=2):
            pass
    assert _sql_running(replica) == "Yes"
    cur.execute(f"DROP TEMPORARY TABLE {DB}.batch_ids")
    conn.close()
    time.sleep(1)
    with replica_source.paused(r, timeout=10) as paused:
        assert _sql_running(replica) == "No" and paused["read"]()["gtid"]
        r.query("START SLAVE SQL_THREAD")  # someone starts it while the snapshot opens: the coordinates are refused
        with pytest.raises(ReplicationError, match="started again while the snapshot opened"):
            paused["read"]()
    assert _sql_running(replica) == "Yes"
