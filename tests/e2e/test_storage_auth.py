"""Authenticated storage on real servers (issue 42): control files are signed with the deployment's key (an Airflow
connection the storage never holds), and a physical restore or a point-in-time restore refuses, before anything is
used, a manifest or chain that someone who can write the storage rewrote (hashes and all) without the key, or an
archive rolled back to an older, validly signed state; a rotated key still reads older backups."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil

import pytest

from conftest import set_conn
from lastline import connections
from lastline.core.errors import IntegrityError, Refusal
from lastline.manifest import read_manifest
from lastline.physical import backup as physical_backup
from lastline.physical import restore as physical_restore
from lastline.pitr import archive
from lastline.pitr import restore as pitr
from lastline.storage import auth, open_storage
from lastline_dev.sandbox import Instance

pytestmark = pytest.mark.e2e
KEY_ENV = "AIRFLOW_CONN_LASTLINE_STORAGE_KEY"


def _write(server, n: int) -> None:
    with server.session() as cur:
        for i in range(n):
            cur.execute("INSERT INTO shop.t (v) VALUES (%s)", (f"row {i} " + "x" * 60,))
            cur.connection.commit()


@pytest.fixture(scope="module")
def signed(sandbox_root, tmp_path_factory):
    """A source, a physical base and a binlog archive of three files after it, all written with the tests' key."""
    src = Instance(sandbox_root, "sauth_src")
    src.create()
    try:
        set_conn("t_sauth_src", src)
        server = connections.server("t_sauth_src")
        server.query("CREATE DATABASE shop")
        server.query("CREATE TABLE shop.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(100))")
        _write(server, 20)
        dest = tmp_path_factory.mktemp("sauth")
        storage = open_storage(f"file://{dest}")
        archive.ship(server, storage)
        plan = physical_backup.preflight({"source_conn_id": "t_sauth_src", "destination": f"file://{dest}"})
        physical_backup.finish(plan, physical_backup.stream(plan))
        for _ in range(3):
            _write(server, 20)
            server.query("FLUSH BINARY LOGS")
            archive.ship(server, storage)
        yield {"dest": dest, "base": plan.backup_id, "server": server}
    finally:
        src.destroy()


def _copy(signed, tmp_path):
    """A copy of the signed destination (under the tests' allowed root), its storage and its one branch id."""
    dest = tmp_path / "dest"
    shutil.copytree(signed["dest"], dest)
    storage = open_storage(f"file://{dest}")
    return dest, storage, archive.branches(storage)[-1]["id"]


def _physical(dest, base):
    return {"target_conn_id": "t_target", "backup": f"file://{dest}/{base}", "force": True}


def _pitr(dest):
    return {"target_conn_id": "t_target", "destination": f"file://{dest}", "until": "latest", "base": "auto"}


def test_a_physical_manifest_forged_without_the_key_is_refused_before_anything(signed, target, tmp_path):
    dest, _, _ = _copy(signed, tmp_path)
    manifest = dest / signed["base"] / "manifest.json"
    original = manifest.read_text()
    assert original.rstrip().splitlines()[-2].startswith(' "lastline_mac": "hmac-sha256:tests-k1:')
    assert physical_restore.preflight(_physical(dest, signed["base"])).backup.backup_id == signed["base"]  # the signed one is restorable
    data = json.loads(original)
    forged_sha = hashlib.sha256(b"a stream with a plugin in it").hexdigest()
    # 1. rewritten with a new sha256 (as the attack on prepare did): the MAC no longer where lastline writes it
    data["sha256"] = forged_sha
    manifest.write_text(json.dumps(data))
    with pytest.raises(IntegrityError, match=r"manifest.json is not authenticated: its MAC is not where lastline writes "
                                             r"it.*A physical restore uses only control files lastline signed.*nothing was used"):
        physical_restore.preflight(_physical(dest, signed["base"]))
    # 2. the same change byte for byte in place, the MAC line kept: it does not match
    manifest.write_text(original.replace(json.loads(original)["sha256"], forged_sha))
    with pytest.raises(IntegrityError, match="its MAC does not match"):
        physical_restore.preflight(_physical(dest, signed["base"]))
    # 3. the MAC line stripped: a manifest without one
    manifest.write_text(original[:original.rindex(',\n "lastline_mac"')] + "\n}\n")
    with pytest.raises(IntegrityError, match="it carries no MAC"):
        physical_restore.preflight(_physical(dest, signed["base"]))
    # 4. a key id the deployment does not hold
    manifest.write_text(original.replace("hmac-sha256:tests-k1:", "hmac-sha256:attacker:"))
    with pytest.raises(IntegrityError, match="signed with key 'attacker', which the storage key connection does not hold"):
        physical_restore.preflight(_physical(dest, signed["base"]))
    # 5. a signed manifest moved into another backup's folder: the MAC binds it to its place
    other = dest / "20200101T000000Z"
    other.mkdir()
    (other / "manifest.json").write_text(original)
    with pytest.raises(IntegrityError, match="its MAC does not match: it was changed \\(or moved\\)"):
        physical_restore.preflight(_physical(dest, "20200101T000000Z"))
    assert target.server().query("SELECT 1") == [(1,)]  # the target was never touched


def test_a_chain_forged_without_the_key_is_refused_by_a_point_in_time_restore(signed, target, tmp_path):
    dest, storage, bid = _copy(signed, tmp_path)
    assert pitr.preflight(_pitr(dest)).base == signed["base"]  # the signed archive rolls the base forward
    chain = dest / "binlogs" / bid / "chain.json"
    original = chain.read_text()
    data = json.loads(original)
    entry = data["entries"][-1]
    seg = entry["segments"][-1]
    forged = b"\xfe\xfd" * (seg["size"] // 2)  # other events of the same length, their hash written in
    (dest / "binlogs" / bid / entry["name"] / f"{seg['offset']:012d}").write_bytes(forged)
    seg["sha256"] = hashlib.sha256(forged).hexdigest()
    chain.write_text(json.dumps(data, indent=1))
    with pytest.raises(IntegrityError, match=f"{bid}/chain.json is not authenticated.*A point-in-time restore uses only"):
        pitr.preflight(_pitr(dest))
    chain.write_text(original)
    branches = dest / "binlogs" / "branches.json"
    branches.write_text(json.dumps(json.loads(branches.read_text())["branches"]))  # the unsigned, older layout
    with pytest.raises(IntegrityError, match="branches.json is not authenticated: it carries no MAC"):
        pitr.preflight(_pitr(dest))


def test_a_truncated_archive_re_signed_with_the_real_key_is_refused(signed, target, tmp_path):
    """A rollback to an older, validly signed state: the last files dropped from chain.json and the chain signed
    again with the deployment's own key. The head recorded in Airflow after the archive's last run refuses it."""
    dest, storage, bid = _copy(signed, tmp_path)
    recorded = archive.head(storage)
    whole = pitr.preflight(_pitr(dest), recorded)
    chain = archive.read_branch(storage, bid)
    whole_entries, whole_covered = list(chain.entries), chain.covered
    dropped = [e.name for e in chain.entries[-2:]]
    chain.entries = chain.entries[:-2]
    archive.write_branch(storage, chain)  # signed with the real key, as an older state of the archive was
    assert archive.read_branch(storage, bid).entries[-1].name not in dropped
    short = pitr.preflight(_pitr(dest))  # without the record the restore to latest silently ends early
    assert short.replay["span"] != whole.replay["span"]
    with pytest.raises(IntegrityError, match=f"ends before, or differs from, the head recorded in Airflow.*"
                                             f"{dropped[-1]} is missing from its chain.*nothing was restored"):
        pitr.preflight(_pitr(dest), recorded)
    # the same last segment with an older `covered` (a review: `latest` would end earlier, silently)
    chain = archive.read_branch(storage, bid)
    archive.write_branch(storage, dataclasses.replace(chain, entries=whole_entries, covered={
        **(whole_covered or {}), "time": float((whole_covered or {}).get("time") or 1) - 600}))
    with pytest.raises(IntegrityError, match="the source was covered up to"):
        pitr.preflight(_pitr(dest), recorded)
    # a branch dropped from branches.json (signed again) is refused too
    archive.write_branches(storage, [])
    with pytest.raises(IntegrityError, match=f"branch {bid} is missing"):
        pitr.preflight(_pitr(dest), recorded)


def test_the_recorded_head_goes_through_airflow(signed, target, run_dag, tmp_path):
    """The binlog_archive DAG records the head (a Variable per destination, and on its Asset event); the
    point_in_time_restore DAG reads it and refuses the truncated archive in its plan task. The key reaches no
    log and no file."""
    from lastline.airflow.assets import head_variable

    dest, storage, bid = _copy(signed, tmp_path)
    state, tis, logs = run_dag("binlog_archive", {
        "source_conn_id": "t_sauth_src", "destination": f"file://{dest}", "aws_conn_id": None, "until_current": True})
    assert state == "success", tis
    from airflow.models import Variable

    recorded = json.loads(Variable.get(head_variable(f"file://{dest}")))
    assert recorded["branch"] == bid and recorded["segment"]["sha256"]
    chain = archive.read_branch(storage, bid)
    dropped = chain.entries[-1].name
    chain.entries = chain.entries[:-1]
    archive.write_branch(storage, chain)
    state, tis, logs = run_dag("point_in_time_restore", {
        "target_conn_id": "t_target", "destination": f"file://{dest}", "until": "latest", "base": "auto",
        "base_kind": "any", "databases": [], "branch": "", "replay_method": "auto", "parallel": 2, "force": True,
        "restore_into_source": "", "aws_conn_id": None})
    assert state == "failed" and tis["plan"] == "failed", tis
    assert f"{dropped} is missing from its chain" in logs
    secret = json.loads(os.environ[KEY_ENV])["password"]
    assert secret not in logs
    assert not [p for p in dest.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_a_rotated_key_still_reads_older_backups_and_signs_with_the_new_one(signed, target, tmp_path, monkeypatch):
    dest, storage, bid = _copy(signed, tmp_path)
    old = json.loads(os.environ[KEY_ENV])
    monkeypatch.setenv(KEY_ENV, json.dumps({"conn_type": "generic", "login": "tests-k2", "password": "k2" * 32,
                                            "extra": {"keys": {"tests-k1": old["password"]}}}))
    manifest = read_manifest(storage, signed["base"], "physical")
    assert manifest.authenticity.key_id == "tests-k1"
    assert physical_restore.preflight(_physical(dest, signed["base"])).backup.backup_id == signed["base"]
    assert pitr.preflight(_pitr(dest)).base == signed["base"]
    _write(signed["server"], 5)
    archive.ship(signed["server"], storage)  # what the archiver writes now is signed with the new key
    assert '"lastline_mac": "hmac-sha256:tests-k2:' in (dest / "binlogs" / bid / "chain.json").read_text()
    assert pitr.preflight(_pitr(dest)).base == signed["base"]
    # the old key retired: what only it signed is refused, by its key id
    monkeypatch.setenv(KEY_ENV, json.dumps({"conn_type": "generic", "login": "tests-k2", "password": "k2" * 32}))
    with pytest.raises(IntegrityError, match="signed with key 'tests-k1', which the storage key connection does not hold"):
        physical_restore.preflight(_physical(dest, signed["base"]))
    # a key too short to be one is a configuration error, named
    monkeypatch.setenv(KEY_ENV, json.dumps({"conn_type": "generic", "login": "tests-k3", "password": "short"}))
    with pytest.raises(Refusal, match="must be a string of 32 characters or more"):
        physical_restore.preflight(_physical(dest, signed["base"]))


def test_without_a_key_physical_and_point_in_time_restores_refuse_unless_the_storage_is_trusted(
        signed, target, tmp_path, monkeypatch):
    dest, storage, _ = _copy(signed, tmp_path)
    monkeypatch.delenv(auth.KEY_CONN_ENV)
    with pytest.raises(IntegrityError, match="this deployment has no storage key"):
        physical_restore.preflight(_physical(dest, signed["base"]))
    with pytest.raises(IntegrityError, match="this deployment has no storage key"):
        pitr.preflight(_pitr(dest))
    monkeypatch.setenv(auth.TRUSTED_ENV, "true")
    assert physical_restore.preflight(_physical(dest, signed["base"])).backup.backup_id == signed["base"]
    assert pitr.preflight(_pitr(dest)).base == signed["base"]
    # a logical reader's view: the verdict is there to report, whatever the kind
    assert not read_manifest(storage, signed["base"], "physical", require=False).authenticity.ok


def test_latest_refuses_a_destination_whose_recorded_newest_backup_is_gone(signed, target, run_dag, tmp_path):
    """A review: with the newest backup deleted (or its manifest spoiled), `latest` silently restored an older, validly
    signed one. The newest backup of each kind is recorded in Airflow when its run announces it; a restore whose
    `latest` is older than that record is refused in its preflight, the target untouched; named, it restores."""
    from airflow.models import Variable

    from lastline.airflow.assets import newest_variable
    from lastline.storage import canonical

    dest, _, _ = _copy(signed, tmp_path)
    place = canonical(f"file://{dest}/./")  # any spelling of the destination finds the one record
    gone = "20991231T000000Z"  # what the backup DAG's announce recorded, since deleted from the storage
    Variable.set(newest_variable(place, "physical"), json.dumps({"backup_id": gone, "destination": place}))
    server = target.server()
    server.query("CREATE DATABASE IF NOT EXISTS sauth_marker")
    up = int(server.query("SHOW GLOBAL STATUS LIKE 'Uptime'")[0][1])
    state, tis, logs = run_dag("physical_restore", {**_physical(dest, "latest"), "parallel": 2, "use_memory": None,
                                                    "restore_into_source": "", "aws_conn_id": None})
    assert state == "failed" and tis["preflight"] == "failed", tis
    assert f"the newest physical backup lastline recorded in Airflow, {gone}, is missing or unreadable, so `latest` " \
           f"would be {signed['base']}" in logs
    # never stopped, never replaced
    assert int(server.query("SHOW GLOBAL STATUS LIKE 'Uptime'")[0][1]) >= up and server.query("SHOW DATABASES LIKE 'sauth_marker'")
    server.query("DROP DATABASE sauth_marker")
    from lastline.manifest import resolve_backup

    assert resolve_backup(f"file://{dest}/{signed['base']}")[1] == signed["base"]  # named: the operator's choice


def test_where_the_deployment_encrypts_a_plain_physical_base_restores_only_authenticated_or_on_trusted_storage(
        signed, target, tmp_path, monkeypatch):
    """Issue 46: a plain backup in a deployment that encrypts (an encryption key connection) is used by a physical or
    a point-in-time restore only with an authenticated manifest, or on storage declared trusted."""
    from lastline_dev.keys import encryption_connection

    dest, _, _ = _copy(signed, tmp_path)
    encryption_connection(monkeypatch.setenv, "lastline_enc_sauth", "sauth-k1", "6c" * 32)
    assert physical_restore.preflight(_physical(dest, signed["base"])).backup.backup_id == signed["base"]  # signed
    assert pitr.preflight(_pitr(dest)).base == signed["base"]
    manifest = dest / signed["base"] / "manifest.json"
    original = manifest.read_text()
    data = json.loads(original)
    data["sha256"] = hashlib.sha256(b"plain bytes of the writer's choosing").hexdigest()
    manifest.write_text(json.dumps(data))  # a storage writer's manifest for plain files
    with pytest.raises(IntegrityError, match="manifest.json is not authenticated.*nothing was used"):
        physical_restore.preflight(_physical(dest, signed["base"]))
    manifest.write_text(original)
    monkeypatch.delenv(auth.KEY_CONN_ENV)
    for refused in (lambda: physical_restore.preflight(_physical(dest, signed["base"])), lambda: pitr.preflight(_pitr(dest))):
        with pytest.raises(IntegrityError, match="this deployment has no storage key"):
            refused()
    monkeypatch.setenv(auth.TRUSTED_ENV, "true")
    assert physical_restore.preflight(_physical(dest, signed["base"])).backup.backup_id == signed["base"]
    assert pitr.preflight(_pitr(dest)).base == signed["base"]
    assert target.server().query("SELECT 1") == [(1,)]  # the target was never touched
