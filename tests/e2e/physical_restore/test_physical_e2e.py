"""End to end through the DAGs, on real sandbox servers, real mariabackup/mbstream/zstd/pigz, moto S3."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from lastline.backups import BackupRef
from lastline.manifest import PhysicalManifest, read_manifest
from lastline.storage import open_storage
from lastline_dev.compare import compare, table_checksums

pytestmark = pytest.mark.e2e


class PsWatcher:
    """Samples every process's command line while a backup runs."""

    def __init__(self) -> None:
        self.samples: list[str] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout)
            time.sleep(0.05)

    def __enter__(self) -> PsWatcher:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


def _only_backup(dest: Path) -> Path:
    (backup,) = [p for p in dest.iterdir() if p.is_dir()]
    return backup


def test_file_round_trip_checksums_match_and_password_stays_secret(run_dag, source, target, tmp_path):
    dest = tmp_path / "backups"
    password = source.server().password
    with PsWatcher() as ps:
        state, tis, logs = run_dag("physical_backup", {"source_conn_id": "t_source", "destination": f"file://{dest}"})
    assert state == "success", tis
    assert any("mariabackup --defaults-extra-file=" in s for s in ps.samples), "the watcher never saw mariabackup"
    assert not any(password in s for s in ps.samples), "the password appeared in ps output"
    assert password not in logs, "the password appeared in a task log"
    assert "backup stream" in logs and "MB/s" in logs  # progress was logged
    report = Path(re.search(r"\(file://(\S+/backup\.md)\)", logs).group(1)).read_text()
    assert report.startswith("# Physical backup ") and " tables, " in report and "x compressed" in report
    assert "Point-in-time: no binlog archive in this destination" in report and "MB/s" in report
    assert "authenticated (storage key " in report  # signed with the deployment's key, and said so
    lines = report.splitlines()  # the verdict on the first lines: what, from where, what proves it, authenticated
    assert lines[2].startswith("**Backed up t_source (") and "records the artifact's sha256" in lines[2], lines[:4]
    assert "the manifest is authenticated (storage key " in lines[2] and not dangling(report)

    backup = _only_backup(dest)
    manifest = PhysicalManifest.from_json((backup / "manifest.json").read_text())
    assert manifest.compression == "zstd" and manifest.artifact == "backup.xbstream.zst"
    assert manifest.bytes == (backup / manifest.artifact).stat().st_size
    assert manifest.binlog_file and manifest.binlog_position and manifest.gtid
    assert manifest.server_version.startswith("10.")
    names = {f"{t.schema}.{t.name}" for t in manifest.tables}
    assert {"store.film", "store.rental", "bulk.t1"} <= names

    state, tis, logs = run_dag("physical_restore", {"target_conn_id": "t_target", "backup": f"file://{dest}/latest", "force": True})
    assert state == "success", tis
    assert compare(source.server(), target.server()) == []
    assert len(table_checksums(target.server())) == len(names)
    assert not list(Path(target.datadir).parent.glob("data.lastline-aside-*")), "the old datadir was not cleaned up"
    assert "restore of" in logs and "total" in logs
    assert "Its manifest was authenticated (storage key " in logs  # the report's verification says it
    summary = Path(re.search(r"report: file://(\S+)/summary\.md", logs)[1], "summary.md").read_text().splitlines()
    assert re.match(rf"# Physical restore of file://\S+ into t_target: verified, {len(names):,} tables, "
                    r"[0-9,.]+ MB in [0-9,.]+ s$", summary[0]), summary[:3]
    assert summary[2].startswith("**Verified: the backup's ")


def dangling(text: str) -> list[str]:
    """The lines of a report that end on a symbol or hold one with nothing beside it (`=`, `(= rows)`, `None`)."""
    return [line for line in text.splitlines()
            if re.search(r"[=(,:;]$|\(\s*=|\(\s*\)|\bNone\b|\s=\s|\(\s|\s\)", line.rstrip())]


def test_a_second_backup_of_an_unchanged_server_reports_no_dangling_symbol(source, tmp_path):
    """A backup compared with the backups before it whose figures did not move: the report says `same`, in words,
    where it printed a dangling `=` and `(= rows)`."""
    from lastline import backup_report
    from lastline.physical import backup as pb

    conf = {"source_conn_id": "t_source", "destination": f"file://{tmp_path}"}
    for _ in range(2):
        plan = pb.preflight(conf)
        pb.finish(plan, pb.stream(plan))
        time.sleep(1.1)  # backup ids are to the second
    storage = open_storage(f"file://{tmp_path}")
    newest = read_manifest(storage, plan.backup_id, "physical")
    report = backup_report.build(storage, newest, "physical", f"file://{tmp_path}/{plan.backup_id}", "Point-in-time: none")
    page = backup_report.markdown(report)
    assert len(report["recent"]) == 1 and report["compared"]["rows"] == "same", report["compared"]
    assert "(same rows)" in page and not dangling(page), page
    unknown = {**report, "ratio": None, "compared": dict.fromkeys(report["compared"], ""), "manifest_sha256": None,
               "recent": [{**report["recent"][0], "ratio": None}]}  # figures a backup could not give
    assert not dangling(backup_report.markdown(unknown)), backup_report.markdown(unknown)


def test_s3_round_trip_with_pigz(run_dag, source, target, s3_server):
    dest = "s3://backups/nightly"
    state, tis, _ = run_dag(
        "physical_backup", {"source_conn_id": "t_source", "destination": dest, "compression": "pigz", "aws_conn_id": "t_s3"}
    )
    assert state == "success", tis
    state, tis, _ = run_dag(
        "physical_restore", {"target_conn_id": "t_target", "backup": f"{dest}/latest", "aws_conn_id": "t_s3", "force": True}
    )
    assert state == "success", tis
    assert compare(source.server(), target.server()) == []


@pytest.fixture(scope="module")
def good_backup(source, tmp_path_factory):
    """One complete file backup made by the stage functions, copied by each failure test."""
    from lastline.core.errors import IntegrityError
    from lastline.physical import backup as pb

    dest = tmp_path_factory.mktemp("good")
    plan = pb.preflight({"source_conn_id": "t_source", "destination": f"file://{dest}", "compression": "zstd"})
    stats = pb.stream(plan)
    # on the way, what finish reads back: the stream's table list, written over in the folder before finish (longer,
    # then as long), is refused; the list the stream wrote goes into the manifest
    listing = dest / plan.backup_id / "tables.json"
    written = listing.read_bytes()
    for forged in (written.replace(b"[", b'[{"schema": "x", "name": "y", "engine": "InnoDB", "rows": 0, "bytes": 0}, ', 1),
                   written.replace(b'"InnoDB"', b'"Innodb"', 1)):
        listing.write_bytes(forged)
        with pytest.raises(IntegrityError, match="is not the table list the stream wrote"):
            pb.finish(plan, stats)
    listing.write_bytes(written)
    pb.finish(plan, stats)
    assert len(read_manifest(open_storage(f"file://{dest}"), plan.backup_id, "physical").tables) == stats.tables > 0
    return _only_backup(dest)


def _copy(good: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "dest"
    shutil.copytree(good, dest / good.name)
    return dest / good.name


def _rewrite_signed(backup: Path, manifest: dict) -> None:
    """Write a changed manifest signed with the deployment's storage key, as lastline would have written it (what the
    restore checks after the MAC; a manifest changed without the key is refused first: test_storage_auth)."""
    from lastline.storage import auth, control

    data = {k: v for k, v in manifest.items() if k != auth.FIELD}
    control.write(open_storage(backup.parent.as_uri()), f"{backup.name}/manifest.json", json.dumps(data))


def test_corrupt_artifact_fails_and_target_is_not_started(run_dag, good_backup, target, tmp_path):
    backup = _copy(good_backup, tmp_path)
    artifact = backup / "backup.xbstream.zst"
    with open(artifact, "r+b") as fh:  # same size, flipped bytes in the middle
        fh.seek(artifact.stat().st_size // 2)
        fh.write(b"\x00garbage\xff" * 64)
    state, tis, logs = run_dag("physical_restore", {"target_conn_id": "t_target", "backup": str(backup.parent.as_uri()) + "/latest", "force": True})
    assert state == "failed"
    assert tis["extract"] == "failed" and tis["start_target"] == "upstream_failed", tis
    assert "corrupt" in logs and "backup.xbstream.zst" in logs
    assert target.pid() is None, "the target was started on half-restored data"
    assert (Path(target.datadir) / ".lastline-restore-in-progress").exists()
    # a run from a good backup recovers: the marker of the failed run is cleared, the old data put aside
    state, tis, _ = run_dag("physical_restore", {"target_conn_id": "t_target", "backup": good_backup.as_uri(), "force": True})
    assert state == "success", tis
    assert target.pid() is not None


@pytest.mark.faults
def test_truncated_artifact_is_refused_before_the_target_is_touched(run_dag, good_backup, target, tmp_path, fault):
    backup = _copy(good_backup, tmp_path)
    artifact = backup / "backup.xbstream.zst"
    os.truncate(artifact, artifact.stat().st_size // 3)
    pid = target.pid()
    state, tis, logs = run_dag("physical_restore", {"target_conn_id": "t_target", "backup": backup.as_uri(), "force": True})
    assert state == "failed" and tis["preflight"] == "failed", tis
    assert "truncated" in logs
    assert target.pid() == pid, "the target was stopped although preflight failed"
    seen = next(line for line in logs.splitlines() if "is truncated or was replaced" in line)
    fault("truncated archive", seen.split("IntegrityError: ")[-1], "refused in preflight: the target kept running, untouched")


def test_missing_manifest_is_incomplete_and_latest_skips_it(good_backup, tmp_path):
    from lastline.core.errors import IntegrityError
    from lastline.manifest import resolve_backup
    from lastline.physical import restore as pr

    backup = _copy(good_backup, tmp_path)
    newer = backup.parent / "29991231T000000Z"
    shutil.copytree(backup, newer)
    (newer / "manifest.json").unlink()
    with pytest.raises(IntegrityError, match="no manifest.json: the backup is incomplete"):
        pr.preflight({"target_conn_id": "t_target", "backup": newer.as_uri(), "force": True})
    _storage, backup_id = resolve_backup(backup.parent.as_uri() + "/latest")
    assert backup_id == backup.name


def test_non_empty_datadir_needs_force_where_no_one_is_asked(good_backup, target):
    from lastline.core.errors import PreflightError
    from lastline.physical import restore as pr

    # the suite's deployment asks no approval (LASTLINE_APPROVAL=false); test_approval asks one
    with pytest.raises(PreflightError, match="is not empty, and no person is asked .*: set force to replace it"):
        pr.preflight({"target_conn_id": "t_target", "backup": good_backup.as_uri()})


def test_protected_target_is_refused(good_backup, target):
    from conftest import set_conn
    from lastline.core.errors import ProtectedTargetError
    from lastline.physical import restore as pr

    set_conn("t_prod", target, protected=True)
    with pytest.raises(ProtectedTargetError, match="protected"):
        pr.preflight({"target_conn_id": "t_prod", "backup": good_backup.as_uri(), "force": True})


@pytest.mark.faults
def test_wrong_password_is_named(source, tmp_path, fault):
    from airflow.sdk.exceptions import AirflowFailException

    from lastline.core.errors import ServerError
    from lastline.physical import backup as pb

    conn = source.connection("t_badpw")
    conn["password"] = "not-the-password"
    os.environ["AIRFLOW_CONN_T_BADPW"] = json.dumps(conn)
    with pytest.raises(ServerError, match="wrong user or password") as err:
        pb.preflight({"source_conn_id": "t_badpw", "destination": f"file://{tmp_path}"})
    assert isinstance(err.value, AirflowFailException)  # waiting does not fix a password: no retries
    assert not list(tmp_path.iterdir())
    fault("wrong password", str(err.value), "refused at once (no retries); nothing written")


def test_full_destination_leaves_no_backup(source, tmp_path):
    """A destination that runs out of space (a 2 MB tmpfs mounted once preflight has found room): clear error,
    nothing kept. A `.partial` planted as a symlink (to /dev/full here) is refused, never written through."""
    import subprocess

    from lastline.core.errors import IntegrityError, StorageError
    from lastline.physical import backup as pb

    dest = tmp_path / "dest"
    dest.mkdir()
    plan = pb.preflight({"source_conn_id": "t_source", "destination": f"file://{dest}"})
    folder = dest / plan.backup_id
    folder.mkdir()
    (folder / (plan.artifact + ".partial")).symlink_to("/dev/full")
    with pytest.raises(IntegrityError, match="is a symlink, and lastline never writes through one"):
        pb.stream(plan)
    (folder / (plan.artifact + ".partial")).unlink()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(dest)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        with pytest.raises(StorageError, match="destination is full"):
            pb.stream(plan)
        assert sorted(p.name for p in dest.rglob("*") if p.is_file()) == []
    finally:
        subprocess.run(["umount", str(dest)], check=True)


def test_failed_prepare_keeps_the_target_down(good_backup, target, tmp_path):
    from lastline.core.errors import IntegrityError, PipelineError
    from lastline.physical import restore as pr

    plan = pr.preflight({"target_conn_id": "t_target", "backup": good_backup.as_uri(), "force": True})
    pr.stop_target(plan)
    pr.extract(plan)
    (Path(plan.datadir) / "ibdata1").write_bytes(b"\0" * 4096)  # damage the system tablespace
    with pytest.raises(PipelineError, match="prepare"):
        pr.prepare(plan)
    with pytest.raises(IntegrityError, match="refusing to start"):
        pr.start_target(plan)
    assert target.pid() is None
    # the same restore, run again, recovers
    for step in (pr.extract, pr.prepare, pr.start_target):
        step(plan)
    assert target.pid() is not None


def test_checksum_mismatch_is_named_and_the_target_stays_down(good_backup, target, tmp_path):
    """The stream unpacks, but its sha256 is not the manifest's: refused before prepare and start."""
    from lastline.core.errors import IntegrityError
    from lastline.physical import restore as pr

    backup = _copy(good_backup, tmp_path)
    manifest = json.loads((backup / "manifest.json").read_text())
    manifest["sha256"] = "0" * 64
    _rewrite_signed(backup, manifest)
    plan = pr.preflight({"target_conn_id": "t_target", "backup": backup.as_uri(), "force": True})
    pr.stop_target(plan)
    with pytest.raises(IntegrityError, match="the artifact is corrupt"):
        pr.extract(plan)
    with pytest.raises(IntegrityError, match="refusing to start"):
        pr.start_target(plan)
    assert target.pid() is None
    good = dataclasses.replace(  # a good backup still restores afterwards (its manifest pinned)
        plan, backup=BackupRef.parse(good_backup.as_uri(), "physical", manifest_sha256=hashlib.sha256(
            (good_backup / "manifest.json").read_bytes()).hexdigest()))
    for step in (pr.extract, pr.prepare, pr.start_target):
        step(good)
    assert target.pid() is not None


def test_verify_names_each_missing_or_implausible_table_in_the_manifests_order(good_backup, target, tmp_path):
    """verify counts every table of the manifest, several connections at once and the biggest first, and names each
    one that is missing or whose count is far from the backup's estimate, in the manifest's order."""
    from lastline.core.errors import IntegrityError
    from lastline.physical import restore as pr

    backup = _copy(good_backup, tmp_path)
    manifest = json.loads((backup / "manifest.json").read_text())
    tables = manifest["tables"]
    big = max(tables, key=lambda t: t["rows"])
    big["rows"] = big["rows"] * 10 + 5000  # ten times what it holds: not plausible
    tables.insert(0, {"schema": big["schema"], "name": "no_such_table", "engine": "InnoDB", "rows": 0, "bytes": 0})
    _rewrite_signed(backup, manifest)
    plan = pr.preflight({"target_conn_id": "t_target", "backup": backup.as_uri(), "force": True})
    for step in (pr.stop_target, pr.extract, pr.prepare, pr.start_target):
        step(plan)
    with pytest.raises(IntegrityError) as err:
        pr.verify(plan)
    problems = str(err.value).splitlines()[1:]
    assert len(problems) == 2, problems
    assert "no_such_table" in problems[0] and "doesn't exist" in problems[0]
    assert f"`{big['name']}`: " in problems[1] and f"the backup estimated {big['rows']}" in problems[1]

    # an account that may hold only 2 connections at once (restored with the source's users): verify counts on one
    # connection, not eight, and names the same two problems (not "more than max_user_connections")
    from lastline.core.servers import Server
    from lastline_dev.sandbox import USER

    root = Server(conn_id="root", socket=str(target.sock), user="root")

    def limit(n: int) -> None:
        with root.session() as cur:
            for host in ("127.0.0.1", "localhost"):
                cur.execute(f"ALTER USER IF EXISTS '{USER}'@'{host}' WITH MAX_USER_CONNECTIONS {n}")

    limit(2)
    try:
        with pytest.raises(IntegrityError) as err:
            pr.verify(plan)
        assert str(err.value).splitlines()[1:] == problems
    finally:
        limit(0)  # the target serves the tests after this one


def test_memory_tables_come_back_empty_and_verify_says_so(source, target, tmp_path, caplog):
    """A physical backup copies no MEMORY table's rows (the server starts them empty, as after any restart): verify
    does not take 5,000 rows on the source and none restored for a damaged restore (it had refused every such
    backup), and says which tables came back empty."""
    from lastline.core.servers import Server
    from lastline.physical import backup as pb
    from lastline.physical import restore as pr

    root = Server(conn_id="root", socket=str(source.sock), user="root")
    with root.session() as cur:
        cur.execute("CREATE DATABASE mem")
        cur.execute("CREATE TABLE mem.cache (k INT PRIMARY KEY, v VARCHAR(40)) ENGINE=MEMORY")
        cur.execute("INSERT INTO mem.cache SELECT seq, CONCAT('v', seq) FROM mysql.seq_1_to_5000")
    try:
        plan = pb.preflight({"source_conn_id": "t_source", "destination": f"file://{tmp_path}", "compression": "zstd"})
        pb.finish(plan, pb.stream(plan))
    finally:
        with root.session() as cur:
            cur.execute("DROP DATABASE mem")
    entry = next(t for t in read_manifest(open_storage(f"file://{tmp_path}"), plan.backup_id, "physical").tables
                 if (t.schema, t.name) == ("mem", "cache"))
    assert (entry.engine, entry.rows) == ("MEMORY", 5000)
    restore = pr.preflight({"target_conn_id": "t_target", "backup": f"file://{tmp_path}/{plan.backup_id}", "force": True})
    pr.stop_target(restore)
    extracted = pr.extract(restore)
    pr.prepare(restore)
    pr.start_target(restore)
    with caplog.at_level("WARNING"):
        verified = pr.verify(restore, extracted)  # and the old datadir, moved aside, is removed
    assert verified.tables == len(read_manifest(open_storage(f"file://{tmp_path}"), plan.backup_id, "physical").tables)
    assert "1 MEMORY table(s) came back empty, as after any restart" in caplog.text and "`mem`.`cache` (5000 rows" in caplog.text
    with Server(conn_id="root", socket=str(target.sock), user="root").session() as cur:
        cur.execute("SELECT COUNT(*) FROM mem.cache")
        assert cur.fetchone()[0] == 0
        cur.execute("DROP DATABASE mem")  # the target serves the tests after this one
