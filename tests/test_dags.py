"""Every DAG imports cleanly and has the shape and Params the README documents."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lastline.mariabackup.target_datadir import StepResult  # a typed stage's annotations (below)
from lastline.physical.plans import RestorePlan, Verified


@pytest.fixture(scope="module")
def dagbag(airflow_db):
    """The DAGs as their files define them: a DagBag of this module's own (the session's is shared with
    `dag.test()` runs, which leave their conf in the Params' values)."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(Path(__file__).resolve().parents[1] / "dags"))


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}


def test_physical_backup_shape(dagbag):
    dag = dagbag.get_dag("physical_backup")
    assert dag.catchup is False
    assert type(dag.timetable).__name__ == "CronTriggerTimetable"  # nightly by default
    assert dag.timetable.expression == "0 2 * * *"
    assert set(dag.params.keys()) >= {"source_conn_id", "destination", "compression", "parallel", "aws_conn_id"}
    assert [t.task_id for t in dag.topological_sort()] == ["preflight", "stream", "resume_replica", "write_manifest",
                                                           "announce_backup", "prune"]
    resume = dag.get_task("resume_replica")  # a replica's SQL thread runs again whatever happened to the stream
    assert resume.is_teardown and resume.upstream_task_ids == {"preflight", "stream"} and not resume.executor_config
    assert [a.name for a in dag.get_task("announce_backup").outlets] == ["lastline_physical_backup"]
    assert dag.get_task("stream").executor_config == {"lastline_server_param": "source_conn_id"}  # near the source
    assert dag.on_failure_callback  # a failed run alerts (a late one too: see test_backup_deadline)
    assert all(t.retries == 0 for t in dag.tasks)  # LASTLINE_RETRIES=0 in tests; default is 2


def test_physical_restore_shape(dagbag):
    dag = dagbag.get_dag("physical_restore")
    assert type(dag.timetable).__name__ == "NullTimetable"  # manual only
    assert set(dag.params.keys()) >= {"target_conn_id", "backup", "parallel", "use_memory", "force", "restore_into_source"}
    order = [t.task_id for t in dag.topological_sort()]
    assert order == ["preflight", "approve", "stop_target", "extract", "prepare", "start_target", "verify", "report"]
    # whether a person approves is the deployment's (LASTLINE_APPROVAL) or the connection's say, never a run's
    assert "approval" not in dag.params and "approval" not in dagbag.get_dag("logical_restore").params
    for step in ("stop_target", "extract", "prepare", "start_target", "verify"):  # on the target's queue and pool
        task = dag.get_task(step)
        assert task.executor_config == {"lastline_server_param": "target_conn_id"} and task.execution_timeout, step


def test_logical_backup_shape(dagbag):
    dag = dagbag.get_dag("logical_backup")
    assert dag.catchup is False and dag.timetable.expression == "0 3 * * *"
    assert set(dag.params.keys()) >= {
        "source_conn_id", "destination", "databases", "chunk_rows", "compression", "parallel", "aws_conn_id", "include_grants",
    }
    assert dag.params["chunk_rows"] == 250_000
    assert [t.task_id for t in dag.topological_sort()] == ["preflight", "dump", "resume_replica", "announce_backup", "prune"]
    assert dag.get_task("resume_replica").is_teardown and dag.get_task("preflight").is_setup
    assert [a.name for a in dag.get_task("announce_backup").outlets] == ["lastline_logical_backup"]
    assert "one task" in dag.doc_md.lower()  # why the parallelism lives inside the dump task


def test_logical_restore_shape(dagbag):
    dag = dagbag.get_dag("logical_restore")
    assert type(dag.timetable).__name__ == "NullTimetable"  # manual only
    assert set(dag.params.keys()) >= {
        "target_conn_id", "backup", "databases", "parallel", "tune", "restart_allowed", "defer_indexes", "force", "aws_conn_id",
        "restore_into_source",
    }
    order = [t.task_id for t in dag.topological_sort()]
    assert order == ["preflight", "approve", "snapshot_config", "prepare", "load", "finalize", "revert", "verify"]  # short steps folded
    assert dag.get_task("snapshot_config").trigger_rule == "none_failed_min_one_success"  # after a skipped approve too
    assert type(dag.get_task("approve")).__name__ == "ApproveReplacement"
    assert dag.get_task("load").executor_config == {"lastline_server_param": "target_conn_id"}
    revert, snap = dag.get_task("revert"), dag.get_task("snapshot_config")
    assert revert.is_teardown and snap.is_setup and revert.on_failure_fail_dagrun
    assert dag.get_task("verify").upstream_task_ids >= {"finalize", "revert"}  # never verifies a failed load
    assert dag.get_task("load").map_index_template == "{{ unit_name }}"


def test_replica_rebuild_shape(dagbag):
    dag = dagbag.get_dag("replica_rebuild")
    assert type(dag.timetable).__name__ == "NullTimetable"  # manual only
    assert set(dag.params.keys()) >= {
        "source_conn_id", "target_conn_id", "replication_conn_id", "parallel", "compression", "force", "catch_up_timeout",
    }
    order = [t.task_id for t in dag.topological_sort()]
    assert order[:9] == ["preflight", "approve", "stop_target", "stream", "prepare", "start_target", "attach", "catch_up", "verify"]
    assert type(dag.get_task("approve")).__name__ == "ApproveReplacement"  # a replica's data is replaced as a restore's
    assert dag.get_task("finish").upstream_task_ids >= {"verify", "stream"}  # old contents go only after verify


def test_replica_detach_uses_the_reusable_task_group(dagbag):
    dag = dagbag.get_dag("replica_detach")
    assert set(dag.params.keys()) == {"target_conn_id", "restart", "read_only_off"}
    assert [t.task_id for t in dag.topological_sort()] == [
        "detach_replication.check", "detach_replication.detach", "detach_replication.verify",
        "detach_replication.open_for_writes",
    ]


def test_staging_refresh_shape(dagbag):
    dag = dagbag.get_dag("staging_refresh")
    assert type(dag.timetable).__name__ == "AssetTriggeredTimetable"  # runs when a logical backup completes
    assert set(dag.params.keys()) >= {"target_conn_id", "backup", "databases", "masking_rules", "open_for_writes",
                                      "parallel", "force"}
    assert "masking_key_conn_id" not in dag.params  # the key's connection is the deployment's (LASTLINE_MASKING_KEY_CONN_ID)
    assert dag.params["target_conn_id"] == "lastline_staging" and dag.params["force"] is True
    order = [t.task_id for t in dag.topological_sort()]
    restore = [t for t in order if t.startswith("restore.")]
    assert restore == ["restore.preflight", "restore.approve", "restore.snapshot_config", "restore.prepare", "restore.load", "restore.finalize",
                       "restore.revert", "restore.verify"]  # the logical restore's own group
    assert order.index("preflight") < order.index("restore.preflight")
    assert "restore.verify" in dag.get_task("detach_replication.check").upstream_task_ids  # detached once restored
    assert "detach_replication.open_for_writes" in dag.get_task("mask").upstream_task_ids
    assert order.index("detach_replication.open_for_writes") < order.index("mask") < order.index("verify_masking") \
        < order.index("objects") < order.index("open") < order.index("close") < order.index("report")
    assert order.index("lock") < order.index("restore.preflight")  # nobody else reads staging from before the restore
    assert dag.get_task("close").is_teardown and dag.get_task("lock").is_setup
    # the report is the run's one leaf and waits on open: a failed objects or open step fails the run (a teardown
    # that succeeds must not make it a success)
    assert {"open", "close"} <= dag.get_task("report").upstream_task_ids
    assert [t.task_id for t in dag.tasks if not t.downstream_task_ids] == ["report"]


def test_backup_deadline(monkeypatch):
    from lastline.airflow.alerts import Alert, backup_deadline

    monkeypatch.setenv("LASTLINE_BACKUP_DEADLINE_MINUTES", "90")
    alert = backup_deadline()
    assert alert.interval.total_seconds() == 5400 and type(alert.reference).__name__ == "DagRunQueuedAtDeadline"
    assert alert.callback.path.endswith("alerts.Alert") and alert.callback.kwargs["event"] == "deadline_missed"
    monkeypatch.setenv("LASTLINE_BACKUP_DEADLINE_MINUTES", "0")
    assert backup_deadline() is None  # off (and under `bin/airflow dags test`)
    assert Alert("failed")._text({"dag_id": "d", "run_id": "r", "task_id": "t"}).startswith("lastline: d run r failed (task t)")


def test_routing_puts_a_servers_tasks_on_its_queue_from_the_runs_conf_or_the_dags_default(dagbag, monkeypatch):
    """The cluster policy as the scheduler calls it: on the serialized task (its executor_config marker and
    Params), the run's conf first, else the DAG's default; the connection's queue extra; other tasks alone."""
    import json
    from types import SimpleNamespace

    from airflow.models.dagrun import DagRun
    from airflow.serialization.serialized_objects import DagSerialization

    from lastline.airflow import routing

    dag = DagSerialization.from_dict(DagSerialization.to_dict(dagbag.get_dag("logical_restore")))
    for conn_id, queue in (("r_named", "near_named"), ("lastline_target", "near_default")):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "mysql", "host": "db", "extra": {"queue": queue}}))
    routing._CACHE.clear()

    def routed(task_id: str, conf: dict) -> str:
        task = dag.get_task(task_id)
        ti = SimpleNamespace(task=task, executor_config=task.executor_config, queue="default", pool="default_pool")
        routing.route(ti, DagRun(dag_id=dag.dag_id, run_id="r", conf=conf))  # a transient run: no session, no pool
        return ti.queue

    assert routed("load", {"target_conn_id": "r_named"}) == "near_named"  # the run names the server
    assert dag.params["target_conn_id"] == "lastline_target" and routed("finalize", {}) == "near_default"  # its default
    assert routed("approve", {"target_conn_id": "r_named"}) == "default"  # a task that does not work on the server


def test_binlog_archive_shape(dagbag):
    dag = dagbag.get_dag("binlog_archive")
    from airflow.sdk.definitions.timetables.simple import ContinuousTimetable

    # the stream is held open by one run at a time, and the next starts as soon as one ends
    assert isinstance(dag.timetable, ContinuousTimetable) and dag.max_active_runs == 1 and dag.catchup is False
    assert set(dag.params.keys()) == {"source_conn_id", "destination", "aws_conn_id", "until_current",
                                       "ship_every_seconds", "stream_minutes", "rpo_alert_seconds", "merge_after_segments",
                                       "retired_grace_seconds"}
    assert [t.task_id for t in dag.tasks] == ["ship", "check_chain"]
    assert dag.get_task("ship").executor_config == {"lastline_server_param": "source_conn_id"}  # on the source's host
    assert [o.name for o in dag.get_task("check_chain").outlets] == ["lastline_binlog_archive"]


def test_backup_verify_shape(dagbag):
    dag = dagbag.get_dag("backup_verify")
    assert dag.timetable.expression == "0 4 * * 0" and dag.catchup is False and dag.max_active_runs == 1  # weekly
    assert set(dag.params.keys()) == {"destination", "aws_conn_id"}
    assert [t.task_id for t in dag.topological_sort()][0] == "preflight"
    assert {t.task_id for t in dag.tasks} == {"preflight", "backups", "verify_backup", "verify_archive", "report"}
    read = dag.get_task("verify_backup")  # one instance per backup, named by its id: Airflow's states are the ledger
    assert type(read).__name__.endswith("MappedOperator") and read.map_index_template == "{{ backup_id }}"
    assert dag.get_task("report").upstream_task_ids == {"preflight", "verify_backup", "verify_archive"}
    assert dag.get_task("report").trigger_rule == "all_done"  # the report is saved whatever failed before it
    assert dag.on_failure_callback  # a failed run alerts
    assert "backup_verify" in dag.doc_md and "never" in dag.doc_md


def test_key_rotation_shape(dagbag):
    dag = dagbag.get_dag("key_rotation")
    assert type(dag.timetable).__name__ == "NullTimetable" and dag.max_active_runs == 1  # manual only
    assert set(dag.params.keys()) == {"destination", "aws_conn_id", "dry_run"} and dag.params["dry_run"] is False
    assert {t.task_id for t in dag.tasks} == {"preflight", "backups", "rotate_backups", "rotate_archive", "report"}
    rotate = dag.get_task("rotate_backups")  # one instance per batch of backups, named by its first and last id
    assert type(rotate).__name__.endswith("MappedOperator") and rotate.map_index_template == "{{ backup_id }}"
    assert dag.get_task("report").upstream_task_ids == {"preflight", "rotate_backups", "rotate_archive"}
    assert dag.get_task("report").trigger_rule == "all_done"  # the report is saved whatever failed before it
    assert dag.on_failure_callback and "no data object is rewritten" in dag.doc_md


def test_point_in_time_restore_shape(dagbag):
    dag = dagbag.get_dag("point_in_time_restore")
    assert type(dag.timetable).__name__ == "NullTimetable"  # manual only
    assert {"target_conn_id", "destination", "until", "base", "base_kind", "databases", "branch", "replay_method",
            "force"} <= set(dag.params.keys())
    assert {t.task_id for t in dag.roots} == {"plan"} and {t.task_id for t in dag.leaves} == {"cleanup"}
    assert dag.get_task("cleanup").is_teardown and "replay" in dag.get_task("cleanup").upstream_task_ids
    assert dag.get_task("report").upstream_task_ids == {"plan", "replay"}  # the roll-forward's report, before cleanup
    assert "report" in dag.get_task("cleanup").upstream_task_ids
    assert dag.get_task("base_kind").downstream_task_ids == {"physical_base.preflight", "logical_base.preflight"}
    replay = dag.get_task("replay")
    assert replay.trigger_rule == "none_failed_min_one_success"  # after the base restored, the other branch skipped
    for kind in ("physical", "logical"):  # never replayed onto an unverified base
        assert f"{kind}_base.verify" in replay.get_flat_relative_ids(upstream=True)
        assert dag.get_task(f"{kind}_base.approve")  # a person approves before data is replaced, as in every restore


def test_server_fields_offer_the_connections_of_their_kind_and_sizes_take_units(monkeypatch, airflow_db):
    from lastline.airflow.params import servers
    from lastline.core.plans import Conf, human_size, parse_size

    def conn(**extra):
        return json.dumps({"conn_type": "lastline", "host": "db", "extra": extra})

    monkeypatch.setenv("AIRFLOW_CONN_T_OFFER_PLAIN", conn())
    monkeypatch.setenv("AIRFLOW_CONN_T_OFFER_PROD", conn(protected=True))
    monkeypatch.setenv("AIRFLOW_CONN_T_OFFER_STAGING", conn(role="staging"))
    monkeypatch.setenv("AIRFLOW_CONN_T_OFFER_DRILL", conn(role="drill"))
    monkeypatch.setenv("AIRFLOW_CONN_T_OFFER_S3", json.dumps({"conn_type": "aws"}))
    offered = {role: {c for c in servers(role) if c.startswith("t_offer_")} for role in ("source", "target", "staging", "drill")}
    assert offered == {"source": {"t_offer_plain", "t_offer_prod"}, "target": {"t_offer_plain"},
                       "staging": {"t_offer_staging"}, "drill": {"t_offer_drill"}}
    assert [parse_size(v) for v in ("1G", "256M", "1.5GiB", "512k", 1024, "2048", " 3 gb ")] == [
        1 << 30, 256 << 20, 3 << 29, 512 << 10, 1024, 2048, 3 << 30]
    assert human_size(1 << 30) == "1G" and human_size(3 << 29) == "1536M" and human_size(1000) == "1000"
    assert Conf({"redo_log_bytes": "512M"}).size("redo_log_bytes", 1) == 512 << 20
    with pytest.raises(Exception, match="a size is a number of bytes"):
        Conf({"use_memory": "lots"}).size("use_memory", 0)


def test_each_shared_default_is_defined_once_in_the_plans_and_the_params_are_built_from_it():
    import dataclasses

    from lastline.airflow.params import SPECS
    from lastline.logical.backup.plans import BackupPlan as LogicalBackup
    from lastline.logical.restore.plans import RestorePlan as LogicalRestore
    from lastline.physical.plans import BackupPlan as PhysicalBackup
    from lastline.physical.plans import RestorePlan as PhysicalRestore

    def default(plan, name):
        return next(f.default for f in dataclasses.fields(plan) if f.name == name)

    for plan, names in ((LogicalRestore, ("parallel", "tune", "restart_allowed", "defer_indexes", "index_build")),
                        (PhysicalRestore, ("parallel",)), (LogicalBackup, ("priority", "max_replica_lag")),
                        (PhysicalBackup, ("priority", "max_replica_lag"))):
        for name in names:
            assert SPECS[name].default == default(plan, name), (plan.__name__, name)
    assert SPECS["index_build"].schema["enum"][0] == default(LogicalRestore, "index_build")


def test_a_stage_sees_only_typed_objects_and_xcom_only_their_dicts():
    """The Airflow layer's step(): XCom's dicts become the plan and results a stage's annotations name, and the typed
    result it returns goes back to XCom as its dict (None, for a teardown after a failed step, passes as None)."""
    from lastline.airflow.steps import typed_call

    seen = {}

    def stage(plan: RestorePlan, extracted: StepResult | None, note: str = "") -> Verified:
        seen.update(plan=plan, extracted=extracted, note=note)
        return Verified(tables=3, rows=7, server_version="10.11", seconds=0.5)

    ref = {"destination": "file:///b", "backup_id": "20261128T161432Z-7c93b6", "kind": "physical"}
    out = typed_call(stage)({"target_conn_id": "t", "backup": ref}, {"seconds": 1.5, "aside": "/d.aside"}, note="n")
    assert isinstance(seen["plan"], RestorePlan) and seen["plan"].backup.url == "file:///b/20261128T161432Z-7c93b6"
    assert seen["extracted"] == StepResult(seconds=1.5, aside="/d.aside") and seen["note"] == "n"
    assert out == {"tables": 3, "rows": 7, "server_version": "10.11", "seconds": 0.5}
    typed_call(stage)({"target_conn_id": "t", "backup": ref}, None)
    assert seen["extracted"] is None


def test_no_dag_file_converts_by_hand():
    """steps.step is the one boundary between XCom and typed objects: no DAG file or task group turns a plan into its
    dict, a dict into a plan, or reads the raw Params (a stage takes the run's Params as its Conf)."""
    root = Path(__file__).resolve().parents[1]
    hand = (".to_dict()", ".of(", "xcom_form(plan", "dict(params)", "params[", "params.get(", "params=None")
    files = [*sorted((root / "dags").glob("*.py")), root / "include" / "lastline" / "airflow" / "task_groups.py"]
    found = [f"{path.name}: {word}" for path in files for word in hand if word in path.read_text()]
    assert not found, found


# What a DAG file's parse is watched for, in a process of its own (tests/test_dags.py below): every connection read
# (Connection.get, and any secrets backend's), every network connection and metadata database opened, every file
# or folder of the backups' destination touched. Airflow's own imports read files too: only the destination counts.
PARSE_SECRETS = '''
from airflow.secrets import BaseSecretsBackend

ASKED = []


class CountingBackend(BaseSecretsBackend):
    """The deployment's secrets backend: it answers nothing and remembers what it was asked."""

    def get_conn_value(self, conn_id, team_name=None):
        ASKED.append(f"connection {conn_id}")

    def get_variable(self, key, team_name=None):
        ASKED.append(f"variable {key}")
'''
PARSE_PROBE = '''
import json, os, sys

DEST = os.environ["LASTLINE_DESTINATION"][len("file://"):]
touched = []


def audit(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "sqlite3.connect"):
        touched.append(f"{event} {args!r}"[:200])
    elif event in ("open", "os.listdir", "os.scandir", "os.stat") and args and str(args[0]).startswith(DEST):
        touched.append(f"{event} {args[0]}")


sys.addaudithook(audit)
from airflow.sdk import Connection
from lastline_parse_secrets import ASKED

got = []
real_get = Connection.get.__func__
Connection.get = classmethod(lambda cls, conn_id: (got.append(conn_id), real_get(cls, conn_id))[1])
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
from airflow.configuration import ensure_secrets_loaded

backends = [type(b).__name__ for b in ensure_secrets_loaded()]  # after the parse: loading them asks nothing
forms = {dag_id: {name: {"value": p.value, "examples": p.schema.get("examples")} for name, p in dag.params.items()}
         for dag_id, dag in bag.dags.items()}
print(json.dumps({"errors": {k: v[-500:] for k, v in bag.import_errors.items()}, "forms": forms, "got": got,
                  "asked": ASKED, "touched": touched, "backends": backends}))
'''


def test_parsing_the_dag_files_reads_no_connection_and_lists_no_storage(tmp_path):
    """The DAG files parsed as the DAG processor parses them (the deployment's plugins folder and local settings), with
    the metadata database out of reach, a secrets backend that counts what it is asked, connections in the
    environment pointing nowhere, and a destination holding a backup: nothing is read, and every form is whole."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    dest = tmp_path / "backups"
    (dest / "20261128T101432Z-0a0b0c").mkdir(parents=True)
    (tmp_path / "lastline_parse_probe.py").write_text(PARSE_PROBE)
    (tmp_path / "lastline_parse_secrets.py").write_text(PARSE_SECRETS)
    nowhere = {"conn_type": "lastline", "host": "192.0.2.1", "port": 3306, "extra": {"role": "staging"}}
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "AIRFLOW_HOME": str(tmp_path / "home"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root / "include"), os.environ.get("PYTHONPATH", "")]),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path}/no-such-folder/airflow.db",
           "AIRFLOW__SECRETS__BACKEND": "lastline_parse_secrets.CountingBackend",
           "LASTLINE_DESTINATION": f"file://{dest}", "LASTLINE_CONNECTIONS": "lastline_db2:target,lastline_vault",
           "AIRFLOW_CONN_LASTLINE_SOURCE": "mysql://root:pw@192.0.2.1:3306/?protected=true",
           "AIRFLOW_CONN_LASTLINE_STAGING_2": json.dumps(nowhere)}
    out = subprocess.run([sys.executable, str(tmp_path / "lastline_parse_probe.py"), str(root / "dags")], env=env,
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["errors"] == {}
    assert seen["backends"][0] == "CountingBackend"  # the one a parse would have asked first
    assert (seen["got"], seen["asked"], seen["touched"]) == ([], [], [])
    forms = seen["forms"]
    assert len(forms) == 12
    offers = {(dag_id, name): f["examples"] for dag_id, form in forms.items() for name, f in form.items()}
    for dag_id in ("physical_restore", "logical_restore", "staging_refresh", "restore_drill"):
        assert offers[dag_id, "backup"] == [f"file://{dest}/latest"] == [forms[dag_id]["backup"]["value"]], dag_id
    for (dag_id, name), examples in offers.items():  # each server field offers its default first
        if name in ("source_conn_id", "target_conn_id", "drill_conn_id"):
            assert examples and examples[0] == forms[dag_id][name]["value"], (dag_id, name, examples)
    assert offers["physical_backup", "source_conn_id"] == ["lastline_source", "lastline_db2", "lastline_vault",
                                                           "lastline_target", "lastline_replica"]
    assert offers["physical_restore", "target_conn_id"] == ["lastline_target", "lastline_db2"]
    assert offers["staging_refresh", "target_conn_id"] == ["lastline_staging", "lastline_staging_2"]
