"""logical.restore.stages on the suite's logical target, from the restore tests' small backup (small_backup), each stage
called as its task calls it: the config snapshot before tune (tune refuses to run without one), prepare's work units
recorded for the lanes and its lanes labelled with their digest, a lane refusing units its prepare did not plan (or
none at all) before a row, per_table index builds in the lanes, one unit loaded by `load` exactly once, revert dropping
the run account and putting the settings back, the snapshot and prepare (the DAG's two setups of revert) keeping the
first snapshot on a retry and leaving the teardown what to put back when prepare fails after tuning, and the stages in their
order, as the DAG's tasks call them, restoring the backup exactly."""
from __future__ import annotations

import re

import pytest

from lastline.core.errors import IntegrityError, LastlineError, Refusal
from lastline.logical.format.dialect import qualified, quote_ident
from lastline.logical.restore import stages, tuning
from lastline.logical.restore.backup_files import target_server
from lastline.logical.restore.plans import ConfigSnapshot, Finalized, Reverted, SchemaCreated, Tuned, UnitLoaded, Verified
from lastline.logical.restore.target_state import dbs_key, recorded_units, units_digest

from .small_backup import (
    BIG,
    EMPTY,
    KEYED,
    KEYED_ROWS,
    MYISAM,
    MYISAM_ROWS,
    SMALL,
    manifest_of,
    restoring,
)

LEDGER = "SELECT COUNT(*) FROM `_lastline`.`ledger` WHERE backup_id = %s"
INDEX = ("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
         "AND INDEX_NAME = 'k.1 x'")


def _rows(server, db: str, name: str) -> int:
    return int(server.query(f"SELECT COUNT(*) FROM {qualified(db, name)}")[0][0])


def test_tune_refuses_to_run_before_the_config_snapshot(restore_backup, logical_target):
    with restoring(restore_backup, tune=True) as plan:
        assert tuning.read_snapshot(target_server(plan)) is None
        with pytest.raises(LastlineError, match=r"^tune: no config snapshot on the target; snapshot_config must run first\.$"):
            stages.tune(plan)


@pytest.mark.parametrize("tune", [pytest.param(True, id="tuned"), pytest.param(False, id="tune-off")])
def test_snapshot_tune_and_revert_put_every_value_back(restore_backup, logical_target, tune):
    server = logical_target.server()
    before = server.variables(*tuning.TUNED_VARIABLES)
    with restoring(restore_backup, tune=tune) as plan:
        snap = stages.snapshot_config(plan, "run `1`.a b")
        assert isinstance(snap, ConfigSnapshot) and snap.run_id == "run `1`.a b" and not snap.inherited
        assert {k: snap.variables[k] for k in before} == before
        tuned = stages.tune(plan)
        assert isinstance(tuned, Tuned) and not tuned.restarted
        assert ("read_only" in tuned.applied) is tune  # off: only what a restore needs (tuning.REQUIRED)
        assert set(tuning.REQUIRED) <= set(tuned.applied)
        stages.create_schema(plan)  # makes the run account revert drops
        reverted = stages.revert(plan)
        assert isinstance(reverted, Reverted) and reverted.run_account_dropped
        assert reverted.reverted.keys() == tuned.applied.keys()
        assert server.variables(*tuning.TUNED_VARIABLES) == before
        assert tuning.read_snapshot(server) is None
        assert stages.revert(plan).run_account_dropped is False  # again: nothing left to drop or put back


def test_prepare_records_the_units_and_labels_each_lane_with_their_digest(restore_backup, logical_target):
    with restoring(restore_backup, parallel=3) as plan:
        stages.snapshot_config(plan)
        done, lanes = stages.prepare(plan)
        assert isinstance(done["tune"], Tuned) and isinstance(done["create_schema"], SchemaCreated)
        assert done["create_schema"].in_lanes == 3  # SMALL's tables, each left to the lane that loads it (BIG not asked)
        with target_server(plan).session() as cur:
            recorded = [u.to_dict() for u in recorded_units(cur, plan.backup.backup_id, plan.databases)]
        digest = units_digest(recorded)
        assert lanes == [f"lane {i} of 3 (units {digest})" for i in (1, 2, 3)]
        parts = {(p["schema"], p["table"]) for u in recorded for p in u["parts"]}
        assert parts == {(SMALL, KEYED), (SMALL, MYISAM), (SMALL, EMPTY)}  # the plan's databases alone
        again = stages.plan_load(plan)  # a second plan replaces the first: still one plan
        assert again == recorded and stages.plan_lanes(plan) == lanes
        stages.revert(plan)


def test_a_lane_refuses_units_its_prepare_did_not_plan_before_a_row(restore_backup, logical_target):
    with restoring(restore_backup) as plan:
        stages.snapshot_config(plan)
        _done, lanes = stages.prepare(plan)
        server = target_server(plan)
        digest = re.search(r"\(units ([0-9a-f]{12})\)$", lanes[0])[1]
        with pytest.raises(IntegrityError, match=r"lane 1 of 2 \(units 000000000000\): the work units recorded on the target "
                                                 r"for file://.* \(unit`lr\.a b\) are not the ones prepare handed this lane"):
            stages.load_lane(plan, lanes[0].replace(digest, "0" * 12))
        with server.session() as cur:  # what another restore into these databases clears
            cur.execute("DELETE FROM `_lastline`.`work_units` WHERE dbs_key = %s", (dbs_key(plan.databases),))
            cur.connection.commit()
        with pytest.raises(IntegrityError, match=r"are missing: another restore .* Re-run the restore from prepare"):
            stages.load_lane(plan, lanes[0])
        assert server.query(LEDGER, (plan.backup.backup_id,))[0][0] == 0  # not a chunk loaded
        stages.revert(plan)


@pytest.mark.parametrize(("index_build", "built_in_lane"), [
    pytest.param("per_table", True, id="per-table-in-the-lane"),
    pytest.param("after_all", False, id="after-all-by-finalize"),
])
def test_lanes_load_every_unit_once_and_build_indexes_as_asked(restore_backup, logical_target, index_build, built_in_lane):
    with restoring(restore_backup, index_build=index_build) as plan:
        stages.snapshot_config(plan)
        _done, lanes = stages.prepare(plan)
        server = target_server(plan)
        loaded = [u for lane in lanes for u in stages.load_lane(plan, lane)]
        assert all(isinstance(u, UnitLoaded) for u in loaded)
        assert sorted(u.unit for u in loaded) == sorted(u["name"] for u in stages.plan_load(plan))  # each once
        assert (_rows(server, SMALL, KEYED), _rows(server, SMALL, MYISAM)) == (KEYED_ROWS, MYISAM_ROWS)
        assert server.query(INDEX, (SMALL, KEYED))[0][0] == int(built_in_lane)  # the held-back index, before finalize
        stages.finalize(plan)
        assert server.query(INDEX, (SMALL, KEYED))[0][0] == 1
        stages.revert(plan)


def test_load_loads_one_unit_exactly_once(restore_backup, logical_target):
    with restoring(restore_backup, databases=[SMALL, BIG]) as plan:
        stages.snapshot_config(plan)
        stages.prepare(plan)
        units = stages.plan_load(plan)
        first = stages.load(plan, units[0])
        assert first.unit == units[0]["name"] and first.rows > 0 and first.created == len(units[0]["parts"])
        again = stages.load(plan, units[0])
        assert (again.rows, again.created, again.skipped) == (0, 0, first.chunks)
        stages.revert(plan)


def test_the_snapshot_then_prepare_and_a_retry_of_each_keeps_the_first_snapshot(restore_backup, logical_target):
    server = logical_target.server()
    before = server.variables(*tuning.TUNED_VARIABLES)
    with restoring(restore_backup, tune=True) as plan:
        snap = stages.snapshot_config(plan, "run `1`.a b")
        done, lanes = stages.prepare(plan)
        assert isinstance(snap, ConfigSnapshot) and snap.run_id == "run `1`.a b" and not snap.inherited
        assert isinstance(done["tune"], Tuned) and "read_only" in done["tune"].applied
        assert isinstance(done["create_schema"], SchemaCreated) and len(lanes) == 2
        assert server.variables("read_only") == {"read_only": "ON"}
        again = stages.snapshot_config(plan, "run 2")  # a retry (or a cleared lane's), on the tuned target
        _done, relanes = stages.prepare(plan)
        assert again.inherited and again.run_id == "run `1`.a b" and relanes == lanes
        assert {k: again.variables[k] for k in before} == before  # the production values, never the tuned ones
        stages.revert(plan)
        assert server.variables(*tuning.TUNED_VARIABLES) == before


def test_a_prepare_that_fails_after_tuning_leaves_the_snapshot_for_the_teardown(restore_backup, logical_target, caplog):
    """The DAG's revert teardown has the snapshot task as its setup: whatever prepare did before it failed (or was
    killed on its last try), revert puts back from the snapshot."""
    server = logical_target.server()
    before = server.variables(*tuning.TUNED_VARIABLES)
    with restoring(restore_backup, tune=True, force=False) as plan:
        with server.session() as cur:  # written after preflight saw the database empty: create_schema refuses it
            cur.execute(f"CREATE DATABASE {quote_ident(SMALL)}")
            cur.execute(f"CREATE TABLE {qualified(SMALL, 'app`s t.1')} (id INT PRIMARY KEY)")
        stages.snapshot_config(plan, "failing")
        with caplog.at_level("INFO"), pytest.raises(Refusal, match=r"hold tables now but were empty when the restore was planned"):
            stages.prepare(plan)
        assert "tune: set {'read_only': 'ON'" in caplog.text  # it had tuned
        assert server.variables("read_only") == {"read_only": "ON"} and tuning.read_snapshot(server) is not None
        stages.revert(plan)  # the teardown
        assert server.variables(*tuning.TUNED_VARIABLES) == before
        assert tuning.read_snapshot(server) is None
        assert _rows(server, SMALL, "app`s t.1") == 0 and server.query(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (SMALL,))[0][0] == 1  # untouched


def test_the_stages_in_their_order_restore_the_backup_exactly(restore_backup, logical_target):
    server = logical_target.server()
    before = server.variables(*tuning.TUNED_VARIABLES)
    with restoring(restore_backup, databases=[SMALL, BIG], tune=True) as plan:
        snap = stages.snapshot_config(plan, "unit")
        _done, lanes = stages.prepare(plan)
        for lane in lanes:
            stages.load_lane(plan, lane)
        finalized = stages.finalize(plan)
        reverted = stages.revert(plan)
        assert isinstance(finalized, Finalized) and isinstance(reverted, Reverted) and reverted.run_account_dropped
        assert reverted.reverted and server.variables(*tuning.TUNED_VARIABLES) == before
        assert stages.revert(plan) == Reverted({}, False)  # a retried revert: nothing left to put back or drop
        verified = stages.verify(plan, snap)
        assert isinstance(verified, Verified) and verified.row_hashes
        manifest = manifest_of(restore_backup)
        assert (verified.tables, verified.rows) == (len(manifest.tables), manifest.rows)
