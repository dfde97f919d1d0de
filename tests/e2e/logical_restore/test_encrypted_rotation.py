"""A key rotation on a real encrypted logical backup (issue 46): key_rotation as Airflow runs it (dag.test) re-wraps
the backup's manifest under the new key (one mapped instance for the batch, its Report saying done, Airflow's pin of
the newest backup following the manifest's new sha256), writing the manifest only; the backup then restores exactly
with the new key alone, and a restore with the old key alone is refused in its preflight naming the key id it needs,
with nothing made on the target. A second run finds it current and writes nothing."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lastline import reports
from lastline.airflow.assets import newest_variable
from lastline.core.errors import ConfigError
from lastline.logical.backup import stages as logical_backup
from lastline.logical.format.dialect import qualified, quote_ident
from lastline.logical.restore import stages as logical_restore
from lastline.storage import canonical
from lastline_dev.keys import encryption_connection

pytestmark = pytest.mark.e2e

DB, TABLE = "rot `db`.x", "t 1"
K1, K2, CONN = "5a" * 32, "6b" * 32, "lastline_encryption"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def source_db(logical_source):
    server = logical_source.server()
    server.query(f"DROP DATABASE IF EXISTS {quote_ident(DB)}")
    server.query(f"CREATE DATABASE {quote_ident(DB)}")
    server.query(f"CREATE TABLE {qualified(DB, TABLE)} (id INT PRIMARY KEY, v VARCHAR(100)) ENGINE=InnoDB")
    server.query(f"INSERT INTO {qualified(DB, TABLE)} SELECT seq, CONCAT('rotated row ', seq) FROM mysql.seq_1_to_3000")
    yield server
    server.query(f"DROP DATABASE IF EXISTS {quote_ident(DB)}")


def _restore(url: str) -> None:
    plan = logical_restore.preflight({"target_conn_id": "t_ltarget", "backup": f"{url}/latest", "databases": [DB],
                                      "force": True})
    logical_restore.create_schema(plan)
    for unit in logical_restore.plan_load(plan):
        logical_restore.load(plan, unit)
    logical_restore.finalize(plan)


def test_a_rotated_backup_restores_with_the_new_key_only(source_db, logical_target, run_dag, monkeypatch, tmp_path):
    dest = tmp_path / "dest"
    url = f"file://{dest}"
    encryption_connection(monkeypatch.setenv, CONN, "k1", K1)
    logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": url, "databases": [DB],
                                                  "chunk_rows": 1000}))
    backup_id = next(p.name for p in dest.iterdir())
    manifest = dest / backup_id / "manifest.json"
    pinned = {"backup_id": backup_id, "manifest_sha256": hashlib.sha256(manifest.read_bytes()).hexdigest(),
              "destination": canonical(url)}  # as the backup's announce records it
    monkeypatch.setenv(f"AIRFLOW_VAR_{newest_variable(canonical(url), 'logical').upper()}", json.dumps(pinned))
    before = _files(dest)
    assert '"key_id": "k1"' in before[f"{backup_id}/manifest.json"].decode()

    encryption_connection(monkeypatch.setenv, CONN, "k2", K2, keys={"k1": K1})  # the rotation's first step
    state, states, _ = run_dag("key_rotation", {"destination": url, "aws_conn_id": None, "dry_run": False})
    assert state == "success" and states["rotate_backups[0]"] == states["rotate_archive"] == "success", states
    run_id = max(p.name for p in Path(reports.url()[len("file://"):], "key_rotation").iterdir() if not p.name.startswith("_"))
    found = json.loads(reports.read("key_rotation", run_id, "key_rotation.json"))
    outcome = next(o for o in found["outcomes"] if o["backup_id"] == backup_id)
    assert (outcome["status"], outcome["was"], outcome["now"]) == ("rewrapped", "k1 (kek)", "k2 (kek)")
    assert outcome["pinned"] and found["bytes_written"] == manifest.stat().st_size == outcome["bytes"]
    after = _files(dest)
    assert [k for k in after if after[k] != before[k]] == [f"{backup_id}/manifest.json"]  # no data object rewritten
    assert reports.read("key_rotation", run_id, "key_rotation.md").decode().startswith(f"# Key rotation of {url}: done")

    encryption_connection(monkeypatch.setenv, CONN, "k2", K2)  # the old key dropped
    _restore(url)
    sql = f"CHECKSUM TABLE {qualified(DB, TABLE)}"
    assert logical_target.server().query(sql)[0][1] == source_db.query(sql)[0][1] is not None
    logical_target.server().query(f"DROP DATABASE IF EXISTS {quote_ident(DB)}")

    encryption_connection(monkeypatch.setenv, CONN, "k1", K1)  # the old key alone
    with pytest.raises(ConfigError, match=rf"backup '{backup_id}' needs one of the keys k2 \(kek\) to be read; the "
                                          r"encryption key connection .* holds k1"):
        _restore(url)
    assert not logical_target.server().query(f"SHOW DATABASES LIKE '{DB.replace('_', chr(92) + '_')}'")

    encryption_connection(monkeypatch.setenv, CONN, "k2", K2)
    state, states, _ = run_dag("key_rotation", {"destination": url, "aws_conn_id": None, "dry_run": False})
    assert state == "success" and _files(dest) == after  # current: nothing written
