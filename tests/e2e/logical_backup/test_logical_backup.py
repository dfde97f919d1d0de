"""Logical backups on real servers: the store dataset and the edge-case corpus, checked against the source."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from lastline.core.errors import PreflightError
from lastline.core.sql import string_literal
from lastline.logical.backup import stages as logical_backup
from lastline.logical.format import dialect
from lastline.logical.format.chunk_files import read_chunk
from lastline.manifest import LogicalManifest, read_manifest
from lastline.storage import open_storage
from lastline_dev.dataset import generate

pytestmark = pytest.mark.e2e


def _dump(dest: Path, **conf) -> LogicalManifest:
    """A logical backup through the task functions (no scheduler), returning its manifest."""
    plan = logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", **conf})
    logical_backup.dump(plan)
    return read_manifest(open_storage(f"file://{dest}"), plan.backup_id, "logical")


def _source_sums(server, manifest: LogicalManifest) -> dict[str, tuple[int, str]]:
    """What the source says now: (rows, checksum) per table, by the manifest's own expression."""
    conn = server.connect()
    try:
        cur = conn.cursor()
        cur.execute("SET time_zone = '+00:00'")
        out = {}
        for t in manifest.tables:
            cur.execute(dialect.checksum_sql(t.schema, t.name, [dialect.Column(**c) for c in t.columns]))
            rows, checksum = cur.fetchone()
            out[f"{t.schema}.{t.name}"] = (int(rows), str(checksum))
        return out
    finally:
        conn.close()


def _chunk_lines(dest: Path, manifest: LogicalManifest, table: str) -> list[bytes]:
    storage = open_storage(f"file://{dest}")
    (t,) = [t for t in manifest.tables if f"{t.schema}.{t.name}" == table]
    data = b"".join(
        b"".join(read_chunk(storage, f"{manifest.backup_id}/{c.file}", manifest.compression, c.sha256)) for c in t.chunks
    )
    return _lines(data)


def _lines(data: bytes) -> list[bytes]:
    """Lines as the dialect ends them (LF only: CR, VT, FF are data)."""
    assert data == b"" or data.endswith(b"\n")
    return data.split(b"\n")[:-1]


@pytest.fixture(scope="module")
def corpus_backup(logical_source, tmp_path_factory):
    dest = tmp_path_factory.mktemp("lbackups")
    return dest, _dump(dest, databases=["store", "edge"], chunk_rows=1000)


def test_dag_backs_up_store_and_corpus_with_manifest_equal_to_source(run_dag, logical_source, tmp_path):
    dest = tmp_path / "b"
    state, tis, logs = run_dag("logical_backup", {
        "source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["store", "edge"], "chunk_rows": 1000,
    })
    assert state == "success", tis
    assert logical_source.server().password not in logs
    assert "tables," in logs and "chunks," in logs and "MB/s" in logs  # progress lines
    (backup,) = [p for p in dest.iterdir() if p.is_dir()]
    manifest = LogicalManifest.from_json((backup / "manifest.json").read_text())
    assert _source_sums(logical_source.server(), manifest) == {f"{t.schema}.{t.name}": (t.rows, t.checksum) for t in manifest.tables}
    names = {f"{t.schema}.{t.name}" for t in manifest.tables}
    assert {"store.payment", "store.film_text", "edge.no_key", "edge.we!rd tab`le/x"} <= names
    assert manifest.binlog_file and manifest.binlog_position and manifest.gtid
    assert manifest.rows == sum(t.rows for t in manifest.tables) > 40000
    page = Path(re.search(r"\(file://(\S+/backup\.md)\)", logs)[1]).read_text().splitlines()  # its verdict first
    assert page[0].startswith(f"# Logical backup {backup.name}: {len(names):,} tables, {manifest.rows:,} rows, "), page[:3]
    assert page[2].startswith("**Backed up t_lsource (") and "each table's row hashes computed on the source" in page[2]
    assert "the manifest is authenticated (storage key " in page[2]


def test_chunking_follows_the_key_and_files_hold_what_the_manifest_says(corpus_backup):
    dest, m = corpus_backup
    tables = {f"{t.schema}.{t.name}": t for t in m.tables}
    assert tables["edge.key_enum"].chunking.startswith("no usable key")
    assert tables["edge.unique_notnull"].chunking == "unique key uu ranges" and tables["edge.unique_notnull"].key == ["u"]
    assert tables["edge.key_composite"].key == ["a", "b", "c"]
    for name in ("edge.key_string", "edge.key_composite", "edge.key_datetime", "edge.key_binary", "store.payment"):
        assert len(tables[name].chunks) >= 2, name  # big enough to be cut at chunk_rows=1000
    assert [c.rows for c in tables["edge.no_key"].chunks] == [1000, 1000, 502]
    storage = open_storage(f"file://{dest}")
    for t in m.tables:
        assert sum(c.rows for c in t.chunks) == t.rows
        for c in t.chunks:
            lines = _lines(b"".join(read_chunk(storage, f"{m.backup_id}/{c.file}", m.compression, c.sha256)))
            assert len(lines) == c.rows and c.rows > 0
    # chunk ranges do not overlap: every key appears once
    keys = [line.split(b"\t")[0] for line in _chunk_lines(dest, m, "edge.key_string")]
    assert len(keys) == len(set(keys)) == 3000


def test_columns_counters_and_engines(corpus_backup):
    _dest, m = corpus_backup
    tables = {f"{t.schema}.{t.name}": t for t in m.tables}
    assert [c["name"] for c in tables["edge.invisible_generated"].columns] == ["id", "a", "secret"]
    assert tables["edge.counters"].auto_increment == 1000
    assert tables["edge.myisam_t"].engine == "MyISAM" and tables["edge.myisam_t"].consistent
    assert tables["edge.aria_t"].consistent
    enc = {c["name"]: c["encoding"] for c in tables["edge.numbers"].columns}
    assert enc["f"] == "double" and enc["d"] == "plain"
    assert {c["name"]: c["encoding"] for c in tables["edge.binaries"].columns}["b64"] == "bit"
    assert {c["name"]: c["encoding"] for c in tables["edge.geo"].columns}["g"] == "hex"
    assert tables["edge.charsets"].charset == "latin1"
    assert "NO_AUTO_CREATE_USER" in m.sql_mode and m.time_zone == "+00:00"


def test_dialect_keeps_null_like_strings_apart(corpus_backup):
    dest, m = corpus_backup
    lines = dict(line.split(b"\t", 1) for line in _chunk_lines(dest, m, "edge.null_like"))
    assert lines[b"1"] == b"\\N\t\\N"  # NULL
    assert lines[b"2"] == b"NULL\tnull"  # the string
    assert lines[b"3"] == b"\\\\N\t\\\\n"  # backslash-N, escaped
    assert lines[b"4"] == b"\t"  # empty strings


def test_schema_objects_are_kept_apart_and_ordered(corpus_backup):
    dest, m = corpus_backup
    schema = json.loads((dest / m.backup_id / m.schema_file).read_text())
    views = [v["name"] for v in schema["views"] if v["schema"] == "edge"]
    assert views.index("z_base") < views.index("m_middle") < views.index("a_top")
    triggers = [t["name"] for t in schema["triggers"] if t["schema"] == "edge"]
    assert triggers == ["counters_ai", "counters_ai2"]
    body = next(t["create"] for t in schema["triggers"] if t["name"] == "counters_ai")
    assert "-- a comment, 'quotes', \"double\", and a tab:\there" in body  # byte for byte
    greet = next(r for r in schema["routines"] if r["name"] == "greet")
    assert "ANSI_QUOTES" in greet["sql_mode"] and "PIPES_AS_CONCAT" in greet["sql_mode"]
    assert any(r["name"] == "count_audit" and "fake delimiter" in r["create"] for r in schema["routines"])
    assert [e["name"] for e in schema["events"] if e["schema"] == "edge"] == ["purge_audit"]
    assert [e["name"] for e in schema["events"] if e["schema"] == "store"] == ["purge_rental_log"]
    seqs = {s["name"]: s["next_value"] for s in schema["sequences"]}
    assert seqs["seq_orders"] >= 110 and seqs["seq_plain"] == 2
    assert {d["name"]: d["charset"] for d in schema["databases"]}["edge"] == "latin1"
    assert "DELIMITER ;;" in (dest / m.backup_id / "schema.sql").read_text()


def _load_into(target, dest: Path, m: LogicalManifest) -> None:
    """Tables from schema.json, then every chunk with the dialect's LOAD DATA (a restore in miniature)."""
    schema = json.loads((dest / m.backup_id / m.schema_file).read_text())
    storage = open_storage(f"file://{dest}")
    conn = target.server().connect(local_infile=1)
    try:
        cur = conn.cursor()
        cur.execute(dialect.LOAD_SESSION)
        for d in schema["databases"]:
            cur.execute(f"DROP DATABASE IF EXISTS {dialect.quote_ident(d['name'])}")
            cur.execute(d["create"])
        for t in schema["tables"] + schema["sequences"]:
            cur.execute(f"USE {dialect.quote_ident(t['schema'])}")
            cur.execute(t["create"])
        for t in m.tables:
            cols = [dialect.Column(**c) for c in t.columns]
            for c in t.chunks:
                with tempfile.NamedTemporaryFile() as fh:
                    for data in read_chunk(storage, f"{m.backup_id}/{c.file}", m.compression, c.sha256):
                        fh.write(data)
                    fh.flush()
                    cur.execute(dialect.load_sql(t.schema, t.name, cols, string_literal(fh.name)))  # no args: `%` in names
                    cur.execute("SHOW WARNINGS")
                    assert cur.fetchall() == (), f"{t.schema}.{t.name}: warnings on load"
        conn.commit()
    finally:
        conn.close()


def test_round_trip_of_every_corner_is_exact(corpus_backup, logical_source, logical_target):
    dest, m = corpus_backup
    _load_into(logical_target, dest, m)
    src, dst = logical_source.server(), logical_target.server()
    assert _source_sums(dst, m) == _source_sums(src, m) == {f"{t.schema}.{t.name}": (t.rows, t.checksum) for t in m.tables}

    def checksum_table(server):
        conn = server.connect()
        try:
            cur = conn.cursor()
            out = {}
            for t in m.tables:
                cur.execute(f"CHECKSUM TABLE {dialect.qualified(t.schema, t.name)}")
                out[f"{t.schema}.{t.name}"] = cur.fetchone()[1]
            return out
        finally:
            conn.close()

    a, b = checksum_table(src), checksum_table(dst)
    assert a == b, sorted(k for k in a if a[k] != b[k])


def test_concurrent_writes_after_the_snapshot_are_absent_in_every_table(logical_source, tmp_path):
    src = logical_source.server()
    setup = src.connect()
    cur = setup.cursor()
    cur.execute("CREATE DATABASE IF NOT EXISTS conc")
    for t, engine in (("a", "InnoDB"), ("b", "InnoDB"), ("c", "MyISAM")):
        cur.execute(f"CREATE OR REPLACE TABLE conc.{t} (id INT PRIMARY KEY) ENGINE={engine}")
    setup.close()
    stop, count = threading.Event(), [0]

    def writer():
        conn = src.connect()
        c = conn.cursor()
        i = 0
        while not stop.is_set():
            i += 1
            c.execute("INSERT INTO conc.c VALUES (%s)", (i,))  # MyISAM first: it may lead by one
            c.execute("INSERT INTO conc.a VALUES (%s)", (i,))
            c.execute("INSERT INTO conc.b VALUES (%s)", (i,))
            conn.commit()
            count[0] = i
        conn.close()

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    while count[0] < 200:
        time.sleep(0.01)
    m = _dump(tmp_path, databases=["conc", "store", "edge"], chunk_rows=1000)
    during = count[0]
    time.sleep(0.2)
    stop.set()
    th.join()
    ids = {t: sorted(int(x) for x in _chunk_lines(tmp_path, m, f"conc.{t}")) for t in "abc"}
    k = len(ids["a"])
    assert 200 <= k < count[0], "the writer must have run before and after the snapshot"
    assert ids["a"] == ids["b"] == list(range(1, k + 1)), "one transaction's rows split by the snapshot"
    assert ids["c"] in (list(range(1, k + 1)), list(range(1, k + 2))), "MyISAM table not dumped under the lock"
    assert during > 200 and {t.name: t.rows for t in m.tables if t.schema == "conc"} == {"a": k, "b": k, "c": len(ids["c"])}


def test_s3_destination_with_pigz(run_dag, logical_source, s3_server):
    state, tis, _logs = run_dag("logical_backup", {
        "source_conn_id": "t_lsource", "destination": "s3://backups/logical", "aws_conn_id": "t_s3",
        "databases": ["store"], "compression": "pigz", "chunk_rows": 5000,
    })
    assert state == "success", tis
    from lastline.manifest import resolve_backup

    storage, backup_id = resolve_backup("s3://backups/logical/latest", "t_s3", "logical")
    m = read_manifest(storage, backup_id, "logical")
    store = generate()  # what the source's `store` database holds (conftest's logical_source loads this seed)
    # every base table of the generated dataset (its sequence is schema, not a table of rows)
    assert m.compression == "pigz" and {t.name for t in m.tables} == set(store.rows) - {"invoice_number"}
    payment = next(t for t in m.tables if t.name == "payment")
    assert len(payment.chunks) >= 3 and all(c.file.endswith(".tsv.gz") for c in payment.chunks)
    lines = _lines(b"".join(
        b"".join(read_chunk(storage, f"{backup_id}/{c.file}", "pigz", c.sha256)) for c in payment.chunks
    ))
    assert len(lines) == payment.rows == store.rows["payment"] > 16000


def test_unknown_database_is_named(run_dag, logical_source, tmp_path):
    state, tis, logs = run_dag("logical_backup", {
        "source_conn_id": "t_lsource", "destination": f"file://{tmp_path}", "databases": ["store", "nope"],
    })
    assert state == "failed" and tis["preflight"] == "failed"
    assert "unknown database(s) nope" in logs


def test_missing_reload_privilege_is_named_and_leaves_no_manifest(run_dag, logical_source, tmp_path):
    from conftest import set_conn

    conn = logical_source.server().connect()
    cur = conn.cursor()
    cur.execute("CREATE OR REPLACE USER 'weak'@'127.0.0.1' IDENTIFIED BY 'weak-pw-1'")
    cur.execute("GRANT SELECT, SHOW VIEW, EVENT, TRIGGER ON *.* TO 'weak'@'127.0.0.1'")
    conn.close()
    set_conn("t_weak", logical_source)
    weak = json.loads(os.environ["AIRFLOW_CONN_T_WEAK"])
    weak.update(login="weak", password="weak-pw-1")
    os.environ["AIRFLOW_CONN_T_WEAK"] = json.dumps(weak)
    state, tis, logs = run_dag("logical_backup", {"source_conn_id": "t_weak", "destination": f"file://{tmp_path}", "databases": ["store"]})
    logical_source.server().query("DROP USER 'weak'@'127.0.0.1'")  # other tests back up the source's accounts
    assert state == "failed" and tis["dump"] == "failed"
    assert "RELOAD" in logs
    assert not list(tmp_path.glob("*/manifest.json"))


@pytest.mark.parametrize("grants", [
    "SELECT, SHOW VIEW, RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR, EVENT ON *.*",  # no TRIGGER
    "SELECT, SHOW VIEW, RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR, TRIGGER ON *.*",  # no EVENT
    "SELECT, SHOW VIEW, RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR ON *.*|TRIGGER, EVENT ON `st\\_re`.*",  # another db
    "SELECT, SHOW VIEW, RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR ON *.*|TRIGGER, EVENT ON `st_r%`.*",  # a pattern: enough
    # the server applies one database grant, the most specific: `store`'s, which holds no TRIGGER (found on a real server)
    "SELECT, SHOW VIEW, RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR ON *.*|SELECT ON `store`.*|TRIGGER, EVENT ON `%`.*",
])
def test_an_account_that_cannot_see_every_trigger_and_event_is_refused_before_it_backs_up_none(logical_source, tmp_path, grants):
    """information_schema hides the triggers and events an account holds no TRIGGER / EVENT for: such a backup carried
    none of them and still verified. The preflight now reads the account's grants (on *.*, or a database grant whose
    name or pattern matches) and refuses, naming the privilege and the database."""
    from conftest import set_conn
    from lastline.logical.backup.stages import preflight

    root = logical_source.server()
    assert root.query("SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'store'")[0][0] > 0
    assert root.query("SELECT COUNT(*) FROM information_schema.EVENTS WHERE EVENT_SCHEMA = 'store'")[0][0] > 0
    root.query("CREATE OR REPLACE USER 'blind'@'127.0.0.1' IDENTIFIED BY 'blind-pw-1'")
    for grant in grants.split("|"):
        root.query(f"GRANT {grant} TO 'blind'@'127.0.0.1'")
    set_conn("t_blind", logical_source)
    conn = json.loads(os.environ["AIRFLOW_CONN_T_BLIND"])
    conn.update(login="blind", password="blind-pw-1")
    os.environ["AIRFLOW_CONN_T_BLIND"] = json.dumps(conn)
    try:
        conf = {"source_conn_id": "t_blind", "destination": f"file://{tmp_path}", "databases": ["store"]}
        if "st_r%" in grants:
            assert preflight(conf).databases == ["store"]
            return
        with pytest.raises(PreflightError) as err:
            preflight(conf)
        lacking = "TRIGGER" if "EVENT ON *.*" in grants else "EVENT" if "TRIGGER ON *.*" in grants else "TRIGGER"
        assert f"lacks {lacking} on store" in str(err.value) and "GRANT " in str(err.value), err.value
    finally:
        root.query("DROP USER 'blind'@'127.0.0.1'")  # other tests back up the source's accounts
    assert not list(tmp_path.iterdir())


def test_lost_connection_mid_dump_is_clear_and_leaves_no_manifest(logical_source, tmp_path):
    src = logical_source.server()
    logical_source.load_tables("slowdump", {"t": 300_000})  # chunks that take long enough to be caught in flight
    killed: list[int] = []

    def killer():
        conn = src.connect()
        cur = conn.cursor()
        deadline = time.monotonic() + 30
        while not killed and time.monotonic() < deadline:
            cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT %%CRC32(CONCAT_WS%%`slowdump`%%' AND ID <> CONNECTION_ID()")
            for (pid,) in cur.fetchall():
                with contextlib.suppress(Exception):
                    cur.execute(f"KILL CONNECTION {int(pid)}")
                    killed.append(pid)
        conn.close()

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    try:
        plan = logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{tmp_path}", "databases": ["slowdump"],
                             "chunk_rows": 100_000, "compression": "none"})
        from lastline.core.errors import LastlineError

        with pytest.raises(LastlineError) as err:
            for _ in range(5):  # until the killer catches a chunk in flight
                plan = dataclasses.replace(plan, backup_id=plan.backup_id[:16] + f"-{_}")
                logical_backup.dump(plan)
        th.join()
    finally:
        src.query("DROP DATABASE slowdump")
    assert killed
    assert "lost the connection to the source while dumping slowdump.t (chunk" in str(err.value)
    assert "no manifest" in str(err.value)
    assert not (tmp_path / plan.backup_id / "manifest.json").exists()
    assert not list((tmp_path / plan.backup_id).rglob("*.partial"))  # the part in flight was discarded


def test_chunk_files_are_made_durable_at_once_before_the_manifest(logical_source, tmp_path, monkeypatch):
    """Thousands of chunk files are not fsynced one by one (an fsync each cost a tenth of the dump at 10,000
    tables): one syncfs of the destination's filesystem makes them all durable, and only then is the manifest
    written, so a backup whose manifest exists is whole after any crash."""
    from lastline.storage.file import FileStorage

    events: list[str] = []
    fsync, sync = os.fsync, FileStorage.sync

    def counted_fsync(fd: int) -> None:
        events.append("fsync " + os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    def counted_sync(self: FileStorage) -> None:
        events.append("sync")
        sync(self)

    monkeypatch.setattr(os, "fsync", counted_fsync)
    monkeypatch.setattr(FileStorage, "sync", counted_sync)
    manifest = _dump(tmp_path, databases=["store"], chunk_rows=1000)
    chunks = sum(len(t.chunks) for t in manifest.tables)
    assert chunks > 20
    assert not [e for e in events if ".tsv" in e]  # no chunk file fsynced alone
    manifest_at = next(i for i, e in enumerate(events) if e.startswith("fsync") and "manifest.json" in e)
    assert "sync" in events[:manifest_at]  # the filesystem flushed before the manifest was
    assert (tmp_path / manifest.backup_id / "manifest.json").exists()
    # where syncfs would not vouch for them (a FUSE or network mount, a kernel before 5.8), each file is fsynced
    events.clear()
    monkeypatch.setattr("lastline.storage.file.filesystem_type", lambda path: "fuse.sshfs")
    _dump(tmp_path / "fuse", databases=["store"], chunk_rows=1000)
    assert len([e for e in events if ".tsv" in e]) == chunks and "sync" in events  # the sync then has nothing to do


def test_full_destination_is_named_and_leaves_no_manifest(logical_source, tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        plan = logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{mnt}", "databases": ["store"], "compression": "none"})
        from lastline.core.errors import StorageError

        with pytest.raises(StorageError, match="destination is full"):
            logical_backup.dump(plan)
        assert not (mnt / plan.backup_id / "manifest.json").exists()
    finally:  # lazily: a dump worker still closing its file there must not leave the mount behind
        subprocess.run(["umount", "--lazy", str(mnt)], check=False)


def test_include_grants_keeps_users_and_their_grants(logical_source, tmp_path):
    m = _dump(tmp_path, databases=["edge"], include_grants=True)
    schema = json.loads((tmp_path / m.backup_id / m.schema_file).read_text())
    users = {(g["user"], g["host"]): g for g in schema["grants"]}
    lastline = users[("lastline", "127.0.0.1")]
    assert lastline["create"].startswith("CREATE USER") and any("GRANT ALL PRIVILEGES" in g for g in lastline["grants"])
    assert ("mariadb.sys", "localhost") not in users
    assert m.include_grants
