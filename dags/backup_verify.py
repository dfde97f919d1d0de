"""
### backup_verify: every backup of a destination, and its binlog archive, read back

Weekly, and on demand (the form: `destination`, `aws_conn_id`): lists every complete backup (physical and logical)
and re-reads each in a task of its own: every file's presence, size and sha256 against its manifest, the manifest
read bounded and its MAC checked with the deployment's storage key (a file's own claim is never trusted). On S3 and
SSH the bytes stream through the digest; nothing is downloaded whole, nothing is written to the storage. The binlog
archive is read back as well: every segment against its chain, no gap in bytes or GTIDs, and how far it rolls each
base forward (holes named).

preflight (the destination, its complete backups) → backups → verify_backup (one per backup, named by its id; runs of
consecutive backups past 1,000 of them; one that finds damage fails at once, without retries) and verify_archive (the
same) → report (always: the run's **Report**, the Backups page's "Read back" column, and the newest drill of
each backup). A damaged, missing or unread backup, or a damaged archive, fails the run and alerts (the connection
`lastline_alerts`). A killed run, cleared, reads again only the backups whose task did not finish.

Schedule: `LASTLINE_BACKUP_VERIFY_SCHEDULE` (cron, or `none`; default 04:00 UTC on Sundays); catchup off.
"""
from __future__ import annotations

from typing import cast

from airflow.sdk import dag, get_current_context

from lastline.airflow.alerts import send
from lastline.airflow.assets import recorded_archive_head
from lastline.airflow.defaults import dag_args, schedule
from lastline.airflow.params import params
from lastline.airflow.steps import step
from lastline.verify import archive, backups, report
from lastline.verify.plans import ArchiveVerdict, BackupVerdict, VerifyPlan


@dag(
    dag_id="backup_verify",
    **dag_args(schedule=schedule("BACKUP_VERIFY_SCHEDULE", "0 4 * * 0")),
    doc_md=__doc__,
    tags=["lastline", "verify"],
    params=params("destination", "aws_conn_id", destination="the destination whose backups and binlog archive are read back"),
)
def backup_verify():
    # a backup or archive found damaged fails its own task at once, its verdict kept for the report (report.kept)
    def verify_backup(plan: VerifyPlan, backup_ids: list[str]) -> list[BackupVerdict]:
        context = cast(dict, get_current_context())
        context["backup_id"] = " .. ".join(dict.fromkeys([backup_ids[0], backup_ids[-1]]))  # the instance's name
        return report.kept([backups.verify_backup(plan, b) for b in backup_ids], context["ti"], "backups")

    def verify_archive(plan: VerifyPlan) -> ArchiveVerdict:  # against the head Airflow recorded after its last run
        found = archive.verify_archive(plan, recorded_archive_head(plan.destination, plan.aws_conn_id))
        return cast(ArchiveVerdict, report.kept(found, get_current_context()["ti"], "the binlog archive"))

    def record(plan: VerifyPlan) -> dict:
        context = get_current_context()
        found = context["ti"].xcom_pull(task_ids="verify_backup")  # every instance's verdicts (a damaged one's too)
        summary = report.record(plan, found, context["ti"].xcom_pull(task_ids="verify_archive"),
                                context["dag"].dag_id, context["run_id"])
        if summary["problems"]:
            send("verify_failed", "lastline: " + "; ".join(summary["problems"])[:1500],
                 {"dag_id": context["dag"].dag_id, "run_id": context["run_id"], "destination": summary["destination"],
                  "problems": summary["problems"]})
        report.fail_if_bad(summary)
        return summary

    plan = step(backups.preflight, task_id="preflight")()
    ids = step(backups.batches, task_id="backups")(plan)
    read = step(verify_backup, map_index_template="{{ backup_id }}").partial(plan=plan).expand(backup_ids=ids)
    archived = step(verify_archive)(plan)
    [read, archived] >> step(record, task_id="report", trigger_rule="all_done", multiple_outputs=True)(plan)


backup_verify()
