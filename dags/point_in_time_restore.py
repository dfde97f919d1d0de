"""
### point_in_time_restore: a base backup rolled forward with the archived binlogs, to a second or a GTID

plan (read-only: the base, the archive's branch, the exact bytes to replay; refuses an `until` in a hole,
past the archive's end or before the base) → base.* (the physical restore's own steps: preflight, approve,
stop, extract, prepare, start, verify) → replay (the archived binlogs from the base's exact coordinates, in
commit order, up to the first transaction stamped after `until` or through the `until` GTID, whole
transactions only; the target's own parallel applier, or `mariadb-binlog | mariadb`; a retry resumes where
the target stopped) → cleanup (a teardown: the replay's replication connection dropped and the settings it
changed put back, however it ended).

`until`: `YYYY-MM-DDTHH:MM:SSZ` (UTC), a GTID `domain-server-seq`, or `latest`. `base`: a backup id, or
`auto` (the newest complete physical backup before `until`). The archive is `<destination>/binlogs`, written
by the binlog_archive DAG.
"""
from __future__ import annotations

from airflow.sdk import dag, get_current_context, task

from lastline.airflow.defaults import dag_args
from lastline.airflow.params import params
from lastline.airflow.routing import on_server
from lastline.airflow.task_groups import physical_restore_steps
from lastline.pitr import replay as pitr_replay
from lastline.pitr import restore as pitr


@dag(
    dag_id="point_in_time_restore",
    **dag_args(schedule=None),
    doc_md=__doc__,
    tags=["lastline", "pitr", "restore"],
    params=params("target_conn_id", "destination", "until", "base", "branch", "replay_method", "parallel", "force",
                  "restore_into_source", "aws_conn_id",
                  force="move a non-empty target datadir aside (deleted after verify)"),
)
def point_in_time_restore():
    @task(multiple_outputs=True, **on_server("target_conn_id", long=False))
    def plan(params=None) -> dict:
        return pitr.preflight(dict(params))

    @task(**on_server("target_conn_id"))
    def replay(plan: dict) -> dict:
        return pitr_replay.run(plan, get_current_context()["run_id"])

    @task(**on_server("target_conn_id", long=False))
    def cleanup(plan: dict) -> dict:
        return pitr_replay.cleanup(plan, get_current_context()["run_id"])

    p = plan()
    base = physical_restore_steps.override(group_id="base")(p["restore"])
    replayed = replay(p["replay"])
    base >> replayed >> cleanup(p["replay"]).as_teardown(setups=replayed)


point_in_time_restore()
