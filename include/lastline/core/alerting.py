"""Alerts raised below the Airflow layer: a stage says what a person must know, the deployment decides where it goes.

The Airflow layer installs the sender (`lastline.airflow.alerts` does on import); without one an alert is a
warning in the task log, which is also where it is always written."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Sender = Callable[[str, str, dict[str, Any]], Any]
_sender: list[Sender] = []


def install(sender: Sender) -> None:
    """Make `sender(event, text, details)` the one way alerts leave the process."""
    _sender[:] = [sender]


def alert(event: str, text: str, details: dict[str, Any]) -> None:
    """Send an alert through the installed sender (which logs it too), or log it when there is none."""
    if _sender:
        _sender[0](event, text, details)
    else:
        log.warning("ALERT (%s; no alert sender in this process): %s", event, text)
