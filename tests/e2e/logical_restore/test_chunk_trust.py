"""Chunk files are untrusted input: a chunk (or a folder on its path) that is a symlink to one of the worker's
files, or a chunk that decompresses to more than its manifest declares, is refused naming it, and not one
byte of it reaches any table on the target, MyISAM (which keeps rows a failed statement wrote) or InnoDB.

The manifests here are edited as someone who can write the backup folder would: sizes and sha256s made to
match the file the symlink points at, so only the design (files opened by descriptor, no symlink
followed, verified before use, capped at the declared size) stops the attack."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from lastline.core.errors import IntegrityError
from lastline.logical.backup import stages as logical_backup
from lastline.logical.restore import stages as logical_restore
from lastline.logical.restore.target_state import aside_name

pytestmark = pytest.mark.e2e

DB = "trust_chunks"
TABLES = {"loot_m": "MyISAM", "loot_i": "InnoDB"}


@pytest.fixture(scope="module")
def chunk_backups(logical_source, tmp_path_factory) -> dict[str, Path]:
    """One backup of DB per compression: a MyISAM and an InnoDB table of a few rows each."""
    conn = logical_source.server().connect()
    cur = conn.cursor()
    cur.execute(f"DROP DATABASE IF EXISTS {DB}")
    cur.execute(f"CREATE DATABASE {DB}")
    for name, engine in TABLES.items():
        # one column: whatever a file holds lands in it as one row per line (no key: the table is one chunk)
        cur.execute(f"CREATE TABLE {DB}.{name} (v LONGBLOB) ENGINE={engine}")
        cur.execute(f"INSERT INTO {DB}.{name} VALUES ('one'), ('two'), (REPEAT('x', 5000))")
    conn.commit()
    conn.close()
    out = {}
    for compression in ("none", "zstd", "pigz"):
        dest = tmp_path_factory.mktemp(f"chunks-{compression}")
        logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": [DB],
                              "compression": compression}))
        out[compression] = dest
    return out


def _forget(server) -> None:
    """DB, the copy force set aside, and the restore state and ledger rows a refused restore left."""
    conn = server.connect()
    cur = conn.cursor()
    cur.execute(f"DROP DATABASE IF EXISTS {DB}")
    cur.execute(f"DROP DATABASE IF EXISTS `{aside_name(DB)}`")
    for table, column in (("restore_state", "dbs"), ("ledger", "file")):
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '_lastline' AND TABLE_NAME = %s", (table,))
        if cur.fetchone()[0]:
            cur.execute(f"DELETE FROM _lastline.{table} WHERE {column} LIKE %s", (f"%{DB}%",))
    conn.commit()
    conn.close()


@pytest.fixture(autouse=True)
def fresh_target(logical_target):
    """Each test is a new restore of DB: a refused one leaves its state (and the ledger rows of the chunks it
    committed), which the next restore of the same backup would resume; none of it stays for other modules."""
    _forget(logical_target.server())
    yield
    _forget(logical_target.server())


def _conf(dest: Path) -> dict:
    return {"target_conn_id": "t_ltarget", "backup": f"file://{dest}/latest", "databases": [DB], "force": True}


def _copy(src: Path, dst: Path) -> tuple[Path, dict]:
    """A copy of a backup, its folder and its manifest (as JSON)."""
    shutil.copytree(src, dst, symlinks=True)
    (folder,) = [p for p in dst.iterdir() if p.is_dir()]
    return folder, json.loads((folder / "manifest.json").read_text())


def _chunk(manifest: dict, table: str) -> dict:
    (t,) = [t for t in manifest["tables"] if t["schema"] == DB and t["name"] == table]
    assert len(t["chunks"]) == 1
    return t["chunks"][0]


def _forge(folder: Path, manifest: dict, table: str, content: bytes) -> str:
    """Make the manifest vouch for `content` as `table`'s chunk (size, raw size, sha256, file list); its key."""
    c = _chunk(manifest, table)
    sha = hashlib.sha256(content).hexdigest()
    size = os.stat(folder / c["file"]).st_size  # what a size check that follows the link sees (0 for /proc files)
    c.update(bytes=size, raw_bytes=len(content), sha256=sha, rows=max(content.count(b"\n"), 1))
    for f in manifest["files"]:
        if f["name"] == c["file"]:
            f.update(bytes=size, sha256=sha)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return c["file"]


def _restore(conf: dict, plan: dict | None = None) -> None:
    """A logical restore in-process, as the DAG runs it (from `plan` if preflight already ran)."""
    plan = plan or logical_restore.preflight(conf)
    logical_restore.create_schema(plan)
    for unit in logical_restore.plan_load(plan):
        logical_restore.load(plan, unit)
    logical_restore.finalize(plan)


def _refused(conf: dict, plan: dict | None = None) -> str:
    """The refusal of a restore (the test fails if it went through)."""
    try:
        _restore(conf, plan)
    except IntegrityError as exc:
        return str(exc)
    return "(the restore went through)"


def _nothing_of(server, marker: bytes) -> None:
    """No table of DB on the target holds `marker`, in any row (the tables may be absent)."""
    for (table,) in server.query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (DB,)):
        found = server.query(f"SELECT COUNT(*) FROM `{DB}`.`{table}` WHERE LOCATE(%s, v) > 0", (marker,))[0][0]
        assert found == 0, f"{DB}.{table} holds bytes of the file the chunk pointed at"


@pytest.fixture
def secret(tmp_path) -> tuple[Path, bytes]:
    """A file of the worker's holding a fake secret (one row's worth of TSV)."""
    path = tmp_path / "worker-secret"
    path.write_bytes(b"AIRFLOW_CONN_PROD=mysql://root:hunter2-fake@db\n")
    return path, b"hunter2-fake"


def _environ() -> tuple[Path, bytes]:
    """/proc/self/environ: the worker's environment as exec gave it (what the loader would read)."""
    data = Path("/proc/self/environ").read_bytes()
    return Path("/proc/self/environ"), data[:40]


@pytest.mark.parametrize("table", list(TABLES))
@pytest.mark.parametrize("link_to", ["secret", "environ"])
@pytest.mark.parametrize("when", ["before preflight", "after preflight"])
def test_a_chunk_that_is_a_symlink_is_refused_and_nothing_of_it_is_loaded(
        chunk_backups, logical_target, tmp_path, secret, table, link_to, when):
    target, marker = secret if link_to == "secret" else _environ()
    folder, manifest = _copy(chunk_backups["none"], tmp_path / "copy")
    key = _chunk(manifest, table)["file"]
    plan = None
    if when == "after preflight":  # the manifest vouches for a regular file; once preflight checked (and pinned) the
        (folder / key).write_bytes(target.read_bytes())  # manifest, the file is swapped for a link (a manifest
        _forge(folder, manifest, table, target.read_bytes())  # changed after preflight is refused by its pin instead)
        plan = logical_restore.preflight(_conf(tmp_path / "copy"))
        (folder / key).unlink()
        (folder / key).symlink_to(target)
    else:
        (folder / key).unlink()
        (folder / key).symlink_to(target)
        _forge(folder, manifest, table, target.read_bytes())
    refusal = _refused(_conf(tmp_path / "copy"), plan)
    _nothing_of(logical_target.server(), marker)  # first: what reached the target, whatever was said
    assert re.search(re.escape(key) + r".*is a symlink", refusal), refusal


@pytest.mark.parametrize("table", list(TABLES))
def test_a_folder_on_the_chunk_s_path_that_is_a_symlink_is_refused(chunk_backups, logical_target, tmp_path, secret, table):
    """data/<db> points at a folder of the attacker's choosing that holds a file of the worker's under the chunk's name."""
    path, marker = secret
    folder, manifest = _copy(chunk_backups["none"], tmp_path / "copy")
    key = _chunk(manifest, table)["file"]
    db_dir = folder / "data" / DB
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(db_dir, elsewhere)
    (elsewhere / Path(key).relative_to(f"data/{DB}")).write_bytes(path.read_bytes())
    shutil.rmtree(db_dir)
    db_dir.symlink_to(elsewhere, target_is_directory=True)
    _forge(folder, manifest, table, path.read_bytes())
    refusal = _refused(_conf(tmp_path / "copy"))
    _nothing_of(logical_target.server(), marker)
    assert re.search(rf"data/{DB}.* is a symlink", refusal), refusal


@pytest.mark.parametrize("table", list(TABLES))
@pytest.mark.parametrize("compression, infile_lib", [("none", None), ("zstd", None), ("pigz", None), ("zstd", "off"), ("pigz", "off")])
def test_a_chunk_that_decompresses_beyond_its_declared_size_is_refused_and_nothing_kept(
        chunk_backups, logical_target, tmp_path, monkeypatch, compression, infile_lib, table):
    """In the client, or with LASTLINE_INFILE_LIB=off (a decompressor process feeds the handler, which still
    counts what it passes on)."""
    if infile_lib:
        monkeypatch.setenv("LASTLINE_INFILE_LIB", infile_lib)
    folder, manifest = _copy(chunk_backups[compression], tmp_path / "copy")
    c = _chunk(manifest, table)
    c["raw_bytes"] -= 1  # the file is intact (its sha256 is the manifest's); the manifest says one byte less
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IntegrityError, match=rf"{c['file']}.*decompresses to more than its declared {c['raw_bytes']} bytes"):
        _restore(_conf(tmp_path / "copy"))
    server = logical_target.server()
    assert server.query(f"SELECT COUNT(*) FROM {DB}.{table}")[0][0] == 0  # not one row of it kept


@pytest.mark.parametrize("infile_lib", [None, "off"])
def test_every_compression_restores_exactly(chunk_backups, logical_source, logical_target, monkeypatch, infile_lib):
    if infile_lib:
        monkeypatch.setenv("LASTLINE_INFILE_LIB", infile_lib)
    for compression, dest in chunk_backups.items():
        _restore(_conf(dest))
        for table in TABLES:
            sql = f"CHECKSUM TABLE {DB}.{table}"
            assert logical_target.server().query(sql) == logical_source.server().query(sql), (compression, table)
