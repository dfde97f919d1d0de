"""
### staging_refresh: yesterday's production in staging, with no one's personal data

Runs when a logical backup completes (the Asset `lastline_logical_backup`: that backup is restored)
and on demand (the Params form: `backup`, default the newest).

preflight (**target guard**: the connection's extra `"role": "staging"`, not `protected`, not the
server the backup came from; **rules**: the deployment's (the Variable `lastline_masking_rules`), which a
run's `masking_rules` may add to but never weaken (no `keep`), each naming a column of the backup and
fitting it; **PII guard**: every column, binary ones too, whose name or values (sampled across the whole
table) look personal or cannot be read has a rule, and every object whose text (comments, defaults,
views, triggers, routines, events) holds personal data is acknowledged by the deployment, else the run
refuses with a rules snippet; then read_only=ON) → **lock** (setup: every other account is locked and
every other session killed) → **restore** (the logical restore's task group; triggers and events wait)
→ **detach_replication** → **mask** (one UPDATE per table, keyed HMAC in SQL: the same value masks alike
in every table and every refresh with the same key) → **verify_masking** (no original value survives;
joins between masked columns still match) → **objects** (the triggers and events, now: none fired on the
mask) → **open** (read_only=OFF if `open_for_writes`) → **close** (teardown, runs whatever happened:
unless the masking was verified, the restored databases are dropped; then the accounts are unlocked) →
**report** (the audit: column, strategy, values, rows changed).

The key is the password of the deployment's `LASTLINE_MASKING_KEY_CONN_ID` connection (type generic,
default `lastline_masking`); it never reaches XCom, a log or a statement's text.
"""
from __future__ import annotations

from airflow.sdk import Variable, dag

from lastline.airflow.assets import LOGICAL_BACKUP, backup_from_event
from lastline.airflow.defaults import dag_args, env
from lastline.airflow.params import BACKUPS_PAGE, Override, params
from lastline.airflow.steps import step
from lastline.airflow.task_groups import detach_replication, logical_restore_steps
from lastline.core.plans import Conf
from lastline.staging import quarantine, refresh
from lastline.staging import verify as staging_verify
from lastline.staging.plans import StagingPlan


@dag(
    dag_id="staging_refresh",
    **dag_args(schedule=[LOGICAL_BACKUP]),
    doc_md=__doc__,
    tags=["lastline", "logical", "staging", "masking"],
    params=params(
        "target_conn_id", "backup", "databases", "masking_rules", "open_for_writes", "parallel",
        "tune", "defer_indexes", "index_build", "force", "restart", "redo_log_bytes", "aws_conn_id",
        target_conn_id=Override(env("STAGING_CONN_ID", "lastline_staging"), servers="staging",
                                description="the staging server's connection (its role must be staging)"),
        backup=f"<destination>/<backup_id> or <destination>/latest; a run started by a backup's Asset event restores that "
               f"backup; {BACKUPS_PAGE}",
        force=Override(True, description="replace the staging databases a previous refresh left"),
        restart=Override(False, description="restart staging to prove the detach holds"),
    ),
)
def staging_refresh():
    def preflight(conf: Conf) -> StagingPlan:
        # the deployment's rules; the run's masking_rules may only add to them (no "keep": see rules.run_rules)
        return refresh.preflight(conf.replace(backup=backup_from_event(conf.text("backup", ""))),
                                 Variable.get("lastline_masking_rules", default="{}"))

    run = "{{ run_id }}"  # the run's key: what it locked, masked and verified
    plan = step(preflight, multiple_outputs=True)()
    locked = step(quarantine.lock)(plan["target_conn_id"], run)  # the setup: nobody but lastline reads staging until the masking is verified
    restored = logical_restore_steps(plan["restore"], role="staging")
    detached = detach_replication(plan["target_conn_id"], "{{ params.restart or false }}", False)
    masked = step(refresh.mask)(plan, run)
    verified = step(staging_verify.verify_masking)(plan, run)
    late = step(refresh.late_objects, task_id="objects")(plan)  # triggers and events: none fired on the mask
    opened = step(refresh.open_target, task_id="open")(plan)
    closed = step(quarantine.close)(plan["target_conn_id"], run, plan["databases"]).as_teardown(
        setups=locked, on_failure_fail_dagrun=True)  # unmasked data dropped, accounts unlocked
    locked >> restored >> detached >> masked >> verified >> late >> opened >> closed
    [opened, closed] >> step(refresh.report)(plan, verified, masked, dag_id="{{ dag.dag_id }}")  # the leaf: a failed open fails the run


staging_refresh()
