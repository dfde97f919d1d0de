"""
### physical_backup: nightly streamed physical backup

`mariabackup --backup --stream=xbstream --parallel=N | compressor` runs as **one OS pipeline** straight
into the destination (`file:///dir` or `s3://bucket/prefix`), with no local temporary copy; sha256 and
byte count are computed in-stream. `manifest.json` is written **last**: a backup folder without it is
incomplete and is never restored.

preflight (tools, versions, credentials, destination; from a replica, its lag; read-only) → stream
(→ resume_replica, a teardown) → write_manifest →
announce_backup (the Asset `lastline_physical_backup`: URL, id, binlog/GTID position) → prune
(keep the `keep` newest complete backups, never the newest; drop incomplete ones older than
`incomplete_grace_hours`; where the destination holds a binlog archive, also every base the
`pitr_window_days` point-in-time window needs, and the archived binlogs those bases roll forward with).

mariabackup takes MariaDB's backup stages: a long write running when it starts holds nothing back, and
commits wait only while the last redo and non-InnoDB files are copied. `priority` (default low: nice 10,
ionice best-effort 7) and `max_read_mb_per_s` bound what it takes from the source's host. From a replica
(`from_replica`, or `"replica": true` in the connection's extra) the lag is checked first, the SQL thread
pauses while no replicated temporary table is open (`--safe-slave-backup`), and the manifest records the
primary's coordinates (`primary`); `resume_replica` starts the SQL thread again if the stream was killed.

Schedule: `LASTLINE_PHYSICAL_BACKUP_SCHEDULE` (cron, or `none` for manual runs only; default 02:00 UTC daily); catchup off.
"""
from __future__ import annotations

from airflow.sdk import dag

from lastline import pruning
from lastline.airflow.alerts import backup_deadline
from lastline.airflow.assets import PHYSICAL_BACKUP, announce
from lastline.airflow.defaults import dag_args, schedule
from lastline.airflow.params import Override, params
from lastline.airflow.routing import on_server
from lastline.airflow.steps import step
from lastline.core.compression import CODECS, DEFAULT_COMPRESSION
from lastline.physical import backup
from lastline.physical.plans import BackupPlan


@dag(
    dag_id="physical_backup",
    **dag_args(schedule=schedule("PHYSICAL_BACKUP_SCHEDULE", "0 2 * * *"), deadline=backup_deadline()),
    doc_md=__doc__,
    tags=["lastline", "physical", "backup"],
    params=params(
        "source_conn_id", "destination", "compression", "parallel", "priority", "max_read_mb_per_s", "from_replica",
        "max_replica_lag", "aws_conn_id", "keep", "incomplete_grace_hours", "pitr_window_days",
        compression=Override(DEFAULT_COMPRESSION, enum=list(CODECS)), parallel="mariabackup and compressor threads",
    ),
)
def physical_backup():
    def announce_backup(plan: BackupPlan, written: str) -> dict:
        """The Asset event: downstream DAGs (a restore drill) run on it."""
        return announce(PHYSICAL_BACKUP, "physical", plan.destination, plan.backup_id, plan.aws_conn_id)

    plan = step(backup.preflight, multiple_outputs=True, **on_server("source_conn_id", long=False))()
    stats = step(backup.stream, **on_server("source_conn_id"))(plan)
    # from a replica: its SQL thread runs again, whatever happened (not in the server's pool: never behind a backup)
    step(backup.resume_replica)(plan, stats).as_teardown(setups=plan, on_failure_fail_dagrun=True)
    written = step(backup.finish, task_id="write_manifest")(plan, stats)
    announced = step(announce_backup, outlets=[PHYSICAL_BACKUP], multiple_outputs=True)(plan, written)
    # prune: the physical bases beyond `keep`, but not those the point-in-time window needs; then the archived binlogs
    # no kept base needs
    announced >> step(pruning.prune_physical, task_id="prune", multiple_outputs=True)()


physical_backup()
