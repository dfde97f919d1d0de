"""
### point_in_time_restore: a base backup rolled forward with the archived binlogs, to a second or a GTID

plan (read-only: the base, the archive's branch, the exact bytes to replay; refuses an `until` in a hole,
past the archive's end or before the base) → base_kind → physical_base.* (the physical restore's own steps:
preflight, approve, stop, extract, prepare, start, verify) or logical_base.* (the logical restore's: the
databases of a logical backup, under an account limited to them) → replay (the archived binlogs from the base's exact coordinates, in
commit order, up to the first transaction stamped after `until` or through the `until` GTID, whole
transactions only; the target's own parallel applier, or `mariadb-binlog | mariadb`; a retry resumes where
the target stopped) → report (the run's report opens with it: until as asked and the point it resolved to, the
transactions replayed, the last one applied, the recoverable window) → cleanup (a teardown: the replay's replication
connection dropped and the settings it changed put back, however it ended).

`until`: `YYYY-MM-DDTHH:MM:SSZ` (UTC), a GTID `domain-server-seq`, or `latest`. `base`: a backup id, or
`auto` (the newest complete backup of `base_kind` before `until`). The archive is `<destination>/binlogs`,
written by the binlog_archive DAG. A logical base's replay reaches its restored databases only: their row
events, rebuilt by lastline, through the target's applier (`replicate_do_db` set to them as a second line);
archived statements that may change them run in order between the row transactions, in one session of a run
account whose grants reach those databases alone (what reaches further is denied by the server, named); one on
other databases is left out and named; DDL or a non-transactional change on them is refused before anything is
applied.
"""
from __future__ import annotations

from airflow.sdk import dag

from lastline.airflow.assets import recorded_archive_head
from lastline.airflow.defaults import dag_args
from lastline.airflow.params import FORCE_OFF, params
from lastline.airflow.routing import on_server
from lastline.airflow.steps import step, task
from lastline.airflow.task_groups import logical_restore_steps, physical_restore_steps
from lastline.core.plans import Conf
from lastline.pitr import replay as pitr_replay
from lastline.pitr import report as pitr_report
from lastline.pitr import restore as pitr
from lastline.pitr.plans import PitrPlan


@dag(
    dag_id="point_in_time_restore",
    **dag_args(schedule=None),
    doc_md=__doc__,
    tags=["lastline", "pitr", "restore"],
    params=params("target_conn_id", "destination", "until", "base", "base_kind", "databases", "branch",
                  "replay_method", "parallel", "force", "restore_into_source", "aws_conn_id",
                  databases="a logical base's databases to restore and roll forward; empty: every one it holds",
                  force="replace what the base replaces: a non-empty datadir (physical) or existing databases (logical), "
                        f"set aside until verified, where no person is asked to approve it, as an unattended run needs; {FORCE_OFF}"),
)
def point_in_time_restore():
    def plan(conf: Conf) -> PitrPlan:
        # the archive's head Airflow recorded after its last run: a restore refuses an archive rolled back from it
        return pitr.preflight(conf, recorded_archive_head(conf.required("destination"), conf.text("aws_conn_id")))

    @task.branch
    def base_kind(kind: str) -> str:
        return f"{kind}_base.preflight"

    p = step(plan, multiple_outputs=True, **on_server("target_conn_id", long=False))()
    physical = physical_restore_steps.override(group_id="physical_base")(p["physical"])
    logical = logical_restore_steps.override(group_id="logical_base")(p["logical"])
    base_kind(p["kind"]) >> [physical, logical]
    replayed = step(pitr_replay.run, task_id="replay", trigger_rule="none_failed_min_one_success",
                    **on_server("target_conn_id"))(p["replay"], "{{ run_id }}")
    cleanup = step(pitr_replay.cleanup, **on_server("target_conn_id", long=False))(p["replay"], "{{ run_id }}")
    reported = step(pitr_report.write, task_id="report")(p, replayed, dag_id="{{ dag.dag_id }}")
    [physical, logical] >> replayed >> reported >> cleanup.as_teardown(setups=replayed)


point_in_time_restore()
