"""
### logical_restore: tune → parallel chunked load with per-table fan-out → revert → verify

preflight → approve (when data on the target would be replaced and the deployment or the target's connection
asks: a person approves, shown the tables, rows and last writes at risk and the backup's age; without `force`,
the approval is what lets the restore replace them, and where nothing asks, only `force` does; where no one is
asked, preflight skips it) → **snapshot_config** (setup, read-only: records the production values durably on
the target) → prepare (tune, create_schema, plan: short steps, one task) → **load** (`parallel` mapped lanes) →
finalize → **revert** (teardown: runs after a failure too, a prepare killed included) → verify (then the report).

Everything the backup brings runs under this run's own account, which can touch the restored databases
only (dropped by revert); triggers, views, routines and events are created by, and run as, a locked owner
of those databases, never the backup's DEFINER; events come back disabled unless `enable_events`.

- **tune**: `SET GLOBAL` for the dynamic settings (`innodb_flush_log_at_trx_commit=0`, no adaptive
  hash index, io capacity, `max_allowed_packet`, a bigger redo log online); with `restart_allowed`, a
  drop-in in the connection's `config_dir` (`innodb_doublewrite=0`, `skip-log-bin`,
  `innodb_autoinc_lock_mode=2`) and a restart. `read_only=ON` keeps application writes out until
  revert (lastline's accounts hold READ_ONLY ADMIN).
- **create_schema** (with defer_indexes): databases and sequences; each table is created by the lane that loads
  it, just before its first chunk, so the first rows do not wait for every CREATE.
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

from airflow.sdk import dag

from lastline.airflow.defaults import dag_args
from lastline.airflow.params import FORCE_OFF, params
from lastline.airflow.task_groups import logical_restore_steps


@dag(
    dag_id="logical_restore",
    **dag_args(schedule=None),
    doc_md=__doc__,
    tags=["lastline", "logical", "restore"],
    params=params(
        "target_conn_id", "backup", "databases", "parallel", "tune", "restart_allowed", "defer_indexes", "index_build", "force", "enable_events",
        "restore_grants", "restore_into_source", "redo_log_bytes", "aws_conn_id",
        databases="a subset; empty: every database in the backup", parallel="work units loading at once on the target",
        force=f"replace databases that already exist on the target (set aside until the restore is verified) where no "
              f"person is asked to approve it, as an unattended run needs; {FORCE_OFF}",
    ),
)
def logical_restore():
    # the steps are a task group shared with staging_refresh; here their ids stay plain (preflight, load, ...)
    logical_restore_steps.override(prefix_group_id=False)()


logical_restore()
