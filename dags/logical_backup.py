"""
### logical_backup: nightly logical backup, one consistent snapshot, parallel chunked TSV

preflight (credentials, databases, privileges, destination; from a replica, its lag; read-only) → dump
(→ resume_replica, a teardown) → announce_backup (the
Asset `lastline_logical_backup`: URL, id, binlog/GTID position; staging_refresh runs on it) → prune.

**dump** never holds production's writes back for more than a moment: on MariaDB (`BACKUP STAGE`)
DDL and writes to non-transactional tables wait while the schema and those tables are read, and commits
wait only while `parallel` dump worker processes each open `START TRANSACTION WITH CONSISTENT SNAPSHOT`
on their own connection and the binlog/GTID position is read (milliseconds; a long running write does not
delay it); elsewhere `FLUSH TABLES WITH READ LOCK`, after the long-statement guard (`long_query_guard`,
`long_query_wait`, `kill_long_queries`), each attempt bounded by `lock_timeout`. All workers read the same
instant, and the parallelism lives **inside this one task**. The workers take chunk jobs (key ranges
of the primary or a unique not-null key; chunks of big tables first, so one huge table keeps every
worker busy) and escape every value on the client in one linear pass, whatever its size. Each chunk
is one compressed TSV file in an exact dialect (NULL vs 'NULL' vs '\\N', binary, every charset,
full-precision floats, invisible columns included, generated ones left out); a warning on a dump
query fails the chunk. `schema.json` keeps databases, tables, views (dependency order), triggers,
routines, events and sequences apart; `manifest.json` is written **last**, with every file's sha256,
per-table row counts and checksums of a row hash the source computes from its stored values (verify
recomputes it on the target), and the binlog/GTID coordinates.
A folder without a manifest is incomplete and is never restored.

`priority` (default low: the workers and compressors at nice 10, ionice best-effort 7) and
`max_read_mb_per_s` (the workers' fetches, shared between them) bound what it takes from the source.
From a replica (`from_replica`, or `"replica": true` in the connection's extra) the lag is checked first,
the SQL thread stands still only while the snapshot opens (and no replicated temporary table is open),
and the manifest records the primary's GTID and binlog file/position (`primary`).

Schedule: `LASTLINE_LOGICAL_BACKUP_SCHEDULE` (cron, or `none` for manual runs only; default 03:00 UTC daily); catchup off.
"""
from __future__ import annotations

from airflow.sdk import dag

from lastline.airflow.alerts import backup_deadline
from lastline.airflow.assets import LOGICAL_BACKUP, announce
from lastline.airflow.defaults import dag_args, schedule
from lastline.airflow.params import params
from lastline.airflow.routing import on_server
from lastline.airflow.steps import step
from lastline.logical.backup import stages as backup_stages
from lastline.logical.backup.plans import BackupPlan


@dag(
    dag_id="logical_backup",
    **dag_args(schedule=schedule("LOGICAL_BACKUP_SCHEDULE", "0 3 * * *"), deadline=backup_deadline()),
    doc_md=__doc__,
    tags=["lastline", "logical", "backup"],
    params=params(
        "source_conn_id", "destination", "databases", "chunk_rows", "compression", "parallel", "include_grants",
        "lock_nontransactional", "lock_method", "long_query_guard", "long_query_wait", "kill_long_queries", "lock_timeout",
        "priority", "max_read_mb_per_s", "from_replica", "max_replica_lag", "aws_conn_id", "keep", "incomplete_grace_hours",
        compression="per chunk file", parallel="snapshot connections dumping at once", keep="complete logical backups to keep",
    ),
)
def logical_backup():
    def announce_backup(plan: BackupPlan, written: str) -> dict:
        """The Asset event: downstream DAGs (staging_refresh) run on it."""
        return announce(LOGICAL_BACKUP, "logical", plan.destination, plan.backup_id, plan.aws_conn_id)

    plan = step(backup_stages.preflight, multiple_outputs=True)()
    written = step(backup_stages.dump, **on_server("source_conn_id"))(plan)
    # from a replica: its SQL thread runs again, whatever happened (not in the server's pool: never behind a backup)
    step(backup_stages.resume_replica)(plan, written).as_teardown(setups=plan, on_failure_fail_dagrun=True)
    step(announce_backup, outlets=[LOGICAL_BACKUP], multiple_outputs=True)(plan, written) >> step(backup_stages.prune)()


logical_backup()
