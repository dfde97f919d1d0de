"""The logical restore's stages, in the order the DAG runs them: preflight, snapshot_config, prepare (tune,
create_schema, plan), load_lane, finalize, revert, verify (then the report). Each is one Airflow task (a load_lane
each); see dags/logical_restore.py for the shape. preflight, create_schema, finalize and verify live in their own
modules."""
from __future__ import annotations

import dataclasses
import logging
import re
from datetime import UTC, datetime
from typing import Any

from lastline.backups import OpenedBackup, open_backup
from lastline.core import accounts, stopping
from lastline.core.errors import IntegrityError, LastlineError
from lastline.core.progress import plural
from lastline.logical.restore import tuning
from lastline.logical.restore.backup_files import RUN_SESSION, run_server, selected, target_server
from lastline.logical.restore.create import create_schema, table_creates
from lastline.logical.restore.finalize import complete_table, finalize
from lastline.logical.restore.lanes import load_lane as lane_loader
from lastline.logical.restore.load import load_unit
from lastline.logical.restore.plans import ConfigSnapshot, RestorePlan, Reverted, SchemaCreated, Tuned, UnitLoaded
from lastline.logical.restore.preflight import preflight
from lastline.logical.restore.target_state import dbs_key, record_units, recorded_units, units_digest
from lastline.logical.restore.verify import keep_chunk_sums, verify
from lastline.logical.restore.work_units import WorkUnit, plan_units

__all__ = ["preflight", "snapshot_config", "tune", "create_schema", "plan_load", "prepare", "plan_lanes", "load_lane",
           "load", "finalize", "revert", "verify"]

log = logging.getLogger(__name__)


def snapshot_config(plan: RestorePlan, run: str = "") -> ConfigSnapshot:
    """The setup: record the production values durably on the target (changes no setting); `run`: the run that took
    it (an Airflow run id), named to whoever finds it left behind."""
    return tuning.take_snapshot(target_server(plan), run, datetime.now(UTC).isoformat())


def tune(plan: RestorePlan) -> Tuned:
    """Apply the restore profile (see tuning), or nothing when tune is off."""
    server = target_server(plan)
    snap = tuning.read_snapshot(server)
    if snap is None:
        raise LastlineError("tune: no config snapshot on the target; snapshot_config must run first.")
    if not plan.tune:
        log.info("tune: off for this run; loading on the target's own settings (but %s)", tuning.REQUIRED)
    return tuning.apply(
        server, snap, restart_allowed=plan.restart_allowed, redo_bytes=plan.redo_log_bytes,
        buffer_pool_bytes=plan.buffer_pool_bytes, profile=plan.tune,
    )


def plan_load(plan: RestorePlan, backup: OpenedBackup | None = None) -> list[dict]:
    """The work units, planned once from the checked manifest and recorded on the target for the lanes
    (target_state.record_units: at 10,000 tables they are about 1 MB of JSON, which XCom should not carry); returned
    as dicts (what the log and the benches show). `backup`: the plan's, when this task opened it already."""
    manifest = (backup or open_backup(plan.backup)).logical
    units = plan_units(manifest, selected(manifest, plan.databases), plan.parallel)
    with target_server(plan).session() as cur:
        record_units(cur, manifest.backup_id, plan.databases, units)
    log.info("plan: %s for %s: %s", plural(len(units), "work unit"), plural(plan.parallel, "lane"),
             "; ".join(f"{u.name} ({u.bytes / 1e6:.1f} MB)" for u in units))
    return [u.to_dict() for u in units]


def prepare(plan: RestorePlan) -> tuple[dict[str, Tuned | SchemaCreated], list[str]]:
    """tune, create_schema and plan as one task (each takes well under a second; a task costs Airflow about
    that much again): their results, and the lanes the load runs on."""
    backup = open_backup(plan.backup)  # once for the task: its manifest read and checked once
    return {"tune": tune(plan), "create_schema": create_schema(plan, backup)}, plan_lanes(plan, backup)


def plan_lanes(plan: RestorePlan, backup: OpenedBackup | None = None) -> list[str]:
    """The `parallel` lanes that load the work units (planned and recorded here, see plan_load), each label naming
    the plan's digest, which its lane checks against what it finds recorded."""
    digest = units_digest(plan_load(plan, backup))
    return [f"lane {i + 1} of {plan.parallel} (units {digest})" for i in range(plan.parallel)]


@stopping.stops_cleanly
def load_lane(plan: RestorePlan, lane: str) -> list[UnitLoaded]:
    """One of `parallel` lanes: load the units no other lane holds, in the order prepare planned them (recorded on
    the target, see plan_load; logical.restore.load)."""
    backup = open_backup(plan.backup)
    storage, manifest, schema = backup.storage, backup.logical, backup.schema
    with target_server(plan).session() as cur:  # lastline's own bookkeeping: read as the admin account
        units = recorded_units(cur, manifest.backup_id, plan.databases)
    handed = re.search(r"\(units ([0-9a-f]{12})\)$", lane)
    if not units and selected(manifest, plan.databases) or handed and units_digest([u.to_dict() for u in units]) != handed[1]:
        raise IntegrityError(
            f"{lane}: the work units recorded on the target for {plan.backup.url} ({', '.join(plan.databases)}) are "
            + ("missing" if not units else "not the ones prepare handed this lane (another prepare of this restore "
               "planned them again)") + ": another restore into these databases may have cleared them. Re-run the "
            "restore from prepare (clear prepare and what follows); the ledger keeps what was loaded.")
    server = run_server(plan)  # the chunks, the held-back indexes and the checks: all under the run account
    built = None
    if plan.index_build == "per_table":  # without defer_indexes the indexes are there: only the checksum
        tables = {(t["schema"], t["name"]): t for t in schema["tables"]}
        in_manifest = {(t.schema, t.name): t for t in manifest.tables}

        def built(cur: Any, schema: str, name: str) -> None:  # in this lane's slot, while the other lanes load
            kept = keep_chunk_sums(cur, manifest, [in_manifest[(schema, name)]])
            indexes, check = complete_table(cur, manifest, tables[(schema, name)], None if kept else in_manifest[(schema, name)])
            # said at info when it took a while: a line per table (10,000 of them) costs the task's log more than it tells
            log.log(logging.INFO if indexes + check >= 1.0 else logging.DEBUG, "%s: %s.%s: indexes built in %.1f s, "
                    "checksum for verify in %.1f s", lane, schema, name, indexes, check)

    return lane_loader(server, storage, manifest, units, lane, plan.parallel, on_table_done=built, setup=RUN_SESSION,
                       create=table_creates(plan, manifest, schema), scope=f"{manifest.backup_id}/{dbs_key(plan.databases)}",
                       help_others=True)


@stopping.stops_cleanly
def load(plan: RestorePlan, unit: dict) -> UnitLoaded:
    """Load one work unit (a dict of work_units.WorkUnit, as plan_load gives it)."""
    backup = open_backup(plan.backup)
    return load_unit(run_server(plan), backup.storage, backup.logical, WorkUnit.from_dict(unit), plan.parallel,
                     table_creates(plan, backup.logical, backup.schema))


def revert(plan: RestorePlan) -> Reverted:
    """The teardown: drop the run account and lock the objects owner (always first: nothing from the backup
    runs after this), then put the production configuration back and read it back (fails loudly on a
    difference)."""
    server = target_server(plan)
    dropped = accounts.drop(server, plan.restore_account) if plan.restore_account else False
    accounts.lock(server, accounts.owner_name(plan.databases))
    return dataclasses.replace(tuning.revert(server), run_account_dropped=dropped)
