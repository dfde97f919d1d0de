"""core.bounds: where a bound comes from (the connection's extra, the deployment, the default), and each knob's rule:
a harsher value refused naming the knob, the bound and where it is set; a gentler one kept; a derived count clamped.
(free_connections asks the server, so it is left to the end-to-end tests.)"""
from __future__ import annotations

import pytest

from lastline.core import bounds
from lastline.core.errors import ConfigError, PreflightError
from lastline.core.servers import Server

ENV = [f"LASTLINE_{s.env}" for s in (bounds.KILL, bounds.GUARD_FLOOR, bounds.WAIT_CEILING, bounds.LOCK_CEILING, bounds.FTWRL,
                                     bounds.PARALLEL_CEILING, bounds.RESERVE, bounds.READ_CEILING, bounds.PRIORITY_CEILING,
                                     bounds.LAG_CEILING, bounds.REPLAY_CEILING)]


@pytest.fixture(autouse=True)
def no_deployment_bounds(monkeypatch):
    """Each case sets the deployment's bounds it needs; none leaks in from the environment."""
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def server(protected: bool = False, **limits: str) -> Server:
    return Server("src", protected=protected, limits=limits or None)


@pytest.mark.parametrize(("env", "limits", "value", "where"), [
    ({}, {}, "16", "lastline's default"),
    ({"LASTLINE_MAX_PARALLEL": " 8 "}, {}, "8", "the deployment setting LASTLINE_MAX_PARALLEL"),
    ({"LASTLINE_MAX_PARALLEL": "8"}, {"max_parallel": 4}, "4", "the connection 'src''s extra max_parallel"),
    ({"LASTLINE_MAX_PARALLEL": "8"}, {"max_parallel": ""}, "8", "the deployment setting"),
], ids=["default", "deployment-stripped", "connection-extra-wins", "empty-extra-falls-back"])
def test_setting_says_where_a_bound_is_set(monkeypatch, env, limits, value, where):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    text, found = bounds.setting(server(**limits), bounds.PARALLEL_CEILING)
    assert text == value
    assert found.startswith(where)


def test_setting_without_a_server_reads_the_deployment(monkeypatch):
    monkeypatch.setenv("LASTLINE_MAX_PARALLEL", "3")
    assert bounds.number(None, bounds.PARALLEL_CEILING) == (3.0, "the deployment setting LASTLINE_MAX_PARALLEL")


@pytest.mark.parametrize(("text", "message"), [
    ("many", "write a number"), ("-1", "at least 0"), ("inf", "at least 0"), ("nan", "at least 0")],
    ids=["not-a-number", "negative", "infinite", "nan"])
def test_number_refuses_what_is_no_bound(text, message):
    with pytest.raises(ConfigError, match=message):
        bounds.number(server(max_parallel=text), bounds.PARALLEL_CEILING)


@pytest.mark.parametrize(("text", "ok"), [("true", True), ("false", False), ("yes", True), ("0", False)],
                         ids=["true", "false", "yes", "zero"])
def test_allowed_reads_flags(text, ok):
    assert bounds.allowed(server(allow_ftwrl=text), bounds.FTWRL)[0] is ok


def test_allowed_refuses_a_typo_rather_than_guess():
    with pytest.raises(ConfigError, match="write true or false"):
        bounds.allowed(server(allow_ftwrl="ture"), bounds.FTWRL)


@pytest.mark.parametrize(("limits", "protected", "asked", "guard", "result", "refused"), [
    ({}, False, False, 0, False, None),
    ({}, False, True, 600, None, "killing statements is off"),
    ({"allow_kill_long_queries": "true"}, True, True, 600, None, "protected"),
    ({"allow_kill_long_queries": "true"}, False, True, 30, None, "long_query_guard=30 is harsher than the floor of 60 s"),
    ({"allow_kill_long_queries": "true"}, False, True, 60, True, None),
    ({"allow_kill_long_queries": "true", "min_long_query_guard": "5"}, False, True, 10, True, None),
], ids=["not-asked", "not-allowed", "never-on-protected", "guard-under-the-floor", "guard-at-the-floor", "floor-from-the-extra"])
def test_kill_long_queries(limits, protected, asked, guard, result, refused):
    s = server(protected, **limits)
    if refused:
        with pytest.raises(PreflightError, match=refused):
            bounds.kill_long_queries(s, asked, guard)
    else:
        assert bounds.kill_long_queries(s, asked, guard) is result


@pytest.mark.parametrize(("check", "limits", "asked", "result", "refused"), [
    (bounds.long_query_wait, {}, 1800, 1800, None),
    (bounds.long_query_wait, {}, 1801, None, "long_query_wait=1801 is harsher than the ceiling of 1800 s"),
    (bounds.lock_timeout, {}, 0.5, 0.5, None),
    (bounds.lock_timeout, {}, 120, None, "lock_timeout=120 is harsher than the ceiling of 0.5 s"),
    (bounds.lock_timeout, {"max_lock_timeout": "2"}, 1.5, 1.5, None),
    (bounds.parallel, {}, 16, 16, None),
    (bounds.parallel, {}, 400, None, "parallel=400 is harsher than the ceiling of 16.*Use 16 or less"),
    (bounds.read_cap, {}, 50, 50, None),
    (bounds.read_cap, {"max_read_mb_per_s": "100"}, 0, 100, None),
    (bounds.read_cap, {"max_read_mb_per_s": "100"}, 40, 40, None),
    (bounds.read_cap, {"max_read_mb_per_s": "100"}, 400, None, "the cap of 100 MB/s"),
    (bounds.replica_lag, {}, 60, 60, None),
    (bounds.replica_lag, {}, 0, None, r"max_replica_lag=0 \(any lag\)"),
    (bounds.replica_lag, {}, 7200, None, "the ceiling of 3600 s"),
    (bounds.replica_lag, {"max_replica_lag": "0"}, 0, 0, None),
], ids=["wait-at-ceiling", "wait-over", "lock-at-ceiling", "lock-120s", "lock-ceiling-from-extra", "parallel-at-ceiling",
        "parallel-400", "read-no-cap", "read-takes-the-cap", "read-under-cap", "read-over-cap", "lag-under",
        "lag-any-refused", "lag-over", "lag-any-where-ceiling-is-zero"])
def test_ceilings(check, limits, asked, result, refused):
    s = server(**limits)
    if refused:
        with pytest.raises(PreflightError, match=refused) as err:
            check(s, asked)
        assert "a run's conf may only make a run gentler" in str(err.value)
    else:
        assert check(s, asked) == result


@pytest.mark.parametrize(("limits", "asked", "stages", "refused"), [
    ({}, "auto", True, False),
    ({}, "ftwrl", False, False),
    ({}, "ftwrl", True, True),
    ({"allow_ftwrl": "true"}, "ftwrl", True, False),
], ids=["auto", "ftwrl-without-stages", "ftwrl-not-allowed", "ftwrl-allowed"])
def test_lock_method(limits, asked, stages, refused):
    if refused:
        with pytest.raises(PreflightError, match="ftwrl is off"):
            bounds.lock_method(server(**limits), asked, stages)
    else:
        assert bounds.lock_method(server(**limits), asked, stages) == asked


@pytest.mark.parametrize(("ceiling", "asked", "refused"), [
    ("low", "idle", None), ("low", "low", None), ("low", "normal", "Use idle or low"),
    ("idle", "low", "Use idle"), ("normal", "normal", None)],
    ids=["idle-under-low", "low-at-low", "normal-over-low", "low-over-idle", "normal-allowed"])
def test_priority(ceiling, asked, refused):
    s = server(max_priority=ceiling)
    if refused:
        with pytest.raises(PreflightError, match=refused):
            bounds.priority(s, asked)
    else:
        assert bounds.priority(s, asked) == asked


def test_an_unknown_priority_ceiling_is_a_config_error():
    with pytest.raises(ConfigError, match="use one of idle, low, normal"):
        bounds.priority(server(max_priority="high"), "low")


@pytest.mark.parametrize(("limits", "wanted", "taken"), [
    ({}, 8, 8), ({}, 64, 16), ({"max_replay_threads": "0"}, 4, 1)],
    ids=["under", "clamped", "zero-ceiling-keeps-one"])
def test_replay_threads_are_clamped_not_refused(limits, wanted, taken):
    assert bounds.replay_threads(server(**limits), wanted) == taken
