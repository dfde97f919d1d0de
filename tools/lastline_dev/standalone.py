"""`bin/airflow standalone` (scheduler, dag-processor, api-server, LocalExecutor on SQLite) as a context
manager for tests and benches: its own process group, stopped with the whole group, runs triggered through
the REST API as an operator's tooling does (no `airflow` command in the middle of a timed run: each costs
seconds of CPU), its metadata DB read directly to follow runs."""
from __future__ import annotations

import json
import os
import secrets
import signal
import sqlite3
import subprocess
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from lastline_dev.deployment import Api
from lastline_dev.peaks import SessionPeaks

ROOT = Path(__file__).resolve().parents[2]


class Standalone:
    """`bin/airflow standalone` with `env` (LASTLINE_AIRFLOW_HOME picks its home), output to `log`."""

    def __init__(self, env: dict, log: Path, wait_for_dag: str = "logical_restore") -> None:
        self.log, self.wait_for_dag = log, wait_for_dag
        self.home = Path(env.get("LASTLINE_AIRFLOW_HOME") or ROOT / ".airflow")
        self.db = self.home / "airflow.db"
        self.proc: subprocess.Popen | None = None
        self.port = env.get("AIRFLOW__API__PORT", "8080")
        self.passwords = self.home / "lastline-api-passwords.json"  # the REST user's, for trigger()
        self.env = {**env, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "lastline:admin",
                    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.passwords)}
        self.api = Api(f"http://127.0.0.1:{self.port}", "lastline", secrets.token_urlsafe(12))
        self.peaks: SessionPeaks | None = None  # every process's peak RSS while it runs: task_peaks()

    def __enter__(self) -> Standalone:
        self.home.mkdir(parents=True, exist_ok=True)
        self.passwords.write_text(json.dumps({self.api.user: self.api.password}))
        self.passwords.chmod(0o600)
        fh = open(self.log, "w")
        self.proc = subprocess.Popen([str(ROOT / "bin/airflow"), "standalone"], env=self.env, stdout=fh,
                                     stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
        self.peaks = SessionPeaks(self.proc.pid).start()
        deadline = time.monotonic() + 240
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"airflow standalone exited with status {self.proc.returncode}; see {self.log}")
                listed = self.airflow("dags", "list", check=False)
                if listed.returncode == 0 and self.wait_for_dag in listed.stdout and self._api_up():
                    return self
                time.sleep(3)
            raise RuntimeError(f"airflow standalone did not come up in 240 s; see {self.log}")
        except BaseException:
            self.__exit__()
            raise

    def _api_up(self) -> bool:
        """The api-server answers (its workers run tasks through it: a task started before it is up fails)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v2/monitor/health", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def airflow(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([str(ROOT / "bin/airflow"), *args], env=self.env, capture_output=True, text=True,
                              check=check, cwd=ROOT)

    def trigger(self, dag_id: str, conf: dict) -> str:
        """Unpause `dag_id` and trigger a run with `conf` (REST API); returns its run id."""
        with sqlite3.connect(self.db) as c:  # runs left queued by an interrupted bench
            c.execute("UPDATE dag_run SET state = 'failed' WHERE dag_id = ? AND state IN ('queued', 'running')", (dag_id,))
        return self.api.trigger(dag_id, conf, run_id=f"manual__{datetime.now(UTC):%Y%m%dT%H%M%S%f}")[1]

    def wait(self, dag_id: str, run_id: str | None = None, run_type: str | None = None, timeout: float = 3600) -> dict:
        """The run (by id, or the newest of `run_type`) once it ended: state, seconds, run id."""
        deadline = time.monotonic() + timeout
        sql = "SELECT state, start_date, end_date, run_id FROM dag_run WHERE dag_id = ?"
        args: tuple = (dag_id,)
        if run_id:
            sql, args = sql + " AND run_id = ?", (*args, run_id)
        if run_type:
            sql, args = sql + " AND run_type = ?", (*args, run_type)
        while time.monotonic() < deadline:
            with sqlite3.connect(self.db) as c:
                row = c.execute(sql + " ORDER BY id DESC LIMIT 1", args).fetchone()
            if row and row[0] in ("success", "failed"):
                state, start, end, rid = row
                seconds = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
                return {"state": state, "seconds": seconds, "run_id": rid}
            time.sleep(1)
        raise TimeoutError(f"{dag_id} {run_id or run_type} did not finish in {timeout} s; see {self.log}")

    def task_peaks(self, dag_id: str, run_id: str) -> dict:
        """The peak RSS of a run's task processes and of what they started (SessionPeaks.tasks)."""
        assert self.peaks is not None, "task_peaks() inside the with block"
        return self.peaks.tasks(self.db, dag_id, run_id)

    def __exit__(self, *exc: object) -> None:
        """TERM the whole group, wait until every member (scheduler, workers) is gone, KILL after 60 s."""
        if self.peaks:
            self.peaks.stop()
        if not self.proc:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.proc.poll()
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.5)
        os.killpg(self.proc.pid, signal.SIGKILL)
