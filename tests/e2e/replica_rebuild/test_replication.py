"""Node to node over a real sshd: replica rebuild in one stream, a stream cut mid-way, detach.

Two sandbox servers in real replication: `rsource` (log-bin, its own server_id, a replication user)
and `replica`, whose commands (service control, mbstream, prepare, file checks) all run over SSH.
"""
from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from conftest import _loaded, set_conn
from lastline import connections
from lastline.core.datadir import MARKER
from lastline.core.errors import IntegrityError, ReplicationError
from lastline_dev.compare import compare
from lastline_dev.sandbox import Instance

pytestmark = pytest.mark.e2e

REPL_PASSWORD = "repl-'pw\"#1"


@pytest.fixture(scope="module")
def rsource(sandbox_root):
    """A source with the store dataset, 60 MB of rows (a stream long enough to cut) and a replication user."""
    def repl_user(inst: Instance) -> None:
        conn = inst.server().connect()
        cur = conn.cursor()
        cur.execute("CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY %s", (REPL_PASSWORD,))
        cur.execute("GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1'")
        conn.close()

    inst = _loaded(sandbox_root, "rsource", Instance.load_store, lambda i: i.load_bulk(60, tables=2), repl_user)
    set_conn("t_rsource", inst)
    os.environ["AIRFLOW_CONN_T_REPL"] = json.dumps({
        "conn_type": "mysql", "host": "127.0.0.1", "port": inst.meta()["port"], "login": "repl", "password": REPL_PASSWORD,
    })
    yield inst
    inst.destroy()


@pytest.fixture(scope="module")
def replica(sandbox_root, sshd):
    """The replica: every command on it goes through the SSH connection t_ssh."""
    inst = Instance(sandbox_root, "replica")
    inst.create()
    set_conn("t_replica", inst, ssh_conn_id="t_ssh")
    yield inst
    inst.destroy()


def _conf(**kw) -> dict:
    conf = {"source_conn_id": "t_rsource", "target_conn_id": "t_replica", "replication_conn_id": "t_repl",
            "compression": "zstd-fast", "parallel": 2, "use_memory": 256 << 20, "catch_up_timeout": 120, "force": True,
            "max_mb_per_s": 0}
    conf.update(kw)
    return conf


def _sessions(sshd: dict) -> list[int]:
    """PIDs of the sshd processes serving connections (children of the test's sshd)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == sshd.pid:
            out.append(int(stat.parent.name))
    return out


def _accepted(sshd: dict) -> int:
    return sshd.log.read_text().count("Accepted publickey")


def _write(inst: Instance, value: str) -> None:
    conn = inst.server().connect()
    cur = conn.cursor()
    cur.execute("CREATE TABLE IF NOT EXISTS store.repl_probe (v VARCHAR(64) PRIMARY KEY)")
    cur.execute("INSERT INTO store.repl_probe VALUES (%s)", (value,))
    conn.commit()
    conn.close()


def _arrives(inst: Instance, value: str, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if inst.server().query("SELECT COUNT(*) FROM store.repl_probe WHERE v = %s", (value,))[0][0]:
                return True
        except Exception:  # noqa: BLE001 - the table may not have replicated yet
            pass
        time.sleep(0.2)
    return False


@pytest.mark.faults
def test_a_cut_stream_fails_clearly_never_starts_the_target_and_a_retry_succeeds(run_dag, rsource, replica, sshd, fault):
    cut: list[int] = []

    def cut_when_streaming() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not cut:
            if (replica.datadir / MARKER).exists() and sum(
                f.stat().st_size for f in replica.datadir.rglob("*") if f.is_file()
            ) > 8_000_000:
                for pid in _sessions(sshd):
                    os.kill(pid, signal.SIGKILL)
                    cut.append(pid)
            time.sleep(0.02)

    watcher = threading.Thread(target=cut_when_streaming, daemon=True)
    watcher.start()
    # capped at 4 MB/s on the wire (pv -L), the stream lasts long enough to be cut in the middle
    state, tis, logs = run_dag("replica_rebuild", _conf(compression="pigz", max_mb_per_s=4))
    watcher.join()
    assert cut, "the watcher never saw the stream reach the replica"
    assert state == "failed" and tis["stream"] == "failed", tis
    assert tis["prepare"] != "success" and tis["start_target"] != "success"
    assert "ssh to t_ssh" in logs and "was not started" in logs and MARKER in logs
    assert not replica.server().answers(), "the replica was started on partial data"
    assert (replica.datadir / MARKER).exists()
    seen = next(line for line in logs.splitlines() if "ssh to t_ssh" in line)
    from lastline.mariabackup.target_datadir import start_server

    with pytest.raises(IntegrityError, match="unfinished restore"):
        start_server(connections.server("t_replica"))

    before = _accepted(sshd)
    set_conn("t_rsource_ssh", rsource, ssh_conn_id="t_ssh")  # the retry runs the source's side over SSH too
    state, tis, logs = run_dag("replica_rebuild", _conf(source_conn_id="t_rsource_ssh"))
    assert state == "success", tis
    assert _accepted(sshd) - before >= 2, "the replica's commands did not go through SSH"  # shared master + stream
    assert "prepare ok on t_ssh" in logs and "moved the old datadir contents aside" not in logs  # kept from the cut run
    assert "equal at both ends" in logs and "MASTER_USE_GTID=slave_pos" in logs
    assert "stream: [t_ssh (" in logs  # mariabackup ran on the source's SSH host
    assert REPL_PASSWORD not in logs
    assert not (replica.datadir / MARKER).exists()
    assert not list(replica.root.glob("replica/data.lastline-aside-*")), "the old datadir was not removed after verify"
    assert compare(rsource.server(), replica.server()) == []
    page = Path(re.search(r"report: file://(\S+/replica_rebuild\.md)", logs)[1]).read_text().splitlines()
    assert re.fullmatch(r"# Replica rebuild of t_replica from t_rsource_ssh: attached and verified, [0-9,.]+ MB "
                        r"streamed, [0-9,.]+ s in all", page[0]), page[:3]
    gtid = re.search(r" from GTID (\S+) \(MASTER_USE_GTID=slave_pos\); replication started", logs)
    assert page[2].startswith("**Streamed t_rsource_ssh's datadir into t_replica in one pipeline (") and (
        f"attached it at GTID {gtid[1]} and it caught up" in page[2]) and "a marker row written on the source" in page[2]
    fault("SSH link cut mid-stream", seen.split("PipelineError: ")[-1],
          "replica not started on partial data; the retry rebuilt it: CHECKSUM TABLE equal to the source's")

    _write(rsource, "after-rebuild")
    assert _arrives(replica, "after-rebuild", 30), "a write on the source did not replicate"

    # a retried attach (after START SLAVE went through) must not rewind gtid_slave_pos and replay
    from lastline.replicas import flavour

    flavour.attach(connections.server("t_replica"), connections.server("t_repl"), {"gtid": "0-1-1"}, True)
    _write(rsource, "after-retried-attach")
    assert _arrives(replica, "after-retried-attach", 30)
    conn = replica.server().connect()
    cur = conn.cursor()
    assert flavour.broken(flavour.replica_status(cur)[0]) is None
    conn.close()


def test_detach_refuses_an_option_file_that_names_a_source(rsource, replica):
    from lastline.replication import detach as replica_detach

    stale = replica.conf_d / "zz-old-master.cnf"
    stale.write_text("[client]\nmaster-host=ignored.example\n[mysqld]\n# old setup\nloose_master_host = 10.9.8.7\nmaster-password=secret-pw\n")
    try:
        with pytest.raises(ReplicationError) as err:
            replica_detach.check("t_replica")
        text = str(err.value)
        assert f"{stale}:5 [mysqld]: master-host=10.9.8.7" in text and f"{stale}:6" in text
        assert "secret-pw" not in text and "ignored.example" not in text and "Nothing was changed" in text
    finally:
        stale.unlink()


def test_detach_cuts_the_replica_off_for_good(run_dag, rsource, replica):
    _write(rsource, "before-detach")
    assert _arrives(replica, "before-detach", 30), "the replica is not replicating before the detach"
    state, tis, logs = run_dag("replica_detach", {"target_conn_id": "t_replica", "restart": True, "read_only_off": True})
    assert state == "success", tis
    assert "RESET SLAVE ALL" in logs and "gtid_slave_pos = ''" in logs and "still detached" in logs
    assert replica.server().query("SELECT @@read_only")[0][0] == 0

    _write(rsource, "after-detach")
    assert not _arrives(replica, "after-detach", 3), "a write arrived after the detach"
    replica.stop()
    replica.start()
    conn = replica.server().connect()
    cur = conn.cursor()
    cur.execute("SHOW ALL SLAVES STATUS")
    assert cur.fetchall() == ()
    cur.execute("SELECT @@gtid_slave_pos")
    assert cur.fetchone()[0] == ""
    conn.close()
    _write(rsource, "after-restart")
    assert not _arrives(replica, "after-restart", 3), "the restarted replica re-attached to its source"
