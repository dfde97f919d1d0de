"""
### physical_backup: nightly streamed physical backup

`mariabackup --backup --stream=xbstream --parallel=N | compressor` runs as **one OS pipeline** straight
into the destination (`file:///dir` or `s3://bucket/prefix`), with no local temporary copy; sha256 and
byte count are computed in-stream. `manifest.json` is written **last**: a backup folder without it is
incomplete and is never restored.

preflight (tools, versions, credentials, destination; read-only) → stream → write_manifest → prune
(keep the `keep` newest complete backups, never the newest; drop incomplete ones older than
`incomplete_grace_hours`).

Schedule: `LASTLINE_PHYSICAL_BACKUP_SCHEDULE` (cron, default 02:00 UTC daily); catchup off.
"""
from __future__ import annotations

from airflow.sdk import Param, dag, task

from lastline.airflow.defaults import DESTINATION, SOURCE_CONN_ID, dag_args, env
from lastline.physical import backup as pb
from lastline.physical.tools import CODECS, DEFAULT_COMPRESSION


@dag(
    dag_id="physical_backup",
    **dag_args(schedule=env("PHYSICAL_BACKUP_SCHEDULE", "0 2 * * *")),
    doc_md=__doc__,
    tags=["lastline", "physical", "backup"],
    params={
        "source_conn_id": Param(SOURCE_CONN_ID, type="string", description="mysql connection of the source"),
        "destination": Param(DESTINATION, type="string", description="file:///dir or s3://bucket/prefix"),
        "compression": Param(DEFAULT_COMPRESSION, enum=list(CODECS), description="zstd is fastest here"),
        "parallel": Param(2, type="integer", minimum=1, description="mariabackup and compressor threads"),
        "aws_conn_id": Param(None, type=["null", "string"], description="AWS connection for s3:// (endpoint, keys)"),
        "keep": Param(7, type="integer", minimum=1, description="complete backups to keep"),
        "incomplete_grace_hours": Param(24, type="number", minimum=0, description="age before an incomplete backup is removed"),
    },
)
def physical_backup():
    @task
    def preflight(params=None) -> dict:
        return pb.preflight(dict(params))

    @task
    def prune(params=None) -> list[str]:
        return pb.prune(dict(params))

    plan = preflight()
    stats = task(pb.stream)(plan)
    task(pb.finish, task_id="write_manifest")(plan, stats) >> prune()


physical_backup()
