"""A restore target's datadir, shared by physical restore and replica rebuild: checked before anything is
touched, prepared with mariabackup on the target's host, the server started on it."""
from __future__ import annotations

import logging
import time

from lastline.core import datadir as dd
from lastline.core.datadir import MARKER
from lastline.core.errors import IntegrityError, PreflightError
from lastline.core.pipeline import run_logged
from lastline.core.servers import Server
from lastline.physical import tools as physical

log = logging.getLogger(__name__)


def check_datadir(server: Server, need: int, force: bool) -> str:
    """Refuse a non-empty datadir without `force`, and too little room; return the datadir's state."""
    datadir, host = server.require_datadir(), server.runner()
    state = dd.state(host, datadir)
    if state == "data" and not force:
        raise PreflightError(
            f"target datadir {datadir} on {host.name} is not empty: set force=true to move its contents aside "
            f"(to {datadir}.lastline-aside-<time>[-N], deleted only after a verified restore), or empty it yourself."
        )
    dd.require_room(host, datadir, need, "the unpacked backup")
    return state


def prepare_datadir(server: Server, datadir: str, use_memory: int) -> float:
    """mariabackup --prepare on the server's host, then the datadir's owner on every file; clears the
    in-progress marker. Returns seconds."""
    host = server.runner()
    if dd.state(host, datadir) != "partial":
        raise PreflightError(f"{datadir} holds no extracted backup ({MARKER} missing): run the extract step first.")
    t0 = time.monotonic()
    run_logged(physical.prepare_argv(datadir, use_memory), "prepare", host=host)
    dd.own_like_folder(host, datadir)
    dd.remove_marker(host, datadir)
    return time.monotonic() - t0


def start_server(server: Server, timeout: float = 180) -> float:
    """Start a server (never on a half-restored datadir) and wait until it answers; returns seconds."""
    datadir = server.require_datadir()
    if dd.state(server.runner(), datadir) == "partial":
        raise IntegrityError(f"{datadir} holds an unfinished restore ({MARKER}): refusing to start {server.describe()}.")
    return server.start_service(timeout)
