"""airflow.task_groups: the shape of each shared group, built inside a DAG (no run): its task ids in order, each task's
upstream tasks, where its tasks run (the Param naming their server), the approve step after a restore's preflight (the
logical restore's preflight skips it when no person is asked, and the snapshot follows a skipped approval), the
logical restore's mapped load (one instance per lane prepare returns) and its revert, a teardown that runs after a
failure too while verify runs only after a load and a finalize that passed; and `group >> x` runs x after its last step."""
from __future__ import annotations

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow.sdk.definitions.taskgroup import TaskGroup
from airflow.task.trigger_rule import TriggerRule

from lastline.airflow import task_groups
from lastline.airflow.approval import ApproveReplacement
from lastline.airflow.routing import MARK


def _built(group, *args, **kwargs) -> tuple[DAG, TaskGroup, EmptyOperator]:
    """A DAG holding `group(*args, **kwargs)` and a task `after` that follows it."""
    with DAG(f"unit_{group.function.__name__}", schedule=None) as dag:
        made = group(*args, **kwargs)
        after = EmptyOperator(task_id="after")
        made >> after
    return dag, made, after


def _upstream(dag: DAG) -> dict[str, set[str]]:
    return {t.task_id: set(t.upstream_task_ids) for t in dag.tasks if t.task_id != "after"}


LOGICAL = {
    "restore.preflight": set(),
    "restore.approve": {"restore.preflight"},
    "restore.snapshot_config": {"restore.preflight", "restore.approve"},
    "restore.prepare": {"restore.preflight", "restore.snapshot_config"},
    "restore.load": {"restore.preflight", "restore.prepare"},
    "restore.finalize": {"restore.preflight", "restore.load"},
    "restore.revert": {"restore.preflight", "restore.snapshot_config", "restore.finalize"},
    "restore.verify": {"restore.preflight", "restore.snapshot_config", "restore.prepare", "restore.load",
                       "restore.finalize", "restore.revert"},
}
PHYSICAL = {
    "restore.preflight": set(),
    "restore.approve": {"restore.preflight"},
    "restore.stop_target": {"restore.preflight", "restore.approve"},
    "restore.extract": {"restore.preflight", "restore.stop_target"},
    "restore.prepare": {"restore.preflight", "restore.extract"},
    "restore.start_target": {"restore.preflight", "restore.prepare"},
    "restore.verify": {"restore.preflight", "restore.extract", "restore.start_target"},
    "restore.report": {"restore.preflight", "restore.stop_target", "restore.extract", "restore.prepare",
                       "restore.start_target", "restore.verify"},
}
DETACH = {
    "detach_replication.check": set(),
    "detach_replication.detach": {"detach_replication.check"},
    "detach_replication.verify": {"detach_replication.check", "detach_replication.detach"},
    "detach_replication.open_for_writes": {"detach_replication.check", "detach_replication.verify"},
}


@pytest.mark.parametrize(("group", "args", "shape", "last"), [
    pytest.param(task_groups.logical_restore_steps, (), LOGICAL, "restore.verify", id="logical-restore"),
    pytest.param(task_groups.physical_restore_steps, (), PHYSICAL, "restore.report", id="physical-restore"),
    pytest.param(task_groups.detach_replication, ("{{ params.target_conn_id }}",), DETACH,
                 "detach_replication.open_for_writes", id="detach-replication"),
])
def test_a_group_s_task_ids_and_dependencies(group, args, shape, last):
    dag, made, after = _built(group, *args)
    assert isinstance(made, TaskGroup)
    assert [t.task_id for t in dag.tasks if t.task_id != "after"] == list(shape)  # in the order the group declares them
    assert _upstream(dag) == shape
    assert after.upstream_task_ids == {last}  # `group >> x`: x after the group's last step alone


@pytest.mark.parametrize(("group", "server_param", "on_server"), [
    pytest.param(task_groups.logical_restore_steps, "target_conn_id", set(LOGICAL) - {"restore.approve"},
                 id="logical-restore-default-param"),
    pytest.param(task_groups.logical_restore_steps, "staging_conn_id", set(LOGICAL) - {"restore.approve"},
                 id="logical-restore-its-own-param"),
    pytest.param(task_groups.physical_restore_steps, "replica_conn_id", set(PHYSICAL) - {"restore.approve", "restore.report"},
                 id="physical-restore-report-anywhere"),
])
def test_every_step_that_works_on_the_target_is_routed_by_the_param_naming_it(group, server_param, on_server):
    dag, _made, _after = _built(group, server_param=server_param)
    routed = {t.task_id: (t.partial_kwargs["executor_config"] if t.task_id == "restore.load" else t.executor_config).get(MARK)
              for t in dag.tasks if t.task_id != "after"}
    assert {task for task, param in routed.items() if param is not None} == on_server
    assert {param for param in routed.values() if param is not None} == {server_param}


@pytest.mark.parametrize(("group", "next_step"), [
    pytest.param(task_groups.logical_restore_steps, "restore.snapshot_config", id="logical-restore"),
    pytest.param(task_groups.physical_restore_steps, "restore.stop_target", id="physical-restore"),
])
def test_a_restore_asks_approval_of_its_preflight_s_plan_and_passes_the_dag_s_role(group, next_step):
    conf = {"target_conn_id": "t_ltarget", "databases": ["a`b.c d"]}
    dag, _made, _after = _built(group, conf, role="staging_refresh")
    preflight, approve = dag.task_dict["restore.preflight"], dag.task_dict["restore.approve"]
    assert preflight.op_args == (conf,) and preflight.op_kwargs == {"role": "staging_refresh"}  # never the conf's role
    assert not preflight.multiple_outputs  # one XCom, the plan whole (each key its own XCom: a round trip each)
    assert isinstance(approve, ApproveReplacement) and approve.downstream_task_ids == {next_step}  # before anything is touched
    assert approve.plan.operator is preflight and approve.plan.key == "return_value"  # the plan it shows the approver
    # its preflight skips approve as it ends when no one is asked: no task starts for it
    assert preflight.python_callable.__code__.co_qualname == "deciding.<locals>.call"
    assert dag.task_dict[next_step].trigger_rule == TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS  # a skipped approve
    # lets it run, a rejected one not


def test_the_logical_restore_loads_one_mapped_instance_per_lane_and_reverts_as_its_teardown():
    dag, _made, _after = _built(task_groups.logical_restore_steps)
    tasks = dag.task_dict
    load = tasks["restore.load"]
    expanded = load._get_specified_expand_input().value
    assert set(expanded) == {"lane"} and expanded["lane"].operator is tasks["restore.prepare"]  # a lane each
    assert load.partial_kwargs["op_kwargs"]["plan"].operator is tasks["restore.preflight"]  # the one plan for all of them
    assert load.partial_kwargs["map_index_template"] == "{{ unit_name }}"  # each instance named by its lane
    snap, revert, verify = tasks["restore.snapshot_config"], tasks["restore.revert"], tasks["restore.verify"]
    assert snap.is_setup and not snap.is_teardown and snap.op_kwargs == {"run": "{{ run_id }}"}
    assert revert.is_teardown and revert.on_failure_fail_dagrun  # runs after a failure too, and a failed revert fails the run
    assert revert.trigger_rule == TriggerRule.ALL_DONE_SETUP_SUCCESS and verify.trigger_rule == TriggerRule.ALL_SUCCESS
    assert {"restore.load", "restore.finalize"} <= verify.upstream_task_ids  # a failed load or finalize is never verified
    cleared_with = {t: {x.task_id for x in tasks[t].get_upstreams_only_setups_and_teardowns()}
                    for t in ("restore.load", "restore.finalize")}
    assert cleared_with == {"restore.load": {"restore.snapshot_config", "restore.revert"},
                            "restore.finalize": {"restore.snapshot_config", "restore.revert"}}  # never prepare: a cleared
    # lane or finalize never plans the restore again (a finalize that completed forgot its state)
    pulled = [arg.key for arg in verify.op_args if arg.operator is tasks["restore.prepare"]]
    assert pulled == ["steps"]  # prepare's results reach the report by their own key, its return value being the lanes
    assert tasks["restore.preflight"].execution_timeout is not None and load.partial_kwargs["execution_timeout"] is not None


def test_a_physical_restore_s_preflight_is_not_a_long_task_and_its_report_names_every_step():
    dag, _made, _after = _built(task_groups.physical_restore_steps)
    tasks = dag.task_dict
    assert tasks["restore.preflight"].execution_timeout is None  # on_server(long=False): read-only, quick
    assert all(tasks[t].execution_timeout is not None for t in ("restore.stop_target", "restore.extract", "restore.prepare",
                                                                "restore.start_target", "restore.verify"))
    report = tasks["restore.report"]
    assert set(report.op_kwargs) == {"stop", "extract", "prepare", "start", "verify", "dag_id"}
    assert report.op_kwargs["dag_id"] == "{{ dag.dag_id }}"
    assert {k: v.operator.task_id for k, v in report.op_kwargs.items() if k != "dag_id"} == {
        "stop": "restore.stop_target", "extract": "restore.extract", "prepare": "restore.prepare",
        "start": "restore.start_target", "verify": "restore.verify"}


@pytest.mark.parametrize(("args", "passed"), [
    pytest.param(("t_replica",), ("t_replica", True, False), id="defaults-restart-keep-read-only"),
    pytest.param(("{{ params.target_conn_id }}", False, True), ("{{ params.target_conn_id }}", False, True),
                 id="template-no-restart-open-for-writes"),
])
def test_detach_replication_hands_its_arguments_to_check_and_its_plan_down_the_chain(args, passed):
    dag, _made, _after = _built(task_groups.detach_replication, *args)
    tasks = dag.task_dict
    assert tasks["detach_replication.check"].op_args == passed
    detach, verify, opened = (tasks[f"detach_replication.{t}"] for t in ("detach", "verify", "open_for_writes"))
    assert [a.operator.task_id for a in detach.op_args] == ["detach_replication.check"]
    assert [a.operator.task_id for a in verify.op_args] == ["detach_replication.check", "detach_replication.detach"]
    assert [a.operator.task_id for a in opened.op_args] == ["detach_replication.check", "detach_replication.verify"]
