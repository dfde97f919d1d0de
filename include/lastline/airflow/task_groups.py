"""Reusable task groups: steps that several DAGs share (replica_detach, staging refresh, promotions)."""
from __future__ import annotations

from typing import Any, cast

from airflow.sdk import chain, get_current_context, task_group
from airflow.sdk.definitions.xcom_arg import XComArg
from airflow.task.trigger_rule import TriggerRule

from lastline.airflow.approval import ApproveReplacement, deciding
from lastline.airflow.routing import on_server
from lastline.airflow.steps import step, xcom_form
from lastline.logical.restore import report as restore_report
from lastline.logical.restore import stages as logical_restore
from lastline.logical.restore.plans import ConfigSnapshot, UnitLoaded, Verified
from lastline.logical.restore.plans import RestorePlan as LogicalRestorePlan
from lastline.physical import restore as physical_restore
from lastline.replication import detach as replication_detach


@task_group(group_id="detach_replication")
def detach_replication(target_conn_id: Any, restart: Any = True, read_only_off: Any = False) -> None:
    """check (read-only: flavour, connections, no master-* option lines) → detach (version-aware STOP/RESET
    ... ALL, every named connection, gtid_slave_pos cleared) → verify (nothing left, also after a
    restart) → open_for_writes (read_only=OFF, only if asked). Arguments may be values, XComArgs or
    templates such as "{{ params.target_conn_id }}". The call gives the group (`a >> group >> b`)."""
    plan = step(replication_detach.check, task_id="check")(target_conn_id, restart, read_only_off)
    detached = step(replication_detach.detach, task_id="detach")(plan)
    verified = step(replication_detach.verify, task_id="verify")(plan, detached)
    step(replication_detach.open_for_writes, task_id="open_for_writes")(plan, verified)


@task_group(group_id="restore")
def logical_restore_steps(conf: Any = None, server_param: str = "target_conn_id", role: str | None = None) -> None:
    """preflight (read-only) → approve (only when data would be replaced and a person is asked: else preflight skips
    it, and no task starts for it) → **snapshot_config** (setup, read-only) → prepare (tune, create_schema, plan) →
    **load** (`parallel` mapped lanes) → finalize → **revert** (teardown: runs after a failure too, a prepare killed on
    its last try included) → verify (then the report). `conf`: the restore's Params as a dict or an XComArg (None: the
    run's own Params); `server_param`: the Param naming the server restored into (its queue and pool). The call gives
    the group: `group >> x` runs x after verify, so after revert."""

    target = on_server(server_param)  # every step works on the target: its queue, its pool

    def prepare(plan: LogicalRestorePlan) -> list[str]:
        steps, lanes = logical_restore.prepare(plan)
        get_current_context()["ti"].xcom_push(key="steps", value=xcom_form(steps))
        return lanes

    def load(plan: LogicalRestorePlan, lane: str) -> list[UnitLoaded]:
        cast(dict, get_current_context())["unit_name"] = lane  # the mapped instance's name (map_index_template)
        return logical_restore.load_lane(plan, lane)

    def verify(plan: LogicalRestorePlan, snap: ConfigSnapshot, prepared: dict, loads: list, finalized: dict,
               reverted: dict) -> Verified:
        verified = logical_restore.verify(plan, snap)
        steps = {**prepared, "finalize": finalized, "revert": reverted, "verify": verified}
        context = get_current_context()
        restore_report.write(plan, steps, list(loads), context["dag"].dag_id, context["run_id"])
        return verified

    # one XCom per step on the critical path (the plan, the verdict): each key as an XCom of its own costs the task an
    # api-server round trip (preflight pushed 19: a quarter of a second), and every reader takes the whole
    plan = step(logical_restore.preflight, around=deciding, **target)(conf, role=role)
    approved = ApproveReplacement(task_id="approve", plan=plan)  # only when data would be replaced and a person is asked
    # a skipped approval lets the snapshot be taken, a rejected one stops the run
    snap = step(logical_restore.snapshot_config, trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS,
                **target)(plan, run="{{ run_id }}")
    plan >> approved >> snap
    lanes = step(prepare, **target)(plan)
    loads = step(load, map_index_template="{{ unit_name }}", **target).partial(plan=plan).expand(lane=lanes)
    finalized = step(logical_restore.finalize, **target)(plan)
    # the teardown's one setup is the snapshot (it only reads): once it passed, revert runs whatever prepare, the lanes
    # or finalize do; prepare is no setup, so clearing a lane or finalize never plans the restore again
    reverted = step(logical_restore.revert, **target)(plan).as_teardown(setups=snap, on_failure_fail_dagrun=True)
    verified = step(verify, **target)(plan, snap, XComArg(lanes.operator, key="steps"), loads, finalized, reverted)
    snap >> lanes
    loads >> finalized >> reverted >> verified
    finalized >> verified  # a failed load or finalize is never verified, though revert runs


@task_group(group_id="restore")
def physical_restore_steps(conf: Any = None, server_param: str = "target_conn_id", role: str | None = None) -> None:
    """preflight (read-only) → approve (only when data would be replaced and a person is asked: else preflight skips
    it, and no task starts for it) → stop_target → extract → prepare
    → start_target → verify → report. `conf`: the restore's Params as a dict or an XComArg (None: the run's own
    Params); `server_param`: the Param naming the server restored into (its queue and pool). The call gives the group:
    `group >> x` runs x after verify."""
    target = on_server(server_param)

    plan = step(physical_restore.preflight, around=deciding, **on_server(server_param, long=False))(conf, role=role)
    approved = ApproveReplacement(task_id="approve", plan=plan)  # only when data would be replaced and a person is asked
    # a skipped approval lets the target be stopped, a rejected one stops the run
    stop = step(physical_restore.stop_target, trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS, **target)(plan)
    ext, prep, start = (step(fn, **target)(plan) for fn in (physical_restore.extract, physical_restore.prepare,
                                                            physical_restore.start_target))
    verified = step(physical_restore.verify, **target)(plan, ext)
    chain(plan, approved, stop, ext, prep, start, verified)
    step(physical_restore.report)(plan, stop=stop, extract=ext, prepare=prep, start=start, verify=verified, dag_id="{{ dag.dag_id }}")
