"""
### key_rotation: every kept backup's data key re-wrapped under the current encryption key

Manual (the form: `destination`, `aws_conn_id`, `dry_run`). Run it after a new key was put in the encryption key
connection (the old one moved to its extras `keys`): each complete backup (physical and logical) whose manifest records
an envelope gets it re-wrapped under the current key and recipients, the manifest written back signed, the same bytes
but for the envelope and the MAC, and Airflow's pin of the newest backup updated to match; the binlog archive's
branches likewise. Only manifests and the archive branches' envelope.json are written: no data object is rewritten (the data key stays the same).

preflight → backups → rotate_backups (one task per batch of 100 backups) and rotate_archive → report (always). A
manifest that does not authenticate with the storage key is reported, never signed again; one that no held key opens,
or that changed while it was re-wrapped, is reported too: the run then fails, and the older key must stay. A re-run
(or a killed run, cleared) re-wraps only what is not yet under the current key.
"""
from __future__ import annotations

from typing import cast

from airflow.sdk import dag, get_current_context

from lastline.airflow.assets import newest_pin, record_archive_head
from lastline.airflow.defaults import dag_args
from lastline.airflow.params import params
from lastline.airflow.steps import step
from lastline.rotation import stages
from lastline.rotation.plans import Outcome, RotationPlan


@dag(
    dag_id="key_rotation",
    **dag_args(schedule=None),
    doc_md=__doc__,
    tags=["lastline", "encryption"],
    params=params("destination", "aws_conn_id", "dry_run", destination="the destination whose backups are re-wrapped"),
)
def key_rotation():
    def rotate_backups(plan: RotationPlan, backup_ids: list[str]) -> list[Outcome]:
        context = cast(dict, get_current_context())
        context["backup_id"] = " .. ".join(dict.fromkeys([backup_ids[0], backup_ids[-1]]))  # the instance's name
        return stages.rotate_backups(plan, backup_ids, None if plan.dry_run else newest_pin(plan.destination, plan.aws_conn_id))

    def rotate_archive(plan: RotationPlan) -> list[Outcome]:  # the head recorded again if it changed
        return stages.rotate_branches(plan, lambda head: record_archive_head(plan.destination, head, plan.aws_conn_id))

    def report(plan: RotationPlan) -> dict:
        context = get_current_context()
        ti = context["ti"]
        found = stages.record(plan, ti.xcom_pull(task_ids="rotate_backups"), ti.xcom_pull(task_ids="rotate_archive"),
                              context["dag"].dag_id, context["run_id"])
        stages.fail_if_bad(found)
        return found

    plan = step(stages.preflight, task_id="preflight")()
    ids = step(stages.batches, task_id="backups")(plan)
    done = step(rotate_backups, map_index_template="{{ backup_id }}").partial(plan=plan).expand(backup_ids=ids)
    archived = step(rotate_archive)(plan)
    [done, archived] >> step(report, trigger_rule="all_done", multiple_outputs=True)(plan)


key_rotation()
