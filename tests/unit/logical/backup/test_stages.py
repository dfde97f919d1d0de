"""logical.backup.stages on the suite's logical source (databases of its own, whose names carry a backtick, a dot and
a space, dropped after): system-versioned tables refused by name, the preflight's refusals and its plan, the snapshot
guard within the server's bounds, a dump whose manifest lists every table and file (and a second dump of the same
plan refused), the replica teardown that does nothing for a primary, and prune keeping the newest backups."""
from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from lastline.core.errors import PreflightError, Refusal
from lastline.core.plans import Conf
from lastline.logical.backup import stages
from lastline.logical.backup.plans import BackupPlan, DumpResult
from lastline.logical.backup.snapshot import Guard
from lastline.logical.format.dialect import qualified, quote_ident
from lastline.manifest import MANIFEST, new_backup_id, read_manifest
from lastline.storage import open_storage

DB = "unit`bs.a b"
VERSIONED = "unit`bs versioned"
KEYED, MYISAM, HISTORY = "t.1 `x`", "my isam", "h.ist `y`"


@pytest.fixture(scope="module")
def lsource(logical_source):
    """DB (a keyed InnoDB table, a MyISAM table) and VERSIONED (a system-versioned table) on the logical source."""
    server = logical_source.server()
    with server.session(autocommit=True) as cur:
        for db in (DB, VERSIONED):
            cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(db)}")
            cur.execute(f"CREATE DATABASE {quote_ident(db)}")
        cur.execute(f"CREATE TABLE {qualified(DB, KEYED)} (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB")
        cur.execute(f"INSERT INTO {qualified(DB, KEYED)} SELECT seq, CONCAT('v\\t', seq) FROM {quote_ident(DB)}.seq_1_to_1500")
        cur.execute(f"CREATE TABLE {qualified(DB, MYISAM)} (id INT PRIMARY KEY) ENGINE=MyISAM")
        cur.execute(f"INSERT INTO {qualified(DB, MYISAM)} SELECT seq FROM {quote_ident(DB)}.seq_1_to_10")
        cur.execute(f"CREATE TABLE {qualified(VERSIONED, HISTORY)} (id INT PRIMARY KEY) WITH SYSTEM VERSIONING")
    try:
        yield server
    finally:
        with server.session(autocommit=True) as cur:
            for db in (DB, VERSIONED):
                cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(db)}")


def _conf(dest, **kw) -> dict:
    return {"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": [DB], "chunk_rows": 1000, **kw}


@pytest.mark.parametrize(("databases", "refused"), [
    pytest.param([], None, id="no-database"),
    pytest.param([DB], None, id="no-versioned-table"),
    pytest.param([DB, VERSIONED], r"^1 system-versioned table\(s\) \(unit`bs versioned\.h\.ist `y`\): a logical backup "
                                  r"does not carry their history yet\. Back these databases up with physical_backup",
                 id="versioned-named"),
])
def test_refuse_versioned(lsource, databases, refused):
    with lsource.session() as cur:
        if refused is None:
            assert stages.refuse_versioned(cur, databases) is None
        else:
            with pytest.raises(PreflightError, match=refused):
                stages.refuse_versioned(cur, databases)


@pytest.mark.parametrize(("change", "refused"), [
    pytest.param({"chunk_rows": 999}, r"^chunk_rows=999: use at least 1000 \(100k-1M is the useful range\)\.$",
                 id="chunk-rows-too-small"),
    pytest.param({"databases": [DB, VERSIONED]}, r"system-versioned table\(s\) \(unit`bs versioned\.h\.ist `y`\)",
                 id="a-versioned-table"),
    pytest.param({"databases": ["unit`bs nowhere"]}, r"^unknown database\(s\) unit`bs nowhere on the source",
                 id="unknown-database"),
    pytest.param({"databases": ["mysql"]}, r"mysql: system schemas and lastline's own _lastline are not dumped",
                 id="system-schema"),
    pytest.param({"compression": "lz4"}, r"unknown compression 'lz4'", id="unknown-compression"),
])
def test_preflight_refuses(lsource, tmp_path, change, refused):
    with pytest.raises(PreflightError, match=refused):
        stages.preflight(_conf(tmp_path, **change))
    assert list(tmp_path.iterdir()) == []  # it changes nothing


def test_preflight_plans_the_backup(lsource, tmp_path):
    plan = stages.preflight(_conf(tmp_path, parallel=3, include_grants=True))
    assert isinstance(plan, BackupPlan)
    assert (plan.databases, plan.chunk_rows, plan.parallel, plan.include_grants) == ([DB], 1000, 3, True)
    assert plan.source_conn_id == "t_lsource" and plan.destination == f"file://{tmp_path}" and plan.replica is None
    assert plan.backup_id and plan.backup_id not in open_storage(f"file://{tmp_path}").list_backups()
    assert plan.server_version == lsource.query("SELECT @@version")[0][0]


@pytest.mark.parametrize(("params", "limits", "guard"), [
    pytest.param({}, {}, Guard(60.0, 300.0, False, 0.5), id="defaults"),
    pytest.param({"long_query_guard": 5, "long_query_wait": 10, "lock_timeout": 0.1}, {}, Guard(5.0, 10.0, False, 0.1),
                 id="gentler-than-the-bounds"),
    pytest.param({"kill_long_queries": True, "long_query_guard": 120}, {"allow_kill_long_queries": "true"},
                 Guard(120.0, 300.0, True, 0.5), id="kill-where-allowed"),
    pytest.param({"long_query_wait": 3600}, {"max_long_query_wait": "3600"}, Guard(60.0, 3600.0, False, 0.5),
                 id="the-connection-raises-a-ceiling"),
])
def test_snapshot_guard(lsource, params, limits, guard):
    server = dataclasses.replace(lsource, limits=limits)
    assert stages.snapshot_guard(server, Conf(params), "11.4.2-MariaDB") == guard


@pytest.mark.parametrize(("params", "protected", "refused"), [
    pytest.param({"kill_long_queries": True}, False, r"kill_long_queries=true is harsher than what is allowed", id="kill-not-allowed"),
    pytest.param({"kill_long_queries": True}, True, r"never kills a protected server's statements", id="kill-protected"),
    pytest.param({"long_query_wait": 4000}, False, r"long_query_wait=4000 is harsher than the ceiling of 1800 s", id="wait-too-long"),
    pytest.param({"lock_timeout": 2}, False, r"lock_timeout=2 is harsher than the ceiling of 0.5 s", id="lock-too-long"),
])
def test_snapshot_guard_refuses(lsource, params, protected, refused):
    server = dataclasses.replace(lsource, limits={}, protected=protected)
    with pytest.raises(PreflightError, match=refused):
        stages.snapshot_guard(server, Conf(params), "11.4.2-MariaDB")


def test_dump_writes_every_table_and_file_into_its_manifest_and_runs_once(lsource, tmp_path):
    plan = stages.preflight(_conf(tmp_path))
    storage = open_storage(f"file://{tmp_path}")
    storage.write_bytes(f"{plan.backup_id}/data/left-by-a-failed-try", b"junk")  # an earlier attempt's file
    done = stages.dump(plan)
    assert isinstance(done, DumpResult) and (done.tables, done.rows) == (2, 1510)
    manifest = read_manifest(storage, plan.backup_id, "logical")
    assert done.manifest.endswith(f"{plan.backup_id}/{MANIFEST}")
    tables = {(t.schema, t.name): t for t in manifest.tables}
    assert {k: t.rows for k, t in tables.items()} == {(DB, KEYED): 1500, (DB, MYISAM): 10}
    assert tables[(DB, MYISAM)].engine == "MyISAM" and tables[(DB, MYISAM)].consistent  # dumped while its writes waited
    for t in manifest.tables:  # a table's totals are its chunks' sums
        assert (t.rows, int(t.checksum), t.bytes) == (sum(c.rows for c in t.chunks), sum(int(c.checksum) for c in t.chunks),
                                                      sum(c.bytes for c in t.chunks))
    assert manifest.rows == 1510 and manifest.bytes == sum(t.bytes for t in manifest.tables)
    folder = tmp_path / plan.backup_id
    on_disk = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} - {MANIFEST}
    assert {f.name for f in manifest.files} == on_disk  # the failed try's file is gone; every file listed
    for f in manifest.files:
        data = (folder / f.name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (f.bytes, f.sha256), f.name
    assert manifest.schema_sha256 == next(f.sha256 for f in manifest.files if f.name == stages.SCHEMA_FILE)
    with pytest.raises(Refusal, match=r"is already complete; trigger a new run for a new backup\."):
        stages.dump(plan)
    assert read_manifest(storage, plan.backup_id, "logical") == manifest  # the complete backup untouched

    assert stages.resume_replica(plan, done) == [] and stages.resume_replica(plan, None) == []  # a primary: nothing

    # a minute later (two backups of one second are ordered by their ids' random part)
    newer = dataclasses.replace(stages.preflight(_conf(tmp_path)), backup_id=new_backup_id(datetime.now(UTC) + timedelta(minutes=1)))
    stages.dump(newer)
    storage.write_bytes("20000101T000000Z-000000/data/x", b"an incomplete backup, long past its grace")
    deleted = stages.prune({"destination": f"file://{tmp_path}", "keep": 1, "incomplete_grace_hours": 1})
    assert sorted(deleted) == sorted([plan.backup_id, "20000101T000000Z-000000"])
    assert storage.list_backups() == [newer.backup_id]
    assert stages.prune({"destination": f"file://{tmp_path}", "keep": 1}) == []
