"""
### restore_drill: a backup is only good once a drill restored it

Runs when a backup completes (the Assets `lastline_logical_backup` and `lastline_physical_backup`) and on
demand: restores that backup (a manual run: `backup`, default `<destination>/latest`, of `kind`) into a
scratch server whose connection says `"role": "drill"` (its data is replaced every time; no other server is
accepted), verifies it as every restore does, and records the time to restore (RTO) and the MB/s per backup
in a history the run's **Report** charts. A failed drill, or one over `rto_budget_minutes`, alerts (the
connection `lastline_alerts`).

preflight (guard, backup, kind) → which → logical.* (the logical restore's steps) or physical.* (the physical
restore's) → record (always: history, report, alert; fails the run when the drill failed).
"""
from __future__ import annotations

from airflow.sdk import dag, get_current_context

from lastline import drill
from lastline.airflow.alerts import send
from lastline.airflow.assets import LOGICAL_BACKUP, PHYSICAL_BACKUP, triggering_backup
from lastline.airflow.defaults import dag_args
from lastline.airflow.params import BACKUPS_PAGE, params
from lastline.airflow.steps import step, task
from lastline.airflow.task_groups import logical_restore_steps, physical_restore_steps
from lastline.core.plans import Conf
from lastline.drill import DrillPlan


@dag(
    dag_id="restore_drill",
    **dag_args(schedule=(LOGICAL_BACKUP | PHYSICAL_BACKUP)),
    doc_md=__doc__,
    tags=["lastline", "restore", "drill"],
    params=params("drill_conn_id", "backup", "kind", "rto_budget_minutes", "parallel", "aws_conn_id",
                  backup=f"for a manual run: the backup to drill (of `kind`); a run started by a backup's Asset event "
                         f"drills that backup; {BACKUPS_PAGE}"),
)
def restore_drill():
    def preflight(conf: Conf) -> DrillPlan:
        event = triggering_backup()  # a backup that just completed; else the Params (a manual run)
        return drill.preflight(conf.replace(kind=event["kind"], backup=event["url"]) if event else conf)

    @task.branch
    def which(kind: str) -> str:
        return f"{kind}.preflight"

    def record(plan: DrillPlan) -> dict:
        context = get_current_context()
        verified = context["ti"].xcom_pull(task_ids=f"{plan.kind}.verify")
        entry = drill.record(plan, verified, context["dag"].dag_id, context["run_id"])
        problem = drill.verdict(entry)
        if problem:
            send("drill_failed" if not entry["ok"] else "rto_exceeded", f"lastline: {problem}",
                 {"dag_id": context["dag"].dag_id, "run_id": context["run_id"], **entry})
        drill.fail_if_bad(entry)
        return entry

    plan = step(preflight, multiple_outputs=True)()
    logical = logical_restore_steps.override(group_id="logical")(plan["restore"], server_param="drill_conn_id", role="drill")
    physical = physical_restore_steps.override(group_id="physical")(plan["restore"], server_param="drill_conn_id", role="drill")
    which(plan["kind"]) >> [logical, physical]
    [logical, physical] >> step(record, trigger_rule="all_done", multiple_outputs=True)(plan)


restore_drill()
