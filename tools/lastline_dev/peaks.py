"""Peak memory of the processes of one session (an `airflow standalone` and everything it starts), sampled from
/proc in a thread: each process's VmHWM (its own peak RSS, kept by the kernel, so a peak between two samples is
not missed), its title (Airflow's task runner calls itself `airflow worker -- <task instance id>`) and parent."""
from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

TASK_TITLE = "airflow worker -- "


@dataclass
class Seen:
    """One process as last sampled: its start time (with its pid, who it is: pids are reused), its title, its
    parent's pid, its peak RSS in MB."""
    started: int
    title: str
    ppid: int
    hwm_mb: float


def _read(path: str) -> bytes:
    """A /proc file's bytes, in one read (each is under a page; pathlib's text reads cost 4x the sampler's CPU)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def _sample(pid: int) -> Seen | None:
    """The process as it is now; None if it is gone or is a kernel thread. Read with as little CPU as can be: the
    sampler runs beside the runs it measures."""
    try:
        stat, status, cmdline = _read(f"/proc/{pid}/stat"), _read(f"/proc/{pid}/status"), _read(f"/proc/{pid}/cmdline")
        started = int(stat.rsplit(b")", 1)[1].split()[19])
        at, parent = status.find(b"\nVmHWM:"), status.find(b"\nPPid:")
        if at < 0 or parent < 0:  # a kernel thread has no VmHWM
            return None
        hwm_kb = int(status[at + 7:status.index(b"kB", at)])
        ppid = int(status[parent + 6:status.index(b"\n", parent + 1)])
    except (OSError, IndexError, ValueError):
        return None
    return Seen(started, cmdline.replace(b"\0", b" ").decode(errors="replace").strip(), ppid, hwm_kb / 1024)


class SessionPeaks:
    """Samples every process whose session id is `sid` every `every` seconds, until stop()."""

    def __init__(self, sid: int, every: float = 0.2) -> None:
        self.sid, self.every = sid, every
        self.seen: dict[int, Seen] = {}  # by pid: the latest process of that pid
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="session-peaks", daemon=True)

    def start(self) -> SessionPeaks:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            self._sample_until_stopped()
        except Exception as exc:  # noqa: BLE001 - said, not silently lost: the figures then stop at that moment
            print(f"session-peaks: sampling stopped: {exc!r}", flush=True)

    def _sample_until_stopped(self) -> None:
        while not self._stop.is_set():
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                pid = int(entry.name)
                try:
                    if os.getsid(pid) != self.sid:
                        continue
                except OSError:
                    continue
                if (now := _sample(pid)) is not None:
                    with self._lock:
                        old = self.seen.get(pid)
                        # the same process, the same program (one sampled between fork and exec showed its parent's
                        # memory; a reused pid is another process): its peak so far stands, else it starts anew
                        if old is not None and (old.started, old.title) == (now.started, now.title):
                            now.hwm_mb = max(now.hwm_mb, old.hwm_mb)
                        self.seen[pid] = now
            self._stop.wait(self.every)

    def tasks(self, db: Path, dag_id: str, run_id: str) -> dict:
        """The run's task processes by peak RSS: each task's process ("task[map] name": MB), the largest task
        process, and the largest process any of them started (a dump worker, mariabackup, zstd...) with its command."""
        with sqlite3.connect(db) as c:
            rows = c.execute("SELECT id, task_id, map_index, rendered_map_index FROM task_instance "
                             "WHERE dag_id = ? AND run_id = ?", (dag_id, run_id)).fetchall()
        names = {(i.hex() if isinstance(i, bytes) else str(i).replace("-", "")): f"{t}[{m}] {r or ''}".strip()
                 if m >= 0 else t for i, t, m, r in rows}
        with self._lock:
            seen = dict(self.seen)
        by_task: dict[str, float] = {}
        task_pids: dict[int, str] = {}
        for pid, s in seen.items():
            if s.title.startswith(TASK_TITLE) and (name := names.get(s.title[len(TASK_TITLE):].strip().replace("-", ""))):
                task_pids[pid] = name
                by_task[name] = round(max(by_task.get(name, 0.0), s.hwm_mb), 1)

        def task_of(pid: int) -> str | None:
            for _ in range(16):  # up the parents to a task process
                if pid in task_pids:
                    return task_pids[pid]
                if pid not in seen:
                    return None
                pid = seen[pid].ppid
            return None

        children = [(s.hwm_mb, task, s.title.split(" ")[0].rsplit("/", 1)[-1]) for pid, s in seen.items()
                    if pid not in task_pids and (task := task_of(s.ppid))]
        top = max(by_task.items(), key=lambda kv: kv[1], default=("none seen", 0.0))
        child = max(children, default=(0.0, "none", "none"))
        return {"tasks_mb": by_task, "largest_task": {"task": top[0], "mb": top[1]},
                "largest_child": {"command": child[2], "task": child[1], "mb": round(child[0], 1)}}

    def session(self, root: int) -> dict:
        """The session leader's own peak (`dags test` runs its tasks in itself) and the largest other process."""
        with self._lock:
            seen = dict(self.seen)
        others = [(s.hwm_mb, s.title.split(" ")[0].rsplit("/", 1)[-1]) for pid, s in seen.items() if pid != root]
        child = max(others, default=(0.0, "none"))
        return {"process_mb": round(seen[root].hwm_mb, 1) if root in seen else None,
                "largest_child": {"command": child[1], "mb": round(child[0], 1)}}
