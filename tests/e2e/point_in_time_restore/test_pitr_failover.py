"""Point-in-time restore across a real failover (issue 29): a primary archived while it writes, a GTID replica (with
log_slave_updates, as a failover candidate runs) promoted in its place and archived into the same destination. The
promoted server writes binlog files under the same names with other bytes: the archive forks, never overwrites.
Then three restores, each exactly the state recorded: the new primary's branch to latest from a backup taken after
the promotion; the old primary's branch to its last transaction from a backup taken on the replica before the
failover (it joins the primary's chain through the coordinates it recorded); and a mid-point of the old branch from
the old primary's own base."""
from __future__ import annotations

import time

import pytest

from conftest import attach_replica, set_conn
from lastline import connections
from lastline.manifest import read_manifest
from lastline.physical import backup as physical_backup
from lastline.pitr import archive, window
from lastline.pitr import restore as pitr
from lastline.replicas import flavour
from lastline.storage import open_storage
from lastline_dev.sandbox import Instance

from .test_pitr_restore import _shop, _writes, state

pytestmark = pytest.mark.e2e


def _backup(conn_id: str, dest: str) -> str:
    plan = physical_backup.preflight({"source_conn_id": conn_id, "destination": dest})
    physical_backup.finish(plan, physical_backup.stream(plan))
    time.sleep(1.1)  # backup ids are stamped to the second
    return str(plan.backup_id)


def _gtid(inst: Instance) -> str:
    return str(inst.server().query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0])


@pytest.fixture
def failover(sandbox_root):
    primary, replica = Instance(sandbox_root, "fo_primary"), Instance(sandbox_root, "fo_replica")
    try:
        primary.create()
        replica.create()
        (replica.conf_d / "failover_candidate.cnf").write_text("[mysqld]\nlog-slave-updates=1\n")
        replica.stop()
        replica.start()
        attach_replica(replica, primary)
        set_conn("t_fo_primary", primary)
        set_conn("t_fo_replica", replica, replica=True)
        set_conn("t_fo_promoted", replica)
        yield primary, replica
    finally:
        replica.destroy()
        primary.destroy()


def _restore(run_dag, dest: str, until: str, base: str = "auto", branch: str = "") -> str:
    state_, tis, logs = run_dag("point_in_time_restore", {
        "target_conn_id": "t_target", "destination": dest, "until": until, "base": base, "base_kind": "any",
        "databases": [], "branch": branch, "replay_method": "auto", "parallel": 2, "force": True, "restore_into_source": "",
        "aws_conn_id": None})
    assert state_ == "success", (tis, logs[-4000:])
    return logs


def test_a_failover_forks_the_archive_and_restores_on_both_branches_are_exact(run_dag, failover, target, tmp_path):
    primary, replica = failover
    dest = f"file://{tmp_path}"
    storage = open_storage(dest)
    p = connections.server("t_fo_primary")
    _shop(p, stock=1000, accounts=10)
    archive.ship(p, storage)
    old_base = _backup("t_fo_primary", dest)
    _writes(primary, 40, "old")
    mid_gtid, mid_state = _gtid(primary), state(primary)
    _writes(primary, 40, "old")
    flavour.wait_for(p, replica.server(), 60)
    replica_base = _backup("t_fo_replica", dest)  # taken on the replica: joins the primary's chain by its coordinates
    assert read_manifest(storage, replica_base).primary["gtid"]
    _writes(primary, 30, "old, after the replica's backup")
    archive.ship(p, storage)
    old_gtid, old_state = _gtid(primary), state(primary)
    # the failover: the replica has everything, the primary takes no more writes, the replica is promoted
    flavour.wait_for(p, replica.server(), 60)
    with replica.server().session() as cur:
        cur.execute("STOP ALL SLAVES")
        cur.execute("RESET SLAVE ALL")
    promoted = connections.server("t_fo_promoted")
    _writes(replica, 30, "new")
    shipped = archive.ship(promoted, storage)  # the archive's source is now the promoted server
    assert shipped["forks"], shipped
    assert len(archive.branches(storage)) == 2
    new_base = _backup("t_fo_promoted", dest)
    _writes(replica, 50, "new")
    archive.ship(promoted, storage)
    new_state = state(replica)
    assert new_state != old_state

    logs = _restore(run_dag, dest, "latest")  # the newest base and the newest branch
    assert state(target) == new_state
    assert f"physical base {new_base}" in logs

    old_branch = archive.branches(storage)[0]["id"]
    plan = pitr.preflight({"target_conn_id": "t_target", "destination": dest, "until": old_gtid, "branch": old_branch})
    assert plan.base == replica_base, plan  # the newest base before until: the one taken on the replica
    _restore(run_dag, dest, old_gtid, branch=old_branch)  # the old primary's last transaction, on its own branch
    assert state(target) == old_state

    _restore(run_dag, dest, mid_gtid, base=old_base)
    assert state(target) == mid_state
    windows = window.windows(storage)
    assert [w["holes"] for w in windows] == [[], []] and windows[0]["to_gtid"] == old_gtid
