"""
### logical_restore: tune → parallel chunked load with per-table fan-out → revert → verify

preflight → **snapshot_config** (setup, read-only: records the production values durably on the
target) → tune → create_schema → plan → **load** (one mapped task per work unit) → finalize →
**revert** (teardown: runs after a failure too) → verify → report.

- **tune**: `SET GLOBAL` for the dynamic settings (`innodb_flush_log_at_trx_commit=0`, no adaptive
  hash index, io capacity, `max_allowed_packet`, a bigger redo log online); with `restart_allowed`, a
  drop-in in the connection's `config_dir` (`innodb_doublewrite=0`, `skip-log-bin`,
  `innodb_autoinc_lock_mode=2`) and a restart. `read_only=ON` keeps application writes out until
  revert (lastline's account needs READ_ONLY ADMIN or SUPER).
- **plan**: bin-packs chunks into units of similar size: a table stays in one unit, in key order,
  unless it is bigger than a unit; small tables are batched (tens of units for a few GB: each task
  instance costs Airflow about a second).
- **load**: each chunk streamed from the backup, sha256-checked, decompressed into a FIFO for
  `LOAD DATA LOCAL INFILE`, committed with its ledger row in one transaction: retries and re-runs
  never duplicate or lose a row, and a new run for the same backup resumes. At most `parallel`
  units load at once on the target (named locks), whatever Airflow schedules.
- **finalize**: deferred indexes and foreign keys, AUTO_INCREMENT, then triggers (after the data),
  views in dependency order, routines, events, sequences, ANALYZE; the ledger is dropped.
- **revert** restores every recorded value, removes the drop-in (restart) and reads them all back,
  failing loudly on any difference. **verify** recomputes each table's rows and checksum and checks
  every object and the configuration; **report** writes per-table figures and a PNG chart.
"""
from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from lastline.airflow.defaults import DESTINATION, TARGET_CONN_ID, dag_args, env
from lastline.logical import report as restore_report
from lastline.logical import restore as lr


@dag(
    dag_id="logical_restore",
    **dag_args(schedule=None),
    doc_md=__doc__,
    tags=["lastline", "logical", "restore"],
    params={
        "target_conn_id": Param(TARGET_CONN_ID, type="string", description="mysql connection of the server to restore into"),
        "backup": Param(f"{DESTINATION}/latest", type="string", description="<destination>/<backup_id> or <destination>/latest"),
        "databases": Param([], type="array", items={"type": "string"}, description="a subset; empty: all in the backup"),
        "parallel": Param(2, type="integer", minimum=1, description="work units loading at once"),
        "tune": Param(True, type="boolean", description="apply the bulk-load profile (always reverted)"),
        "restart_allowed": Param(False, type="boolean", description="may restart the target for doublewrite/binlog/autoinc settings"),
        "defer_indexes": Param(True, type="boolean", description="build secondary indexes and foreign keys after the data"),
        "force": Param(False, type="boolean", description="replace databases that already exist on the target"),
        "restore_grants": Param(False, type="boolean", description="also recreate the accounts and grants of a backup taken with include_grants"),
        "restore_into_source": Param("", type="string", description="the target's connection id, to allow restoring into the server the backup came from"),
        "redo_log_bytes": Param(lr.DEFAULT_REDO_BYTES, type="integer", minimum=0, description="redo log size while loading"),
        "aws_conn_id": Param(None, type=["null", "string"], description="AWS connection for s3:// backups"),
    },
)
def logical_restore():
    @task
    def preflight(params=None) -> dict:
        return lr.preflight(dict(params))

    @task
    def snapshot_config(plan: dict) -> dict:
        return lr.snapshot_config(plan, get_current_context()["run_id"])

    @task(map_index_template="{{ unit_name }}", max_active_tis_per_dagrun=int(env("LOAD_SLOTS", "2")))
    def load(plan: dict, unit: dict) -> dict:
        get_current_context()["unit_name"] = unit["name"]
        return lr.load(plan, unit)

    @task
    def revert(plan: dict) -> dict:
        return lr.revert(plan)

    @task
    def report(plan: dict, tuned: dict, schema: dict, loads: list, finalized: dict, reverted: dict, verified: dict) -> dict:
        steps = {"tune": tuned, "create_schema": schema, "finalize": finalized, "revert": reverted, "verify": verified}
        return restore_report.write(plan, steps, list(loads), get_current_context()["run_id"])

    plan = preflight()
    snap = snapshot_config(plan)
    tuned = task(lr.tune)(plan)
    schema = task(lr.create_schema)(plan)
    units = task(lr.plan_load, task_id="plan")(plan)
    loads = load.partial(plan=plan).expand(unit=units)
    finalized = task(lr.finalize)(plan)
    reverted = revert(plan).as_teardown(setups=snap, on_failure_fail_dagrun=True)
    verified = task(lr.verify)(plan, snap)
    snap >> tuned >> schema >> units
    loads >> finalized >> reverted >> verified
    finalized >> verified  # a failed load or finalize is never verified, though revert runs
    report(plan, tuned, schema, loads, finalized, reverted, verified)


logical_restore()
