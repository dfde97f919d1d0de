"""
### binlog_archive: the source's binary logs, shipped to the destination as they are written

Each run ships the source's binlogs up to its position at the start of the run, exactly once and in order
(a file still being written goes in pieces), into `<destination>/binlogs/<branch>/`, and ends. Files the
source purged before they were shipped are recorded as holes, named; a server that writes its binlogs anew
under the same names (a restore, `RESET MASTER`, a failover) starts a new branch: nothing is overwritten.

Point-in-time restore and the chain check build on this archive (issue 29: being built).

Schedule: `LASTLINE_BINLOG_ARCHIVE_SCHEDULE` (cron, or `none`; default every minute: the archive stays
within about a minute of the source); one run at a time; catchup off.
"""
from __future__ import annotations

from airflow.sdk import dag, task

from lastline.airflow.defaults import dag_args, schedule
from lastline.airflow.params import params
from lastline.airflow.routing import on_server
from lastline.pitr import archive


@dag(
    dag_id="binlog_archive",
    **dag_args(schedule=schedule("BINLOG_ARCHIVE_SCHEDULE", "* * * * *")),
    doc_md=__doc__,
    tags=["lastline", "pitr"],
    params=params("source_conn_id", "destination", "aws_conn_id", "until_current"),
)
def binlog_archive():
    @task(**on_server("source_conn_id", long=False))
    def ship(params=None) -> dict:
        return archive.run(dict(params))

    ship()


binlog_archive()
