"""Logical restores through the DAG on real servers: exact round trips, crashes and re-runs, bad input."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lastline.backups import open_backup
from lastline.core.errors import IntegrityError, PreflightError, ProtectedTargetError, ServerError
from lastline.core.sql import global_variables, table_exists
from lastline.logical.backup import stages as logical_backup
from lastline.logical.format import dialect
from lastline.logical.restore import stages as logical_restore
from lastline.logical.restore import tuning
from lastline.logical.restore.backup_files import run_server
from lastline.logical.restore.create import table_creates
from lastline.logical.restore.plans import ConfigSnapshot, RestorePlan
from lastline.logical.restore.target_state import STATE, aside_name
from lastline.logical.restore.verify import chunk_checks, recorded_checks
from lastline.manifest import LogicalManifest
from lastline_dev.sandbox import alive

pytestmark = pytest.mark.e2e

WATCHED = tuning.TUNED_VARIABLES


def _variables(server) -> dict[str, str]:
    conn = server.connect()
    try:
        return global_variables(conn.cursor(), WATCHED)
    finally:
        conn.close()


def _objects(server, dbs: tuple[str, ...]) -> dict:
    """Tables' DDL and CHECKSUM TABLE, and every view, trigger, routine and event body."""
    conn = server.connect()
    try:
        cur = conn.cursor()
        out = {}
        ph = ", ".join(["%s"] * len(dbs))
        cur.execute(f"SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA IN ({ph})", dbs)
        for s, t, kind in cur.fetchall():
            q = dialect.qualified(s, t)
            if kind == "BASE TABLE":
                cur.execute(f"SHOW CREATE TABLE {q}")
                ddl = cur.fetchone()[1]
                cur.execute(f"CHECKSUM TABLE {q}")
                out[f"table {s}.{t}"] = (ddl, cur.fetchone()[1])
            elif kind == "SEQUENCE":
                cur.execute(f"SELECT next_not_cached_value FROM {q}")
                out[f"sequence {s}.{t}"] = cur.fetchone()[0]
        for kind, sql in (
            ("view", f"SELECT TABLE_SCHEMA, TABLE_NAME, VIEW_DEFINITION FROM information_schema.VIEWS WHERE TABLE_SCHEMA IN ({ph})"),
            ("trigger", f"SELECT TRIGGER_SCHEMA, TRIGGER_NAME, CONCAT(ACTION_ORDER, ACTION_STATEMENT, SQL_MODE) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA IN ({ph})"),
            ("routine", f"SELECT ROUTINE_SCHEMA, ROUTINE_NAME, CONCAT(ROUTINE_DEFINITION, SQL_MODE) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA IN ({ph})"),
            ("event", f"SELECT EVENT_SCHEMA, EVENT_NAME, CONCAT(EVENT_DEFINITION, STATUS) FROM information_schema.EVENTS WHERE EVENT_SCHEMA IN ({ph})"),
        ):
            cur.execute(sql, dbs)
            out.update({f"{kind} {s}.{n}": body for s, n, body in cur.fetchall()})
        return out
    finally:
        conn.close()


def _errors(logs: str) -> str:
    """The error lines of a run's log, for assertion messages."""
    return "\n".join(line for line in logs.splitlines() if "Error" in line or "error" in line)[-4000:]


def _diff(a: dict, b: dict) -> list[str]:
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


@pytest.fixture(scope="module")
def backups(logical_source, tmp_path_factory) -> Path:
    """One logical backup of store + edge + big (300k rows in 100k-row chunks)."""
    logical_source.load_tables("big", {"t": 300_000})
    dest = tmp_path_factory.mktemp("lrestore")
    plan = logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["store", "edge", "big"],
                         "chunk_rows": 100_000})
    logical_backup.dump(plan)
    return dest


def _conf(dest: Path, **kw) -> dict:
    """Every Param spelled out (dag.test in one process can carry a run's values into the next)."""
    return {
        "target_conn_id": "t_ltarget", "backup": f"file://{dest}/latest", "redo_log_bytes": 128 << 20, "databases": [],
        "parallel": 2, "tune": True, "restart_allowed": False, "defer_indexes": True, "force": False, "aws_conn_id": None, **kw,
    }


def test_round_trip_of_store_and_corpus_is_exact_and_config_comes_back(run_dag, backups, logical_source, logical_target):
    before = _variables(logical_target.server())
    state, tis, logs = run_dag("logical_restore", _conf(backups, force=True))
    assert state == "success", (tis, _errors(logs))
    assert tis["approve"] == "skipped" and tis["prepare"] == "success"  # no person asked: preflight skipped it, no task ran
    dbs = ("store", "edge", "big")
    src, dst = _objects(logical_source.server(), dbs), _objects(logical_target.server(), dbs)
    assert _diff(src, dst) == []
    assert _variables(logical_target.server()) == before
    assert "tune: set" in logs and "innodb_flush_log_at_trx_commit" in logs
    assert "load " in logs and "MB/s" in logs and "revert: restored" in logs and "verify ok" in logs
    chart = next(line.split("report: chart ", 1)[1].split(",")[0] for line in logs.splitlines() if "report: chart " in line)
    svg = Path(chart.removeprefix("file://")).read_text()  # where the UI's report link reads it
    assert svg.startswith("<svg") and "seconds per stage" in svg and "store." in svg  # a chart, its tables named
    summary = Path(chart.removeprefix("file://")).with_name("summary.md").read_text()  # the Report tab's first page
    assert summary.splitlines()[2].startswith("**Verified: all ") and "tables hold exactly the backup's" in summary
    rows = int(re.search(r"hold exactly the backup's ([0-9,]+) rows", summary)[1].replace(",", ""))
    assert re.fullmatch(rf"# Logical restore of file://\S+ into t_ltarget: verified, {rows:,} rows, [0-9,.]+ MB in "
                        r"[0-9,.]+ s", summary.splitlines()[0]), summary.splitlines()[0]
    assert "row hashes, summed per table, equal the ones computed on the source" in summary
    assert "- **Backup:** authenticated (storage key " in summary  # every report says whether its backup was
    assert "Returned value was" not in logs  # return values stay out of the task logs
    rows = logical_target.server().query(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '_lastline' AND TABLE_NAME IN ('ledger', 'config_snapshot')")
    assert rows[0][0] <= 1  # the ledger is dropped; the emptied snapshot table may stay
    assert logical_source.server().password not in logs


def test_corrupt_chunk_is_named_nothing_of_it_is_kept_and_revert_runs(run_dag, backups, logical_source, logical_target, tmp_path):
    dbs = ("store", "edge", "big")
    state, tis, logs = run_dag("logical_restore", _conf(backups, force=True))  # a good restore to replace
    assert state == "success", (tis, _errors(logs))
    old = _objects(logical_target.server(), dbs)
    dest = tmp_path / "copy"
    shutil.copytree(backups, dest)
    (backup,) = [p for p in dest.iterdir() if p.is_dir()]
    m = LogicalManifest.from_json((backup / "manifest.json").read_text())
    big = next(t for t in m.tables if t.name == "t")
    victim = backup / big.chunks[1].file
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    before = _variables(logical_target.server())
    state, tis, logs = run_dag("logical_restore", _conf(dest, force=True))
    assert state == "failed" and tis["revert"] == "success" and tis["verify"] == "upstream_failed"
    assert big.chunks[1].file.split("/")[-1] in logs and "(big.t)" in logs
    assert _variables(logical_target.server()) == before
    n = logical_target.server().query("SELECT COUNT(*) FROM big.t")[0][0]
    assert n == big.chunks[0].rows  # chunk 0 is in; chunk 1 left nothing behind; the unit stopped there
    # force dropped nothing: the old tables wait aside, with their triggers' and views' text, until a verified restore
    target = logical_target.server()
    aside = {db: aside_name(db) for db in dbs}
    for db in dbs:
        rows = target.query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_TYPE = 'BASE TABLE' "
                            "AND TABLE_NAME <> '__lastline_objects'", (aside[db],))
        assert {f"table {db}.{t}" for (t,) in rows} == {k for k in old if k.startswith(f"table {db}.")}
        for (t,) in rows:
            checksum = target.query(f"CHECKSUM TABLE {dialect.qualified(aside[db], t)}")[0][1]
            assert checksum == old[f"table {db}.{t}"][1], (db, t)
    saved = {(k, n) for k, n in target.query(f"SELECT kind, name FROM {dialect.qualified(aside['store'], '__lastline_objects')}")}
    assert ("TRIGGER", "customer_create_date") in saved and ("VIEW", "actor_info") in saved
    assert "kept in lastline_aside_" in logs
    # a re-run that verifies replaces the partial restore and only then drops the old tables
    state, tis, logs = run_dag("logical_restore", _conf(backups, force=True))
    assert state == "success", (tis, _errors(logs))
    assert not target.query("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'lastline\\_aside\\_%'")
    assert _diff(_objects(logical_source.server(), dbs), _objects(target, dbs)) == []


def _wait_for_load(server, table: str, min_ledger: int, timeout: float = 60) -> None:
    """Until a LOAD DATA into `table` runs and the ledger already holds `min_ledger` rows."""
    conn = server.connect()
    conn.autocommit(True)  # else REPEATABLE READ freezes the ledger count at its first read
    cur = conn.cursor()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE %s", (f"LOAD DATA%{table}%",))
            running = cur.fetchone()[0]
            ledger = 0
            if table_exists(cur, "_lastline", "ledger"):
                cur.execute("SELECT COUNT(*) FROM _lastline.ledger")
                ledger = cur.fetchone()[0]
            if running and ledger >= min_ledger:
                return
            time.sleep(0.02)
    finally:
        conn.close()
    raise AssertionError(f"no LOAD DATA into {table} seen within {timeout} s")


def _big_unit(plan: RestorePlan) -> dict:
    """A work unit holding every chunk of big.t (the plan may cut it in small units; the load of one unit is
    what is killed here, and it must still be running when its first chunk is in the ledger)."""
    from lastline.logical.restore.work_units import plan_units

    manifest = open_backup(plan.backup).logical
    unit = next(u for u in plan_units(manifest, [t for t in manifest.tables if t.schema == "big"], 1, min_unit_bytes=1 << 40)
                if u.name.startswith("big.t"))
    assert sum(p.last - p.first + 1 for p in unit.parts) >= 3, unit
    return unit.to_dict()


@pytest.mark.faults
def test_load_task_killed_mid_chunk_then_rerun_is_exact(run_dag, backups, logical_source, logical_target, fault):
    plan = logical_restore.preflight(_conf(backups, force=True, tune=False))
    logical_restore.create_schema(plan)
    unit = _big_unit(plan)
    code = ("import json, sys; from lastline.logical.restore import stages as logical_restore; "
            "from lastline.logical.restore.plans import RestorePlan; "
            "logical_restore.load(RestorePlan.of(json.loads(sys.argv[1])), json.loads(sys.argv[2]))")
    child = subprocess.Popen([sys.executable, "-c", code, json.dumps(plan.to_dict()), json.dumps(unit)], env=os.environ.copy())
    _wait_for_load(logical_target.server(), "big", min_ledger=1)
    child.send_signal(signal.SIGKILL)
    child.wait()
    state, tis, logs = run_dag("logical_restore", _conf(backups))  # no force: it resumes this backup's restore
    assert state == "success", (tis, _errors(logs))
    dbs = ("store", "edge", "big")
    assert _diff(_objects(logical_source.server(), dbs), _objects(logical_target.server(), dbs)) == []
    skipped = next(line for line in logs.splitlines() if "already in the ledger, skipped" in line)
    fault("kill -9 of a load task", f"the load task died (SIGKILL); the re-run resumed: {skipped[skipped.index('big.t:'):]}",
          "re-run without force: every table's DDL and CHECKSUM TABLE equal to the source's")


@pytest.mark.faults
def test_target_killed_mid_load_then_rerun_is_exact(run_dag, backups, logical_source, logical_target, fault):
    killed: list[int] = []

    def kill_target():
        # one committed chunk is enough for the resume to skip; waiting for more risks landing on big's
        # last chunk, after which no load is left to kill
        _wait_for_load(logical_target.server(), "big", min_ledger=1)
        pid = logical_target.pid()
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    th = threading.Thread(target=kill_target, daemon=True)
    th.start()
    state, tis, logs = run_dag("logical_restore", _conf(backups, force=True))
    th.join()
    first_logs = logs
    assert state == "failed" and tis["load"] == "failed", (tis, _errors(logs))
    assert killed
    while alive(killed[0]):  # a killed server stops answering before it is gone: start() must not see it
        time.sleep(0.1)
    logical_target.start()
    state, tis, logs = run_dag("logical_restore", _conf(backups))  # resumes; its revert restores the first run's snapshot
    assert state == "success", (tis, _errors(logs))
    assert "never reverted" in logs
    dbs = ("store", "edge", "big")
    assert _diff(_objects(logical_source.server(), dbs), _objects(logical_target.server(), dbs)) == []
    seen = next(line for line in _errors(first_logs).splitlines() if "lost the connection to the target" in line)
    fault("kill -9 of the target server", seen.split("ServerError: ")[-1],
          "re-run after the server restarted: equal to the source; configuration reverted")


def test_preflight_refusals(backups, logical_target, tmp_path):
    from conftest import set_conn

    set_conn("t_lprotected", logical_target, protected=True)
    with pytest.raises(ProtectedTargetError, match="protected"):
        logical_restore.preflight(_conf(backups, target_conn_id="t_lprotected"))
    with pytest.raises(PreflightError, match="already exist .* not empty.*: set force"):
        logical_restore.preflight(_conf(backups))  # the databases hold the earlier tests' restores
    with pytest.raises(IntegrityError, match="no complete logical backup"):
        logical_restore.preflight(_conf(tmp_path))
    newer = tmp_path / "newer"
    shutil.copytree(backups, newer)
    (backup,) = [p for p in newer.iterdir() if p.is_dir()]
    data = json.loads((backup / "manifest.json").read_text())
    data["server_version"] = "99.1.0-MariaDB"
    (backup / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(PreflightError, match="newer than the target"):
        logical_restore.preflight(_conf(newer, force=True))
    set_conn("t_lbadpw", logical_target)
    bad = json.loads(os.environ["AIRFLOW_CONN_T_LBADPW"])
    bad["password"] = "wrong"
    os.environ["AIRFLOW_CONN_T_LBADPW"] = json.dumps(bad)
    with pytest.raises(ServerError, match="wrong user or password"):
        logical_restore.preflight(_conf(backups, target_conn_id="t_lbadpw", force=True))


def test_restart_profile_is_applied_then_removed(run_dag, backups, logical_source, logical_target):
    server = logical_target.server()
    drop_in = Path(server.config_dir) / tuning.DROP_IN
    before = server.variables("innodb_doublewrite", "log_bin", "innodb_autoinc_lock_mode")
    seen: list[dict] = []
    stop = threading.Event()

    def watch():  # the restart profile must be in force at some point of the run (it restarts twice)
        while not stop.is_set():
            try:
                seen.append(server.variables("innodb_doublewrite", "log_bin", "innodb_autoinc_lock_mode"))
            except Exception:  # noqa: BLE001 - down while it restarts
                pass
            time.sleep(0.05)

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    state, tis, logs = run_dag("logical_restore", _conf(backups, force=True, restart_allowed=True, databases=["store"]))
    stop.set()
    th.join()
    assert state == "success", tis
    assert {"innodb_doublewrite": "OFF", "log_bin": "OFF", "innodb_autoinc_lock_mode": "2"} in seen
    assert not drop_in.exists() and "restarting the target" in logs
    assert server.variables("innodb_doublewrite", "log_bin", "innodb_autoinc_lock_mode") == before
    assert _diff(_objects(logical_source.server(), ("store",)), _objects(server, ("store",))) == []


def test_restore_from_s3(run_dag, logical_source, logical_target, s3_server):
    plan = logical_backup.preflight({"source_conn_id": "t_lsource", "destination": "s3://backups/lr", "aws_conn_id": "t_s3",
                         "databases": ["edge"], "chunk_rows": 1000, "compression": "pigz"})
    logical_backup.dump(plan)
    state, tis, _logs = run_dag("logical_restore", {
        **_conf(Path("/unused"), force=True, aws_conn_id="t_s3"), "backup": "s3://backups/lr/latest",
    })
    assert state == "success", tis
    assert _diff(_objects(logical_source.server(), ("edge",)), _objects(logical_target.server(), ("edge",))) == []


def test_revert_names_every_variable_that_did_not_come_back(logical_target):
    from lastline.core.errors import LastlineError

    server = logical_target.server()
    snap = tuning.take_snapshot(server, "test-run", "now")
    assert not snap.inherited and snap.variables["innodb_doublewrite"] == "ON"
    wrong = {**snap.variables, "innodb_doublewrite": "OFF"}  # a restart-only value revert cannot set by itself
    conn = server.connect()
    try:
        conn.cursor().execute("UPDATE _lastline.config_snapshot SET variables = %s WHERE id = 1", (json.dumps(wrong),))
        conn.commit()
        with pytest.raises(LastlineError, match="innodb_doublewrite is 'ON', was 'OFF'"):
            tuning.revert(server)
        assert tuning.read_snapshot(server) is not None  # kept for the person who fixes it
    finally:
        conn.cursor().execute("DELETE FROM _lastline.config_snapshot")
        conn.commit()
        conn.close()


def test_a_format_1_backup_still_restores_and_verify_says_its_checksum_is_weaker(run_dag, backups, logical_source, logical_target, tmp_path):
    """Backups made before the row-hash checksum (format 1: SUM(CRC32) over the server-built lines, no file
    list) restore; verify checks them the old way and says that this cannot catch a value the dump got wrong."""
    dest = tmp_path / "old"
    shutil.copytree(backups, dest)
    (folder,) = [p for p in dest.iterdir() if p.is_dir()]
    data = json.loads((folder / "manifest.json").read_text())
    src = logical_source.server()
    conn = src.connect()
    try:
        cur = conn.cursor()
        cur.execute("SET time_zone = '+00:00'")
        for t in data["tables"]:
            cur.execute(dialect.legacy_checksum_sql(t["schema"], t["name"], [dialect.Column(**c) for c in t["columns"]]))
            t["checksum"] = str(cur.fetchone()[1])
            for c in t["chunks"]:
                del c["checksum"]
    finally:
        conn.close()
    for key in ("files", "checksum"):
        del data[key]
    data["format"] = "lastline-logical/1"
    (folder / "manifest.json").write_text(json.dumps(data))
    state, tis, logs = run_dag("logical_restore", _conf(dest, force=True, databases=["store"]))
    assert state == "success", (tis, _errors(logs))
    assert "predates row-hash checksums" in logs and "verify ok" in logs
    assert _diff(_objects(src, ("store",)), _objects(logical_target.server(), ("store",))) == []


def test_an_interrupted_run_for_one_database_lets_no_other_run_skip_force(backups, logical_target):
    """Resume is keyed on (backup, databases) on this target: a run for `edge` that stopped after
    create_schema does not let a run for `big` write into an existing, non-empty `big` without force."""
    target = logical_target.server()
    conn = target.connect()
    cur = conn.cursor()
    cur.execute("CREATE DATABASE IF NOT EXISTS big")
    cur.execute("CREATE TABLE IF NOT EXISTS big.precious (id INT PRIMARY KEY)")
    cur.execute("REPLACE INTO big.precious VALUES (1)")
    conn.commit()
    conn.close()
    edge = logical_restore.preflight(_conf(backups, force=True, databases=["edge"]))
    logical_restore.create_schema(edge)  # ...and the run stops here
    assert logical_restore.preflight(_conf(backups, databases=["edge"])).resume  # the same restore resumes
    with pytest.raises(PreflightError, match="big already exist.*set force"):
        logical_restore.preflight(_conf(backups, databases=["big"]))
    assert target.query("SELECT id FROM big.precious") == [(1,)]
    # the restore of edge, run to its end, leaves no state behind
    units = logical_restore.plan_load(edge)
    for u in units:
        logical_restore.load(edge, u)
    logical_restore.finalize(edge)
    assert target.query("SELECT COUNT(*) FROM _lastline.restore_state") == [(0,)]
    assert not logical_restore.preflight(_conf(backups, force=True, databases=["edge"])).resume


def test_per_table_index_builds_run_in_the_lanes_and_two_lanes_split_the_units(backups, logical_source, logical_target, caplog):
    """index_build=per_table: the lane that commits a table's last chunk builds its held-back indexes at once
    (they exist before finalize runs); two lanes run side by side take every unit exactly once between them."""
    import logging
    import threading

    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="lastline.logical.restore")  # a table's line is at debug when it was quick
    dbs = ("store", "big")
    plan = logical_restore.preflight(_conf(backups, force=True, databases=list(dbs), index_build="per_table"))
    snap = logical_restore.snapshot_config(plan)
    logical_restore.prepare(plan)
    lanes = logical_restore.plan_lanes(plan)
    assert [lane.split(" (units ")[0] for lane in lanes] == ["lane 1 of 2", "lane 2 of 2"]
    assert len({lane.split(" (units ")[1] for lane in lanes}) == 1  # one plan's digest: each lane checks its units by it
    results: dict[str, list] = {}
    threads = [threading.Thread(target=lambda lane=lane: results.__setitem__(lane, logical_restore.load_lane(plan, lane))) for lane in lanes]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    loaded = [u.unit for lane in lanes for u in results[lane]]
    assert sorted(loaded) == sorted(u["name"] for u in logical_restore.plan_load(plan))  # every unit once, none twice
    target = logical_target.server()
    indexes = target.query("SELECT COUNT(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = 'store' "
                           "AND TABLE_NAME = 'rental' AND INDEX_NAME <> 'PRIMARY'")[0][0]
    assert indexes >= 3  # built in a lane, before finalize
    assert "store.rental: indexes built in" in caplog.text
    # and each table's checksum, taken in the lane while its pages were in memory, is what verify compares
    assert recorded_checks(target, plan.backup.backup_id) == _backup_checks(plan, dbs)
    logical_restore.finalize(plan)
    _verify_compares_the_kept_checks(plan, snap, logical_source.server(), target, dbs, caplog)


def test_a_lane_refuses_units_its_prepare_did_not_plan(backups, logical_source, logical_target):
    """A lane loads only the units the prepare that made it planned: units planned again since (another prepare of the
    restore) or gone (another restore into these databases cleared them) are refused with what to do, before a row."""
    plan = logical_restore.preflight(_conf(backups, force=True, databases=["store"]))
    logical_restore.snapshot_config(plan)
    try:
        _steps, lanes = logical_restore.prepare(plan)
        ledger = "SELECT COUNT(*) FROM `_lastline`.`ledger` WHERE backup_id = %s"
        before = logical_target.server().query(ledger, (plan.backup.backup_id,))
        digest = lanes[0].split(" (units ")[1].rstrip(")")
        stale = lanes[0].replace(digest, "0" * 12)
        with pytest.raises(IntegrityError, match=r"not the ones prepare handed this lane .*Re-run the restore from prepare"):
            logical_restore.load_lane(plan, stale)
        with logical_target.server().session() as cur:  # what another restore's clear_state does
            cur.execute("DELETE FROM `_lastline`.`work_units`")
            cur.connection.commit()
        with pytest.raises(IntegrityError, match=r"the work units recorded on the target for .* are missing"):
            logical_restore.load_lane(plan, lanes[0])
        assert logical_target.server().query(ledger, (plan.backup.backup_id,)) == before  # not a chunk loaded
    finally:
        logical_restore.revert(plan)


def _base_tables(server, dbs: tuple[str, ...]) -> set[str]:
    ph = ", ".join(["%s"] * len(dbs))
    return {f"{s}.{t}" for s, t in server.query(
        f"SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA IN ({ph}) AND TABLE_TYPE = 'BASE TABLE'", dbs)}


def test_each_table_is_created_by_the_lane_that_loads_it(backups, logical_source, logical_target, caplog):
    """With defer_indexes, prepare creates the databases and sequences and no table: each table is created by the
    lane that loads it, just before its first chunk, so the first rows come in while other tables do not exist yet
    (the first row does not wait for every CREATE), on a connection of the run account without LOCAL INFILE. A unit
    of empty tables alone, found "loaded" (no chunk to say otherwise), creates them. The restore is exact."""
    import logging

    from lastline.logical.restore import lanes as restore_lanes
    from lastline.logical.restore.work_units import Part, WorkUnit

    caplog.set_level(logging.INFO)
    dbs = ("store", "edge", "big")
    plan = logical_restore.preflight(_conf(backups, force=True, databases=list(dbs)))
    snap = logical_restore.snapshot_config(plan)
    steps, lanes = logical_restore.prepare(plan)
    target = logical_target.server()
    backup = open_backup(plan.backup)
    storage, manifest = backup.storage, backup.logical
    tables = [t for t in manifest.tables if t.schema in dbs]
    assert steps["create_schema"].in_lanes == len(tables) and _base_tables(target, dbs) == set()
    assert target.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'edge' AND TABLE_TYPE = 'SEQUENCE'")[0][0]
    units = logical_restore.plan_load(plan)
    first = logical_restore.load(plan, units[0])  # one unit: its tables exist and hold their rows, the others are not made yet
    in_first = {f"{p['schema']}.{p['table']}" for p in units[0]["parts"]}
    assert first.created == len(in_first) and first.rows > 0
    made = _base_tables(target, dbs)
    assert made == in_first and len(made) < len(tables)
    assert logical_restore.load(plan, units[0]).created == 0  # again: every table there, nothing made, every chunk skipped
    for lane in lanes:
        logical_restore.load_lane(plan, lane)
    assert _base_tables(target, dbs) == {f"{t.schema}.{t.name}" for t in tables}
    assert "table(s) before their first chunk" in caplog.text
    empty = next(t for t in tables if not t.chunks)
    target.query(f"DROP TABLE {dialect.qualified(empty.schema, empty.name)}")
    only_empty = WorkUnit(len(units), "empty tables", 0, [Part(empty.schema, empty.name, 0, -1, 0, True)])
    creates = table_creates(plan, manifest, backup.schema)
    assert restore_lanes.load_lane(run_server(plan), storage, manifest, [only_empty], "lane x", 2, create=creates) == []
    assert f"{empty.schema}.{empty.name}" in _base_tables(target, dbs)
    logical_restore.finalize(plan)
    logical_restore.revert(plan)
    assert logical_restore.verify(plan, snap)
    assert _diff(_objects(logical_source.server(), dbs), _objects(target, dbs)) == []


def test_a_create_the_target_refuses_fails_at_once_and_the_re_run_resumes(backups, logical_source, logical_target, tmp_path):
    """A table's CREATE the target refuses (here a duplicated column, from a tampered schema.json) fails the lane at
    once (a Refusal: no retry), naming the table; what was loaded stays in the ledger and a re-run resumes."""
    from conftest import tamper_schema
    from lastline.core.errors import Refusal

    def duplicate_a_column(schema: dict) -> None:
        t = next(t for t in schema["tables"] if t["schema"] == "edge" and t["name"] == "numbers")
        lines = t["create"].split("\n")
        t["create"] = "\n".join([lines[0], lines[1], *lines[1:]])

    bad = tamper_schema(backups, tmp_path / "bad", duplicate_a_column)
    plan = logical_restore.preflight(_conf(bad, force=True, databases=["edge"]))
    snap = logical_restore.snapshot_config(plan)
    try:
        _steps, lanes = logical_restore.prepare(plan)
        with pytest.raises(Refusal, match=r"the target refused to create edge\.numbers: Duplicate column name .*re-run"):
            for lane in lanes:
                logical_restore.load_lane(plan, lane)
    finally:
        logical_restore.revert(plan)
    again = logical_restore.preflight(_conf(backups, databases=["edge"]))  # the untampered backup (the same id): it resumes
    assert again.resume
    logical_restore.snapshot_config(again)
    _steps, lanes = logical_restore.prepare(again)
    loaded = [u for lane in lanes for u in logical_restore.load_lane(again, lane)]
    assert sum(u.skipped for u in loaded) > 0  # what the refused run loaded was not loaded twice
    logical_restore.finalize(again)
    logical_restore.revert(again)
    assert logical_restore.verify(again, snap)
    assert _diff(_objects(logical_source.server(), ("edge",)), _objects(logical_target.server(), ("edge",))) == []


def _committed(server, sql: str, args: tuple) -> None:
    with server.session() as cur:
        cur.execute(sql, args)
        cur.connection.commit()


@pytest.mark.parametrize("first,recorded", [(True, True), (False, True), (True, False), (False, False)],
                         ids=["deferred-then-not", "not-then-deferred", "unrecorded-deferred-then-not", "unrecorded-not-then-deferred"])
def test_a_resume_keeps_the_defer_indexes_its_tables_were_created_with(first, recorded, backups, logical_source, logical_target,
                                                                        caplog):
    """A run stopped after its lanes (its tables created with defer_indexes=`first`) is resumed by a run that asks the
    opposite: the resume keeps the first run's setting, so that the held-back indexes and foreign keys are built once,
    neither left out (big.t without its KEY k, store without its foreign keys) nor added twice. A state an earlier
    lastline left (`recorded` False: no setting in it) resumes with defer_indexes on, under which finalize adds whatever
    a table lacks, either way; create_schema records it. A plan that still disagrees is refused by create_schema
    before it creates anything."""
    import dataclasses
    import logging

    dbs = ("store", "big")
    ours = json.dumps(sorted(dbs))  # the state's row of this restore
    target = logical_target.server()
    plan = logical_restore.preflight(_conf(backups, force=True, databases=list(dbs), defer_indexes=first, index_build="after_all"))
    snap = logical_restore.snapshot_config(plan)
    try:
        try:
            _steps, lanes = logical_restore.prepare(plan)
            for lane in lanes:
                logical_restore.load_lane(plan, lane)
        finally:
            logical_restore.revert(plan)  # stopped before finalize: the restore is unfinished
        if not recorded:  # as a lastline before the setting was kept left it
            _committed(target, f"UPDATE {STATE} SET defer_indexes = NULL WHERE dbs = %s", (ours,))
        kept = first if recorded else True
        with caplog.at_level(logging.WARNING, logger="lastline"):
            again = logical_restore.preflight(_conf(backups, databases=list(dbs), defer_indexes=not first))
        assert again.resume and again.defer_indexes is kept
        if kept == first:
            assert f"defer_indexes={not first} asked, but the unfinished restore this run resumes " + (
                f"created its tables with defer_indexes={first}: kept" if recorded else
                "was started by an earlier lastline, which did not record how it created its tables: resumed with "
                "defer_indexes=True") in caplog.text
        logical_restore.snapshot_config(again)
        with pytest.raises(IntegrityError, match=rf"plan has defer_indexes={not kept}, but the unfinished restore .* "
                                                 rf"defer_indexes={kept}.*from its preflight"):
            logical_restore.create_schema(dataclasses.replace(again, defer_indexes=not kept))
        _steps, lanes = logical_restore.prepare(again)
        assert target.query(f"SELECT defer_indexes FROM {STATE} WHERE dbs = %s", (ours,)) == [(int(kept),)]  # from now on
        for lane in lanes:
            logical_restore.load_lane(again, lane)
        try:
            logical_restore.finalize(again)
        finally:
            logical_restore.revert(again)
    except BaseException:  # later tests must not resume what this one left
        _committed(target, f"DELETE FROM {STATE} WHERE dbs = %s", (ours,))
        raise
    assert logical_restore.verify(again, snap)
    assert _diff(_objects(logical_source.server(), dbs), _objects(target, dbs)) == []


def test_tables_set_aside_by_a_run_that_created_none_yet_still_need_force(backups, logical_target):
    """A forced run sets the old tables aside and stops before any lane created a table: the database is empty, but
    another restore into it still needs force (and would ask for approval) - the old tables are what is at stake."""
    target = logical_target.server()
    target.query("CREATE DATABASE IF NOT EXISTS edge")
    target.query("CREATE TABLE IF NOT EXISTS edge.precious (id INT PRIMARY KEY)")
    plan = logical_restore.preflight(_conf(backups, force=True, databases=["edge"]))
    logical_restore.snapshot_config(plan)
    logical_restore.prepare(plan)  # the old edge is set aside; no lane runs
    logical_restore.revert(plan)
    assert _base_tables(target, ("edge",)) == set() and _base_tables(target, (aside_name("edge"),))
    with pytest.raises(PreflightError, match=r"edge(, big)? already exist.*set aside.*set force"):
        logical_restore.preflight(_conf(backups, databases=["edge", "big"]))
    # the same restore resumes, and completes
    again = logical_restore.preflight(_conf(backups, databases=["edge"]))
    assert again.resume
    snap = logical_restore.snapshot_config(again)
    _steps, lanes = logical_restore.prepare(again)
    for lane in lanes:
        logical_restore.load_lane(again, lane)
    logical_restore.finalize(again)
    logical_restore.revert(again)
    assert logical_restore.verify(again, snap) and not _base_tables(target, (aside_name("edge"),))


def test_a_manifest_and_schema_json_naming_different_tables_are_refused_before_anything(backups, logical_target, tmp_path):
    from conftest import tamper_schema

    def drop_a_table(schema: dict) -> None:
        schema["tables"] = [t for t in schema["tables"] if not (t["schema"] == "edge" and t["name"] == "numbers")]

    bad = tamper_schema(backups, tmp_path / "bad", drop_a_table)
    with pytest.raises(IntegrityError, match=r"do not name the same tables: edge\.numbers \(only in the manifest\)"):
        logical_restore.preflight(_conf(bad, force=True, databases=["edge"]))


def test_without_defer_indexes_prepare_creates_every_table_with_its_keys(backups, logical_source, logical_target):
    """defer_indexes off: a CREATE carries its foreign keys, so prepare creates every table (one at a time where
    keys name other tables) and the lanes create none."""
    dbs = ("store",)
    plan = logical_restore.preflight(_conf(backups, force=True, databases=list(dbs), defer_indexes=False))
    snap = logical_restore.snapshot_config(plan)
    steps, lanes = logical_restore.prepare(plan)
    target = logical_target.server()
    assert steps["create_schema"].in_lanes == 0
    assert _base_tables(target, dbs) == {f"{t.schema}.{t.name}" for t in open_backup(plan.backup).logical.tables if t.schema in dbs}
    loaded = [u for lane in lanes for u in logical_restore.load_lane(plan, lane)]
    assert loaded and all(u.created == 0 for u in loaded)
    logical_restore.finalize(plan)
    logical_restore.revert(plan)
    assert logical_restore.verify(plan, snap)
    assert _diff(_objects(logical_source.server(), dbs), _objects(target, dbs)) == []


def test_after_all_finalize_takes_each_checksum_right_after_the_tables_indexes(backups, logical_source, logical_target, caplog):
    """index_build=after_all: each chunk of a table cut in primary-key ranges (or of one chunk) is checked in its
    own transaction as it loads, and finalize keeps the sum of a table's chunk checks; the other tables'
    checksums are taken right after their indexes. Verify compares those (it reads no table again) and forgets them."""
    import logging

    caplog.set_level(logging.INFO)
    dbs = ("store", "big")
    plan = logical_restore.preflight(_conf(backups, force=True, databases=list(dbs), index_build="after_all"))
    snap = logical_restore.snapshot_config(plan)
    logical_restore.prepare(plan)
    for lane in logical_restore.plan_lanes(plan):
        logical_restore.load_lane(plan, lane)
    target = logical_target.server()
    assert recorded_checks(target, plan.backup.backup_id) == {}  # no lane took one
    # each chunk of a table cut in primary-key ranges (or of one chunk) was checked in its transaction
    manifest = open_backup(plan.backup).logical
    ranged = [t for t in manifest.tables if t.schema in dbs and chunk_checks(manifest, t) is not None]
    assert any(len(t.chunks) > 1 for t in ranged)  # big.t: several key ranges
    assert sum(len(t.chunks) for t in ranged) == target.query(
        "SELECT COUNT(*) FROM _lastline.ledger WHERE backup_id = %s AND checksum_seen IS NOT NULL", (manifest.backup_id,))[0][0]
    logical_restore.finalize(plan)
    assert f"finalize: {len(ranged)} of " in caplog.text
    _verify_compares_the_kept_checks(plan, snap, logical_source.server(), target, dbs, caplog)


def _verify_compares_the_kept_checks(plan: RestorePlan, snap: ConfigSnapshot, source, target, dbs: tuple[str, ...], caplog) -> None:
    """After finalize: every table's kept check is the manifest's; revert, then verify passes comparing them
    (it says so), forgets them, and the data equals the source's."""
    manifest = _backup_checks(plan, dbs)
    backup_id = plan.backup.backup_id
    assert recorded_checks(target, backup_id) == manifest
    logical_restore.revert(plan)
    caplog.clear()
    assert logical_restore.verify(plan, snap)
    assert f"({len(manifest)} taken as each table completed)" in caplog.text
    assert recorded_checks(target, backup_id) == {}  # forgotten once verified
    assert _diff(_objects(source, dbs), _objects(target, dbs)) == []


def _backup_checks(plan: RestorePlan, dbs: tuple[str, ...]) -> dict:
    """Rows and checksum of each table of `dbs` as the backup's manifest gives them, by (schema, table)."""
    return {(t.schema, t.name): (t.rows, t.checksum) for t in open_backup(plan.backup).logical.tables
            if t.schema in dbs}


def test_small_tables_are_created_with_their_indexes_and_big_ones_wait_for_their_rows(backups, logical_source, logical_target):
    """With defer_indexes, a table under INLINE_INDEXES_BELOW keeps its secondary indexes in its CREATE (an ALTER
    afterwards costs more than their upkeep while so few rows load), a big one (big.t, 58 MB) gets them once its
    rows are in; foreign keys wait for finalize either way. The restore is exact."""
    target = logical_target.server()
    plan = logical_restore.preflight(_conf(backups, force=True, databases=["store", "big"], index_build="after_all"))

    def indexes(db: str, table: str) -> set[str]:
        return {r[0] for r in target.query("SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS "
                                           "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (db, table))}

    snap = logical_restore.snapshot_config(plan, "inline")
    try:
        _steps, lanes = logical_restore.prepare(plan)
        for lane in lanes:  # each creates the tables it loads
            logical_restore.load_lane(plan, lane)
        assert indexes("store", "actor") == {"PRIMARY", "idx_actor_last_name"}  # 200 rows: with its index
        assert indexes("big", "t") == {"PRIMARY"}  # 58 MB: its KEY k after its rows (after_all: in finalize)
        assert not target.query("SELECT COUNT(*) FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_SCHEMA = 'store' "
                                "AND CONSTRAINT_TYPE = 'FOREIGN KEY'")[0][0]
        logical_restore.finalize(plan)
    finally:
        logical_restore.revert(plan)
    assert logical_restore.verify(plan, snap).tables
    assert indexes("big", "t") == {"PRIMARY", "k"}
    dbs = ("store", "big")
    assert _diff(_objects(logical_source.server(), dbs), _objects(target, dbs)) == []


def _restore(plan: RestorePlan) -> None:
    """Every step of a logical restore, in process, revert always; verify last."""
    from conftest import restore_steps

    assert logical_restore.verify(plan, restore_steps(plan))


def _root(inst):
    from lastline.core.servers import Server
    return Server(conn_id="root", socket=str(inst.sock), user="root")


def _archive_plugin(inst, on: bool) -> None:
    with _root(inst).session() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'ARCHIVE'")
        if bool(cur.fetchone()[0]) != on:
            cur.execute(f"{'INSTALL' if on else 'UNINSTALL'} SONAME 'ha_archive'")


def test_a_table_whose_engine_the_target_lacks_is_refused_never_made_with_another(backups, logical_source, logical_target, tmp_path):
    """Before anything is touched, preflight refuses: an ARCHIVE table on a target without the plugin, or any
    MyISAM/Aria table on one whose enforce_storage_engine makes every table InnoDB (naming the tables, the engine and
    the remedy); a schema.json whose CREATE names another engine than the manifest (which decides how a table is
    loaded). A target that loses the engine after preflight refuses the CREATE: the load session never lets it make
    the table InnoDB instead (NO_ENGINE_SUBSTITUTION). With the plugin back, the re-run restores exactly, as ARCHIVE."""
    from conftest import tamper_schema
    from lastline.core.errors import Refusal
    from lastline.logical.restore.target_state import empty_table

    try:
        _archive_plugin(logical_source, True)
        with _root(logical_source).session() as cur:
            cur.execute("CREATE DATABASE arch")
            cur.execute("CREATE TABLE arch.`log book` (id INT NOT NULL, msg TEXT) ENGINE=ARCHIVE")
            cur.execute("INSERT INTO arch.`log book` SELECT seq, CONCAT('tab\\there\\\\', seq) FROM mysql.seq_1_to_5000")
        dest = tmp_path / "arch"
        logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["arch"]}))
        with pytest.raises(PreflightError) as err:
            logical_restore.preflight(_conf(dest, databases=["arch"]))
        message = str(err.value)
        assert "lacks the storage engine(s) of these tables: ARCHIVE (1: arch.log book)" in message, message
        assert "INSTALL SONAME 'ha_archive'" in message and "Nothing was touched" in message, message
        assert not logical_target.server().query("SHOW DATABASES LIKE 'arch'")

        def archive_numbers(schema: dict) -> None:
            t = next(t for t in schema["tables"] if t["schema"] == "edge" and t["name"] == "numbers")
            assert "ENGINE=InnoDB" in t["create"]
            t["create"] = t["create"].replace("ENGINE=InnoDB", "ENGINE=ARCHIVE")

        with pytest.raises(IntegrityError, match=r"disagree on the engine of 1 table\(s\): edge\.numbers \(InnoDB in the "
                                                 r"manifest, ARCHIVE in schema\.json\)"):
            logical_restore.preflight(_conf(tamper_schema(backups, tmp_path / "bad", archive_numbers), force=True, databases=["edge"]))

        with _root(logical_target).session() as cur:
            cur.execute("SET GLOBAL enforce_storage_engine = 'InnoDB'")
        try:
            with pytest.raises(PreflightError, match=r"makes every table INNODB \(enforce_storage_engine\) and so refuses "
                                                     r"the storage engine\(s\) of these tables: ARIA \(1: edge\.aria_t\); MYISAM"):
                logical_restore.preflight(_conf(backups, force=True, databases=["edge"]))
        finally:
            with _root(logical_target).session() as cur:
                cur.execute("SET GLOBAL enforce_storage_engine = NULL")

        _archive_plugin(logical_target, True)
        plan = logical_restore.preflight(_conf(dest, databases=["arch"]))
        _archive_plugin(logical_target, False)  # the target changed after its preflight
        logical_restore.snapshot_config(plan)
        try:
            with pytest.raises(Refusal, match=r"arch\.log book: Unknown storage engine 'ARCHIVE'"):
                _steps, lanes = logical_restore.prepare(plan)
                for lane in lanes:
                    logical_restore.load_lane(plan, lane)
        finally:
            logical_restore.revert(plan)
        assert not logical_target.server().query(  # not made with another engine
            "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'arch'")

        _archive_plugin(logical_target, True)
        again = logical_restore.preflight(_conf(dest, databases=["arch"]))
        assert again.resume
        _restore(again)
        restored = _objects(logical_target.server(), ("arch",))
        assert _objects(logical_source.server(), ("arch",)) == restored
        assert "ENGINE=ARCHIVE" in restored["table arch.log book"][0]
        # a reload after a try that left rows (ARCHIVE deletes none: swapped for an empty copy), and a spare a crash left
        with logical_target.server().session() as cur:
            cur.execute(f"CREATE TABLE arch.`__lastline_empty_{hashlib.sha1(b'log book').hexdigest()[:20]}` (x INT)")
            empty_table(cur, "arch", "log book", "ARCHIVE")
            cur.execute("SELECT COUNT(*) FROM arch.`log book`")
            assert cur.fetchone()[0] == 0
            cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'arch'")
            assert cur.fetchall() == (("log book",),)
            cur.execute("SHOW CREATE TABLE arch.`log book`")
            assert cur.fetchone()[1] == restored["table arch.log book"][0]
    finally:
        for inst in (logical_source, logical_target):
            with _root(inst).session() as cur:
                cur.execute("DROP DATABASE IF EXISTS arch")
            _archive_plugin(inst, False)


def test_a_restore_of_memory_tables_with_rows_never_restarts_the_target(logical_source, logical_target, tmp_path, caplog):
    """A MEMORY table loses its rows when the server restarts, and revert restarts the target after the load when a
    restart profile was applied: with restart_allowed, such a restore would fail its verify every time (shown here
    on a plan that forces it). preflight leaves the restart profile out instead, says why, and the restore is exact."""
    import dataclasses

    with _root(logical_source).session() as cur:
        cur.execute("CREATE DATABASE mem")
        cur.execute("CREATE TABLE mem.cache (k INT PRIMARY KEY, v VARCHAR(40)) ENGINE=MEMORY")
        cur.execute("INSERT INTO mem.cache SELECT seq, CONCAT('v', seq) FROM mysql.seq_1_to_3000")
        cur.execute("CREATE TABLE mem.kept (k INT PRIMARY KEY) ENGINE=InnoDB")
        cur.execute("INSERT INTO mem.kept SELECT seq FROM mysql.seq_1_to_100")
    try:
        dest = tmp_path / "mem"
        logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["mem"]}))
        with caplog.at_level("WARNING"):
            plan = logical_restore.preflight(_conf(dest, databases=["mem"], restart_allowed=True))
        assert not plan.restart_allowed
        assert "no restart profile for this restore: 1 MEMORY table(s) with rows (mem.cache)" in caplog.text

        forced = dataclasses.replace(plan, restart_allowed=True)
        with pytest.raises(IntegrityError, match=r"mem\.cache: 0 rows, .* \(a MEMORY table: a restart of the target after its "
                                                 r"load emptied it; re-run the restore with force\)"):
            _restore(forced)
        assert logical_restore.preflight(_conf(dest, databases=["mem"], force=True)).resume is False  # verify failed: the run is over
        _restore(logical_restore.preflight(_conf(dest, databases=["mem"], force=True, restart_allowed=True)))
        assert _objects(logical_source.server(), ("mem",)) == _objects(logical_target.server(), ("mem",))
    finally:
        for inst in (logical_source, logical_target):
            with _root(inst).session() as cur:
                cur.execute("DROP DATABASE IF EXISTS mem")
                cur.execute(f"DROP DATABASE IF EXISTS `{aside_name('mem')}`")


def test_names_with_capitals_restore_into_a_server_that_ignores_their_case(logical_source, sandbox_root, tmp_path):
    """A target with lower_case_table_names=1 stores `CaseDb`.`Users` as `casedb`.`users`: the restore loads, indexes
    and verifies them there (verify had called every such table missing, after loading all of it). Names that would
    be one there are refused before anything, by the server's own rule, not Python's casefold: `Users` and `users`,
    `İx` and `ix` (but not `Straße` and `strasse`), and a database `_LASTLİNE`, which is lastline's own `_lastline`."""
    from conftest import set_conn
    from lastline_dev.sandbox import Instance

    inst = Instance(sandbox_root, "nocase")
    try:
        inst.conf_d.mkdir(parents=True, exist_ok=True)
        (inst.conf_d / "case.cnf").write_text("[mysqld]\nlower_case_table_names=1\n")
        inst.create()
        set_conn("t_nocase", inst)
        with _root(logical_source).session() as cur:
            cur.execute("CREATE DATABASE CaseDb")
            cur.execute("CREATE TABLE CaseDb.Users (id INT PRIMARY KEY AUTO_INCREMENT, Name VARCHAR(20), KEY ByName (Name))")
            cur.execute("INSERT INTO CaseDb.Users (Name) SELECT CONCAT('n', seq) FROM mysql.seq_1_to_2000")
            cur.execute("CREATE TABLE CaseDb.`Order Lines` (id INT PRIMARY KEY, user_id INT, "
                        "CONSTRAINT ToUser FOREIGN KEY (user_id) REFERENCES Users (id))")
            cur.execute("INSERT INTO CaseDb.`Order Lines` SELECT seq, seq FROM mysql.seq_1_to_500")
            cur.execute("CREATE VIEW CaseDb.Recent AS SELECT id, Name FROM CaseDb.Users WHERE id > 1990")
            cur.execute("CREATE TABLE CaseDb.`Straße` (id INT PRIMARY KEY)")
            cur.execute("CREATE TABLE CaseDb.strasse (id INT PRIMARY KEY)")  # two tables on the server, whatever its case rule
        dest = tmp_path / "case"
        logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["CaseDb"]}))
        conf = {**_conf(dest, databases=["CaseDb"]), "target_conn_id": "t_nocase"}
        _restore(logical_restore.preflight(conf))
        target = inst.server()
        assert {r[0] for r in target.query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'casedb'")} == {
            "order lines", "recent", "strasse", "straße", "users"}
        for table in ("Users", "`Order Lines`", "Recent"):
            assert target.query(f"CHECKSUM TABLE CaseDb.{table}")[0][1] == logical_source.server().query(
                f"CHECKSUM TABLE CaseDb.{table}")[0][1]
        assert target.query("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = 'casedb' "
                            "AND INDEX_NAME = 'ByName'")[0][0] == 1
        assert target.query("SELECT COUNT(*) FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_SCHEMA = 'casedb' "
                            "AND CONSTRAINT_NAME = 'ToUser'")[0][0] == 1

        with _root(logical_source).session() as cur:
            cur.execute("CREATE TABLE CaseDb.users (id INT PRIMARY KEY)")
            cur.execute("CREATE TABLE CaseDb.`İx` (id INT PRIMARY KEY)")
            cur.execute("CREATE TABLE CaseDb.ix (id INT PRIMARY KEY)")
            cur.execute("CREATE DATABASE `_LASTLİNE`")
            cur.execute("CREATE TABLE `_LASTLİNE`.ledger (id INT PRIMARY KEY)")
        logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}",
                              "databases": ["CaseDb", "_LASTLİNE"]}))
        with pytest.raises(PreflightError, match=r"there _LASTLİNE would be _lastline, a system schema or lastline's own"):
            logical_restore.preflight({**conf, "force": True, "databases": ["CaseDb", "_LASTLİNE"]})
        with pytest.raises(PreflightError) as err:
            logical_restore.preflight({**conf, "force": True})
        message = str(err.value)
        assert "cannot hold both of 2 pair(s) of names the backup keeps apart: " in message, message
        assert "names the backup keeps apart: CaseDb.Users and CaseDb.users; CaseDb.ix and CaseDb.İx. " in message, message
        assert "Straße" not in message and "Restore into a server with lower_case_table_names=0" in message
        assert target.query("SELECT COUNT(*) FROM casedb.users")[0][0] == 2000  # untouched
    finally:
        with _root(logical_source).session() as cur:
            cur.execute("DROP DATABASE IF EXISTS CaseDb")
            cur.execute("DROP DATABASE IF EXISTS `_LASTLİNE`")
        inst.destroy()


def test_a_table_only_a_non_strict_server_makes_is_refused_naming_the_setting_then_resumes(logical_source, logical_target,
                                                                                          tmp_path):
    """A table whose rows could exceed an InnoDB page, made with innodb_strict_mode off (the default before MariaDB
    10.2.2; legacy schemas have them), is refused by a strict target at once, naming the setting: the restore never
    turns strict mode off itself (off, InnoDB makes a table it cannot compress uncompressed, with the same SHOW CREATE
    TABLE). With the setting off on the target, the re-run resumes and restores it exactly."""
    from lastline.core.errors import Refusal

    with _root(logical_source).session() as cur:
        cur.execute("SET SESSION innodb_strict_mode = OFF")
        cur.execute("CREATE DATABASE wide")
        cur.execute("CREATE TABLE wide.t (id INT PRIMARY KEY, " + ", ".join(f"c{i} CHAR(255)" for i in range(40))
                    + ", KEY k1 (c1)) CHARSET=latin1 ROW_FORMAT=DYNAMIC")
        cur.execute("SHOW WARNINGS")
        assert any(w[1] == 139 for w in cur.fetchall())  # Row size too large: made anyway
        cur.execute("INSERT INTO wide.t (id, c1, c39) SELECT seq, CONCAT('x', seq), REPEAT('y', 200) FROM mysql.seq_1_to_500")
    target = _root(logical_target)
    try:
        dest = tmp_path / "wide"
        logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["wide"]}))
        assert logical_target.server().variables("innodb_strict_mode") == {"innodb_strict_mode": "ON"}
        plan = logical_restore.preflight(_conf(dest, databases=["wide"]))
        logical_restore.snapshot_config(plan)
        try:
            with pytest.raises(Refusal, match=r"the target refused to create wide\.t: Row size too large .*\(1118\) \(the "
                                              r"source made this table with innodb_strict_mode off.*SET GLOBAL "
                                              r"innodb_strict_mode = OFF on the target for this restore"):
                _steps, lanes = logical_restore.prepare(plan)
                for lane in lanes:
                    logical_restore.load_lane(plan, lane)
        finally:
            logical_restore.revert(plan)
        with target.session() as cur:
            cur.execute("SET GLOBAL innodb_strict_mode = OFF")
        again = logical_restore.preflight(_conf(dest, databases=["wide"]))
        assert again.resume
        _restore(again)
        assert _objects(logical_source.server(), ("wide",)) == _objects(logical_target.server(), ("wide",))
    finally:
        with target.session() as cur:
            cur.execute("SET GLOBAL innodb_strict_mode = ON")
        for inst in (logical_source, logical_target):
            with _root(inst).session() as cur:
                cur.execute("DROP DATABASE IF EXISTS wide")
                cur.execute(f"DROP DATABASE IF EXISTS `{aside_name('wide')}`")
