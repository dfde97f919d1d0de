"""No encryption key in ps, logs, XCom or files (issue 46): an encrypted physical_backup and logical_backup run as
Airflow runs them (dag.test), with a key connection holding a current key, an older one and a recipient's private key;
then, as Airflow runs them too, a binlog_archive of the source beside the physical backup (sealed), a
physical_restore, a logical_restore and a point_in_time_restore of them, a backup_verify of each destination, and a
key_rotation of each to a new current key (the keys before it kept as older ones). While they run, every process's
command line and environment is sampled, and every file in the temporary folder the
runs have is read; afterwards no key, in any form the connection holds it or a tool could be handed it (its text, its
bytes, hex, base64), neither backup's data key, and no chunk file's AEAD key (the dump worker's, handed over on its
control socket) is in a sample, a task log, an XCom value of either run, a file left in the backup folders or the
temporary folder, or anything under Airflow's home (its metadata DB included)."""
from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import secrets
import subprocess
import tempfile
from pathlib import Path

import pytest
from tests.e2e.physical_restore.test_physical_e2e import PsWatcher

from lastline.backups import backup_seal
from lastline.logical.format.dialect import qualified, quote_ident
from lastline.manifest import complete_backups, read_manifest
from lastline.storage import encryption_keys, open_storage, sealing
from lastline_dev.keys import encryption_connection

pytestmark = pytest.mark.e2e
DB = "key_secrecy"


class Watcher(PsWatcher):
    """PsWatcher's samples with each process's environment beside its arguments (`ps e`), and every file that shows
    in `folder` while it exists (each distinct content once)."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.files: dict[str, bytes] = {}  # "path sha256" -> content

    def _run(self) -> None:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # ps's own environment holds no key
        while not self._stop.is_set():
            self.samples.append(subprocess.run(["ps", "-e", "-ww", "-o", "args", "e"], capture_output=True, text=True,
                                               env=env).stdout)
            for path in self.folder.rglob("*"):
                try:
                    data = path.read_bytes() if path.is_file() else None
                except OSError:  # gone meanwhile, or a socket
                    continue
                if data is not None:
                    self.files[f"{path} {hashlib.sha256(data).hexdigest()}"] = data
            self._stop.wait(0.05)


def _forms(secret: str | bytes) -> set[bytes]:
    """`secret` as text and in every encoding a key might be written in: its bytes, hex (either case), base64; and, for
    a key written as hex or base64, the bytes it stands for in those encodings too."""
    raw = secret.encode() if isinstance(secret, str) else secret
    found = {raw, raw.hex().encode(), raw.hex().upper().encode(), base64.b64encode(raw),
             base64.urlsafe_b64encode(raw).rstrip(b"=")}
    for decode in (bytes.fromhex, base64.b64decode):
        try:
            inner = decode(secret if isinstance(secret, str) else raw.decode("latin-1"))
        except (ValueError, binascii.Error):
            continue
        if len(inner) >= 16:
            found |= {inner, inner.hex().encode(), base64.b64encode(inner)}
    return found


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, each read by a child process (`cat`). Never by this one: the Airflow home holds the
    suite's live SQLite metadata DB, and a close() here of any descriptor on airflow.db or its -wal/-shm drops every
    POSIX lock this process's SQLite holds on them (sqlite.org/howtocorrupt.html, 2.2). The next `airflow` child to
    close the DB then found itself its last user and deleted the -wal and -shm this process still wrote: the suite's
    metadata DB was "malformed" a few hundred tests later."""
    return {str(p): subprocess.run(["cat", "--", str(p)], check=True, capture_output=True).stdout
            for p in folder.rglob("*") if p.is_file()}


def _xcoms(dag_id: str, runs: int = 1) -> list[str]:
    """Every XCom value of `dag_id`'s `runs` newest runs, as Airflow's metadata DB holds it."""
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        ids = [r.run_id for r in session.query(DagRun).filter_by(dag_id=dag_id).order_by(DagRun.id.desc()).limit(runs)]
        rows = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id.in_(ids)).all()
        return [f"{r.task_id} {r.key} {r.value!r}" for r in rows]


@pytest.fixture
def tiny_db(logical_source):
    server = logical_source.server()
    server.query(f"DROP DATABASE IF EXISTS {quote_ident(DB)}")
    server.query(f"CREATE DATABASE {quote_ident(DB)}")
    server.query(f"CREATE TABLE {qualified(DB, 't')} (id INT PRIMARY KEY, v VARCHAR(40)) ENGINE=InnoDB")
    with server.session(autocommit=True) as cur:  # server.query commits nothing: the rows would never be dumped
        cur.execute(f"INSERT INTO {qualified(DB, 't')} SELECT seq, CONCAT('row ', seq) FROM mysql.seq_1_to_200")
    yield
    server.query(f"DROP DATABASE IF EXISTS {quote_ident(DB)}")


def test_no_key_in_ps_logs_xcom_or_files_of_encrypted_backups_their_restores_verify_and_rotation(
        run_dag, source, target, logical_source, logical_target, tiny_db, monkeypatch, tmp_path, request):
    request.addfinalizer(lambda: logical_target.server().query(f"DROP DATABASE IF EXISTS {quote_ident(DB)}"))
    current, older = secrets.token_hex(32), base64.b64encode(os.urandom(32)).decode()  # hex and base64 keys
    rotated = secrets.token_hex(32)  # the key the rotation wraps under
    private, public = encryption_keys.new_identity()
    encryption_connection(monkeypatch.setenv, "lastline_encryption_secrecy", "sec-k2", current, keys={"sec-k1": older},
                          recipients={"ops": public}, identities={"ops": private})
    stored = os.environ["AIRFLOW_CONN_LASTLINE_ENCRYPTION_SECRECY"].encode()  # the connection, as the worker has it
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # the runs' temporary folder, and their children's
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    physical, logical = tmp_path / "physical", tmp_path / "logical"
    with Watcher(temp) as watched:
        state, tis, physical_logs = run_dag("physical_backup", {
            "source_conn_id": "t_source", "destination": physical.as_uri(), "compression": "zstd", "parallel": 2,
            "aws_conn_id": None, "keep": 7, "incomplete_grace_hours": 24})
        assert state == "success", tis
        state, tis, logical_logs = run_dag("logical_backup", {
            "source_conn_id": "t_lsource", "destination": logical.as_uri(), "databases": [DB], "chunk_rows": 1000,
            "compression": "zstd", "aws_conn_id": None, "keep": 7, "incomplete_grace_hours": 24})  # (run_dag: every
        # Param given, dag.test() would carry an earlier test's pigz; zstd is compressed, so sealed, in the worker)
        assert state == "success", tis
        logs = {"the physical backup's": physical_logs, "the logical backup's": logical_logs}
        state, tis, logs["binlog_archive's"] = run_dag("binlog_archive", {  # sealed, beside the physical backup
            "source_conn_id": "t_source", "destination": physical.as_uri(), "aws_conn_id": None, "until_current": True})
        assert state == "success", tis
        state, tis, logs["the physical restore's"] = run_dag("physical_restore", {
            "target_conn_id": "t_target", "backup": f"{physical.as_uri()}/latest", "force": True, "parallel": 2,
            "use_memory": None, "restore_into_source": "", "aws_conn_id": None})
        assert state == "success", tis
        state, tis, logs["the logical restore's"] = run_dag("logical_restore", {
            "target_conn_id": "t_ltarget", "backup": f"{logical.as_uri()}/latest", "databases": [DB], "parallel": 2,
            "tune": True, "restart_allowed": False, "defer_indexes": True, "force": True, "redo_log_bytes": 128 << 20,
            "aws_conn_id": None})
        assert state == "success", tis
        assert logical_target.server().query(f"SELECT COUNT(*) FROM {qualified(DB, 't')}")[0][0] == 200
        state, tis, logs["the point-in-time restore's"] = run_dag("point_in_time_restore", {
            "target_conn_id": "t_target", "destination": physical.as_uri(), "until": "latest", "base": "auto",
            "base_kind": "physical", "databases": [], "branch": "", "replay_method": "auto", "parallel": 2,
            "force": True, "restore_into_source": "", "aws_conn_id": None})
        assert state == "success", tis
        for dest in (physical, logical):
            state, tis, logs[f"backup_verify's of {dest.name}"] = run_dag("backup_verify", {
                "destination": dest.as_uri(), "aws_conn_id": None})
            assert state == "success", tis
            assert "opened: every sealed chunk authenticated" in logs[f"backup_verify's of {dest.name}"]
        encryption_connection(monkeypatch.setenv, "lastline_encryption_secrecy", "sec-k3", rotated,
                              keys={"sec-k2": current, "sec-k1": older}, recipients={"ops": public},
                              identities={"ops": private})
        for dest in (physical, logical):
            state, tis, logs[f"key_rotation's of {dest.name}"] = run_dag("key_rotation", {
                "destination": dest.as_uri(), "aws_conn_id": None, "dry_run": False})
            assert state == "success", tis
    assert any("mariabackup --defaults-extra-file=" in s for s in watched.samples), "the watcher never saw mariabackup"
    assert watched.files, "the runs wrote nothing in their temporary folder: TMPDIR was not theirs"

    data_keys = []
    for dest, kind in ((physical, "physical"), (logical, "logical")):
        storage = open_storage(dest.as_uri())
        manifest = read_manifest(storage, complete_backups(storage, kind)[0], kind)
        assert [w["key_id"] for w in manifest.encryption["wrappings"]] == ["sec-k3", "ops"], manifest.encryption
        seal = backup_seal(storage, manifest)
        data_keys.append(seal.data_key.raw())
    # each chunk file's AEAD key, which the dump worker was handed with its descriptor (its control socket only)
    chunk_files = list(logical.rglob("*.tsv.zst"))
    for path in chunk_files:
        header = path.read_bytes()[:sealing.HEADER_SIZE]
        name = path.relative_to(logical).as_posix()
        data_keys.append(sealing._keys(seal.data_key, seal.cipher, seal.chunk_size, header[12:44], seal.backup_id, name)[0])
    assert chunk_files and all(seal.reader(io.BytesIO(p.read_bytes()), p.relative_to(logical).as_posix()).read()
                               for p in chunk_files)  # the keys derived are the files' own
    assert all(any(f in stored for f in _forms(key)) for key in (current, older, private))  # the forms cover it
    assert any(f in os.environ["AIRFLOW_CONN_LASTLINE_ENCRYPTION_SECRECY"].encode() for f in _forms(rotated))
    forbidden = {f for key in (current, older, rotated, private, *data_keys) for f in _forms(key)}
    assert all(len(f) >= 32 for f in forbidden)  # none short enough to be found by chance

    xcoms = [x for dag, runs in (("physical_backup", 1), ("logical_backup", 1), ("binlog_archive", 1),
                                 ("physical_restore", 1), ("logical_restore", 1), ("point_in_time_restore", 1),
                                 ("backup_verify", 2), ("key_rotation", 2)) for x in _xcoms(dag, runs)]
    assert {x.split()[0] for x in _xcoms("logical_restore")} >= {"preflight", "verify"}, xcoms
    assert any("backup_id" in x for x in xcoms), xcoms  # the runs' XComs were read
    places = {
        "a ps sample": "\n".join(watched.samples).encode(),
        **{f"{run} task log": text.encode() for run, text in logs.items()},
        **{f"XCom {x[:60]}": x.encode() for x in xcoms},
        **{f"the temporary file {name.split()[0]} (while the runs went)": data for name, data in watched.files.items()},
        **_tree(physical), **_tree(logical), **_tree(temp), **_tree(Path(os.environ["AIRFLOW_HOME"])),
    }
    assert len(_tree(physical)) >= 3 and len(_tree(logical)) >= 3
    segments = [p for p in (physical / "binlogs").rglob("*") if p.is_file() and p.name.isdigit()]
    assert segments and any(p.read_bytes().startswith(b"LLSEAL") for p in segments)  # the archive was sealed
    leaks = [place for place, data in places.items() if any(f in data for f in forbidden)]
    assert leaks == [], f"key material found in: {leaks}"
