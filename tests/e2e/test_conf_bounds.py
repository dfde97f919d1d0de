"""A run's conf can only make a run gentler, on real servers: each conf a review used to harm production (killing the
application's statements, freezing its writes behind a 120 s lock attempt, taking every connection, starting
thousands of threads) is refused at once, naming the knob, the bound and where the bound is set, or clamped, with
the application unharmed; the backup says how long writes really waited, the wait for its lock included; and a
replica paused by a backup whose worker died is resumed, with an alert, by the next backup's preflight."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import MySQLdb
import pytest

from conftest import Writes, attach_replica, set_conn
from lastline import backup_report
from lastline.core import bounds
from lastline.core.errors import PreflightError, Refusal, ServerError
from lastline.core.servers import Server
from lastline.logical.backup import stages as logical_backup
from lastline.logical.backup.plans import DumpResult
from lastline.logical.restore import stages as logical_restore
from lastline.manifest import read_manifest
from lastline.physical import backup as physical_backup
from lastline.physical import restore as physical_restore
from lastline.replicas import backup_source as replica_source
from lastline.replicas import flavour
from lastline.replicas import pauses as replica_pauses
from lastline.storage import open_storage
from lastline_dev.sandbox import Instance

DB = "cb"
ENV = ("ALLOW_KILL_LONG_QUERIES", "MIN_LONG_QUERY_GUARD", "MAX_LONG_QUERY_WAIT", "MAX_LOCK_TIMEOUT", "ALLOW_FTWRL",
       "MAX_PARALLEL", "CONNECTION_RESERVE", "MAX_READ_MB_PER_S", "MAX_PRIORITY", "MAX_REPLICA_LAG", "MAX_REPLAY_THREADS")


@pytest.fixture(autouse=True)
def deployment(monkeypatch):
    """Each test starts from lastline's defaults (no LASTLINE_* bound of the machine's leaks in)."""
    for name in ENV:
        monkeypatch.delenv(f"LASTLINE_{name}", raising=False)
    return monkeypatch


def _server(**limits) -> Server:
    return Server(conn_id="s1", limits=limits)


# --- the rules -------------------------------------------------------------------------------------------------


def test_kill_long_queries_needs_the_deployment_never_runs_on_protected_and_respects_the_floor(deployment):
    with pytest.raises(PreflightError, match="kill_long_queries=true .*LASTLINE_ALLOW_KILL_LONG_QUERIES") as e:
        bounds.kill_long_queries(_server(), True, 600)
    assert isinstance(e.value, Refusal)  # fails the task at once: no retry
    assert bounds.kill_long_queries(_server(), False, 0) is False  # not asking is always allowed
    deployment.setenv("LASTLINE_ALLOW_KILL_LONG_QUERIES", "true")
    with pytest.raises(PreflightError, match="protected"):
        bounds.kill_long_queries(Server(conn_id="prod", protected=True, limits={"allow_kill_long_queries": True}), True, 600)
    with pytest.raises(PreflightError, match=r"long_query_guard=0 .*floor of 60 s.*LASTLINE_MIN_LONG_QUERY_GUARD"):
        bounds.kill_long_queries(_server(), True, 0)
    assert bounds.kill_long_queries(_server(), True, 60)
    # the connection's extra wins for its server, either way
    with pytest.raises(PreflightError, match="the connection 's1'.s extra allow_kill_long_queries"):
        bounds.kill_long_queries(_server(allow_kill_long_queries="false"), True, 600)
    assert bounds.kill_long_queries(_server(min_long_query_guard="5"), True, 5)
    deployment.setenv("LASTLINE_ALLOW_KILL_LONG_QUERIES", "sure")
    with pytest.raises(Refusal, match="LASTLINE_ALLOW_KILL_LONG_QUERIES is 'sure'"):
        bounds.kill_long_queries(_server(), True, 600)


def test_lock_knobs_have_ceilings_and_ftwrl_is_opt_in_where_backup_stages_exist(deployment):
    with pytest.raises(PreflightError, match=r"lock_timeout=120 .*ceiling of 0.5 s.*LASTLINE_MAX_LOCK_TIMEOUT"):
        bounds.lock_timeout(_server(), 120)
    assert bounds.lock_timeout(_server(), 0.2) == 0.2
    assert bounds.lock_timeout(_server(max_lock_timeout=2), 2) == 2
    with pytest.raises(PreflightError, match="lock_method=ftwrl .*LASTLINE_ALLOW_FTWRL"):
        bounds.lock_method(_server(), "ftwrl", has_stages=True)
    assert bounds.lock_method(_server(), "ftwrl", has_stages=False) == "ftwrl"  # MySQL: the only method there
    assert bounds.lock_method(_server(allow_ftwrl=True), "ftwrl", has_stages=True) == "ftwrl"
    with pytest.raises(PreflightError, match="long_query_wait=7200 .*1800"):
        bounds.long_query_wait(_server(), 7200)


def test_parallel_priority_read_cap_lag_and_replay_threads_only_get_gentler(deployment):
    with pytest.raises(PreflightError, match=r"parallel=400 .*ceiling of 16.*LASTLINE_MAX_PARALLEL"):
        bounds.parallel(_server(), 400)
    with pytest.raises(PreflightError, match=r"parallel=20000 .*extra max_parallel"):
        bounds.parallel(_server(max_parallel=64), 20000)
    assert bounds.parallel(_server(), 16) == 16
    with pytest.raises(PreflightError, match="priority=normal .*harshest priority allowed, low.*Use idle or low"):
        bounds.priority(_server(), "normal")
    assert bounds.priority(_server(), "idle") == "idle" and bounds.priority(_server(max_priority="normal"), "normal")
    deployment.setenv("LASTLINE_MAX_READ_MB_PER_S", "50")
    assert bounds.read_cap(_server(), 0) == 50  # no cap of the run's own: the deployment's
    assert bounds.read_cap(_server(), 10) == 10
    with pytest.raises(PreflightError, match="max_read_mb_per_s=500 .*cap of 50 MB/s"):
        bounds.read_cap(_server(), 500)
    with pytest.raises(PreflightError, match=r"max_replica_lag=0 \(any lag\) .*3600"):
        bounds.replica_lag(_server(), 0)
    assert bounds.replica_lag(_server(max_replica_lag=0), 0) == 0
    assert bounds.replay_threads(_server(), 40000) == 16 and bounds.replay_threads(_server(), 4) == 4


# --- on real servers: the application's load --------------------------------------------------------------------


class LongSelect:
    """A report: a long SELECT SLEEP on its own connection; whether it ran to its end or was killed."""

    def __init__(self, server: Server, seconds: int, sql: str = "") -> None:
        self.conn = server.connect()
        self.id = self.conn.thread_id()
        self.result: object = None
        self.error: str | None = None
        self.sql = sql or f"SELECT SLEEP({seconds}) FROM {DB}.report WHERE id = 1"
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            cur = self.conn.cursor()
            cur.execute(self.sql)
            self.result = cur.fetchall()
        except Exception as exc:  # noqa: BLE001 - killed
            self.error = str(exc)

    def alive(self) -> bool:
        return self._t.is_alive()

    def __enter__(self) -> LongSelect:
        self._t.start()
        time.sleep(1.2)
        return self

    def __exit__(self, *exc) -> None:
        self._t.join(timeout=120)
        self.conn.close()


@pytest.fixture
def app(logical_source):
    """The application's tables on the logical source, and the connection marked protected (production)."""
    server = logical_source.server("t_lsource")
    with server.session() as cur:
        for sql in (f"CREATE DATABASE IF NOT EXISTS {DB}",
                    f"CREATE OR REPLACE TABLE {DB}.orders (id INT AUTO_INCREMENT PRIMARY KEY, t DATETIME(6)) ENGINE=InnoDB",
                    f"CREATE OR REPLACE TABLE {DB}.report (id INT PRIMARY KEY) ENGINE=InnoDB",
                    f"INSERT INTO {DB}.report VALUES (1)"):
            cur.execute(sql)
        cur.connection.commit()
    set_conn("t_cb_prod", logical_source, protected=True)
    yield server
    server.query(f"DROP DATABASE {DB}")


def _conf(dest: Path, **conf) -> dict:
    return {"source_conn_id": "t_cb_prod", "destination": f"file://{dest}", "databases": [DB], "chunk_rows": 1000, **conf}


def _backup(dest: Path, **conf) -> DumpResult:
    return logical_backup.dump(logical_backup.preflight(_conf(dest, **conf)))


@pytest.mark.parametrize(("name", "value"), [("NaN", "nan"), ("NaN, any case", "NaN"), ("infinity", "inf"),
                                           ("minus infinity", "-inf"), ("an overflow", "1e999"), ("a flag", True)])
def test_a_number_that_is_not_finite_is_refused_wherever_a_run_gives_one(name, value):
    """A review: NaN passed every minimum and every ceiling (max_replica_lag, lock_timeout, stream_minutes: a binlog
    archive run that never ended)."""
    from lastline.core.errors import ConfigError
    from lastline.core.plans import Conf

    for read in (lambda c: c.number("max_replica_lag", 300.0, minimum=0), lambda c: c.integer("parallel", 2, minimum=1),
                 lambda c: c.number("stream_minutes", 0.8, minimum=0.1, maximum=60)):
        with pytest.raises(ConfigError):
            read(Conf({"max_replica_lag": value, "parallel": value, "stream_minutes": value}))


def test_a_binlog_archive_run_cannot_be_told_to_stream_for_ever():
    from lastline.core.errors import ConfigError
    from lastline.core.plans import Conf

    with pytest.raises(ConfigError, match="at most 60"):
        Conf({"stream_minutes": 1e12}).number("stream_minutes", 0.8, minimum=0.1, maximum=60)


def test_killing_with_a_zero_guard_on_a_protected_source_is_refused_and_the_report_runs_on(app, deployment, tmp_path):
    """The review's case: kill_long_queries with long_query_guard 0 killed the application's queries. Refused at once
    on a protected source even where the deployment allows killing (and ftwrl); the SELECT runs to its end."""
    deployment.setenv("LASTLINE_ALLOW_KILL_LONG_QUERIES", "true")
    deployment.setenv("LASTLINE_ALLOW_FTWRL", "true")
    harsh = {"lock_method": "ftwrl", "long_query_guard": 0, "long_query_wait": 1, "kill_long_queries": True}
    with Writes(app, f"{DB}.orders", every=0.05) as writes, LongSelect(app, 6) as report:
        t0 = time.monotonic()
        with pytest.raises(PreflightError, match="kill_long_queries .*protected") as refused:
            _backup(tmp_path / "a", **harsh)
        assert isinstance(refused.value, Refusal) and time.monotonic() - t0 < 5
        # not protected: the floor refuses a guard of 0 (statements younger than it are never killed)
        with pytest.raises(PreflightError, match=r"long_query_guard=0 .*floor of 60 s"):
            _backup(tmp_path / "b", **{**harsh, "source_conn_id": "t_lsource"})
        assert report.alive()
    assert report.error is None and report.result == ((0,),), report.error
    assert writes.worst() < 1.0, f"an application write waited {writes.worst():.2f} s"


def test_where_killing_is_allowed_a_statement_younger_than_the_guard_is_never_killed(app, deployment, tmp_path):
    """The guard used to kill, at the end of its wait, every statement older than 1 s that held its lock, whatever
    long_query_guard said. Now it kills only statements past the guard: a 12 s batch UPDATE, 3 s old when the wait
    ends, runs to its end, the backup gives up naming it, and no write waits over 1 s meanwhile."""
    deployment.setenv("LASTLINE_ALLOW_KILL_LONG_QUERIES", "true")
    deployment.setenv("LASTLINE_ALLOW_FTWRL", "true")
    batch = f"UPDATE {DB}.report SET id = 1 WHERE id = 1 AND SLEEP(12) = 0"
    with Writes(app, f"{DB}.orders", every=0.05) as writes, LongSelect(app, 12, batch) as update:
        with pytest.raises(ServerError, match="did not take its lock") as gave_up:
            _backup(tmp_path, source_conn_id="t_lsource", lock_method="ftwrl", kill_long_queries=True, long_query_wait=2)
        assert update.alive() and f"id {update.id} by " in str(gave_up.value)
    assert update.error is None, update.error
    assert writes.worst() < 1.0, f"an application write waited {writes.worst():.2f} s"


def test_a_120_s_ftwrl_attempt_is_refused_and_the_report_tells_how_long_writes_really_waited(app, deployment, tmp_path):
    """lock_method ftwrl with lock_timeout 120 froze writes behind a long statement while the log said "every write
    held 0.01 s". Refused at once (the ceiling, then ftwrl where BACKUP STAGE exists). Where the deployment itself
    allows both, the backup's figure is the writes' real wait behind a batch UPDATE, the wait for the lock included."""
    harsh = {"lock_method": "ftwrl", "lock_timeout": 120}
    with Writes(app, f"{DB}.orders", every=0.05) as writes, LongSelect(app, 5) as report:
        t0 = time.monotonic()
        with pytest.raises(PreflightError, match=r"lock_timeout=120 .*ceiling of 0.5 s.*LASTLINE_MAX_LOCK_TIMEOUT"):
            _backup(tmp_path / "a", **harsh)
        with pytest.raises(PreflightError, match="lock_method=ftwrl .*LASTLINE_ALLOW_FTWRL"):
            _backup(tmp_path / "a", lock_method="ftwrl")
        assert time.monotonic() - t0 < 5 and report.alive()
    assert writes.worst() < 1.0, f"an application write waited {writes.worst():.2f} s"

    deployment.setenv("LASTLINE_ALLOW_FTWRL", "true")
    deployment.setenv("LASTLINE_MAX_LOCK_TIMEOUT", "120")  # the deployment's own choice: measured, not hidden
    batch = f"UPDATE {DB}.report SET id = 1 WHERE id = 1 AND SLEEP(4) = 0"  # FLUSH TABLES WITH READ LOCK waits for it
    with Writes(app, f"{DB}.orders", every=0.05) as writes, LongSelect(app, 4, batch):
        result = _backup(tmp_path / "c", **harsh, source_conn_id="t_lsource")
    assert writes.worst() > 2, "the control case: FLUSH TABLES WITH READ LOCK queues writes behind the SELECT"
    assert result.writes_blocked_seconds >= writes.worst() - 0.3, (result, writes.worst())
    assert result.commits_held_seconds < 1.0  # what the log used to call "every write held"
    storage = open_storage(f"file://{tmp_path / 'c'}")
    manifest = read_manifest(storage, result.manifest.split("/")[-2], "logical")
    page = backup_report.markdown(backup_report.build(storage, manifest, "logical", "u", "no archive"))
    shown = re.search(r"\*\*Writes blocked:\*\* up to ([0-9.]+) s", page)
    assert shown and abs(float(shown[1]) - result.writes_blocked_seconds) < 0.002, page


def test_parallel_400_is_refused_or_clamped_to_free_connections_and_the_application_still_connects(app, deployment, tmp_path):
    """parallel 400 took every connection of the source. Beyond the deployment's ceiling it is refused at once; with
    a ceiling that allows it, the dump takes only what max_connections leaves free beyond the reserve, and the
    application still opens connections throughout (no "Too many connections")."""
    with pytest.raises(PreflightError, match=r"parallel=400 .*ceiling of 16"):
        logical_backup.preflight(_conf(tmp_path, parallel=400))
    deployment.setenv("LASTLINE_MAX_PARALLEL", "1000")
    app.query("SET GLOBAL max_connections = 40")
    refused: list[str] = []
    stop = threading.Event()

    def connect_often() -> None:
        while not stop.is_set():
            try:
                app.connect().close()
            except Exception as exc:  # noqa: BLE001 - what the application would see
                refused.append(str(exc))
            time.sleep(0.05)

    t = threading.Thread(target=connect_often, daemon=True)
    was = app.query("SELECT @@GLOBAL.max_connections")[0][0]
    try:
        with app.session() as cur:
            cur.execute(f"INSERT INTO {DB}.orders (t) SELECT NOW(6) FROM {DB}.seq_1_to_20000")
            cur.connection.commit()
        plan = logical_backup.preflight(_conf(tmp_path, parallel=400))
        assert 1 <= plan.parallel <= 40 - 10 - 2, plan.parallel
        t.start()
        result = logical_backup.dump(plan)
        assert result.rows > 20000
    finally:
        stop.set()
        if t.is_alive():
            t.join(timeout=30)
        app.query(f"SET GLOBAL max_connections = {int(was)}")
    assert not refused, refused[:3]


def test_an_account_limit_bounds_the_workers_too(app, logical_source):
    """max_user_connections of the account: the workers never take its last connections."""
    with app.session() as cur:
        cur.execute("CREATE OR REPLACE USER cb_lim@'%' IDENTIFIED BY 'x' WITH MAX_USER_CONNECTIONS 6")
        cur.execute(f"GRANT SELECT ON {DB}.* TO cb_lim@'%'")
    try:
        limited = Server(conn_id="cb_lim", host=app.host, port=app.port, user="cb_lim", password="x")
        held = limited.connect()
        try:
            assert bounds.free_connections(limited, 50, own=2) == 6 - 1 - 2
        finally:
            held.close()
    finally:
        app.query("DROP USER cb_lim@'%'")


def test_parallel_20000_on_a_target_is_refused_before_a_thread_starts(app, logical_target, deployment, tmp_path):
    """parallel 20000 started 16k threads on a target: refused at once by the restore's and the point-in-time replay's
    preflights (the replay's applier threads have their own ceiling)."""
    _backup(tmp_path, source_conn_id="t_lsource")
    backup = f"file://{tmp_path}/latest"
    t0 = time.monotonic()
    with pytest.raises(PreflightError, match=r"parallel=20000 .*ceiling of 16.*LASTLINE_MAX_PARALLEL") as refused:
        logical_restore.preflight({"target_conn_id": "t_ltarget", "backup": backup, "parallel": 20000})
    assert isinstance(refused.value, Refusal) and time.monotonic() - t0 < 10
    from lastline.pitr import restore as pitr

    with pytest.raises(PreflightError, match="parallel=20000"):
        pitr.preflight({"target_conn_id": "t_ltarget", "destination": f"file://{tmp_path}", "parallel": 20000})
    with pytest.raises(PreflightError, match="parallel=20000"):
        physical_restore.preflight({"target_conn_id": "t_ltarget", "backup": backup, "parallel": 20000})


# --- a replica's pause: recorded, and resumed after a death ------------------------------------------------------------


@pytest.fixture(scope="module")
def pair(sandbox_root):
    """(primary, replica): a small table written on the primary, replicated by GTID."""
    primary, replica = Instance(sandbox_root, "cbprimary"), Instance(sandbox_root, "cbreplica")
    try:
        primary.create()
        replica.create()
        attach_replica(replica, primary)
        with primary.server().session() as cur:
            cur.execute(f"CREATE DATABASE {DB}")
            cur.execute(f"CREATE TABLE {DB}.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
            cur.execute(f"INSERT INTO {DB}.t (v) SELECT seq FROM {DB}.seq_1_to_1000")
            cur.connection.commit()
        set_conn("t_cbprimary", primary)
        set_conn("t_cbreplica", replica, replica=True)
        flavour.wait_for(primary.server(), replica.server(), 60)
        yield primary, replica
    finally:
        replica.destroy()
        primary.destroy()


def _sql_running(inst: Instance) -> str:
    with inst.server().session() as cur:
        return flavour.running(flavour.replica_status(cur)[0])[1]


PAUSE_AND_HANG = textwrap.dedent("""
    import sys, time
    from lastline import connections
    from lastline.replicas import backup_source as source
    from lastline.replicas import pauses
    server = connections.server("t_cbreplica")
    if sys.argv[1] == "snapshot":
        with source.paused(server):
            print("paused", flush=True)
            time.sleep(600)
    else:  # mariabackup --safe-slave-backup's pause, recorded around the stream
        with pauses.recorded(server, [""], "physical backup killed"):
            server.query("STOP SLAVE SQL_THREAD")
            print("paused", flush=True)
            time.sleep(600)
""")


def _die_while_paused(mode: str) -> None:
    """A worker that pauses the replica's SQL thread and is killed (-9) mid-pause: nothing of it runs again."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", PAUSE_AND_HANG, mode], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "paused"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _live_pauses(r: Server) -> int:
    try:
        return r.query("SELECT COUNT(*) FROM _lastline.replica_pauses WHERE holder IN (SELECT ID FROM "
                       "information_schema.PROCESSLIST)")[0][0]
    except MySQLdb.ProgrammingError:  # no record at all (lastline before pauses were recorded)
        return 0


@pytest.mark.parametrize("mode", ["snapshot", "stream"])
def test_a_pause_a_killed_worker_left_is_resumed_by_the_next_backup_with_an_alert(pair, tmp_path, caplog, mode):
    """A replica stayed paused after its worker died, and the next backup refused on lag. Now the pause is recorded
    on the replica (unlogged) before it starts: the next preflight starts the thread again, alerts, and the backup
    proceeds; a live pause (its session still there) and a thread an operator stopped are left alone."""
    primary, replica = pair
    r = replica.server("t_cbreplica")
    gtid_before = r.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]
    _die_while_paused(mode)
    deadline = time.monotonic() + 10  # the server notices the dead worker's connection in a moment
    while _live_pauses(r):
        assert time.monotonic() < deadline, "the killed worker's session is still there"
        time.sleep(0.1)
    assert _sql_running(replica) == "No"
    assert r.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0] == gtid_before, "the record reached the replica's binlog"
    with primary.server().session() as cur:
        cur.execute(f"INSERT INTO {DB}.t (v) VALUES (-1)")
        cur.connection.commit()
    conf = {"source_conn_id": "t_cbreplica", "destination": f"file://{tmp_path}", "databases": [DB]}
    plan = logical_backup.preflight(conf)  # today's code: "not within 300 s of its primary"
    assert _sql_running(replica) == "Yes"
    assert "started the SQL thread of default again" in caplog.text and "ALERT (replica_resumed" in caplog.text
    assert r.query("SELECT COUNT(*) FROM _lastline.replica_pauses")[0][0] == 0
    result = logical_backup.dump(plan)
    assert result.rows >= 1001 and _sql_running(replica) == "Yes"

    # a live pause is not another run's to resume; a thread stopped with no record stays as it is
    with replica_source.paused(r, what="a live backup"):
        assert replica_pauses.resume_abandoned(r) == [] and _sql_running(replica) == "No"
    assert _sql_running(replica) == "Yes"
    r.query("STOP SLAVE SQL_THREAD")
    try:
        assert replica_pauses.resume_abandoned(r) == [] and _sql_running(replica) == "No"
    finally:
        r.query("START SLAVE SQL_THREAD")


def test_the_physical_backup_of_a_replica_records_mariabackup_s_pause(pair, tmp_path):
    """mariabackup --safe-slave-backup pauses the SQL thread itself: the stream holds a record of it while it runs,
    and leaves none behind once it is done."""
    primary, replica = pair
    seen: list[int] = []
    r = replica.server("t_cbreplica")
    plan = physical_backup.preflight({"source_conn_id": "t_cbreplica", "destination": f"file://{tmp_path}", "compression": "zstd"})
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                seen.append(r.query("SELECT COUNT(*) FROM _lastline.replica_pauses")[0][0])
            except MySQLdb.Error:
                pass
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        physical_backup.finish(plan, physical_backup.stream(plan))
    finally:
        stop.set()
        t.join(timeout=10)
    assert max(seen) == 1, seen
    assert r.query("SELECT COUNT(*) FROM _lastline.replica_pauses")[0][0] == 0 and _sql_running(replica) == "Yes"
