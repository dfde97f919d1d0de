"""core.stopping: inside `stoppable`, SIGTERM runs every registered cleanup at once (a child process killed while the
main thread waits on it) and the task fails with TaskStopped; outside, nothing changes."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading

import pytest

from lastline.core import stopping


def test_sigterm_inside_stoppable_kills_the_child_and_stops_the_task():
    before = signal.getsignal(signal.SIGTERM)
    proc = subprocess.Popen(["sleep", "30"])
    token = stopping.add("killed sleep", stopping.kill_process(proc))
    try:
        with pytest.raises(stopping.TaskStopped, match="dump.run: told to stop"), stopping.stoppable("dump.run"):
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM)).start()
            proc.wait(timeout=20)
        assert proc.wait(timeout=5) == -signal.SIGKILL  # killed by the cleanup, not by the wait's timeout
    finally:
        stopping.remove(token)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back


def test_run_cleanups_runs_each_once_and_goes_on_after_a_failure(caplog):
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("already gone")

    stopping.add("first", lambda: ran.append("first"))
    stopping.add("broken", broken)
    stopping.add("last", lambda: ran.append("last"))
    removed = stopping.add("removed", lambda: ran.append("removed"))
    stopping.remove(removed)
    with caplog.at_level(logging.WARNING, logger="lastline.core.stopping"):
        stopping.run_cleanups()
        stopping.run_cleanups()
    assert ran == ["first", "last"]
    assert "stop: broken failed: already gone" in caplog.text


def test_stoppable_off_the_main_thread_changes_nothing():
    seen: list[object] = []

    def work() -> None:
        with stopping.stoppable("worker"):
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [before]


def test_stops_cleanly_keeps_the_signature_and_the_result():
    @stopping.stops_cleanly
    def stage(a: int, b: int = 2) -> int:
        """A stage."""
        return a + b

    before = signal.getsignal(signal.SIGTERM)
    assert stage(1, b=3) == 4 and stage.__name__ == "stage" and stage.__doc__ == "A stage."
    assert signal.getsignal(signal.SIGTERM) == before


# the stages that run long, each stopped cleanly by SIGTERM (its queries killed, its processes ended): a refactor that
# moves the decorator off one of them leaves its pipeline running after the task was told to stop
LONG_STAGES = [
    "lastline.logical.backup.stages:dump", "lastline.logical.restore.create:create_schema",
    "lastline.logical.restore.finalize:finalize", "lastline.logical.restore.stages:load_lane",
    "lastline.logical.restore.stages:load", "lastline.logical.restore.verify:verify", "lastline.physical.backup:stream",
    "lastline.physical.restore:extract", "lastline.physical.restore:prepare", "lastline.replication.rebuild:stream",
    "lastline.pitr.stream:run",
]


@pytest.mark.parametrize("where", LONG_STAGES)
def test_every_long_stage_stops_cleanly(where):
    import importlib

    module, name = where.split(":")
    fn = getattr(importlib.import_module(module), name)
    assert fn.__code__.co_qualname == "stops_cleanly.<locals>.wrapper" and fn.__wrapped__.__name__ == name
