"""core.alerting: an alert from below the Airflow layer goes through the one installed sender, or to the log."""
from __future__ import annotations

import logging

import pytest

from lastline.core import alerting


@pytest.fixture
def no_sender():
    saved = list(alerting._sender)
    alerting._sender.clear()
    yield
    alerting._sender[:] = saved


def test_without_a_sender_an_alert_is_a_warning(no_sender, caplog):
    with caplog.at_level(logging.WARNING, logger="lastline.core.alerting"):
        alerting.alert("replica_lag", "the replica is 5 min behind", {"lag": 300})
    assert "ALERT (replica_lag; no alert sender in this process): the replica is 5 min behind" in caplog.text


def test_the_last_installed_sender_is_the_only_one(no_sender):
    first: list[tuple] = []
    second: list[tuple] = []
    alerting.install(lambda *a: first.append(a))
    alerting.install(lambda *a: second.append(a))
    alerting.alert("e", "t", {"k": 1})
    assert first == [] and second == [("e", "t", {"k": 1})]
