"""pitr.stream: a stall alerts once when the stream has shipped nothing for longer than its threshold, and once more
when it ships again; a round that ships resets it."""
from __future__ import annotations

from typing import Any

import pytest

from lastline.core import alerting
from lastline.pitr.stream import Stall


@pytest.fixture
def sent():
    got: list[tuple[str, str, dict[str, Any]]] = []
    before = list(alerting._sender)
    alerting.install(lambda event, text, details: got.append((event, text, details)))
    yield got
    alerting._sender[:] = before


def test_a_stall_alerts_once_then_once_on_recovery(sent):
    now = [100.0]
    stall = Stall(10, {"destination": "file:///d/binlogs"}, clock=lambda: now[0])
    for t in (105.0, 109.0):  # failing rounds within the threshold: nothing sent
        now[0] = t
        stall.failed("ServerError: cannot connect")
    assert sent == []
    for t in (111.0, 115.0, 130.0):  # past it: one alert for the stall, not one a round
        now[0] = t
        stall.failed("ServerError: cannot connect")
    assert len(sent) == 1
    event, text, details = sent[0]
    assert event == "binlog_chain" and "has shipped nothing for 11 s" in text and "cannot connect" in text
    assert details["stalled"] is True and details["destination"] == "file:///d/binlogs"
    now[0] = 131.0
    stall.shipped()
    assert len(sent) == 2 and "ships again, after 31 s" in sent[1][1] and sent[1][2]["stalled"] is False
    now[0] = 132.0
    stall.shipped()
    stall.failed("again")  # a new stall starts from the last round that shipped
    assert len(sent) == 2


def test_rounds_that_ship_keep_a_stream_from_stalling(sent):
    now = [0.0]
    stall = Stall(5, {}, clock=lambda: now[0])
    for t in range(1, 60):
        now[0] = float(t)
        stall.failed("one round") if t % 4 == 0 else stall.shipped()
    assert sent == []
