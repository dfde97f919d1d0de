"""
### logical_restore: tune → parallel chunked load with per-table fan-out → revert → verify

preflight → **snapshot_config** (setup, read-only: records the production values durably on the
target) → prepare (tune, create_schema, plan: short steps, one task) → **load** (`parallel` mapped
lanes) → finalize → **revert** (teardown: runs after a failure too) → verify (then the report).

- **tune**: `SET GLOBAL` for the dynamic settings (`innodb_flush_log_at_trx_commit=0`, no adaptive
  hash index, io capacity, `max_allowed_packet`, a bigger redo log online); with `restart_allowed`, a
  drop-in in the connection's `config_dir` (`innodb_doublewrite=0`, `skip-log-bin`,
  `innodb_autoinc_lock_mode=2`) and a restart. `read_only=ON` keeps application writes out until
  revert (lastline's account needs READ_ONLY ADMIN or SUPER).
- **plan**: bin-packs chunks into units of similar size: a table stays in one unit, in key order,
  unless it is bigger than a unit; small tables are batched.
- **load**: each chunk streamed from the backup, sha256-checked, decompressed into a FIFO for
  `LOAD DATA LOCAL INFILE`, committed with its ledger row in one transaction: retries and re-runs
  never duplicate or lose a row, and a new run for the same backup resumes. `parallel` is the one
  knob: `parallel` lane tasks each take the next unit no other lane holds (a named lock per unit), so
  a lane that ends early takes the rest, and a retried lane resumes after the ledger.
- **finalize**: deferred indexes and foreign keys, AUTO_INCREMENT, then triggers (after the data),
  views in dependency order, routines, events, sequences, ANALYZE; the ledger is dropped.
- **revert** restores every recorded value, removes the drop-in (restart) and reads them all back,
  failing loudly on any difference. **verify** recomputes each table's rows and checksum and checks
  every object and the configuration, then writes the report: per-table figures and an SVG chart.
"""
from __future__ import annotations

from airflow.sdk import dag, get_current_context, task
from airflow.sdk.definitions.xcom_arg import XComArg

from lastline.airflow.defaults import dag_args
from lastline.airflow.params import params
from lastline.logical import report as restore_report
from lastline.logical import restore as lr


@dag(
    dag_id="logical_restore",
    **dag_args(schedule=None),
    doc_md=__doc__,
    tags=["lastline", "logical", "restore"],
    params=params(
        "target_conn_id", "backup", "databases", "parallel", "tune", "restart_allowed", "defer_indexes", "index_build", "force",
        "restore_grants", "restore_into_source", "redo_log_bytes", "aws_conn_id",
        databases="a subset; empty: every database in the backup", parallel="work units loading at once on the target",
        force="replace databases that already exist on the target (set aside until the restore is verified)",
    ),
)
def logical_restore():
    @task
    def preflight(params=None) -> dict:
        return lr.preflight(dict(params))

    @task
    def snapshot_config(plan: dict) -> dict:
        return lr.snapshot_config(plan, get_current_context()["run_id"])

    @task(map_index_template="{{ unit_name }}")
    def load(plan: dict, lane: str) -> list:
        get_current_context()["unit_name"] = lane
        return lr.load_lane(plan, lane)

    @task
    def prepare(plan: dict) -> list[str]:
        steps, lanes = lr.prepare(plan)
        get_current_context()["ti"].xcom_push(key="steps", value=steps)
        return lanes

    @task
    def revert(plan: dict) -> dict:
        return lr.revert(plan)

    @task
    def verify(plan: dict, snap: dict, prepared: dict, loads: list, finalized: dict, reverted: dict) -> dict:
        verified = lr.verify(plan, snap)
        steps = {**prepared, "finalize": finalized, "revert": reverted, "verify": verified}
        restore_report.write(plan, steps, list(loads), get_current_context()["run_id"])
        return verified

    plan = preflight()
    snap = snapshot_config(plan)
    lanes = prepare(plan)
    loads = load.partial(plan=plan).expand(lane=lanes)
    finalized = task(lr.finalize)(plan)
    reverted = revert(plan).as_teardown(setups=snap, on_failure_fail_dagrun=True)
    verified = verify(plan, snap, XComArg(lanes.operator, key="steps"), loads, finalized, reverted)
    snap >> lanes
    loads >> finalized >> reverted >> verified
    finalized >> verified  # a failed load or finalize is never verified, though revert runs


logical_restore()
