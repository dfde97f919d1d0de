"""Unit tests: command builders, option files, the pipeline runner, storage backends, the manifest, pruning."""
from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from lastline import connections
from lastline.core.errors import IntegrityError, PipelineError, PreflightError, StorageError
from lastline.core.hosts import Stage
from lastline.core.option_files import option_file, option_file_text
from lastline.core.pipeline import run_pipeline
from lastline.core.servers import Server
from lastline.manifest import PhysicalManifest, TableInfo, backup_time, json_lines, new_backup_id, plan_prune, split_backup_url
from lastline.mariabackup import commands
from lastline.storage import open_storage

# -- command builders ---------------------------------------------------------------------------

def test_backup_stages_carry_no_secret_and_pipe_into_the_compressor():
    stages = commands.backup_stages("/tmp/opt.cnf", "/var/lib/mysql", 4, "zstd")
    assert [s.name for s in stages] == ["mariabackup", "compress"]
    mb = stages[0].argv
    assert mb[1] == "--defaults-extra-file=/tmp/opt.cnf"  # must be the first option
    assert "--stream=xbstream" in mb and "--parallel=4" in mb and "--datadir=/var/lib/mysql" in mb
    assert not any("password" in a for a in mb)
    assert stages[1].argv == ["zstd", "-q", "-T4", "-c"]


@pytest.mark.parametrize("compression,first", [("pigz", ["pigz", "-d", "-c"]), ("zstd", ["zstd", "-q", "-d", "-c"])])
def test_restore_stages(compression, first):
    stages = commands.restore_stages("/data", 3, compression)
    assert stages[0].argv == first
    assert stages[-1].argv == ["mbstream", "-x", "--parallel=3", "-C", "/data"]


def test_no_compression_is_mbstream_alone():
    assert [s.name for s in commands.restore_stages("/d", 2, "none")] == ["mbstream"]
    assert [s.name for s in commands.backup_stages("/o", "/d", 2, "none")] == ["mariabackup"]
    assert commands.artifact_name("none") == "backup.xbstream"


def test_pigz_fast_is_level_one():
    assert "--fast" in commands.backup_stages("/o", "/d", 2, "pigz-fast")[1].argv


def test_unknown_compression_is_named():
    with pytest.raises(PreflightError, match="unknown compression 'lz4'"):
        commands.codec("lz4")


def test_prepare_argv_and_default_memory():
    assert commands.prepare_argv("/d", 1 << 30) == ["mariabackup", "--prepare", "--target-dir=/d", f"--use-memory={1 << 30}"]
    assert 256 << 20 <= commands.default_use_memory() <= 8 << 30


def test_parse_backup_log():
    text = (
        "[00] 2026-11-22 00:43:03 Using server version 10.11.19-MariaDB-0+deb12u1-log\n"
        "[00] 2026-11-22 00:43:04 MySQL binlog position: filename 'mariadb-bin.000001', position '4684204', "
        "GTID of the last change '0-48132-60'\n[00] 2026-11-22 00:43:04 completed OK!\n"
    )
    assert commands.parse_backup_log(text) == {
        "binlog_file": "mariadb-bin.000001", "binlog_position": 4684204, "gtid": "0-48132-60",
        "server_version": "10.11.19-MariaDB-0+deb12u1-log",
    }
    assert commands.backup_completed(text)
    assert commands.parse_backup_log("nothing")["binlog_file"] is None


def test_version_check():
    commands.check_versions("10.11.19-MariaDB", "10.11.6-MariaDB-log")
    with pytest.raises(PreflightError, match="11.4 series"):
        commands.check_versions("10.11.19-MariaDB", "11.4.2-MariaDB")


def test_a_datadir_with_more_tablespaces_than_open_files_is_refused_before_the_stream(tmp_path):
    """mariabackup keeps every tablespace open: a datadir that needs more descriptors than the host's hard limit (a
    real shell's, lowered to 150 here, its soft one to 60) is refused in the preflight, naming both numbers and the
    remedy; one that fits gets mariabackup run with --open-files-limit at the hard limit, not the soft one."""
    from lastline.core.errors import PreflightError
    from lastline.core.hosts import LocalHost

    class Limited(LocalHost):
        def sh(self, script: str, *args: str, **kwargs) -> str:
            return super().sh("ulimit -Sn 60; ulimit -Hn 150; " + script, *args, **kwargs)

    datadir = tmp_path / "data"
    (datadir / "db 0").mkdir(parents=True)
    for name in ("ibdata1", "undo001", "undo002", "t0.frm"):
        (datadir / name).write_bytes(b"")
    for i in range(46):
        (datadir / f"db {i % 3}").mkdir(exist_ok=True)
        (datadir / f"db {i % 3}" / f"t{i}.ibd").write_bytes(b"")
    link = tmp_path / "link"  # a symlinked datadir is followed
    link.symlink_to(datadir)
    assert commands.check_open_files(Limited(), str(link), "source s") == 150  # 49 tablespaces + 100: fits
    assert "--open-files-limit=150" in commands.backup_stages("/o", "/d", 2, "zstd", open_files=150)[0].argv
    (datadir / "db 1" / "t99.ibd").write_bytes(b"")
    (datadir / "db 1" / "t100.isl").write_bytes(b"/elsewhere/t100.ibd")  # DATA DIRECTORY: its .ibd lies elsewhere
    with pytest.raises(PreflightError) as err:
        commands.check_open_files(Limited(), str(link), "source s")
    assert "51 InnoDB tablespaces" in str(err.value) and "about 151 open files" in str(err.value)
    assert "at most 150 (`ulimit -Hn`)" in str(err.value) and "LimitNOFILE=" in str(err.value)


def test_a_second_move_aside_in_the_same_second_gets_its_own_folder(tmp_path, monkeypatch):
    """A restore whose verify failed keeps the old datadir aside; a forced restore in the same second (a retry,
    the next test) moves the new contents into a folder of its own, `-2`, `-3`, and never into the kept one (nor
    a dangling link's). A folder that cannot be made at all fails at once with mkdir's own reason; output that is not
    the folder's name (a chatty login shell over SSH) is not taken for it."""
    from lastline.core import datadir as datadirs
    from lastline.core.hosts import LocalHost

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 11, 27, 12, 4, 40, tzinfo=UTC)

    monkeypatch.setattr(datadirs, "datetime", Frozen)
    data = tmp_path / "data"
    asides = []
    for i in range(3):
        data.mkdir(exist_ok=True)
        (data / f"ibdata{i}").write_text(str(i))
        (data / "lost+found").mkdir(exist_ok=True)
        asides.append(datadirs.move_aside(LocalHost(), str(data)))
    base = f"{data}.lastline-aside-20261127T120440Z"
    assert asides == [base, f"{base}-2", f"{base}-3"]
    assert [sorted(p.name for p in (tmp_path / a).iterdir()) for a in asides] == [[f"ibdata{i}"] for i in range(3)]
    assert sorted(p.name for p in data.iterdir()) == ["lost+found"]

    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(PipelineError, match="Not a directory"):  # not "exists": no second name is tried
        datadirs.move_aside(LocalHost(), str(tmp_path / "file" / "data"))

    other = tmp_path / "other"  # a dangling link holds the first name: the next one is used
    other.mkdir()
    (other / "ibdata1").write_text("x")
    (tmp_path / "other.lastline-aside-20261127T120440Z").symlink_to(tmp_path / "nowhere")
    assert datadirs.move_aside(LocalHost(), str(other)) == f"{other}.lastline-aside-20261127T120440Z-2"

    class Chatty(LocalHost):  # a login shell that prints a banner: its output is not taken for the folder
        def sh(self, script: str, *args: str, **kwargs) -> str:
            return super().sh("echo Welcome; " + script, *args, **kwargs)

    (other / "ibdata1").write_text("y")
    with pytest.raises(PipelineError, match=r"printed 'Welcome\\n.*-3', not the folder it made"):
        datadirs.move_aside(Chatty(), str(other))


# -- servers and option files -------------------------------------------------------------------

class _Conn:
    conn_id, host, port, login, password = "db", "10.0.0.5", 3307, "backup", 'p"a#ss\\word'
    extra_dejson = {"datadir": "/srv/db", "protected": "true", "ssh_conn_id": "db_ssh"}


def test_server_from_connection_reads_extras():
    s = Server.from_connection(_Conn())
    assert (s.host, s.port, s.user, s.datadir, s.protected, s.ssh_conn_id) == ("10.0.0.5", 3307, "backup", "/srv/db", True, "db_ssh")
    assert s.service_start == "systemctl start mariadb" and s.service_stop == "systemctl stop mariadb"
    assert "p\"a#ss" not in repr(s) and "p\"a#ss" not in s.describe()


def test_option_file_is_0600_quoted_and_removed():
    s = Server.from_connection(_Conn())
    with option_file(s, ("client", "mariabackup")) as path:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        text = open(path).read()
        assert text.count("password=") == 2 and "[mariabackup]" in text
        assert 'password="p\\"a#ss\\\\word"' in text
    assert not os.path.exists(path)
    assert "socket=" in option_file_text(Server("x", socket="/run/s.sock"))


# -- runner -------------------------------------------------------------------------------------

def test_pipeline_counts_and_hashes_both_ends():
    data = os.urandom(3 << 20)
    got = bytearray()
    res = run_pipeline([Stage("gzip", ["gzip", "-1", "-c"]), Stage("gunzip", ["gzip", "-d", "-c"])],
                       source=[data[:1000], data[1000:]], sink=got.extend)
    assert bytes(got) == data
    assert res.bytes_in == res.bytes_out == len(data)
    assert res.sha256_in == res.sha256_out == hashlib.sha256(data).hexdigest()


def test_pipeline_blames_the_failing_stage_not_the_sigpipe_victim():
    with pytest.raises(PipelineError) as err:
        run_pipeline([Stage("producer", ["yes"]), Stage("bad", ["bash", "-c", "head -c 10 >/dev/null; echo boom >&2; exit 3"])],
                     sink=lambda b: None)
    assert "'bad' failed with exit status 3" in str(err.value) and "boom" in str(err.value)


def test_pipeline_reports_an_interrupted_stream():
    with pytest.raises(PipelineError, match="'gunzip' failed"):
        run_pipeline([Stage("gunzip", ["gzip", "-d", "-c"])], source=[b"\x1f\x8b\x08\x00garbage"], sink=lambda b: None)


def test_sink_failure_stops_the_pipeline():
    def sink(_):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        run_pipeline([Stage("yes", ["yes"])], sink=sink)


# -- storage ------------------------------------------------------------------------------------

def test_file_writer_is_atomic(tmp_path):
    st = open_storage(f"file://{tmp_path}")
    with pytest.raises(RuntimeError):
        with st.writer("b1/a.bin") as w:
            w.write(b"half")
            raise RuntimeError("interrupted")
    assert not st.exists("b1/a.bin") and os.listdir(tmp_path / "b1") == []
    st.write_bytes("b1/a.bin", b"whole")
    assert st.read_bytes("b1/a.bin") == b"whole" and st.size("b1/a.bin") == 5
    assert st.list_backups() == ["b1"]


def test_open_storage_rejects_unknown_schemes():
    with pytest.raises(StorageError, match="unknown scheme 'ftp'"):
        open_storage("ftp://x/y")
    with pytest.raises(StorageError, match="absolute path"):
        open_storage("relative/dir")


# -- manifest and retention ---------------------------------------------------------------------

def test_manifest_round_trip_and_format_check():
    m = PhysicalManifest(
        backup_id="20261122T000000Z", source_conn_id="src", server_version="10.11.19", tool_version="10.11.19",
        artifact="backup.xbstream.zst", compression="zstd", bytes=10, sha256="ab", started_at="s", finished_at="f",
        seconds=1.0, mb_per_s=1.0, parallel=2, datadir_bytes=100, tables=[TableInfo("a", "b", "InnoDB", 1, 2)],
    )
    assert PhysicalManifest.from_json(m.to_json()) == m
    lines = m.to_json().splitlines()  # one key a line, each table on its own line (json_lines)
    assert lines[0] == "{" and ' "tables": [' in lines and '  {"bytes": 2, "engine": "InnoDB", "name": "b", "rows": 1, "schema": "a"}' in lines
    assert json_lines({"b": [], "a": [{"x": 1}, {"y": "\u00e9"}], "c": {"d": [1]}}) == (
        '{\n "a": [\n  {"x": 1},\n  {"y": "\\u00e9"}\n ],\n "b": [],\n "c": {"d": [1]}\n}\n')
    with pytest.raises(IntegrityError, match="unknown manifest format"):
        PhysicalManifest.from_json('{"format": "other"}')


def test_backup_ids_sort_by_time():
    a = new_backup_id(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert a.startswith("20260102T030405Z-") and backup_time(a) == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert backup_time("20260102T030405Z") == backup_time(a)  # ids of older backups have no suffix
    assert backup_time("lost+found") is None
    assert backup_time("20250101T000000Z-before-migration-DO-NOT-DELETE") is None  # not exactly an id
    assert split_backup_url("s3://b/p/latest") == ("s3://b/p", "latest")


def test_prune_keeps_the_newest_and_young_incomplete_ones():
    now = datetime(2026, 1, 10, tzinfo=UTC)
    ids = [f"202601{d:02d}T000000Z" for d in range(1, 10)] + ["notes"]
    complete = ids[:8:2]  # 01, 03, 05, 07 complete; 02, 04, 06, 08, 09 incomplete
    doomed = plan_prune(ids, complete, keep=2, grace=timedelta(hours=36), now=now)
    assert doomed == ["20260101T000000Z", "20260102T000000Z", "20260103T000000Z", "20260104T000000Z",
                      "20260106T000000Z", "20260108T000000Z"]
    # keep=0 still keeps the newest complete backup; unknown folders are never touched
    assert "20260107T000000Z" not in plan_prune(ids, complete, keep=0, grace=timedelta(days=99), now=now)


def test_latest_and_the_newest_backups_read_a_few_manifests_of_500(tmp_path, monkeypatch):
    """500 backups in a destination (the newest ones unfinished, a logical one among them): `latest` and the form's
    ten newest read the manifests from the newest down and stop, and name the same backups a full listing does."""
    from lastline.manifest import MANIFEST, complete_backups, newest_complete, resolve_backup, write_manifest

    storage = open_storage(f"file://{tmp_path}")
    ids = [f"2026{1 + i // 28 // 24:02d}{1 + i // 24 % 28:02d}T{i % 24:02d}0000Z" for i in range(500)]
    for i, backup_id in enumerate(ids):
        if i >= 495:  # the five newest are still being written: no manifest yet
            (tmp_path / backup_id).mkdir()
            continue
        write_manifest(storage, PhysicalManifest(
            backup_id=backup_id, source_conn_id="src", server_version="10.11.19", tool_version="10.11.19",
            artifact="backup.xbstream.zst", compression="zstd", bytes=10, sha256="ab", started_at="s", finished_at="f",
            seconds=1.0, mb_per_s=1.0, parallel=2, datadir_bytes=100, tables=[TableInfo("a", "b", "InnoDB", 1, 2)]))
    logical = tmp_path / ids[493] / MANIFEST  # one of another kind among the newest
    data = json.loads(logical.read_text())
    logical.write_text(json.dumps({**data, "kind": "logical"}))
    reads: list[str] = []
    real = storage.read_bytes
    monkeypatch.setattr(storage, "read_bytes", lambda key, *a, **k: reads.append(key) or real(key, *a, **k))
    assert newest_complete(storage, "physical") == [ids[494]]
    assert len(reads) == 1
    reads.clear()
    monkeypatch.setattr("lastline.manifest.open_storage", lambda *a, **k: storage)
    assert resolve_backup(f"file://{tmp_path}/latest", None, "physical") == (storage, ids[494])  # what a restore reads
    assert len(reads) == 1
    reads.clear()
    newest = newest_complete(storage, "physical", 10)
    assert newest == list(reversed(complete_backups(storage, "physical")))[:10] and ids[493] not in newest
    assert len(reads) - 500 <= 11  # 11 read for the ten newest, then 500 by the full listing it is compared with
    assert newest_complete(storage, "physical", 3, before=ids[100]) == [ids[99], ids[98], ids[97]]


def test_a_missing_ssh_connection_is_named():
    from lastline.core.errors import LastlineError

    with pytest.raises(LastlineError, match="SSH connection 'db_ssh' could not be read"):
        connections.host_for(Server.from_connection(_Conn()).ssh_conn_id)
    with pytest.raises(LastlineError, match="built without that host"):  # never silently run here instead
        Server.from_connection(_Conn()).runner()
    assert Server("local").runner().name == "local"


# -- logical: key ranges, deferred DDL, work units ----------------------------------------------

def test_range_predicates_are_open_at_both_ends_and_lexicographic():
    from lastline.logical.format.chunking import KeyColumn, range_where

    key = [KeyColumn("a", "int", None, None), KeyColumn("b", "varchar", "utf8mb4", "utf8mb4_general_ci")]
    lo, hi = ["'1'", "_utf8mb4 X'41' COLLATE utf8mb4_general_ci"], ["'2'", "_utf8mb4 X'42' COLLATE utf8mb4_general_ci"]
    where = range_where(key, lo, hi)
    assert where.startswith("((`a` > '1') OR (`a` = '1' AND `b` >= _utf8mb4 X'41'")
    assert "((`a` < '2') OR (`a` = '2' AND `b` < _utf8mb4 X'42'" in where
    assert range_where(key, None, None) is None
    assert range_where(key[:1], None, ["'5'"]) == "((`a` < '5'))"


def test_chunk_checks_need_contiguous_single_part_primary_key_ranges_and_refuse_altered_bounds():
    """A chunk is checked over its key range only where the ranges cut the table into disjoint pieces that
    cover it; the bounds come from an untrusted manifest, so anything but the literals lastline writes is refused."""
    from lastline.logical.format.chunking import chunk_ranges
    from lastline.manifest import ChunkInfo, LogicalTable

    def table(bounds, chunking="primary key ranges", key=("id",)):
        chunks = [ChunkInfo(f"data/db/t/{i:05d}-000.tsv.zst", 1, 1, 1, "0" * 64, lo, hi, "1") for i, (lo, hi) in enumerate(bounds)]
        return LogicalTable("db", "t", "InnoDB", None, None, True, chunking, list(key), [], len(chunks), "1", 1, 1, 0.0, chunks=chunks)

    ok = [(None, ["100"]), (["100"], ["'2020-01-01 00:00:00.5'"]), (["'2020-01-01 00:00:00.5'"], None)]
    assert chunk_ranges(table(ok)) == ["((`id` < 100))",
                                       "((`id` >= 100)) AND ((`id` < '2020-01-01 00:00:00.5'))",
                                       "((`id` >= '2020-01-01 00:00:00.5'))"]
    assert chunk_ranges(table([(None, None)])) == [None]  # one chunk: the whole table
    assert chunk_ranges(table([])) == []
    assert chunk_ranges(table([(None, ["5"]), (["5"], None), (["5"], None)])) is None  # a range in two parts
    assert chunk_ranges(table([(None, ["5"]), (["6"], None)])) is None  # a gap
    assert chunk_ranges(table([(None, None), (None, None)], "no usable key: one stream split by row count", ())) is None
    assert chunk_ranges(table(ok, "unique key u ranges")) is None  # that index is built after the load
    text = ["_utf8mb4 X'41' COLLATE utf8mb4_general_ci", "X'00ff'"]
    assert chunk_ranges(table([(None, text), (text, None)], key=("a", "b")))[1].startswith("((`a` > _utf8mb4 X'41'")
    for bad in (["1 OR 1=1"], ["'1' OR '1'='1'"], ["X'00' OR 1"], ["1", "2"], [1]):
        with pytest.raises(IntegrityError, match="the manifest was altered"):
            chunk_ranges(table([(None, bad), (bad, None)]))


def test_key_literals_follow_the_column_type():
    from lastline.logical.format.chunking import KeyColumn

    assert KeyColumn("k", "varbinary", None, None).literal(b"\x00\xff") == "X'00ff'"
    assert KeyColumn("k", "char", "latin1", "latin1_bin").literal(b"\xe9") == "_latin1 X'e9' COLLATE latin1_bin"
    assert KeyColumn("k", "datetime", None, None).literal(b"2020-01-01 00:00:00.5") == "'2020-01-01 00:00:00.5'"
    with pytest.raises(PipelineError):
        KeyColumn("k", "int", None, None).literal(b"1'; DROP TABLE x")


def test_integer_bounds_cut_even_ranges():
    from lastline.logical.format.chunking import chunk_count, integer_bounds

    assert chunk_count(1_400, 1_000) == 1 and chunk_count(1_600, 1_000) == 2
    assert integer_bounds(1, 1_000_000, 1_000_000, 250_000) == [250_001, 500_001, 750_001]
    assert integer_bounds(5, 5, 1, 1000) == []


def test_split_deferred_keeps_the_primary_key_and_valid_ddl():
    from lastline.logical.restore.schema_tables import split_deferred

    create = (
        "CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `a` int(11) DEFAULT NULL,\n  `b` text,\n"
        "  PRIMARY KEY (`id`),\n  UNIQUE KEY `ua` (`a`),\n  KEY `ka` (`a`),\n  FULLTEXT KEY `fb` (`b`),\n"
        "  CONSTRAINT `fk` FOREIGN KEY (`a`) REFERENCES `p` (`id`),\n  CONSTRAINT `chk` CHECK (`a` > 0)\n"
        ") ENGINE=InnoDB"
    )
    table, indexes, fks = split_deferred(create)
    assert table == (
        "CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `a` int(11) DEFAULT NULL,\n  `b` text,\n"
        "  PRIMARY KEY (`id`),\n  CONSTRAINT `chk` CHECK (`a` > 0)\n) ENGINE=InnoDB"
    )
    assert indexes == ["UNIQUE KEY `ua` (`a`)", "KEY `ka` (`a`)", "FULLTEXT KEY `fb` (`b`)"]
    assert fks == ["CONSTRAINT `fk` FOREIGN KEY (`a`) REFERENCES `p` (`id`)"]
    last_def = split_deferred("CREATE TABLE `u` (\n  `id` int,\n  KEY `k` (`id`)\n) ENGINE=InnoDB")[0]
    assert last_def == "CREATE TABLE `u` (\n  `id` int\n) ENGINE=InnoDB"


def _manifest(tables: list[tuple[str, str, int, int]]):
    from lastline.manifest import ChunkInfo, LogicalManifest, LogicalTable

    lt = [
        LogicalTable("db", name, engine, "utf8mb4", "utf8mb4_general_ci", True, "primary key ranges", ["id"], [],
                     chunks * 100, "0", size, size, 0.0, None,
                     [ChunkInfo(f"data/db/{name}/{i:05d}-000.tsv.zst", 100, size // chunks, size // chunks, "x") for i in range(chunks)])
        for name, engine, chunks, size in tables
    ]
    return LogicalManifest("20260101T000000Z", "c", "10.11.9", "", "+00:00", "tsv", "zstd", 100, 2, [], "schema.json", "",
                           "", "", 0, 0, 0, 0, 0, 0, tables=lt)


def test_work_units_keep_tables_whole_split_big_ones_and_batch_small_ones():
    from lastline.logical.restore.work_units import plan_units

    MB = 1 << 20
    m = _manifest([("big", "InnoDB", 40, 400 * MB)] + [(f"t{i}", "InnoDB", 10, 100 * MB) for i in range(8)]
                  + [(f"s{i}", "InnoDB", 1, MB) for i in range(30)] + [("my", "MyISAM", 20, 300 * MB)])
    units = plan_units(m, m.tables, lanes=2)
    assert 4 <= len(units) <= 64
    parts = [p for u in units for p in u.parts]
    big = sorted((p.first, p.last) for p in parts if p.table == "big")
    assert len(big) > 1 and big[0][0] == 0 and big[-1][1] == 39  # contiguous key ranges, all chunks
    assert all(b[0] == a[1] + 1 for a, b in zip(big, big[1:]))
    assert [p.whole for p in parts if p.table == "my"] == [True]  # MyISAM never split
    assert all(len([p for p in parts if p.table == f"t{i}"]) == 1 for i in range(8))  # tables whole
    small_units = [u for u in units if any(p.table.startswith("s") for p in u.parts)]
    assert len(small_units) <= 2 and all(" +" in u.name and u.name.endswith(" tables") for u in small_units)  # batched
    assert units[0].bytes == max(u.bytes for u in units)  # the biggest first (then kept apart from its own table's)
    assert any("[chunks " in u.name for u in units)
    assert sum(p.last - p.first + 1 for p in parts) == sum(len(t.chunks) for t in m.tables)


def test_thousands_of_small_tables_spread_over_every_lane_and_planning_stays_linear():
    """Per-object costs: 2,000 small tables (some empty) once made one unit that one lane loaded alone for 19 s while
    the other idled. Each table now costs TABLE_COST on top of its bytes: the tables spread over several units per
    lane, and lanes taking units as they free up each load about half of them. Planning 2x the tables takes about
    2x the time (the first fit kept each bin's sum)."""
    import gc
    import time

    from lastline.logical.restore.work_units import plan_units

    def tenants(n: int):
        return _manifest([(f"t{i}", "InnoDB", 0 if i % 7 == 0 else 1, 0 if i % 7 == 0 else 20_000) for i in range(n)])

    m = tenants(2_000)
    units = plan_units(m, m.tables, lanes=2)
    assert len(units) >= 4, [u.name for u in units]
    lanes = [0, 0]  # tables per lane, each unit taken by the lane that has loaded the fewest so far
    for u in units:
        lanes[lanes.index(min(lanes))] += len(u.parts)
    assert max(lanes) <= 0.6 * 2_000, lanes
    assert sorted(p.table for u in units for p in u.parts) == sorted(t.name for t in m.tables)  # each table once

    def best(n: int) -> float:  # the best of 3, without the collector's pauses (they grow with the heap, not the plan)
        m = tenants(n)
        times = []
        gc.collect()
        gc.disable()
        try:
            for _ in range(3):
                t0 = time.perf_counter()
                plan_units(m, m.tables, lanes=2)
                times.append(time.perf_counter() - t0)
        finally:
            gc.enable()
        return min(times)

    small, large = best(10_000), best(20_000)
    assert large < 3 * small + 0.05, f"planning 10,000 tables took {small:.3f} s, 20,000 took {large:.3f} s: quadratic"


def test_units_of_one_table_do_not_start_side_by_side():
    from lastline.logical.restore.work_units import plan_units

    MB = 1 << 20
    m = _manifest([("big", "InnoDB", 40, 800 * MB)] + [(f"t{i}", "InnoDB", 10, 200 * MB) for i in range(8)])
    units = plan_units(m, m.tables, lanes=2)
    tables = [{p.table for p in u.parts} for u in units]
    assert sum("big" in t for t in tables) >= 2
    assert all(not (a & b) for a, b in zip(tables, tables[1:]))  # neighbours never share a table


def test_a_split_table_is_loaded_in_key_order():
    from lastline.logical.restore.work_units import plan_units

    MB = 1 << 20
    m = _manifest([("big", "InnoDB", 16, 800 * MB)] + [(f"t{i}", "InnoDB", 4, 200 * MB) for i in range(8)])
    firsts = [u.parts[0].first for u in plan_units(m, m.tables, lanes=2) if u.parts[0].table == "big"]
    assert len(firsts) >= 2 and firsts == sorted(firsts)


# -- node to node: taps, remote groups, detach statements, option files -------------------------

def test_a_tap_counts_and_hashes_what_passes():
    from lastline.core.pipeline import tap_result, tap_stage

    data = [os.urandom(100_000) for _ in range(7)]
    out: list[bytes] = []
    res = run_pipeline([Stage("cat", ["cat"]), tap_stage("t")], source=data, sink=out.append)
    whole = b"".join(data)
    crc = subprocess.run(["cksum"], input=whole, capture_output=True, check=True).stdout.split()[0].decode()
    assert b"".join(out) == whole and tap_result(res, "t") == (len(whole), crc)


def test_a_remote_group_report_is_split_per_stage_and_a_lost_link_is_named():
    from lastline.core.hosts import split_group_stderr

    own, found = split_group_stderr("warning\n\n@@lastline-stage 0 141\n\n@@lastline-stage 1 2\nboom\n")
    assert own.strip() == "warning" and found == {0: (141, ""), 1: (2, "boom")}
    assert split_group_stderr("Connection closed by remote host\n")[1] == {}


def test_detach_statements_follow_version_and_flavour():
    from lastline.replicas.flavour import Flavour, detach_statements

    assert detach_statements(Flavour.parse("5.1.73-log"), []) == ["STOP SLAVE", "CHANGE MASTER TO MASTER_HOST=''", "RESET SLAVE"]
    assert detach_statements(Flavour.parse("5.7.44"), [""]) == ["STOP SLAVE", "RESET SLAVE ALL"]
    assert detach_statements(Flavour.parse("8.0.21"), []) == ["STOP SLAVE", "RESET SLAVE ALL"]
    assert detach_statements(Flavour.parse("8.0.22"), []) == ["STOP REPLICA", "RESET REPLICA ALL"]
    assert detach_statements(Flavour.parse("8.4.3"), []) == ["STOP REPLICA", "RESET REPLICA ALL"]
    assert detach_statements(Flavour.parse("5.5.68-MariaDB"), []) == ["STOP SLAVE", "RESET SLAVE ALL"]
    assert detach_statements(Flavour.parse("10.11.9-MariaDB-log"), ["east", "", "o'brien"]) == [
        "STOP SLAVE 'east'", "RESET SLAVE 'east' ALL", "STOP SLAVE 'o\\'brien'", "RESET SLAVE 'o\\'brien' ALL",
        "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL gtid_slave_pos = ''",
    ]
    assert Flavour.parse("10.6.1", "mariadb.org binary distribution").mariadb


def test_option_files_are_followed_through_includes_and_only_server_groups_count(tmp_path):
    from lastline.core.hosts import LOCAL
    from lastline.core.option_files import read_settings, starting_files

    (tmp_path / "conf.d").mkdir()
    (tmp_path / "my.cnf").write_text("[client]\nmaster-host=client-only\n[mysqld]\nport=3306\n!include extra.cnf\n"
                                     f"!includedir {tmp_path / 'conf.d'}\n")
    (tmp_path / "extra.cnf").write_text("[mysqld-10.11]\n; comment\nMaster_User = 'repl'\n")
    (tmp_path / "conf.d" / "a.cnf").write_text("[mariadbd]\nloose-master-port=3307\n[mysqldump]\nmaster-host=x\n")
    (tmp_path / "conf.d" / "b.cnf.disabled").write_text("[mysqld]\nmaster-host=ignored\n")
    (tmp_path / "suffix.cnf").write_text("[mysqld_x]\nmaster-password=pw\n")
    files, suffix = starting_files(["mariadbd", f"--defaults-file={tmp_path / 'my.cnf'}", "--defaults-group-suffix=_x"])
    assert suffix == "_x"
    found = read_settings(LOCAL, files + [str(tmp_path / "suffix.cnf")], suffix=suffix)
    masters = sorted((s.path.rsplit("/", 1)[1], s.line, s.name, s.value) for s in found if s.name.startswith("master-"))
    assert masters == [("a.cnf", 2, "master-port", "3307"), ("extra.cnf", 3, "master-user", "repl"),
                       ("suffix.cnf", 2, "master-password", "pw")]
    assert starting_files(["mariadbd"])[0][:2] == ["/etc/my.cnf", "/etc/mysql/my.cnf"]


def test_a_backup_that_does_not_exist_says_so_and_names_the_nearest_that_do(tmp_path):
    """A backup id with no folder: not "incomplete", but "no such backup", with the complete backups nearest in
    time (a folder still being written is not offered); an unfinished folder is still called incomplete."""
    from lastline.manifest import read_manifest, write_manifest

    storage = open_storage(f"file://{tmp_path}")
    ids = ["20261128T101500Z-0a1b2c", "20261128T121500Z-3d4e5f", "20261128T141500Z-6a7b8c", "20261128T151500Z-9d0e1f"]
    for backup_id in ids[:3]:
        write_manifest(storage, PhysicalManifest(
            backup_id=backup_id, source_conn_id="src", server_version="10.11.19", tool_version="10.11.19",
            artifact="backup.xbstream.zst", compression="zstd", bytes=10, sha256="ab", started_at="s", finished_at="f",
            seconds=1.0, mb_per_s=1.0, parallel=2, datadir_bytes=100, tables=[TableInfo("a", "b", "InnoDB", 1, 2)]))
    (tmp_path / ids[3]).mkdir()  # still being written
    with pytest.raises(IntegrityError) as missing:
        read_manifest(storage, "20261128T131000Z-7c93b6", "physical")
    text = str(missing.value)
    assert "there is no backup 20261128T131000Z-7c93b6" in text and "incomplete" not in text
    assert text.index(ids[1]) < text.index(ids[2]) < text.index(ids[0])  # nearest first: 55 min, 65 min, 3 h away
    assert ids[3] not in text and f"file://{tmp_path}/latest" in text
    with pytest.raises(IntegrityError, match="none of the backups near it is a complete logical backup"):
        read_manifest(storage, "20261128T131000Z-7c93b6", "logical")
    with pytest.raises(IntegrityError, match="it holds no backup at all"):
        read_manifest(open_storage(f"file://{tmp_path / 'empty'}"), "20261128T131000Z-7c93b6", "physical")
    with pytest.raises(IntegrityError, match="the backup is incomplete"):
        read_manifest(storage, ids[3], "physical")


def test_the_approval_shows_a_table_named_to_look_like_markdown_as_its_name():
    """A table name from the target holding `|` or backticks stays one cell of code in the approval's table."""
    from lastline.airflow.approval import body

    risk = {"backup_id": "20261128T161432Z-7c93b6", "target": "t", "databases": ["sh`op"], "table_count": 1, "rows": 1,
            "bytes": 1, "force": False, "tables": [{"table": "shop.a | 0 | 0 B | `x", "rows": 1, "bytes": 1, "updated": None}]}
    row = next(line for line in body({"at_risk": risk}).splitlines() if "shop.a" in line)
    assert row.count(" | ") == 3 and row.count("\\|") == 3 and "``" in row  # four cells; the name's own bars escaped
    assert "``sh`op``" in body({"at_risk": risk})
