"""Shared fixtures: a private Airflow home (SQLite), sandbox MariaDB servers, an S3 emulator.

Airflow's settings are read at import time, so the environment is set here before anything
imports airflow.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_HOME = tempfile.mkdtemp(prefix="lastline-airflow-")
os.environ.update(
    AIRFLOW_HOME=_HOME,
    AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
    AIRFLOW__CORE__LOAD_EXAMPLES="False",
    AIRFLOW__CORE__UNIT_TEST_MODE="False",
    LASTLINE_RETRIES="0",
    # in-process runs (dag.test) have no person to approve a restore that replaces data; the distributed
    # suite, which has the REST API, approves and rejects for real
    LASTLINE_APPROVAL="false",
    # where runs may read and write backups (a deployment setting): the tests' temporary folders, S3 and SSH
    # an S3 root names the AWS connection it is reached through: the tests' moto server, and the throttling proxy
    LASTLINE_BACKUP_ROOTS=f"file://{tempfile.gettempdir()},s3://?aws_conn_id=t_s3,s3://?aws_conn_id=t_s3slow,ssh://",
    # dag.test() of Airflow 3.3.2 fails at the end of a run whose DAG has a deadline (it looks the alert up
    # by a dict); the distributed suite proves the deadline under the real scheduler
    LASTLINE_BACKUP_DEADLINE_MINUTES="0",
    # the deployment's storage key (storage.auth): every control file the tests write is signed and checked
    LASTLINE_STORAGE_KEY_CONN_ID="lastline_storage_key",
    AIRFLOW_CONN_LASTLINE_STORAGE_KEY=json.dumps({"conn_type": "generic", "login": "tests-k1",
                                                  "password": hashlib.sha256(b"lastline tests' storage key").hexdigest()}),
)

from lastline_dev.sandbox import Instance  # noqa: E402
from lastline_dev.webhook import Webhook  # noqa: E402

# The fault matrix (`make faults`): each row is recorded by the end-to-end test that proves it, at its
# end, so a row shows only when its test passed: the error the operator saw, and the proof that nothing
# was lost.
FAULT_ROWS = (
    "kill -9 of a load task", "kill -9 of the target server", "SSH link cut mid-stream",
    "S3 answering 500/503/SlowDown", "target datadir full mid-load", "truncated archive", "truncated chunk",
    "corrupt manifest", "wrong password",
)
_FAULTS: dict[str, dict] = {}


@pytest.fixture
def fault():
    """`fault(row, seen, proof)`: record a passing row of the fault matrix (call it after the asserts)."""
    def record(row: str, seen: str, proof: str) -> None:
        assert row in FAULT_ROWS, row
        _FAULTS[row] = {"seen": " ".join(str(seen).split())[:150], "proof": proof}
    return record


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    faults_run = "faults" in (config.getoption("markexpr") or "")
    if not _FAULTS and not faults_run:
        return
    write = terminalreporter.write_line
    write("")
    write("fault matrix (each row: the error the operator sees | the proof that nothing was lost)")
    for row in FAULT_ROWS:
        r = _FAULTS.get(row)
        if r:
            write(f"  PASS  {row:<32} | {r['seen']} | {r['proof']}")
        else:
            write(f"  ----  {row:<32} | not proven in this run")


def pytest_sessionfinish(session, exitstatus):
    if "faults" in (session.config.getoption("markexpr") or "") and set(FAULT_ROWS) - set(_FAULTS):
        session.exitstatus = 1  # `make faults` passes only when every row does


# Fixtures that start something costly: a MariaDB sandbox, Airflow's metadata DB or a DagBag, an S3 emulator, an sshd.
# A test that is not e2e but uses one is marked `slow` (pytest.ini), which keeps it out of `make test-fast`.
SLOW_FIXTURES = frozenset({"airflow_db", "dagbag", "sandbox_root", "source", "target", "logical_source", "logical_target",
                           "s3_server", "sshd"})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def _lost_metadata_files() -> list[str]:
    """The session's SQLite metadata DB files (airflow.db, -wal, -shm) this process still has open though they were
    deleted: what a close() in this process of another descriptor on them brings about (it drops every POSIX lock
    SQLite holds here, and the next `airflow` child to close the DB takes itself for the last user and deletes them)."""
    lost = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(os.path.join(_HOME, "airflow.db")) and target.endswith(" (deleted)"):
            lost.append(target)
    return lost


_LOST_SAID: list[str] = []  # the test at which the loss was said (once)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Fail where the metadata DB's files are lost, not hundreds of tests later as "database disk image is
    malformed": read a file of the Airflow home in a child process, never in this one (test_key_secrecy's _tree)."""
    yield
    lost = _lost_metadata_files()
    if lost and not _LOST_SAID:
        _LOST_SAID.append(item.nodeid)
        pytest.fail(f"the suite's metadata DB lost {lost} during or before {item.nodeid}: a test closed a descriptor of "
                    "its own on a file of the Airflow home's airflow.db (read it in a child process instead)")


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """A migrated metadata DB in the session's private Airflow home."""
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    return _HOME


@pytest.fixture(scope="session")
def sandbox_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sandbox")


def _instance(root: Path, name: str, **kw) -> Instance:
    inst = Instance(root, name)
    inst.create(**kw)
    return inst


def set_conn(conn_id: str, inst: Instance, **extra) -> None:
    """Expose a sandbox as the Airflow connection `conn_id` (AIRFLOW_CONN_*)."""
    conn = inst.connection(conn_id)
    conn["extra"].update(extra)
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(conn)


def _loaded(root: Path, name: str, *loads) -> Instance:
    """A started sandbox with `loads` applied; destroyed again if one fails (no server left running)."""
    inst = _instance(root, name)
    try:
        for load in loads:
            load(inst)
    except BaseException:
        inst.destroy()
        raise
    return inst


@pytest.fixture(scope="session")
def source(sandbox_root):
    """A source server with the store dataset (and its system-versioned `store_history`, which physical backups
    carry) and a few MB of generated rows."""
    inst = _loaded(sandbox_root, "source", lambda i: i.load_store(versioned=True), lambda i: i.load_bulk(8, tables=2))
    set_conn("t_source", inst)
    yield inst
    inst.destroy()


@pytest.fixture(scope="session")
def target(sandbox_root):
    """A target server the restores write into."""
    inst = _instance(sandbox_root, "target")
    set_conn("t_target", inst)
    yield inst
    inst.destroy()


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server on loopback, reached through an Airflow AWS connection."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ["AIRFLOW_CONN_T_S3"] = json.dumps({
        "conn_type": "aws", "login": "testing", "password": "testing-secret",
        "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    })
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing-secret").create_bucket(Bucket="backups")
    yield endpoint
    server.stop()


@pytest.fixture(scope="session")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


@pytest.fixture
def run_dag(dagbag, capfd, caplog):
    """Run a DAG in-process with `dag.test(run_conf=...)`; return (state, failed task ids, log text)."""

    def run(dag_id: str, conf: dict):
        # Pass every Param in `conf`: dag.test() in one process can carry an earlier run's values
        # into the defaults of the next.
        dag = dagbag.get_dag(dag_id)
        caplog.clear()
        with caplog.at_level("INFO"):
            dr = dag.test(run_conf=conf)
        out, err = capfd.readouterr()
        sys.stdout.write(out[-20000:])  # keep the tail visible in a failing test's report
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session

        with create_session() as session:
            tis = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=dr.run_id).all()
            states = {ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]": str(ti.state) for ti in tis}
            for ti in sorted((ti for ti in tis if ti.map_index >= 0), key=lambda ti: str(ti.state) == "failed"):
                states[ti.task_id] = str(ti.state)  # "load": failed if any instance failed (failures last)
        return str(dr.state), states, out + err + caplog.text

    return run


CORPUS = ROOT / "tests" / "corpus" / "edge_cases.sql"


@pytest.fixture(scope="session")
def logical_source(sandbox_root):
    """A source for logical backups: the store dataset and the edge-case corpus (database `edge`)."""
    inst = _loaded(sandbox_root, "lsource", Instance.load_store, lambda i: i.load_sql_file(CORPUS))
    set_conn("t_lsource", inst)
    yield inst
    inst.destroy()


@pytest.fixture(scope="session")
def logical_target(sandbox_root):
    """A server logical backups are loaded back into."""
    inst = _instance(sandbox_root, "ltarget")
    set_conn("t_ltarget", inst)
    yield inst
    inst.destroy()


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """A real sshd on a loopback port with generated keys, and the Airflow SSH connection `t_ssh` to it
    (host key pinned, key authentication only). Stopped by PID at the end."""
    from lastline_dev import sshd_sandbox

    if not sshd_sandbox.available():
        pytest.skip("sshd tests need root and openssh-server (make setup installs it)")
    server = sshd_sandbox.start(tmp_path_factory.mktemp("sshd"))
    os.environ["AIRFLOW_CONN_T_SSH"] = json.dumps(server.connection())
    yield server
    server.stop()


@pytest.fixture
def webhook():
    """A webhook on loopback as the Airflow connection `lastline_alerts` (where lastline's alerts go)."""
    hook = Webhook()
    os.environ["AIRFLOW_CONN_LASTLINE_ALERTS"] = json.dumps({"conn_type": "http", "host": f"http://127.0.0.1:{hook.server_port}/alerts"})
    yield hook
    os.environ.pop("AIRFLOW_CONN_LASTLINE_ALERTS", None)
    hook.shutdown()


def tamper_schema(src: Path, dst: Path, change) -> Path:
    """A copy of a backup whose schema.json was changed by `change(schema)`, with the manifest's sha256 and
    file list updated to match (as someone who can write the backup folder would)."""
    shutil.copytree(src, dst)
    (folder,) = [p for p in dst.iterdir() if p.is_dir()]
    schema = json.loads((folder / "schema.json").read_text())
    change(schema)
    data = json.dumps(schema).encode()
    (folder / "schema.json").write_bytes(data)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["schema_sha256"] = hashlib.sha256(data).hexdigest()
    for f in manifest["files"]:
        if f["name"] == "schema.json":
            f.update(bytes=len(data), sha256=manifest["schema_sha256"])
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return dst


def restore_steps(plan, run: str = ""):
    """Every step of a logical restore after its preflight, in process, revert always; returns the configuration
    snapshot (for verify)."""
    from lastline.logical.restore import stages as logical_restore

    snap = logical_restore.snapshot_config(plan, run)
    try:
        _steps, lanes = logical_restore.prepare(plan)
        for lane in lanes:
            logical_restore.load_lane(plan, lane)
        logical_restore.finalize(plan)
    finally:
        logical_restore.revert(plan)
    return snap


class Writes:
    """The application: one INSERT every `every` seconds on its own connection; the worst wait, in-flight ones
    included."""

    def __init__(self, server, table: str, every: float = 0.1) -> None:
        self.server, self.table, self.every = server, table, every
        self.waits: list[float] = []
        self.started: float | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = self.server.connect()
        conn.autocommit(True)
        cur = conn.cursor()
        while not self._stop.is_set():
            self.started = time.monotonic()
            cur.execute(f"INSERT INTO {self.table} (t) VALUES (NOW(6))")
            self.waits.append(time.monotonic() - self.started)
            self.started = None
            time.sleep(self.every)
        conn.close()

    def worst(self) -> float:
        inflight = time.monotonic() - self.started if self.started else 0.0
        return max([inflight, *self.waits])

    def __enter__(self) -> Writes:
        self._t.start()
        time.sleep(0.3)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(timeout=120)


def attach_replica(replica: Instance, primary: Instance) -> None:
    """Replicate from `primary` by GTID, from where it is now (its own setup is not replayed)."""
    p = primary.server()
    with replica.server().session() as cur:
        cur.execute("STOP ALL SLAVES")
        cur.execute("RESET SLAVE ALL")
        cur.execute("SET GLOBAL gtid_slave_pos = %s", (p.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0],))
        cur.execute("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s, "
                    "MASTER_USE_GTID=slave_pos", (p.port, p.user, p.password))
        cur.execute("START SLAVE")
