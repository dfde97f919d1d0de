"""The physical backup's stages (lastline.physical.backup) on the suite's shared source sandbox with the real mariabackup:
what preflight refuses (each refusal named, nothing written) and what it plans, the tables a backup lists (names with
backticks, dots and spaces too), one real stream into a temporary folder and the manifest finish writes from it, what
finish refuses of an artifact or table list that is not what the stream wrote, and what a re-run of finish does."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from conftest import set_conn
from lastline.core.errors import ConfigError, IntegrityError, PreflightError, ReplicationError, StorageError
from lastline.core.servers import Server
from lastline.core.sql import qualified, quote_ident
from lastline.manifest import ID_RE, TableInfo, read_manifest
from lastline.physical import backup as pb
from lastline.physical.plans import BackupPlan
from lastline.storage import open_storage

ODD_DB, ODD_TABLE, ODD_VIEW = "ll_unit`pb. one", "t.1 `x`", "v 1"  # a backtick, a dot and a space in each name


def _root(inst) -> Server:
    return Server(conn_id="root", socket=str(inst.sock), user="root")


@pytest.fixture(scope="module")
def odd(source):
    """A database on the source whose names need quoting, with 3 rows, a MEMORY table and a view (no base table)."""
    with _root(source).session() as cur:
        cur.execute(f"CREATE DATABASE {quote_ident(ODD_DB)}")
        cur.execute(f"CREATE TABLE {qualified(ODD_DB, ODD_TABLE)} (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB")
        cur.execute(f"INSERT INTO {qualified(ODD_DB, ODD_TABLE)} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        cur.execute(f"CREATE TABLE {qualified(ODD_DB, 'mem')} (k INT PRIMARY KEY) ENGINE=MEMORY")
        cur.execute(f"CREATE VIEW {qualified(ODD_DB, ODD_VIEW)} AS SELECT id FROM {qualified(ODD_DB, ODD_TABLE)}")
        cur.execute(f"ANALYZE TABLE {qualified(ODD_DB, ODD_TABLE)}")  # the row estimate the backup lists
        cur.fetchall()
    yield source
    with _root(source).session() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(ODD_DB)}")


@pytest.fixture(scope="module")
def backed_up(odd, tmp_path_factory):
    """One real backup of the source by the stage functions: (plan, the stream's result, the manifest's location)."""
    dest = tmp_path_factory.mktemp("pb")
    plan = pb.preflight({"source_conn_id": "t_source", "destination": f"file://{dest}", "compression": "zstd"})
    stats = pb.stream(plan)
    return plan, stats, pb.finish(plan, stats)


def test_table_estimates_lists_every_user_base_table_and_no_view_or_system_table(odd):
    tables = pb.table_estimates(odd.server())
    mine = {t.name: t for t in tables if t.schema == ODD_DB}
    assert sorted(mine) == sorted([ODD_TABLE, "mem"])  # the view is no base table
    assert (mine[ODD_TABLE].engine, mine[ODD_TABLE].rows) == ("InnoDB", 3) and mine[ODD_TABLE].bytes > 0
    assert mine["mem"].engine == "MEMORY"
    assert not {t.schema for t in tables} & {"mysql", "information_schema", "performance_schema", "sys"}
    assert [(t.schema, t.name) for t in tables] == sorted((t.schema, t.name) for t in tables)
    assert {("store", "film"), ("bulk", "t1")} <= {(t.schema, t.name) for t in tables}


@pytest.mark.parametrize("conf, error, message", [
    ({"source_conn_id": None}, ConfigError, "the Param source_conn_id is required"),
    ({"source_conn_id": "t_pb_no_datadir"}, ConfigError, "has no 'datadir' extra"),
    ({"compression": "lz4"}, PreflightError, "unknown compression 'lz4'; choose one of zstd, zstd-fast, pigz"),
    ({"priority": "urgent"}, ConfigError, "the Param priority is 'urgent'; it must be one of"),
    ({"priority": "normal"}, PreflightError, "priority=normal is harsher than the harshest priority allowed, low"),
    ({"parallel": -1}, ConfigError, "the Param parallel is -1; it must be at least 1"),
    ({"parallel": "two"}, ConfigError, "the Param parallel is 'two', not a number"),
    ({"parallel": 17}, PreflightError, "parallel=17 is harsher than the ceiling of 16"),
    ({"max_read_mb_per_s": 0.01}, PreflightError, r"max_read_mb_per_s=0.01: use 0 \(no cap\) or 0.1 to"),
    ({"from_replica": True}, PreflightError, "is not a replica"),
    ({"destination": "file:///var/lib/lastline-not-a-root"}, ConfigError, "is outside the storage this deployment allows"),
    ({"destination": "DEST/../elsewhere"}, ConfigError, "a storage URL with `..` in it is refused"),
    ({"destination": None}, ConfigError, "the Param destination is required"),
], ids=["no source", "a connection without datadir", "unknown compression", "unknown priority", "priority above the bound",
        "parallel below 1", "parallel not a number", "parallel above the ceiling", "read cap below its floor", "from_replica on a primary",
        "destination outside the roots", "destination climbing out with ..", "no destination"])
def test_preflight_refuses_and_writes_nothing(source, tmp_path, conf, error, message):
    set_conn("t_pb_no_datadir", source, datadir="")
    dest = tmp_path / "dest"
    dest.mkdir()
    full = {"source_conn_id": "t_source", "destination": f"file://{dest}", **conf}
    full = {k: (v.replace("DEST", f"file://{dest}") if isinstance(v, str) else v) for k, v in full.items() if v is not None}
    with pytest.raises(error, match=message):
        pb.preflight(full)
    assert list(dest.iterdir()) == []


@pytest.mark.parametrize("compression, artifact", [
    ("zstd", "backup.xbstream.zst"), ("zstd-fast", "backup.xbstream.zst"), ("pigz", "backup.xbstream.gz"),
    ("none", "backup.xbstream"),
], ids=["zstd", "zstd-fast", "pigz", "none"])
def test_preflight_plans_without_writing(source, tmp_path, compression, artifact):
    plan = pb.preflight({"source_conn_id": "t_source", "destination": f"file://{tmp_path}", "compression": compression,
                         "parallel": 3, "max_read_mb_per_s": 50})
    server = source.server()
    assert ID_RE.fullmatch(plan.backup_id), plan.backup_id
    assert (plan.artifact, plan.compression, plan.parallel, plan.max_read_mb_per_s) == (artifact, compression, 3, 50)
    assert (plan.source_conn_id, plan.destination, plan.priority, plan.replica) == ("t_source", f"file://{tmp_path}", "low", None)
    assert plan.server_version == server.variables("version")["version"] and plan.source_identity == server.identity()
    assert plan.tool_version and BackupPlan.of(plan.to_dict()) == plan  # what the next task reads from XCom
    assert list(tmp_path.iterdir()) == []  # preflight changes nothing


def test_preflight_picks_an_id_no_backup_in_the_destination_has(source, tmp_path):
    first = pb.preflight({"source_conn_id": "t_source", "destination": f"file://{tmp_path}"}).backup_id
    (tmp_path / first).mkdir()
    again = [pb.preflight({"source_conn_id": "t_source", "destination": f"file://{tmp_path}"}).backup_id for _ in range(3)]
    assert first not in again


def test_a_real_stream_and_its_manifest(backed_up, odd):
    plan, stats, where = backed_up
    assert where == f"{plan.destination}/{plan.backup_id}/manifest.json"
    folder = Path(plan.destination[len("file://"):]) / plan.backup_id
    artifact = folder / plan.artifact
    assert artifact.stat().st_size == stats.bytes > 0
    assert hashlib.sha256(artifact.read_bytes()).hexdigest() == stats.sha256  # counted in-stream, as written
    listed = (folder / pb.TABLES_FILE).read_bytes()
    assert (len(listed), hashlib.sha256(listed).hexdigest()) == (stats.tables_bytes, stats.tables_sha256)
    assert stats.binlog_file and stats.binlog_position and stats.gtid and stats.primary is None
    assert stats.prepare_options and stats.datadir_bytes > 0 and stats.server_version.startswith(plan.server_version[:4])
    manifest = read_manifest(open_storage(plan.destination), plan.backup_id, "physical")
    assert (manifest.bytes, manifest.sha256, manifest.artifact, manifest.compression) == (
        stats.bytes, stats.sha256, plan.artifact, "zstd")
    assert len(manifest.tables) == stats.tables == len(json.loads(listed))
    assert TableInfo(ODD_DB, ODD_TABLE, "InnoDB", 3, manifest.tables[[t.name for t in manifest.tables].index(ODD_TABLE)].bytes) \
        in manifest.tables
    assert (manifest.gtid, manifest.source_identity, manifest.prepare_options) == (
        stats.gtid, plan.source_identity, stats.prepare_options)


def _copy(plan: BackupPlan, tmp_path: Path) -> tuple[BackupPlan, Path]:
    src = Path(plan.destination[len("file://"):]) / plan.backup_id
    dest = tmp_path / "copy"
    shutil.copytree(src, dest / plan.backup_id)
    (dest / plan.backup_id / "manifest.json").unlink()  # as the stream left it: finish has not run
    return dataclasses.replace(plan, destination=f"file://{dest}"), dest / plan.backup_id


def _truncate(folder: Path, plan: BackupPlan) -> None:
    with open(folder / plan.artifact, "r+b") as fh:
        fh.truncate((folder / plan.artifact).stat().st_size - 1)


def _grow_list(folder: Path, plan: BackupPlan) -> None:
    listing = folder / pb.TABLES_FILE
    listing.write_bytes(listing.read_bytes().replace(b"[", b'[{"schema": "x", "name": "y", "engine": "InnoDB", '
                                                            b'"rows": 0, "bytes": 0}, ', 1))


def _same_size_list(folder: Path, plan: BackupPlan) -> None:
    listing = folder / pb.TABLES_FILE
    listing.write_bytes(listing.read_bytes().replace(b'"InnoDB"', b'"Innodb"', 1))


def _no_list(folder: Path, plan: BackupPlan) -> None:
    (folder / pb.TABLES_FILE).unlink()


@pytest.mark.parametrize("damage, error, message", [
    (_truncate, StorageError, r"holds \d+ bytes, the stream wrote \d+: re-run the backup"),
    (_grow_list, IntegrityError, "is not the table list the stream wrote"),
    (_same_size_list, IntegrityError, "is not the table list the stream wrote"),
    (_no_list, IntegrityError, "is not the table list the stream wrote"),
], ids=["artifact a byte short", "table list grown", "table list changed, same size", "table list gone"])
def test_finish_refuses_what_the_stream_did_not_write_and_writes_no_manifest(backed_up, tmp_path, damage, error, message):
    plan, stats, _where = backed_up
    copy, folder = _copy(plan, tmp_path)
    damage(folder, copy)
    with pytest.raises(error, match=message):
        pb.finish(copy, stats)
    assert not (folder / "manifest.json").exists()  # the backup stays incomplete: latest skips it


def test_a_rerun_of_finish_writes_the_same_manifest(backed_up, tmp_path):
    plan, stats, _where = backed_up
    copy, folder = _copy(plan, tmp_path)
    first = pb.finish(copy, stats)
    written = read_manifest(open_storage(copy.destination), plan.backup_id, "physical")
    assert pb.finish(copy, stats) == first
    again = read_manifest(open_storage(copy.destination), plan.backup_id, "physical")
    assert again == written and again.bytes == stats.bytes


GTID_LOG = "[00] 2024-01-01 mariabackup: MySQL slave binlog position: gtid_slave_pos '0-1-42'\ncompleted OK!\n"
FILE_LOG = ("[00] 2024-01-01 mariabackup: MySQL slave binlog position: master '' filename 'mariadb-bin.000007' "
            "position '385'\ncompleted OK!\n")
REPLICA = {"primaries": ["127.0.0.1:3306"], "lag_seconds": 4, "sql_running": [""]}


@pytest.mark.parametrize("replica, log, primary", [
    (None, GTID_LOG, None),
    (None, "", None),
    (REPLICA, GTID_LOG, {"gtid": "0-1-42", "binlog_file": None, "binlog_position": None,
                         "primaries": ["127.0.0.1:3306"], "lag_seconds": 4}),
    (REPLICA, FILE_LOG, {"gtid": None, "binlog_file": "mariadb-bin.000007", "binlog_position": 385,
                         "primaries": ["127.0.0.1:3306"], "lag_seconds": 4}),
], ids=["a primary", "a primary, no log", "a replica by GTID", "a replica by file and position"])
def test_primary_of(replica, log, primary):
    assert pb.primary_of(replica, log) == primary


def test_primary_of_a_replica_whose_log_names_no_primary_is_refused():
    with pytest.raises(ReplicationError, match="printed no primary position"):
        pb.primary_of(REPLICA, "completed OK!\n")


def test_resume_replica_after_a_backup_of_a_primary_does_nothing(backed_up):
    plan, stats, _where = backed_up
    assert pb.resume_replica(plan, None) == [] and pb.resume_replica(plan, stats) == []


def test_a_rerun_of_stream_over_what_a_killed_stream_left_makes_a_whole_backup(backed_up, tmp_path):
    """A stream killed mid-way leaves its `.partial` artifact (and no manifest): the task's retry streams again over
    it, and finish takes the retry's artifact."""
    plan, _stats, _where = backed_up
    retry = dataclasses.replace(plan, destination=f"file://{tmp_path}")
    folder = tmp_path / plan.backup_id
    folder.mkdir()
    (folder / (plan.artifact + ".partial")).write_bytes(b"\0half a stream" * 1000)
    stats = pb.stream(retry)
    assert sorted(p.name for p in folder.iterdir()) == sorted([plan.artifact, pb.TABLES_FILE])
    assert hashlib.sha256((folder / plan.artifact).read_bytes()).hexdigest() == stats.sha256
    pb.finish(retry, stats)
    assert read_manifest(open_storage(retry.destination), plan.backup_id, "physical").sha256 == stats.sha256


def test_a_sealed_stream_counts_and_hashes_the_bytes_as_stored_and_opens_again():
    from lastline.storage import encryption_keys
    from lastline.storage.envelope import new_seal

    seal, _ = new_seal(encryption_keys.keys_from_connection("c", "generic", "k1", "s" * 32, {}), "b1")
    stored = bytearray()
    sealed = pb._Sealed(stored.extend, seal, "b1/backup.xbstream.zst")
    plain = [b"x" * 5, b"y" * (5 << 20), b"", b"z" * 3]  # pieces as a pipe gives them, one over a sealed chunk
    for piece in plain:
        sealed.feed(piece)
    sealed.sealer.close()
    assert (sealed.bytes, sealed.digest.hexdigest()) == (len(stored), hashlib.sha256(stored).hexdigest())
    assert b"y" * 64 not in stored and stored.startswith(b"LLSEAL")
    assert b"".join(seal.opened_stream(iter([bytes(stored)]), "b1/backup.xbstream.zst")) == b"".join(plain)
