"""The demo is a deployment where every DAG succeeds from its form with the form's defaults: each connection a
default names is one the demo stores, its masking rules cover the demo's data (a staging refresh on it
succeeds), the rules a refusal suggests are ones the form or the deployment accepts, and a size is a one-line
field."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import _instance, _loaded, set_conn
from lastline.core.errors import ConfigError, PreflightError
from lastline.logical.backup import stages as logical_backup
from lastline.staging import refresh as staging_refresh
from lastline.staging.rules import REVEALING, run_rules
from lastline_dev import demo

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dags(airflow_db):
    """The DAGs as their files define them (a DagBag of this module's own: no earlier run's conf in its Params)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return {dag_id: bag.get_dag(dag_id) for dag_id in bag.dag_ids}


def test_every_connection_a_form_names_by_default_is_one_the_demo_stores(dags):
    assert len(dags) == 12
    named = {(dag_id, name): param.value for dag_id, dag in dags.items() for name, param in dag.params.items()
             if name.endswith("_conn_id") and param.value}
    assert {name for _, name in named} >= {"source_conn_id", "target_conn_id", "drill_conn_id", "replication_conn_id"}
    missing = {k: v for k, v in named.items() if v not in demo.CONNECTION_IDS}
    assert not missing, f"form defaults naming connections the demo does not create: {missing}"
    # the replica's DAGs act on the demo's replica, never on the restores' target
    assert dags["replica_rebuild"].params["target_conn_id"] == dags["replica_detach"].params["target_conn_id"] == "lastline_replica"
    assert dags["replica_rebuild"].params["replication_conn_id"] == "lastline_replication"
    # the keys the deployment reads: the masking key (staging_refresh) and the storage key (`make ui`'s setting)
    assert staging_refresh.key_conn_id() in demo.CONNECTION_IDS and demo.STORAGE_KEY_CONN in demo.CONNECTION_IDS
    assert "lastline_masking_rules" in (ROOT / "dags" / "staging_refresh.py").read_text()  # the Variable the demo sets


def test_no_help_text_says_mysql_connection(dags):
    texts = [f"{dag_id}.{name}: {p.description}" for dag_id, dag in dags.items() for name, p in dag.params.items()]
    assert not [t for t in texts if re.search(r"\bmysql connection", t, re.I)]
    assert "lastline connection" in dags["physical_backup"].params.get_param("source_conn_id").description


def test_a_size_is_a_one_line_field_that_takes_a_unit_or_bytes(dags):
    """The trigger form renders a field whose type lists two types besides null as a JSON box (six lines)."""
    from airflow.sdk import Param

    for dag_id, name in (("logical_restore", "redo_log_bytes"), ("physical_restore", "use_memory"),
                         ("replica_rebuild", "use_memory"), ("staging_refresh", "redo_log_bytes")):
        schema = dags[dag_id].params.get_param(name).schema
        kinds = schema.get("type", [])
        assert not (isinstance(kinds, list) and len([k for k in kinds if k != "null"]) > 1), (dag_id, name, schema)
        for good in ("1G", "256M", 268435456, None):
            assert Param(good, **schema).resolve() == good
        for bad in ("1 lot", -1, "G"):
            with pytest.raises(Exception, match="not valid|Invalid|does not match|less than"):
                Param(bad, **schema).resolve()


def test_fields_sit_in_their_sections(dags):
    section = {name: p.schema.get("section") for dag in dags.values() for name, p in dag.params.items()}
    assert section["rto_budget_minutes"] == section["rpo_alert_seconds"] == "Alerts"
    assert section["until_current"] == section["ship_every_seconds"] == section["stream_minutes"] == "Streaming"
    assert {section[n] for n in ("lock_method", "long_query_guard", "kill_long_queries", "priority", "max_read_mb_per_s",
                                 "max_mb_per_s")} == {"Production impact"}
    assert section["from_replica"] == section["source_conn_id"] == "Servers"


def test_each_strategy_the_form_lists_is_one_a_run_may_add(dags):
    help_text = dags["staging_refresh"].params.get_param("masking_rules").description
    listed = re.search(r"\((email[^)]*)\)", help_text).group(1).split(", ")
    assert "phone" not in listed and "keep" not in listed and len(listed) >= 6
    for strategy in listed:
        run_rules({}, {"db.t.c": strategy.replace("<value>", "x")})  # accepted
    for strategy in REVEALING:  # the help says where these come from, and a run is refused them
        assert f'"{strategy}"' in help_text and "lastline_masking_rules" in help_text
        with pytest.raises(ConfigError, match="come only from the deployment"):
            run_rules({}, {"db.t.c": strategy})


@pytest.fixture(scope="module")
def demo_data(sandbox_root, tmp_path_factory):
    """A source holding the demo's data (demo._fill_source: the store dataset of the demo's seed and bulk rows),
    one logical backup of it, and a staging server."""
    source = _loaded(sandbox_root, "demosource", lambda i: demo._fill_source(i, 1))
    staging = _instance(sandbox_root, "demostaging")
    set_conn("t_demo_source", source)
    set_conn("t_demo_staging", staging, role="staging")
    dest = tmp_path_factory.mktemp("demo-backups")
    plan = logical_backup.preflight({"source_conn_id": "t_demo_source", "destination": f"file://{dest}", "parallel": 2})
    logical_backup.dump(plan)
    yield source, staging, f"file://{dest}/{plan.backup_id}"
    source.destroy()
    staging.destroy()


def _conf(backup: str) -> dict:
    """The staging form's defaults, on this test's servers (every Param given: see conftest's run_dag)."""
    return {"target_conn_id": "t_demo_staging", "backup": backup, "databases": [], "masking_rules": None,
            "open_for_writes": True, "parallel": 2, "tune": True, "defer_indexes": True, "index_build": "per_table",
            "force": True, "restart": False, "redo_log_bytes": None, "aws_conn_id": None}


def test_the_refusal_on_the_demo_data_says_where_each_suggested_rule_goes(demo_data):
    _, _, backup = demo_data
    with pytest.raises(PreflightError) as refused:
        staging_refresh.preflight(_conf(backup), "{}")
    text = str(refused.value)
    snippet = json.loads(text[text.index("{"): text.rindex("}") + 1])
    assert "the Airflow Variable lastline_masking_rules" in text
    assert set(snippet) <= set(demo.MASKING_RULES)  # the demo's rules cover every column the guard flags
    revealing = {k: v for k, v in snippet.items() if v in REVEALING}
    assert revealing  # the store's phone column and its card number key: deployment-only rules
    assert '"keep" and "phone" come only from the Variable' in text
    run_rules({}, {k: v for k, v in snippet.items() if v not in REVEALING})  # what the form's field accepts
    run_rules(snippet, None)  # all of it, as the deployment's rules
    with pytest.raises(ConfigError):
        run_rules({}, revealing)


def test_staging_refresh_with_the_demo_rules_on_the_demo_data_succeeds(run_dag, demo_data, monkeypatch):
    source, staging, backup = demo_data
    monkeypatch.setenv("AIRFLOW_VAR_LASTLINE_MASKING_RULES", json.dumps(demo.MASKING_RULES))
    monkeypatch.setenv("AIRFLOW_CONN_T_DEMO_MASKING", json.dumps({"conn_type": "generic", "password": "demo key"}))
    monkeypatch.setenv("LASTLINE_MASKING_KEY_CONN_ID", "t_demo_masking")
    state, tis, logs = run_dag("staging_refresh", _conf(backup))
    assert state == "success", (tis, logs[-3000:])
    src, tgt = source.server(), staging.server()
    emails = "SELECT email FROM store.customer ORDER BY customer_id"
    masked = [r[0] for r in tgt.query(emails)]
    assert len(masked) == len(src.query(emails)) > 500
    assert not {r[0] for r in src.query(emails)} & set(masked) and all(e.endswith("@example.com") for e in masked)
    phones = "SELECT phone FROM store.address ORDER BY address_id"
    assert [r[0] for r in tgt.query(phones)] != [r[0] for r in src.query(phones)]
    assert tgt.query("SELECT COUNT(*) FROM bulk.t1")[0][0] == src.query("SELECT COUNT(*) FROM bulk.t1")[0][0] > 0
