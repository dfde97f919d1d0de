"""Trust boundaries: what a backup folder, a connection or a refusal can and cannot make lastline do."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from conftest import set_conn, tamper_schema
from lastline import connections
from lastline.backups import BackupRef
from lastline.core.errors import ConfigError, IntegrityError, PipelineError, PreflightError, ProtectedTargetError, ServerError
from lastline.logical.backup import stages as logical_backup
from lastline.logical.restore import stages as logical_restore
from lastline.manifest import PhysicalManifest, TableInfo, read_manifest, write_manifest
from lastline.physical import restore as physical_restore
from lastline.physical.plans import RestorePlan
from lastline.storage import open_storage

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def store_backup(logical_source, tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("trust")
    logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["store"]}))
    return dest


@pytest.fixture
def sentinel(logical_target):
    """A database on the target that no test here may touch."""
    server = logical_target.server()
    server.query("CREATE DATABASE IF NOT EXISTS trust_sentinel")
    server.query("CREATE TABLE IF NOT EXISTS trust_sentinel.t (id INT PRIMARY KEY)")
    conn = server.connect()
    conn.cursor().execute("REPLACE INTO trust_sentinel.t VALUES (42)")
    conn.commit()
    conn.close()
    yield server
    assert server.query("SELECT id FROM trust_sentinel.t") == [(42,)]


def _conf(dest: Path, **kw) -> dict:
    return {"target_conn_id": "t_ltarget", "backup": f"file://{dest}/latest", "databases": ["store"], "force": True, **kw}


def test_connections_run_one_statement_and_read_no_local_file(sentinel):
    conn = sentinel.connect()
    try:
        cur = conn.cursor()
        with pytest.raises(Exception) as err:  # a second statement is a syntax error, not a second statement
            cur.execute("SELECT 1; DROP DATABASE trust_sentinel")
        assert err.value.args[0] == 1064
        with pytest.raises(Exception) as err:  # LOCAL INFILE only on the loader's connections
            cur.execute("LOAD DATA LOCAL INFILE '/proc/self/environ' INTO TABLE trust_sentinel.t")
        assert "LOCAL" in str(err.value) or err.value.args[0] in (1148, 2068, 4166)
    finally:
        conn.close()


@pytest.mark.parametrize("change, refusal", [
    (lambda s: s["tables"].append({"schema": "store", "name": "loot",
                                   "create": "LOAD DATA LOCAL INFILE '/proc/self/environ' INTO TABLE store.loot"}),
     "is not a CREATE of that table"),
    (lambda s: s["tables"][0].update(create=s["tables"][0]["create"].replace("CREATE TABLE ", "CREATE TABLE `trust_sentinel`.", 1)),
     "is not a CREATE of that table"),
    (lambda s: s["tables"][0].update(create=s["tables"][0]["create"] + "; DROP DATABASE trust_sentinel"),
     "more than one statement"),
    (lambda s: s["tables"][0].update(create=s["tables"][0]["create"] + " AS SELECT * FROM trust_sentinel.t"),
     "reads other tables"),
    (lambda s: s["views"][0].update(create="DROP DATABASE trust_sentinel"), "is not a CREATE of that view"),
    (lambda s: s["triggers"][0].update(table="film"), "is not a CREATE of that trigger"),
    (lambda s: s["databases"][0].update(charset="utf8mb4 COLLATE x; DROP DATABASE trust_sentinel; --"), "is not a name"),
    (lambda s: s["routines"][0].update(collation_connection="x'; DROP DATABASE trust_sentinel; --"), "is not a character set"),
    # the review's: a quote inside a comment hid this SELECT from a pattern check; MERGE's UNION; DATA DIRECTORY
    # (which MariaDB lets any account with CREATE set); a held-back index line carrying a second clause
    (lambda s: s["tables"][0].update(create=s["tables"][0]["create"] + " /* ' */ SELECT * FROM mysql.user /* ' */"),
     "reads other tables"),
    (lambda s: s["tables"][0].update(create=s["tables"][0]["create"].replace("ENGINE=InnoDB", "ENGINE=MRG_MyISAM UNION=(`trust_sentinel`.`t`)")),
     "reaches other tables"),
    (lambda s: s["tables"][0].update(create=s["tables"][0]["create"] + " DATA DIRECTORY='/tmp'"), "places files outside the datadir"),
    (lambda s: s["tables"][0].update(create=s["tables"][0]["create"].replace(
        "PRIMARY KEY (`actor_id`),", "PRIMARY KEY (`actor_id`),\n  KEY `k` (`last_name`), RENAME TO `trust_sentinel`.`planted`,")),
     "not a column, key or constraint"),
], ids=["load-data-local", "other-database", "second-statement", "create-select", "view", "trigger-table", "charset", "collation",
        "select-hidden-by-a-comment", "merge-union", "data-directory", "index-line-with-rename"])
def test_a_schema_statement_that_is_not_its_own_create_is_refused_before_anything_is_touched(
        store_backup, sentinel, tmp_path, change, refusal):
    copy = tamper_schema(store_backup, tmp_path / "copy", change)
    t0 = time.monotonic()
    with pytest.raises(IntegrityError, match=refusal):
        logical_restore.preflight(_conf(copy))
    assert time.monotonic() - t0 < 30


def test_storage_keys_stay_inside_their_folder(tmp_path, store_backup):
    storage = open_storage(f"file://{tmp_path}")
    for key in ("/etc/passwd", "../x", "a//b", "a/./b", ""):
        with pytest.raises(IntegrityError, match="refusing storage key"):
            storage.read_bytes(key)
    # a manifest moved into another folder is not trusted: its ids must name the folder it is in
    (folder,) = [p for p in store_backup.iterdir() if p.is_dir()]
    shutil.copytree(folder, tmp_path / "20300101T000000Z")
    with pytest.raises(IntegrityError, match="is in folder '20300101T000000Z'"):
        read_manifest(open_storage(f"file://{tmp_path}"), "20300101T000000Z", "logical")


def test_a_manifest_naming_files_outside_its_layout_is_refused(tmp_path, store_backup):
    dest = tmp_path / "copy"
    shutil.copytree(store_backup, dest)
    (folder,) = [p for p in dest.iterdir() if p.is_dir()]
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["tables"][0]["chunks"][0]["file"] = "data/../../../../etc/passwd"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IntegrityError, match="outside the backup's own layout"):
        read_manifest(open_storage(f"file://{dest}"), folder.name, "logical")


def test_physical_verify_quotes_names_from_the_manifest(sentinel, tmp_path):
    """A real table named we`ird verifies; a crafted name cannot end the statement and run another."""
    sentinel.query("CREATE DATABASE IF NOT EXISTS trust_q")
    sentinel.query("CREATE TABLE IF NOT EXISTS trust_q.`we``ird` (id INT PRIMARY KEY)")
    version = sentinel.query("SELECT @@version")[0][0]
    storage = open_storage(f"file://{tmp_path}")
    tables = [TableInfo("trust_q", "we`ird", "InnoDB", 0, 0)]
    m = PhysicalManifest(
        backup_id="20300101T000000Z", source_conn_id="x", server_version=version, tool_version="x", artifact="a",
        compression="zstd", bytes=0, sha256="", started_at="", finished_at="", seconds=0, mb_per_s=0, parallel=1,
        datadir_bytes=0, tables=tables,
    )
    write_manifest(storage, m)
    plan = RestorePlan(target_conn_id="t_ltarget", backup=BackupRef.parse(f"file://{tmp_path}/20300101T000000Z", "physical"))
    assert physical_restore.verify(plan)  # the real, awkward name passes
    m.tables.append(TableInfo("trust_sentinel", "t`; DROP DATABASE trust_sentinel; -- ", "InnoDB", 0, 0))
    write_manifest(storage, m)
    with pytest.raises(IntegrityError, match="DROP DATABASE trust_sentinel"):  # reported as a missing table
        physical_restore.verify(plan)
    sentinel.query("DROP DATABASE trust_q")


def test_refusals_are_airflow_fail_now_and_transient_errors_are_not():
    from airflow.sdk.exceptions import AirflowFailException

    for refusal in (PreflightError, ProtectedTargetError, IntegrityError, ConfigError):
        assert issubclass(refusal, AirflowFailException), refusal
    for transient in (ServerError, PipelineError):
        assert not issubclass(transient, AirflowFailException), transient


def test_a_refusal_fails_the_run_at_once_despite_retries(airflow_db, logical_target, store_backup, monkeypatch):
    """Retries 2, 300 s apart: a protected target is still refused in seconds, on the first try."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    from conftest import ROOT, set_conn

    monkeypatch.setenv("LASTLINE_RETRIES", "2")
    monkeypatch.setenv("LASTLINE_RETRY_DELAY_SECONDS", "300")
    set_conn("t_lprotected", logical_target, protected=True)
    dag = DagBag(dag_folder=str(ROOT / "dags" / "logical_restore.py")).get_dag("logical_restore")
    assert dag.default_args["retries"] == 2
    t0 = time.monotonic()
    dr = dag.test(run_conf={**_conf(store_backup, target_conn_id="t_lprotected"), "redo_log_bytes": 128 << 20,
                            "parallel": 2, "tune": True, "restart_allowed": False, "defer_indexes": True, "aws_conn_id": None})
    took = time.monotonic() - t0
    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id="logical_restore", run_id=dr.run_id, task_id="preflight").one()
        assert (str(ti.state), ti.try_number) == ("failed", 1)
    assert str(dr.state) == "failed" and took < 120


def test_latest_and_prune_survive_an_unreadable_manifest_and_touch_only_backup_ids(tmp_path, caplog):
    from datetime import timedelta

    from lastline.manifest import MANIFEST, complete_backups, new_backup_id, prune_backups, resolve_backup

    storage = open_storage(f"file://{tmp_path}")
    good = ["20250101T000000Z", "20250102T000000Z-0a1b2c"]
    for b in good:
        storage.write_bytes(f"{b}/{MANIFEST}", json.dumps({"kind": "logical", "backup_id": b}).encode())
    storage.write_bytes(f"20250103T000000Z/{MANIFEST}", b"")  # 0 bytes: a broken copy, say
    keep_me = "20250101T000000Z-before-migration-DO-NOT-DELETE"
    storage.write_bytes(f"{keep_me}/{MANIFEST}", b"{}")
    storage.write_bytes("20240101T000000Z/data/x", b"old and incomplete")
    caplog.set_level("WARNING")
    assert complete_backups(storage, "logical") == good
    assert resolve_backup(f"file://{tmp_path}/latest", kind="logical")[1] == good[-1]
    assert "20250103T000000Z/manifest.json is unreadable" in caplog.text
    deleted = prune_backups(storage, "logical", keep=1, grace=timedelta(hours=1))
    assert deleted == ["20240101T000000Z", "20250101T000000Z"]
    assert sorted(storage.list_backups()) == sorted(["20250102T000000Z-0a1b2c", "20250103T000000Z", keep_me])
    # ids of backups started in the same second differ, and never name a folder that exists
    same_second = {new_backup_id(taken=storage.list_backups()) for _ in range(200)}
    assert len(same_second) == 200 and not same_second & set(storage.list_backups())


def test_every_path_that_writes_honours_protected_and_the_source_is_refused_unless_named(
        logical_source, logical_target, store_backup):
    from conftest import set_conn
    from lastline.replication import detach as replica_detach

    set_conn("t_lprotected", logical_target, protected=True)
    with pytest.raises(ProtectedTargetError, match="never detaches, restarts or opens it for writes"):
        replica_detach.check("t_lprotected")
    # the backup came from t_lsource: restoring into that very server is refused...
    with pytest.raises(ProtectedTargetError, match="is the server this backup was taken from"):
        logical_restore.preflight(_conf(store_backup, target_conn_id="t_lsource"))
    # ...unless the Param names it; then the ordinary rules apply (store exists there: force needed)
    with pytest.raises(PreflightError, match="already exist"):
        logical_restore.preflight(_conf(store_backup, target_conn_id="t_lsource", force=False, restore_into_source="t_lsource"))


def test_lastline_s_own_schema_is_never_backed_up_nor_restored(logical_source, logical_target, store_backup):
    logical_source.server().query("CREATE DATABASE IF NOT EXISTS _lastline")
    with pytest.raises(PreflightError, match="lastline's own _lastline are not dumped"):
        logical_backup.preflight({"source_conn_id": "t_lsource", "destination": "file:///tmp", "databases": ["_lastline"]})
    with pytest.raises(PreflightError, match="never restored"):
        logical_restore.preflight(_conf(store_backup, databases=["_lastline"]))
    plan = logical_backup.preflight({"source_conn_id": "t_lsource", "destination": "file:///tmp/unused"})
    assert "_lastline" not in plan.databases
    logical_source.server().query("DROP DATABASE _lastline")


def test_backup_files_are_private(store_backup):
    (folder,) = [p for p in store_backup.iterdir() if p.is_dir()]
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files and all(p.stat().st_mode & 0o777 == 0o600 for p in files)
    assert all(p.stat().st_mode & 0o777 == 0o700 for p in [folder, *folder.rglob("*")] if p.is_dir())


@pytest.mark.faults
@pytest.mark.parametrize("damage", ["truncate", "remove"])
def test_a_missing_or_truncated_chunk_is_found_before_anything_is_touched(store_backup, sentinel, tmp_path, damage, fault):
    dest = tmp_path / "copy"
    shutil.copytree(store_backup, dest)
    (folder,) = [p for p in dest.iterdir() if p.is_dir()]
    victim = sorted((folder / "data").rglob("*.tsv.zst"))[-1]
    if damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:-10])
    else:
        victim.unlink()
    before = sentinel.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'store'")
    with pytest.raises(IntegrityError, match="missing or truncated") as err:
        logical_restore.preflight(_conf(dest))
    assert sentinel.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'store'") == before
    if damage == "truncate":
        fault("truncated chunk", str(err.value).split("\n")[1], "refused in preflight: the target's databases untouched")


@pytest.mark.faults
def test_a_corrupt_manifest_is_refused_and_latest_passes_over_it(store_backup, sentinel, tmp_path, fault):
    dest = tmp_path / "copy"
    shutil.copytree(store_backup, dest)
    (folder,) = [p for p in dest.iterdir() if p.is_dir()]
    manifest = folder / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:200])  # cut in the middle, as a half-copied file
    before = sentinel.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'store'")
    with pytest.raises(IntegrityError) as err:
        logical_restore.preflight(_conf(dest, backup=f"file://{dest}/{folder.name}"))
    assert "cannot be read" in str(err.value)
    with pytest.raises(IntegrityError, match="holds no complete logical backup"):
        logical_restore.preflight(_conf(dest))  # latest skips it (with a warning), and there is no other
    assert sentinel.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'store'") == before
    fault("corrupt manifest", str(err.value), "refused before anything is touched; latest passes over it")


def _lastline_queries(server, like: str) -> list:
    return server.query(
        "SELECT ID, INFO FROM information_schema.PROCESSLIST WHERE USER = 'lastline' AND INFO LIKE %s AND ID <> CONNECTION_ID()",
        (like,),
    )


def test_sigterm_stops_the_task_within_seconds_and_leaves_no_query_on_the_source(airflow_db, logical_source, tmp_path):
    """`airflow dags test logical_backup` told to stop (SIGTERM, as the task runner sends on mark-failed,
    execution_timeout or shutdown) while its FLUSH TABLES WITH READ LOCK waits behind a LOCK TABLES: the
    process ends within seconds, the lock request is gone from the source, no dump worker is left."""
    import os
    import signal
    import subprocess
    import sys

    src = logical_source.server()
    blocker = src.connect()
    blocker.cursor().execute("LOCK TABLES store.actor WRITE")  # the global read lock waits for it
    conf = {"source_conn_id": "t_lsource", "destination": f"file://{tmp_path}", "databases": ["store"],
            "chunk_rows": 250_000, "compression": "zstd", "parallel": 2, "include_grants": False,
            "lock_nontransactional": True, "aws_conn_id": None, "keep": 7, "incomplete_grace_hours": 24,
            "lock_method": "ftwrl", "lock_timeout": 600, "long_query_wait": 600}  # one lock attempt that waits
    allow = {"LASTLINE_ALLOW_FTWRL": "true", "LASTLINE_MAX_LOCK_TIMEOUT": "600"}  # the deployment's own bounds
    proc = subprocess.Popen([sys.executable, "-m", "airflow", "dags", "test", "logical_backup", "-c", json.dumps(conf)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, **allow})
    try:
        deadline = time.monotonic() + 90
        while not _lastline_queries(src, "%FLUSH TABLES WITH READ LOCK%"):
            assert proc.poll() is None and time.monotonic() < deadline, "the dump never reached its lock"
            time.sleep(0.2)
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        blocker.cursor().execute("UNLOCK TABLES")
        blocker.close()
    text = out.decode(errors="replace")
    assert took < 20, text[-3000:]
    assert "told to stop" in text and "KILL QUERY" in text, text[-3000:]
    assert not _lastline_queries(src, "%FLUSH TABLES%")
    assert not list(tmp_path.rglob("manifest.json"))
    ps = subprocess.run(["pgrep", "-f", "lastline-tsvdump"], capture_output=True, text=True).stdout.split()
    assert not ps, "dump workers left running"


def test_grants_are_restored_when_asked_and_only_as_their_own_account(logical_source, logical_target, tmp_path):
    src, dst = logical_source.server(), logical_target.server()
    conn = src.connect()
    cur = conn.cursor()
    cur.execute("CREATE OR REPLACE USER 'reporter'@'127.0.0.1' IDENTIFIED BY 'rep-pw-1'")
    cur.execute("GRANT SELECT ON edge.* TO 'reporter'@'127.0.0.1'")
    cur.execute("CREATE OR REPLACE USER 'wide'@'127.0.0.1' IDENTIFIED BY 'wide-pw-1'")
    cur.execute("GRANT SELECT ON *.* TO 'wide'@'127.0.0.1'")
    conn.close()
    dst.query("DROP USER IF EXISTS 'reporter'@'127.0.0.1'")
    dst.query("DROP USER IF EXISTS 'wide'@'127.0.0.1'")
    # accounts log in with the passwords a backup chose: only a target whose connection allows it gets them
    wide = tmp_path.parent / f"{tmp_path.name}-wide"  # beside tmp_path: the test copies tmp_path whole below
    logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{wide}", "databases": ["edge"],
                          "include_grants": True}))
    with pytest.raises(PreflightError, match='does not let restores create accounts .* "restore_grants": true'):
        logical_restore.preflight({"target_conn_id": "t_ltarget", "backup": f"file://{wide}/latest", "databases": ["edge"], "force": True,
                      "restore_grants": True})
    set_conn("t_ltarget_accounts", logical_target, restore_grants=True)
    # an account whose grants reach beyond the restored databases is refused before anything is touched: a
    # restore grants on those databases only (its GRANTs run under the run account, which could not grant more)
    with pytest.raises(PreflightError, match=r"wide@127.0.0.1: a grant that is global \(ON \*\.\*\)"):
        logical_restore.preflight({"target_conn_id": "t_ltarget_accounts", "backup": f"file://{wide}/latest", "databases": ["edge"],
                      "force": True, "restore_grants": True})
    src.query("DROP USER 'wide'@'127.0.0.1'")
    logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{tmp_path}", "databases": ["edge"],
                          "include_grants": True}))
    conf = {"target_conn_id": "t_ltarget_accounts", "backup": f"file://{tmp_path}/latest", "databases": ["edge"], "force": True}
    plan = logical_restore.preflight({**conf, "restore_grants": True})
    logical_restore.create_schema(plan)
    for unit in logical_restore.plan_load(plan):
        logical_restore.load(plan, unit)
    logical_restore.finalize(plan)
    assert dst.query("SHOW GRANTS FOR 'reporter'@'127.0.0.1'")[-1][0].startswith("GRANT SELECT ON `edge`.* TO `reporter`@`127.0.0.1`")
    from lastline.core.servers import Server

    as_reporter = Server("r", host="127.0.0.1", port=dst.port, user="reporter", password="rep-pw-1")
    assert as_reporter.query("SELECT COUNT(*) FROM edge.null_like")[0][0] > 0
    # an entry that grants to another account than its own is refused before anything is touched
    copy = tamper_schema(tmp_path, tmp_path / "copy", lambda s: next(
        g for g in s["grants"] if g["user"] == "reporter")["grants"].append("GRANT ALL PRIVILEGES ON *.* TO `root`@`%`"))
    with pytest.raises(IntegrityError, match="is not a GRANT to that account"):
        logical_restore.preflight({**conf, "backup": f"file://{copy}/latest", "restore_grants": True})
    with pytest.raises(PreflightError, match="taken without include_grants"):
        logical_restore.preflight({**conf, "backup": f"file://{_plain_backup(tmp_path)}/latest", "restore_grants": True})
    src.query("DROP USER 'reporter'@'127.0.0.1'")
    dst.query("DROP USER 'reporter'@'127.0.0.1'")


def _plain_backup(tmp_path: Path) -> Path:
    dest = tmp_path / "plain"
    logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["edge"]}))
    return dest


@pytest.fixture(scope="module")
def tls_source(sandbox_root, tmp_path_factory):
    """A sandbox that accepts TCP connections over TLS only (require_secure_transport), with a test CA."""
    import subprocess

    from conftest import _instance, set_conn

    d = tmp_path_factory.mktemp("tls")
    run = lambda *a: subprocess.run(list(a), check=True, capture_output=True, cwd=d)  # noqa: E731
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=lastline test CA")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "san.cnf")
    inst = _instance(sandbox_root, "tls")
    try:
        (inst.conf_d / "tls.cnf").write_text(
            f"[mysqld]\nssl-ca={d / 'ca.pem'}\nssl-cert={d / 'server.pem'}\nssl-key={d / 'server.key'}\n"
            "require-secure-transport=ON\n"
        )
        inst.stop()
        inst.start()
        root = inst.server()
        conn = root.connect(ssl={"ca": str(d / "ca.pem")})
        cur = conn.cursor()
        cur.execute("CREATE DATABASE tlsdb")
        cur.execute("CREATE TABLE tlsdb.t (id INT PRIMARY KEY, v TEXT)")
        cur.execute("USE tlsdb")  # the sequence engine's tables need a current database
        cur.execute("INSERT INTO tlsdb.t SELECT seq, REPEAT('x\\n', seq) FROM seq_1_to_3000")
        conn.commit()
        conn.close()
        set_conn("t_tls", inst, ssl={"ca": str(d / "ca.pem")}, ssl_mode="VERIFY_CA")
        set_conn("t_plain", inst)
        yield inst
    finally:
        inst.destroy()


def test_connections_use_tls_when_the_connection_asks_for_it(tls_source, tmp_path):
    from lastline.core.errors import ServerError

    with pytest.raises(ServerError):  # the server takes TLS only: a plain connection is refused
        connections.server("t_plain").connect().close()
    tls = connections.server("t_tls")
    assert tls.query("SHOW SESSION STATUS LIKE 'Ssl_cipher'")[0][1]
    plan = logical_backup.preflight({"source_conn_id": "t_tls", "destination": f"file://{tmp_path}", "databases": ["tlsdb"],
                         "chunk_rows": 1000})
    logical_backup.dump(plan)  # preflight, snapshot control, splitter and the C dump workers all connected over TLS
    m = read_manifest(open_storage(f"file://{tmp_path}"), plan.backup_id, "logical")
    assert m.tables[0].rows == 3000


def test_server_side_files_are_looked_at_on_the_server_s_own_host(logical_target, store_backup, tmp_path):
    """For a target reached over ssh_conn_id, the restart drop-in and the datadir's free space are looked at
    on that host. Its sshd runs in a mount namespace of its own, where the folder the connection names is a
    1 MB tmpfs holding a stray drop-in; the worker sees an empty folder on a big disk."""
    from conftest import set_conn
    from lastline.logical.restore import tuning
    from lastline_dev import sshd_sandbox

    if not sshd_sandbox.available():
        pytest.skip("needs root and openssh-server")
    remote = tmp_path / "remote-only"
    remote.mkdir()
    wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs -o size=1m tmpfs "$0" && exec "$@"', str(remote)]
    sshd = sshd_sandbox.start(tmp_path / "sshd", wrap=wrap)
    try:
        import os

        os.environ["AIRFLOW_CONN_T_SSH_NS"] = json.dumps(sshd.connection())
        set_conn("t_remote", logical_target, ssh_conn_id="t_ssh_ns", config_dir=str(remote), datadir=str(remote))
        server = connections.server("t_remote")
        server.runner().sh('printf "[mysqld]\\n" > "$1"', f"{remote}/{tuning.DROP_IN}")
        assert not (remote / tuning.DROP_IN).exists()  # the worker cannot see it: it is on the other host
        with pytest.raises(PreflightError, match="exists but no config snapshot records it"):
            tuning.take_snapshot(server, "run", "now")
        with pytest.raises(PreflightError, match=r"remote-only on t_ssh_ns \(.*\) has 1\.0 MB free"):
            logical_restore.preflight(_conf(store_backup, target_conn_id="t_remote"))
    finally:
        sshd.stop()
