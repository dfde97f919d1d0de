"""Stop at once when told to: SIGTERM (mark failed, execution_timeout, worker shutdown) ends a stage's
queries on the servers (`KILL QUERY`) and its child processes within seconds, then fails the task.

Airflow's task runner only calls the operator's on_kill() on SIGTERM and lets the task run on; and a
Python signal handler waits until the main thread leaves its current C call (a 45-minute query, say).
So inside `stoppable()` the signal also wakes a watcher thread (through the signal wakeup fd, written
by the C-level handler at once): it runs every registered cleanup (kill child processes, `KILL QUERY`
over a fresh connection), the blocked call then fails, and the main thread raises TaskStopped.

Cleanups are registered (`add`/`remove`) by what starts the work: dump workers, loader connections,
index builds, OS pipelines. Outside `stoppable()` (or off the main thread) nothing changes.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import select
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

from lastline.core.errors import LastlineError

log = logging.getLogger(__name__)

_lock = threading.Lock()
_cleanups: dict[int, tuple[str, Callable[[], None]]] = {}
_ids = itertools.count()


class TaskStopped(LastlineError):
    """The task was told to stop (SIGTERM); its queries and child processes were ended."""


def add(what: str, fn: Callable[[], None]) -> int:
    """Register a cleanup to run when the task is told to stop; returns a token for remove()."""
    token = next(_ids)
    with _lock:
        _cleanups[token] = (what, fn)
    return token


def remove(token: int) -> None:
    with _lock:
        _cleanups.pop(token, None)


def kill_process(proc: subprocess.Popen) -> Callable[[], None]:
    """A cleanup that kills a child process (if it still runs)."""
    def kill() -> None:
        if proc.poll() is None:
            proc.kill()
    return kill


def kill_query(server: Any, connection_id: int) -> Callable[[], None]:
    """A cleanup that ends the query of connection `connection_id` on `server`, over a fresh connection
    (the server would otherwise run a killed client's statement to its end)."""
    def kill() -> None:
        conn = server.connect(connect_timeout=5)
        try:
            conn.cursor().execute(f"KILL QUERY {int(connection_id)}")
        except Exception as exc:  # noqa: BLE001 - already finished: nothing to kill
            if getattr(exc, "args", (None,))[0] != 1094:  # unknown thread id
                raise
        finally:
            conn.close()
    return kill


def run_cleanups() -> None:
    """Run every registered cleanup once (from the watcher thread, or the handler); errors are logged."""
    with _lock:
        items = list(_cleanups.items())
        _cleanups.clear()
    for _token, (what, fn) in items:
        try:
            fn()
            log.warning("stop: %s", what)
        except Exception as exc:  # noqa: BLE001 - the others still run
            log.warning("stop: %s failed: %s", what, exc)


def stops_cleanly(fn: Callable) -> Callable:
    """Decorate a long stage: it runs inside `stoppable(<its name>)` (its signature is kept for Airflow)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with stoppable(f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"):
            return fn(*args, **kwargs)
    return wrapper


@contextlib.contextmanager
def stoppable(label: str) -> Iterator[None]:
    """Within: SIGTERM runs the cleanups at once and raises TaskStopped in the main thread (see the module doc)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    r, w = os.pipe()
    os.set_blocking(w, False)
    previous = signal.getsignal(signal.SIGTERM)
    quit_r, quit_w = os.pipe()

    def handler(signum: int, frame: Any) -> None:
        run_cleanups()
        if callable(previous):
            previous(signum, frame)  # Airflow's: the operator's on_kill()
        raise TaskStopped(
            f"{label}: told to stop (SIGTERM: marked failed, timed out, or the worker is shutting down); its queries "
            "were killed on the servers and its processes ended. Nothing it left is taken for complete; a re-run "
            "starts or resumes cleanly."
        )

    def watch() -> None:
        while True:
            ready, _, _ = select.select([r, quit_r], [], [])
            if quit_r in ready:
                return
            data = os.read(r, 64)
            if signal.SIGTERM in data:
                log.warning("%s: SIGTERM received: ending its queries and processes now", label)
                run_cleanups()

    old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, handler)
    watcher = threading.Thread(target=watch, name="stop-watcher", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(old_fd)
        os.write(quit_w, b"x")
        watcher.join(timeout=5)
        for fd in (r, w, quit_r, quit_w):
            os.close(fd)
