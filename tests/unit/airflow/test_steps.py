"""airflow.steps: the one place where XCom meets typed objects. A stage's Conf parameter receives the run's Params (the
task's signature names `params`, which Airflow injects), or the dict it is given; XCom's dicts come back as the plans
and results the annotations name, a teardown's None after a failure stays None, and a typed return is stored as its
dict. No Airflow run: the callables and a DAG definition."""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.bases.decorator import determine_kwargs

from lastline.airflow.steps import step, typed_call, xcom_form
from lastline.core.plans import Conf, Plan, Result, RunParams


@dataclasses.dataclass(frozen=True)
class Planned(Plan):
    """A plan as a preflight returns it."""

    target: str
    parallel: int = 2


@dataclasses.dataclass(frozen=True)
class Done(Result):
    """A stage's result."""

    rows: int


def preflight(conf: Conf) -> Planned:
    """A preflight: the Params read through their Conf."""
    return Planned(target=conf.required("target"), parallel=conf.integer("parallel", 2))


def restore_preflight(conf: RunParams, role: str | None = None) -> Planned:
    """A restore's preflight: a drill's restore conf (a dict) or the run's Params."""
    return Planned(target=f"{Conf(conf).required('target')}:{role}")


def load(plan: Planned, done: Done | None) -> list[Done]:
    """A stage taking a plan and a result that a failure may have left out (a teardown)."""
    return [Done(rows=plan.parallel + (done.rows if done else 0))]


def seen(conf: Conf) -> Any:
    """What a stage is handed."""
    return conf


@pytest.mark.parametrize(("given", "params", "expected"), [
    ({}, {"target": "t1", "parallel": "4"}, "t1"),
    ({"conf": {"target": "from-xcom"}}, {"target": "t1"}, "from-xcom"),
    ({"conf": Conf({"target": "typed"})}, {"target": "t1"}, "typed"),
    ({"conf": None}, {"target": "t1"}, "t1"),
], ids=["the-run-s-params", "a-dict-from-xcom", "a-conf-as-is", "none-means-the-run-s-params"])
def test_a_conf_parameter_receives_the_params(given, params, expected):
    out = typed_call(preflight)(params=params, **given)
    assert out["target"] == expected and isinstance(out, dict)  # the plan stored as its dict


def test_the_params_arrive_as_a_conf_and_the_plan_leaves_as_its_dict():
    assert isinstance(typed_call(seen)(params={"a": 1}), Conf)
    assert typed_call(preflight)(params={"target": "t", "parallel": "4"}) == {"target": "t", "parallel": 4}


def test_airflow_injects_the_params_by_the_signature():
    """Airflow passes a callable the context values its signature names (KeywordParameters.determine)."""
    call = typed_call(restore_preflight)
    signature = inspect.signature(call)
    assert list(signature.parameters) == ["conf", "role", "params"]
    assert signature.parameters["conf"].default is None  # a task given nothing binds at parse time
    context = {"params": {"target": "t"}, "run_id": "r1", "role": "drill"}  # op_kwargs are merged into the context
    assert call(None, **determine_kwargs(call, [None], context)) == {"target": "t:drill", "parallel": 2}


def test_a_stage_without_a_conf_is_not_given_the_params():
    assert "params" not in inspect.signature(typed_call(load)).parameters


@pytest.mark.parametrize(("done", "rows"), [({"rows": 5}, 7), (None, 2), (Done(rows=1), 3)],
                         ids=["a-result-from-xcom", "none-for-a-teardown-after-a-failure", "a-result-as-is"])
def test_dicts_become_plans_and_results(done, rows):
    assert typed_call(load)({"target": "t", "parallel": 2}, done) == [{"rows": rows}]


def test_xcom_form_is_plain_json_inside_lists_and_dicts():
    assert xcom_form({"a": [Done(rows=1)], "b": Planned(target="t")}) == {"a": [{"rows": 1}], "b": {"target": "t", "parallel": 2}}


def test_step_keeps_the_task_s_kwargs_and_binds_with_no_arguments():
    with DAG("test_steps", schedule=None):
        plan = step(preflight, task_id="plan", multiple_outputs=True, trigger_rule="all_done")()
        loaded = step(load)(plan, None)
    assert plan.operator.task_id == "plan" and plan.operator.multiple_outputs
    assert plan.operator.trigger_rule == "all_done"
    assert loaded.operator.upstream_task_ids == {"plan"}


def _needs_after(conf: Conf, rules: str) -> None:
    """A stage whose Conf is followed by a required parameter (the staging refresh's preflight takes its rules so)."""


def _takes_params(conf: Conf, params: dict) -> None:
    """A stage that would take Airflow's `params` beside its Conf."""


def _conf_list(confs: list[Conf]) -> list:
    """A stage that takes several Confs: not the run's Params."""
    return confs


@pytest.mark.parametrize(("stage", "says"), [
    (_needs_after, r"_needs_after: its Conf parameter 'conf' is followed by required parameters \(rules\)"),
    (_takes_params, r"_takes_params: a stage's Params are its Conf parameter"),
], ids=["a required parameter after the conf", "a params parameter beside the conf"])
def test_a_stage_that_cannot_take_the_params_is_refused_by_name_when_made_a_step(stage, says):
    with pytest.raises(TypeError, match=says):
        typed_call(stage)


def test_a_container_of_confs_is_not_the_run_s_params():
    assert "params" not in inspect.signature(typed_call(_conf_list)).parameters
