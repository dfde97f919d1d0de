"""A distributed Airflow deployment without Docker: the shape docker-compose.yaml describes, as processes.

CeleryExecutor on a Postgres metadata database of its own (created on the machine's PostgreSQL, dropped at
the end) and a Redis database number of its own (flushed at the end, no other touched); `airflow api-server`,
`scheduler`, `dag-processor`, `triggerer` and any number of `airflow celery worker` processes, each in a
session of its own, stopped by their ids (TERM, then KILL) and checked gone. Operators' tooling talks to it
through the REST API (`Api`, a real HTTP client with a token from the auth manager).

    with Deployment(tmp, workers={"w1": ["default", "near_a"], "w2": ["default"]}) as d:
        run = d.api.trigger("logical_backup", {...}); d.api.wait(run)

`python -m lastline_dev.deployment check` says whether Postgres and Redis answer here.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from lastline.airflow.embedded import DEPLOYMENT
from lastline_dev.sandbox import alive, free_port

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN = os.environ.get("LASTLINE_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("LASTLINE_REDIS", "redis://127.0.0.1:6379")
TERMINAL = ("success", "failed")

# What the suite and docker-compose.yaml must agree on (tests/e2e/test_deploy.py holds them to it).
SHARED_SETTINGS = {
    "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
    "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
    # the Airflow settings the deployment and the embedded Airflow share, declared once (examples off, the scheduler's
    # idle sleep, the parse interval); the folders are set below, from this checkout
    **{k: v for k, v in DEPLOYMENT.items() if k.startswith("AIRFLOW__") and "{root}" not in v},
}


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def services_available() -> str | None:
    """None when Postgres and Redis answer here, else what is missing."""
    missing = [name for name, port in (("PostgreSQL", 5432), ("Redis", 6379)) if not _answers("127.0.0.1", port)]
    if missing:
        return f"{' and '.join(missing)} not answering on 127.0.0.1"
    try:
        import psycopg2
        import redis
    except ImportError as exc:
        return f"{exc.name} is not installed (make setup installs it)"
    try:
        psycopg2.connect(PG_ADMIN, connect_timeout=3).close()
        redis.Redis.from_url(REDIS_URL).ping()
    except Exception as exc:  # noqa: BLE001 - any failure means: not usable here
        return f"cannot use the services: {exc}"
    return None


def hostname() -> str:
    """[core] hostname_callable of the suite's workers: the worker's own name, so that task instances say
    which worker ran them (two workers on one machine share its hostname)."""
    return os.environ.get("LASTLINE_WORKER_NAME") or socket.getfqdn()


@dataclass
class Proc:
    """One Airflow component: its command, log, and the session it leads."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen | None = None
    seen: set[int] = field(default_factory=set)

    def start(self) -> None:
        out = open(self.log, "ab")
        self.popen = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True, cwd=ROOT)
        out.close()

    @property
    def pid(self) -> int:
        assert self.popen
        return self.popen.pid

    def members(self) -> set[int]:
        """Every process of this component's session (the component and what it forked), as /proc sees it."""
        found = set()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[3]) == self.pid and fields[0] != "Z":  # field 6 of stat: the session id
                found.add(int(entry))
        self.seen |= found
        return found

    def signal(self, sig: int) -> None:
        for pid in self.members():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 60) -> None:
        """TERM the session, wait until every member is gone, KILL what is left after `timeout`."""
        if not self.popen:
            return
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (self.popen.poll() is None or self.members()):
            time.sleep(0.3)
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


class Api:
    """Airflow's REST API (v2) as an operator's tooling uses it: a bearer token from /auth/token."""

    def __init__(self, base: str, user: str, password: str) -> None:
        self.base, self.user, self.password = base.rstrip("/"), user, password
        self.http = httpx.Client(base_url=self.base, timeout=30)
        self._token: str | None = None

    def token(self) -> str:
        """A bearer token from the auth manager (kept until it expires)."""
        if not self._token:
            r = self.http.post("/auth/token", json={"username": self.user, "password": self.password})
            r.raise_for_status()
            self._token = r.json()["access_token"]
        return self._token

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token()}"}

    def call_raw(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """The response itself (any status), with the token."""
        r = self.http.request(method, path, headers=self._auth(), **kw)
        if r.status_code == 401:  # token expired: once more with a new one
            self._token = None
            r = self.http.request(method, path, headers=self._auth(), **kw)
        return r

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """The JSON answer; an error status raises, naming the call."""
        r = self.call_raw(method, path, **kw)
        if r.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:500]}")
        return r.json() if r.content else None

    def put_connection(self, conn_id: str, conn: dict) -> None:
        """Create or replace a connection (the JSON form of AIRFLOW_CONN_*) in the metadata database."""
        body = {"connection_id": conn_id, "conn_type": conn["conn_type"], "host": conn.get("host"),
                "port": conn.get("port"), "login": conn.get("login"), "password": conn.get("password"),
                "schema": conn.get("schema"), "description": conn.get("description"),
                "extra": json.dumps(conn.get("extra") or {})}
        try:
            self.call("DELETE", f"/api/v2/connections/{conn_id}")
        except RuntimeError as exc:
            if " 404 " not in str(exc):
                raise
        self.call("POST", "/api/v2/connections", json=body)

    def put_pool(self, name: str, slots: int, description: str = "") -> None:
        body = {"name": name, "slots": slots, "description": description, "include_deferred": False}
        try:
            self.call("POST", "/api/v2/pools", json=body)
        except RuntimeError as exc:
            if " 409 " not in str(exc):
                raise
            self.call("PATCH", f"/api/v2/pools/{name}", json=body)

    def dag_ids(self) -> list[str]:
        return [d["dag_id"] for d in self.call("GET", "/api/v2/dags", params={"limit": 100})["dags"]]

    def trigger(self, dag_id: str, conf: dict, run_id: str | None = None) -> tuple[str, str]:
        """Unpause `dag_id` and trigger a run with `conf` (and `run_id`, else Airflow names it): (dag_id, run_id)."""
        self.call("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False})
        body = {"logical_date": None, "conf": conf} | ({"dag_run_id": run_id} if run_id else {})
        run = self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", json=body)
        return dag_id, run["dag_run_id"]

    def run(self, run: tuple[str, str]) -> dict:
        return self.call("GET", f"/api/v2/dags/{run[0]}/dagRuns/{run[1]}")

    def task_instances(self, run: tuple[str, str]) -> list[dict]:
        return self.call("GET", f"/api/v2/dags/{run[0]}/dagRuns/{run[1]}/taskInstances",
                         params={"limit": 1000})["task_instances"]

    def tries(self, run: tuple[str, str], task_id: str) -> list[dict]:
        """Every try of every instance of `task_id` in the run (earlier tries included)."""
        out = []
        for ti in self.task_instances(run):
            if ti["task_id"] == task_id:
                out += self.call("GET", f"/api/v2/dags/{run[0]}/dagRuns/{run[1]}/taskInstances/{task_id}/"
                                 f"{ti['map_index']}/tries")["task_instances"]
        return out

    def wait(self, run: tuple[str, str], timeout: float = 600, until: tuple[str, ...] = TERMINAL) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.run(run)
            if state["state"] in until:
                return state
            time.sleep(1)
        raise TimeoutError(f"{run[0]} {run[1]} still {state['state']} after {timeout} s")


class Deployment:
    """Postgres database + Redis db number + api-server, scheduler, dag-processor, triggerer, workers.

    `workers` maps a worker's name to the queues it serves. `env` adds to every process's environment."""

    def __init__(self, home: Path, workers: dict[str, list[str]], env: dict[str, str] | None = None,
                 concurrency: int = 1) -> None:
        self.home = home
        self.workers = workers
        self.concurrency = concurrency
        self.db = f"lastline_{os.getpid()}_{secrets.token_hex(3)}"
        self.redis_db = self._free_redis_db()
        self.port = free_port()
        self.user, self.password = "operator", secrets.token_urlsafe(12)
        pg = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg2://")  # the driver, by name
        self.env = {
            **os.environ, **SHARED_SETTINGS, **(env or {}),
            "AIRFLOW_HOME": str(home), "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"), "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"{pg}/{self.db}",
            "AIRFLOW__CELERY__BROKER_URL": f"{REDIS_URL}/{self.redis_db}",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{pg}/{self.db}",
            "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.port}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{self.user}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "lastline_dev.deployment.hostname",
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        }
        for key in ("AIRFLOW_CONFIG", "AIRFLOW__CORE__UNIT_TEST_MODE"):
            self.env.pop(key, None)
        self.procs: dict[str, Proc] = {}
        self.stopped = False
        self.api = Api(f"http://127.0.0.1:{self.port}", self.user, self.password)

    @staticmethod
    def _free_redis_db() -> int:
        """The highest-numbered empty Redis database (the machine's own use starts at 0)."""
        import redis

        for n in range(15, 0, -1):
            if redis.Redis.from_url(f"{REDIS_URL}/{n}").dbsize() == 0:
                return n
        raise RuntimeError("no empty Redis database number (1-15) on this server")

    # -- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> Deployment:
        import psycopg2

        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "passwords.json").write_text(json.dumps({self.user: self.password}))
        admin = psycopg2.connect(PG_ADMIN)
        admin.autocommit = True
        admin.cursor().execute(f'CREATE DATABASE "{self.db}"')
        admin.close()
        try:
            self.airflow("db", "migrate")
            self._spawn("api-server", ["api-server", "--port", str(self.port)])
            for name in ("scheduler", "dag-processor", "triggerer"):
                self._spawn(name, [name])
            for name in self.workers:
                self.start_worker(name)
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Proc:
        proc = Proc(name, [str(ROOT / ".venv/bin/airflow"), *args], {**self.env, **(env or {})}, self.home / f"{name}.log")
        proc.start()
        self.procs[name] = proc
        return proc

    def start_worker(self, name: str) -> Proc:
        """(Re)start the Celery worker `name` on its queues, with a log server port of its own."""
        env = {"LASTLINE_WORKER_NAME": name, "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port())}
        return self._spawn(name, ["celery", "worker", "--celery-hostname", f"{name}@%h", "--queues",
                                  ",".join(self.workers[name]), "--concurrency", str(self.concurrency)], env)

    def _wait_ready(self, timeout: float = 240) -> None:
        """The api-server answers with a healthy scheduler, the DAGs are parsed, every worker is ready."""
        deadline = time.monotonic() + timeout
        waiting = "the api-server"
        while time.monotonic() < deadline:
            for proc in self.procs.values():
                if proc.popen and proc.popen.poll() is not None:
                    raise RuntimeError(f"{proc.name} exited with status {proc.popen.returncode}:\n{proc.tail()}")
            try:
                health = httpx.get(f"{self.api.base}/api/v2/monitor/health", timeout=5).json()
                waiting = "the scheduler"
                if health["scheduler"]["status"] == "healthy":
                    waiting = "the DAGs"
                    if {p.stem for p in (ROOT / "dags").glob("*.py")} <= set(self.api.dag_ids()):  # every DAG file parsed
                        waiting = "the workers"
                        if all("ready." in self.procs[w].tail(20000) for w in self.workers):
                            return
            except (httpx.HTTPError, KeyError, RuntimeError):
                pass
            time.sleep(2)
        raise RuntimeError(f"the deployment did not come up in {timeout} s: waiting for {waiting}")

    def airflow(self, *args: str) -> str:
        proc = subprocess.run([str(ROOT / ".venv/bin/airflow"), *args], env=self.env, capture_output=True, text=True, cwd=ROOT)
        if proc.returncode:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
        return proc.stdout

    def kill_worker(self, name: str) -> set[int]:
        """SIGKILL every process of worker `name` (the worker, its pool, the task it runs): a lost machine."""
        proc = self.procs[name]
        members = proc.members()
        proc.signal(signal.SIGKILL)
        assert proc.popen
        proc.popen.wait(timeout=30)
        return members

    def pids(self) -> set[int]:
        """Every process id this deployment started or that its components forked, as seen so far."""
        out: set[int] = set()
        for proc in self.procs.values():
            proc.members()
            out |= proc.seen | ({proc.pid} if proc.popen else set())
        return out

    def __exit__(self, *exc: object) -> None:
        """Stop every component (workers first, then the scheduler side), then drop the database and the
        Redis database number. Idempotent."""
        if self.stopped:
            return
        self.stopped = True
        for name in [*self.workers, "triggerer", "scheduler", "dag-processor", "api-server"]:
            if name in self.procs:
                self.procs[name].stop()
        import psycopg2
        import redis

        try:
            admin = psycopg2.connect(PG_ADMIN)
            admin.autocommit = True
            admin.cursor().execute(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')
            admin.close()
        finally:
            redis.Redis.from_url(f"{REDIS_URL}/{self.redis_db}").flushdb()

    def alive(self) -> list[int]:
        return sorted(pid for pid in self.pids() if alive(pid))

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail(3000)}" for p in self.procs.values())


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args[:1] == ["check"]:
        missing = services_available()
        print(missing or "PostgreSQL and Redis answer: the distributed suite can run here")
        return 1 if missing else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
