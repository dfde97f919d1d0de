"""airflow.defaults: the settings every DAG file shares, read from LASTLINE_<NAME>: a schedule that "none" turns off,
retries and their delay, and the arguments a DAG adds its own to; whether a run of a DAG is queued (asked of the
supervisor)."""
from __future__ import annotations

from datetime import timedelta

import pytest

from lastline.airflow import failures
from lastline.airflow.alerts import Alert
from lastline.airflow.defaults import START_DATE, dag_args, default_args, env, queued, schedule


@pytest.mark.parametrize(("value", "read"), [(None, "fallback"), ("set", "set"), ("", "")],
                         ids=["unset-the-default", "set", "set-empty-kept"])
def test_env(monkeypatch, value, read):
    if value is None:
        monkeypatch.delenv("LASTLINE_UNIT_DEFAULTS", raising=False)
    else:
        monkeypatch.setenv("LASTLINE_UNIT_DEFAULTS", value)
    assert env("UNIT_DEFAULTS", "fallback") == read


@pytest.mark.parametrize(("value", "cron"), [
    (None, "0 1 * * *"), (" 30 2 * * * ", "30 2 * * *"), ("none", None), ("NONE", None), ("off", None), ("", None),
    ("  ", None), ("@daily", "@daily"),
], ids=["unset-the-default", "set-trimmed", "none", "none-any-case", "off", "empty", "blank", "a-preset"])
def test_schedule(monkeypatch, value, cron):
    if value is None:
        monkeypatch.delenv("LASTLINE_UNIT_SCHEDULE", raising=False)
    else:
        monkeypatch.setenv("LASTLINE_UNIT_SCHEDULE", value)
    assert schedule("UNIT_SCHEDULE", "0 1 * * *") == cron


@pytest.mark.parametrize(("retries", "delay", "expected"), [
    (None, None, (2, timedelta(seconds=120))), ("0", "5", (0, timedelta(seconds=5))),
], ids=["defaults", "from-the-environment"])
def test_default_args(monkeypatch, retries, delay, expected):
    for name, value in (("LASTLINE_RETRIES", retries), ("LASTLINE_RETRY_DELAY_SECONDS", delay)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    args = default_args()
    assert (args["retries"], args["retry_delay"]) == expected
    assert args["on_failure_callback"] is failures.record and args["show_return_value_in_logs"] is False


def test_dag_args_are_shared_and_a_dag_adds_or_changes_its_own():
    args = dag_args(tags=["backup"], max_active_runs=3)
    assert (args["start_date"], args["catchup"], args["max_active_runs"], args["tags"]) == (START_DATE, False, 3, ["backup"])
    assert isinstance(args["on_failure_callback"], Alert) and args["on_failure_callback"].event == "failed"
    assert dag_args()["max_active_runs"] == 1


@pytest.mark.parametrize(("count", "answer"), [(0, False), (1, True), (3, True)])
def test_queued_asks_the_supervisor_for_the_dag_s_queued_runs(monkeypatch, count, answer):
    """The Task SDK's own get_dr_count (a static method of the task's RuntimeTaskInstance): the message it sends the
    supervisor names the DAG and the queued state only (the asking run itself is running, never counted)."""
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import DRCount, GetDRCount

    sent = []

    class Comms:
        def send(self, msg):
            sent.append(msg)
            return DRCount(count=count)

    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", Comms(), raising=False)
    assert queued(task_runner.RuntimeTaskInstance, "binlog_archive") is answer
    assert sent == [GetDRCount(dag_id="binlog_archive", states=["queued"])]
