"""pitr.stream: a stall alerts once when the stream has shipped nothing for longer than its threshold, and once more
when it ships again; a round that ships resets it. Whether another run is queued (the handover) is asked at most every
WAITING_EVERY seconds, and a question that fails is logged once and counts as no."""
from __future__ import annotations

import logging
from typing import Any

import pytest

from lastline.core import alerting
from lastline.core.stopping import TaskStopped
from lastline.pitr import stream
from lastline.pitr.stream import Handover, Stall


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


def test_the_handover_asks_at_most_every_waiting_every_seconds():
    now, asked, queued = [0.0], [], [False]

    def waiting() -> bool:
        asked.append(now[0])
        return queued[0]

    handover = Handover(waiting, clock=lambda: now[0])
    for t in range(1, 61):  # a round every 0.5 s for 30 s: three asks, not one a round
        now[0] = t / 2
        assert not handover.due()
    assert asked == [10.0, 20.0, 30.0] and stream.WAITING_EVERY == 10.0
    queued[0] = True
    now[0] = 35.0
    assert not handover.due() and len(asked) == 3  # queued, but not asked yet
    now[0] = 40.0
    assert handover.due() and asked[-1] == 40.0
    assert not Handover(None, clock=lambda: now[0]).due()  # nothing to ask (a test, a bench): never


def test_a_failing_question_counts_as_no_is_logged_once_and_asked_again_after_a_pause(caplog):
    now, asked, down = [0.0], [], [True]

    def waiting() -> bool:
        asked.append(now[0])
        if down[0]:
            raise ConnectionError("the API server is down")
        return True

    handover = Handover(waiting, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="lastline.pitr.stream"):
        for t in range(1, 70):  # 690 s
            now[0] = 10.0 * t
            assert not handover.due()
    assert asked == [10.0, 310.0, 610.0] and stream.FAILED_PAUSE == 300.0  # each failed ask blocks: not every 10 s
    lines = [r.getMessage() for r in caplog.records if "another run is queued" in r.getMessage()]
    assert len(lines) == 1 and "ConnectionError: the API server is down" in lines[0], lines
    down[0] = False
    now[0] = 910.0
    assert handover.due()  # back: the queued run is seen

    def stopped() -> bool:
        raise TaskStopped("stream.run: told to stop")

    asking = Handover(stopped, clock=lambda: now[0])
    now[0] += stream.WAITING_EVERY
    with pytest.raises(TaskStopped):  # SIGTERM while asking still ends the task
        asking.due()
