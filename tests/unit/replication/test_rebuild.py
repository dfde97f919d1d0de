"""A replica's rebuild (lastline.replication.rebuild) on this host, with the real mariabackup: the suite's shared source
and a small replica of this module's own (started here, stopped by its PID). What preflight refuses (each refusal named,
nothing touched) and plans, the replication user's check, the stream's stages, then one real rebuild step by step
(stop, stream, a retried stream, prepare, start, attach, a retried attach, catch up, verify, finish, report), and the
catch-up sensor on a replica that lags or whose SQL thread stopped."""
from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from conftest import set_conn
from lastline import connections
from lastline.core.datadir import MARKER
from lastline.core.errors import ConfigError, PreflightError, ProtectedTargetError, ReplicationError
from lastline.core.servers import Server
from lastline.core.sql import quote_ident
from lastline.replication import rebuild
from lastline.replication.plans import Attached, RebuildPlan
from lastline_dev.compare import compare
from lastline_dev.sandbox import Instance, free_port

REPL_PASSWORD = "rb-'pw\"#1"
USERS = {  # name: grant, each a replication user on the source this module makes and drops
    "ll_rb_slave": "REPLICATION SLAVE ON *.*",
    "ll_rb. all": "ALL PRIVILEGES ON *.*",
    "ll_rb_select": "SELECT ON *.*",
}
PROBE_DB = "ll_rb`probe db"


def _root(inst: Instance) -> Server:
    return Server(conn_id="root", socket=str(inst.sock), user="root")


def _account(name: str) -> str:
    return f"'{name}'@'127.0.0.1'"


def _repl_conn(conn_id: str, source: Instance, user: str, password: str = REPL_PASSWORD) -> None:
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps({
        "conn_type": "mysql", "host": "127.0.0.1", "port": source.meta()["port"], "login": user, "password": password})


@pytest.fixture(scope="module")
def users(source):
    with _root(source).session() as cur:
        for name, grant in USERS.items():
            cur.execute(f"CREATE USER {_account(name)} IDENTIFIED BY %s", (REPL_PASSWORD,))
            cur.execute(f"GRANT {grant} TO {_account(name)}")
    _repl_conn("t_rb_repl", source, "ll_rb_slave")
    yield source
    with _root(source).session() as cur:
        for name in USERS:
            cur.execute(f"DROP USER IF EXISTS {_account(name)}")


@pytest.fixture(scope="module")
def replica(sandbox_root, users):
    """This module's replica: a fresh small server (its own server_id), rebuilt from the source by the tests."""
    inst = Instance(sandbox_root, "rb_replica")
    inst.create()
    set_conn("t_rb_replica", inst)
    yield inst
    inst.destroy()  # stops it by its own PID


def _conf(**kw) -> dict:
    conf = {"source_conn_id": "t_source", "target_conn_id": "t_rb_replica", "replication_conn_id": "t_rb_repl",
            "force": True, "parallel": 2, "use_memory": "128M", "catch_up_timeout": 60}
    return {k: v for k, v in {**conf, **kw}.items() if v is not None}


@pytest.mark.parametrize("user, password, refused", [
    ("ll_rb_slave", REPL_PASSWORD, None),
    ("ll_rb. all", REPL_PASSWORD, None),
    ("ll_rb_select", REPL_PASSWORD, r"replication user 'll_rb_select' lacks REPLICATION SLAVE on the source: "
                                    r"GRANT REPLICATION SLAVE ON \*\.\* TO 'll_rb_select'@'<replica host>'"),
    ("ll_rb_slave", "not-the-password", "replication connection 't_rb_check': .*wrong user or password"),
], ids=["REPLICATION SLAVE", "ALL PRIVILEGES (a name with a dot and a space)", "SELECT only", "wrong password"])
def test_check_replication_user(users, user, password, refused):
    _repl_conn("t_rb_check", users, user, password)
    repl = connections.server("t_rb_check")
    if refused:
        with pytest.raises(PreflightError, match=refused):
            rebuild.check_replication_user(repl)
    else:
        assert rebuild.check_replication_user(repl) is None


def test_a_source_this_worker_cannot_reach_is_only_warned_about(caplog):
    """The source may answer only the replica's network: an unreachable source is a warning, the attach step tells."""
    unreachable = Server(conn_id="t_rb_far", host="127.0.0.1", port=free_port(), user="repl", password="x")
    with caplog.at_level("WARNING"):
        assert rebuild.check_replication_user(unreachable) is None
    assert "could not check the replication user from this worker" in caplog.text


def _set_server_id(inst: Instance, value: int | None) -> int:
    with _root(inst).session() as cur:
        cur.execute("SELECT @@GLOBAL.server_id")
        before = int(cur.fetchone()[0])
        if value is not None:
            cur.execute("SET GLOBAL server_id = %s", (value,))
    return before


@pytest.mark.parametrize("conf, server_ids, error, message", [
    ({"target_conn_id": "t_rb_prod"}, None, ProtectedTargetError, "is marked protected .*: lastline never rebuilds it"),
    ({"target_conn_id": "t_rb_drill"}, None, ProtectedTargetError, "is a drill server"),
    ({"target_conn_id": "t_source"}, None, PreflightError, "has the source's server_id .*: give it its own"),
    ({}, "target twin", PreflightError, "has the source's server_id .*its events would be dropped as its own"),
    ({"force": False}, None, PreflightError, "is not empty, and no person is asked to approve replacing data"),
    ({"replication_conn_id": "t_rb_repl_select"}, None, PreflightError, "lacks REPLICATION SLAVE on the source"),
    ({"compression": "lz4"}, None, PreflightError, "unknown compression 'lz4'"),
    ({"parallel": 17}, None, PreflightError, "parallel=17 is harsher than the ceiling of 16"),
    ({"replication_conn_id": None}, None, ConfigError, "the Param replication_conn_id is required"),
    ({"source_conn_id": "t_rb_no_datadir"}, None, ConfigError, "has no 'datadir' extra"),
], ids=["protected target", "a drill server", "the source as its own target", "a target with the source's server_id",
"data without force", "a replication user without the grant", "unknown compression",
        "parallel above the ceiling", "no replication connection", "a source without datadir"])
def test_preflight_refuses_and_touches_nothing(source, replica, conf, server_ids, error, message):
    set_conn("t_rb_prod", replica, protected=True)
    set_conn("t_rb_drill", replica, role="drill")
    set_conn("t_rb_no_datadir", source, datadir="")
    _repl_conn("t_rb_repl_select", source, "ll_rb_select")
    pid, source_id = replica.pid(), _set_server_id(source, None)
    restore: list[tuple[Instance, int]] = []
    if server_ids == "target twin":
        restore.append((replica, _set_server_id(replica, source_id)))
    try:
        with pytest.raises(error, match=message):
            rebuild.preflight(_conf(**conf))
    finally:
        for inst, value in restore:
            _set_server_id(inst, value)
    assert replica.pid() == pid and not (replica.datadir / MARKER).exists()


def test_preflight_plans(source, replica):
    plan = rebuild.preflight(_conf(max_mb_per_s=5, catch_up_timeout=90))
    assert (plan.source_conn_id, plan.target_conn_id, plan.replication_conn_id) == ("t_source", "t_rb_replica", "t_rb_repl")
    assert (plan.compression, plan.parallel, plan.use_memory, plan.force, plan.at_risk) == ("zstd-fast", 2, 128 << 20,
                                                                                            True, None)
    assert (plan.source_datadir, plan.datadir, plan.datadir_state) == (str(source.datadir), str(replica.datadir), "data")
    assert plan.source_version == source.server().variables("version")["version"]
    assert (plan.gtid, plan.max_mb_per_s, plan.catch_up_timeout, plan.priority) == (True, 5.0, 90.0, "low")
    assert RebuildPlan.of(plan.to_dict()) == plan


def test_preflight_where_a_person_approves_lists_what_is_at_risk(replica):
    set_conn("t_rb_ask", replica, approval=True)
    plan = rebuild.preflight(_conf(target_conn_id="t_rb_ask", force=None))
    assert plan.force and plan.at_risk and plan.at_risk["force"] is False
    assert plan.at_risk["datadir"] == str(replica.datadir) and "t_rb_ask" in plan.at_risk["target"]


@pytest.mark.parametrize("compression, mb_per_s, names", [
    ("zstd-fast", 0, ["mariabackup", "compress", "sent", "received", "decompress", "mbstream"]),
    ("pigz", 4, ["mariabackup", "compress", "throttle", "sent", "received", "decompress", "mbstream"]),
    ("none", 0, ["mariabackup", "sent", "received", "mbstream"]),
], ids=["zstd-fast", "pigz, capped", "uncompressed"])
def test_stream_stages(source, replica, compression, mb_per_s, names):
    plan = rebuild.preflight(_conf(compression=compression, max_mb_per_s=mb_per_s))
    stages = rebuild.stream_stages(source.server(), replica.server(), "/nonexistent/opt.cnf", plan)
    assert [s.name for s in stages] == names
    by_name = {s.name: s for s in stages}
    assert "--defaults-extra-file=/nonexistent/opt.cnf" in by_name["mariabackup"].argv
    assert by_name["mbstream"].argv[-2:] == ["-C", str(replica.datadir)]
    if mb_per_s:
        assert by_name["throttle"].argv == ["pv", "-q", "-L", "4000000"]


def test_stream_refuses_a_running_target(replica):
    plan = rebuild.preflight(_conf())
    with pytest.raises(PreflightError, match="is running: stop it before streaming into its datadir"):
        rebuild.stream(plan)
    assert replica.pid() is not None and not (replica.datadir / MARKER).exists()


@pytest.fixture(scope="module")
def rebuilt(source, replica):
    """One real rebuild of the replica from the source, with a retried stream and a retried attach on the way;
    returns (plan, each step's result)."""
    plan = rebuild.preflight(_conf())
    stop = rebuild.stop_target(plan)
    assert replica.pid() is None
    first = rebuild.stream(plan)
    assert first.aside and Path(first.aside).is_dir() and (replica.datadir / MARKER).exists()
    streamed = rebuild.stream(plan)  # a retry: starts again on its own partial datadir, keeps the first one's aside
    assert streamed.aside == first.aside and streamed.bytes > 0 and len(streamed.crc32) > 0
    assert streamed.binlog_file and streamed.binlog_position and streamed.gtid
    prepared = rebuild.prepare(plan)
    assert not (replica.datadir / MARKER).exists()
    started = rebuild.start_target(plan)
    attached = rebuild.attach(plan, streamed)
    assert (attached.gtid, attached.position) == (True, streamed.gtid)
    again = rebuild.attach(plan, streamed)  # a retried attach leaves the running replication as it is
    assert again.gtid and again.position == attached.position
    deadline, caught = time.monotonic() + 60, None
    while caught is None and time.monotonic() < deadline:
        caught = rebuild.caught_up(plan, attached, within=2)
    assert caught is not None and caught.seconds >= 0
    marker = rebuild.verify(plan, timeout=60)
    yield plan, {"stop": stop, "stream": streamed, "prepare": prepared, "start": started, "attach": attached,
                 "catch_up": caught, "verify": marker}
    with _root(replica).session() as cur:
        cur.execute("STOP ALL SLAVES")
    with _root(source).session() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {rebuild.MARKER_TABLE}")  # verify's marker rows: the source is shared


def test_a_real_rebuild_replicates_and_holds_the_sources_data(rebuilt, source, replica):
    plan, steps = rebuilt
    token = steps["verify"].marker
    assert replica.server().query(f"SELECT replica FROM {rebuild.MARKER_TABLE} WHERE token = %s", (token,)) == [
        ("t_rb_replica",)]
    with _root(source).session() as cur:
        cur.execute(f"CREATE DATABASE {quote_ident(PROBE_DB)}")
        cur.execute(f"CREATE TABLE {quote_ident(PROBE_DB)}.t (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO {quote_ident(PROBE_DB)}.t VALUES (1), (2)")
        cur.connection.commit()
    try:
        rebuild.verify(plan, timeout=60)  # waits until the replica applied what the source wrote
        assert replica.server().query(f"SELECT COUNT(*) FROM {quote_ident(PROBE_DB)}.t") == [(2,)]
        assert compare(source.server(), replica.server()) == []
    finally:
        with _root(source).session() as cur:
            cur.execute(f"DROP DATABASE {quote_ident(PROBE_DB)}")


def test_finish_removes_only_what_the_stream_moved_aside(rebuilt, tmp_path):
    plan, steps = rebuilt
    aside = Path(steps["stream"].aside)
    assert aside.is_dir()
    rebuild.finish(plan, dataclasses.replace(steps["stream"], aside=None), steps["verify"])
    assert aside.is_dir()  # none named: nothing removed
    rebuild.finish(plan, steps["stream"], steps["verify"])
    assert not aside.exists()


def test_caught_up_waits_on_a_replica_that_lags_and_fails_past_its_timeout(rebuilt, source, replica):
    """A lock on the replica holds its SQL thread (running, not applying) behind a write of the source."""
    plan, steps = rebuilt
    with _root(source).session() as cur:
        cur.execute(f"CREATE DATABASE {quote_ident(PROBE_DB)}")
        cur.execute(f"CREATE TABLE {quote_ident(PROBE_DB)}.held (id INT PRIMARY KEY)")
    try:
        rebuild.verify(plan, timeout=60)
        lock = _root(replica).connect()
        held = lock.cursor()
        held.execute(f"LOCK TABLES {quote_ident(PROBE_DB)}.held WRITE")
        try:
            with _root(source).session() as cur:
                cur.execute(f"INSERT INTO {quote_ident(PROBE_DB)}.held VALUES (1)")
                cur.connection.commit()
            now = Attached(0.1, True, time.time(), steps["attach"].position)
            assert rebuild.caught_up(plan, now, within=1) is None  # not yet: the sensor pokes again
            past = Attached(0.1, True, time.time() - 120, steps["attach"].position)
            with pytest.raises(ReplicationError, match=r"did not catch up with .* within catch_up_timeout \(60 s\)"):
                rebuild.caught_up(plan, past, within=1)
        finally:
            held.execute("UNLOCK TABLES")
            lock.close()
        assert rebuild.caught_up(plan, now, within=30) is not None  # the lock gone, it applies
    finally:
        with _root(source).session() as cur:
            cur.execute(f"DROP DATABASE {quote_ident(PROBE_DB)}")


def test_caught_up_fails_at_once_when_a_replication_thread_stopped(rebuilt, source, replica):
    plan, steps = rebuilt
    assert rebuild.caught_up(plan, steps["attach"], within=30) is not None  # what earlier tests wrote, applied first
    with _root(replica).session() as cur:
        cur.execute("STOP SLAVE SQL_THREAD")
    try:
        assert rebuild.caught_up(plan, steps["attach"], within=1) is not None  # nothing written since: nothing to apply
        with _root(source).session() as cur:
            cur.execute(f"CREATE DATABASE {quote_ident(PROBE_DB)}")  # now there is
        with pytest.raises(ReplicationError, match=r"replication threads not running \(IO Yes, SQL No\)"):
            rebuild.caught_up(plan, steps["attach"], within=1)
    finally:
        with _root(replica).session() as cur:
            cur.execute("START SLAVE SQL_THREAD")
        with _root(source).session() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(PROBE_DB)}")


def test_report_gives_the_verdict_first_and_saves_it(rebuilt, tmp_path, monkeypatch):
    monkeypatch.setenv("LASTLINE_REPORT_DIR", str(tmp_path / "reports"))
    monkeypatch.delenv("LASTLINE_REPORTS", raising=False)
    plan, s = rebuilt
    out = rebuild.report(plan, s["stop"], s["stream"], s["prepare"], s["start"], s["attach"], s["catch_up"], s["verify"],
                         run_id="manual__unit")
    assert list(out["steps"]) == ["stop", "stream", "prepare", "start", "attach", "catch_up", "verify"]
    assert out["seconds"] == pytest.approx(sum(float(v["seconds"]) for v in out["steps"].values()), abs=0.01)
    folder = tmp_path / "reports" / "replica_rebuild" / "manual__unit"
    page = (folder / "replica_rebuild.md").read_text().splitlines()
    assert page[0].startswith("# Replica rebuild of t_rb_replica from t_source: attached and verified, ")
    assert page[2].startswith(f"**Streamed t_source's datadir into t_rb_replica in one pipeline ({s['stream'].bytes:,} "
                              f"bytes, CRC-32 {s['stream'].crc32} equal at both ends)")
    assert f"attached it at GTID {s['attach'].position} and it caught up" in page[2]
    assert json.loads((folder / "replica_rebuild.json").read_text())["target"] == "t_rb_replica"

