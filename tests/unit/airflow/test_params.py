"""airflow.params: a DAG picks its Params by name and says what one means there; what may be left empty accepts
null (its default applies), an Override changes a default, an enum or the examples; a server field offers only the
connections of its kind, known from the environment alone; the backup field offers `latest` and points to the
Backups page."""
from __future__ import annotations

import json
import os

import pytest

from lastline.airflow.params import SPECS, Override, params, servers


def test_every_spec_has_a_title_a_description_and_a_section():
    for name, spec in SPECS.items():
        assert spec.title and spec.description and spec.section, name


def test_params_keep_the_order_asked_then_the_changed_ones():
    assert list(params("parallel", "force", compression=Override("none"), parallel="lanes loading at once")) == [
        "parallel", "force", "compression"]


@pytest.mark.parametrize(("name", "types"), [
    ("parallel", ["integer", "null"]), ("force", ["boolean", "null"]), ("aws_conn_id", ["string", "null"]),
    ("masking_rules", ["object", "null"]), ("destination", "string"), ("backup", "string"),
], ids=["integer-may-be-empty", "flag-may-be-empty", "null-listed-once", "object-may-be-empty", "required-destination",
        "required-backup"])
def test_what_may_be_left_empty_accepts_null_and_what_is_required_does_not(name, types):
    assert params(name)[name].schema["type"] == types


@pytest.mark.parametrize("name", ["compression", "lock_method", "kind"], ids=["compression", "lock-method", "kind"])
def test_an_enum_is_never_widened_to_null(name):
    schema = params(name)[name].schema
    assert "enum" in schema and "type" not in schema


@pytest.mark.parametrize(("change", "value", "enum", "description"), [
    (None, "zstd", ["zstd", "pigz", "none"], SPECS["compression"].description),
    ("what it means here", "zstd", ["zstd", "pigz", "none"], "what it means here"),
    (Override("none"), "none", ["zstd", "pigz", "none"], SPECS["compression"].description),
    (Override("zstd-fast", enum=["zstd-fast", "none"], description="d"), "zstd-fast", ["zstd-fast", "none"], "d"),
], ids=["as-defined", "a-description", "a-default", "default-enum-and-description"])
def test_a_dag_changes_what_a_param_means_there(change, value, enum, description):
    param = params(**{"compression": change})["compression"] if change else params("compression")["compression"]
    assert (param.value, param.schema["enum"], param.description) == (value, enum, description)
    assert param.schema["title"] == SPECS["compression"].title and param.schema["section"] == SPECS["compression"].section


@pytest.fixture
def connections(monkeypatch):
    """Server connections in the environment (as a deployment defines them), and none other: the forms' defaults and
    LASTLINE_CONNECTIONS unset."""
    for name in ("LASTLINE_CONNECTIONS", *(k for k in os.environ if k.startswith("AIRFLOW_CONN_"))):
        monkeypatch.delenv(name, raising=False)

    def add(conn_id: str, conn_type: str, **extra):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}",
                           json.dumps({"conn_type": conn_type, "host": "db.example", "extra": extra}))
    return add


@pytest.mark.parametrize(("role", "offered"), [
    ("source", ["unit_plain", "unit_mysql", "unit_protected", "unit_typo", "unit_uri"]),
    ("target", ["unit_plain", "unit_mysql", "unit_uri"]),
    ("drill", ["unit_drill"]),
    ("staging", ["unit_staging", "unit_uri_staging"]),
], ids=["source-any-without-a-role", "target-not-protected-nor-unreadable", "drill-its-role", "staging-its-role"])
def test_a_server_field_offers_the_environments_connections_of_its_kind(connections, monkeypatch, role, offered):
    connections("unit_plain", "lastline")
    connections("unit_mysql", "mysql", role="")
    connections("unit_protected", "mariadb", protected="true")
    connections("unit_typo", "lastline", protected="ture")
    connections("unit_drill", "lastline", role="drill")
    connections("unit_staging", "lastline", role=" Staging ")
    connections("unit_http", "http")
    monkeypatch.setenv("AIRFLOW_CONN_UNIT_URI", "mysql://root:pw@db.example:3306/")
    monkeypatch.setenv("AIRFLOW_CONN_UNIT_URI_STAGING", "mariadb://root:pw@db.example:3306/?role=staging")
    monkeypatch.setenv("AIRFLOW_CONN_UNIT_BROKEN", '{"conn_type": "lastline", "port": "not a port"}')
    assert [c for c in servers(role) if c.startswith("unit_")] == offered


@pytest.mark.parametrize(("setting", "role", "offered"), [
    ("unit_db2", "source", ["unit_db2"]),
    ("unit_db2", "target", []),
    ("unit_db2:target", "target", ["unit_db2"]),
    (" unit_db2 : Target ", "source", ["unit_db2"]),
    ("unit_db2:staging,unit_db3:drill", "staging", ["unit_db2"]),
    ("unit_db2:staging,unit_db3:drill", "drill", ["unit_db3"]),
    ("unit_db2:replica", "source", []),
    ("", "source", []),
], ids=["no-kind-a-source", "no-kind-never-a-target", "target", "spaces-and-case", "staging", "drill",
        "unknown-kind-not-offered", "empty"])
def test_an_id_known_only_by_name_is_offered_where_the_deployment_says(connections, monkeypatch, setting, role, offered):
    """A connection stored in the metadata database or a secrets backend is never read at parse: LASTLINE_CONNECTIONS
    says what it is."""
    monkeypatch.setenv("LASTLINE_CONNECTIONS", setting)
    assert [c for c in servers(role) if c.startswith("unit_")] == offered


def test_the_environments_value_outranks_what_a_name_says(connections, monkeypatch):
    monkeypatch.setenv("LASTLINE_CONNECTIONS", "unit_prod:target,unit_s3:target")
    connections("unit_prod", "lastline", protected=True)
    connections("unit_s3", "aws")
    assert [c for c in servers("target") if c.startswith("unit_")] == []
    assert [c for c in servers("source") if c.startswith("unit_")] == ["unit_prod"]


@pytest.mark.parametrize(("role", "offered"), [
    ("source", ["lastline_source", "lastline_target", "lastline_replica"]),
    ("target", ["lastline_target"]),  # a replica is a target only where it is the field's default (rebuild, detach)
    ("staging", ["lastline_staging"]),
    ("drill", ["lastline_drill"]),
], ids=["source", "target", "staging", "drill"])
def test_the_forms_defaults_are_offered_for_their_kind(connections, role, offered):
    assert servers(role) == offered


def test_an_environment_key_airflow_would_not_read_is_no_connection(connections, monkeypatch):
    """Airflow reads AIRFLOW_CONN_<ID upper-cased> only: a key in another case is passed over, and breaks no form."""
    monkeypatch.setenv("AIRFLOW_CONN_unit_lower", "mysql://root@db9:3306/")
    assert "unit_lower" not in servers("source") and "unit_lower" not in servers("target")
    assert params("source_conn_id", "target_conn_id")["target_conn_id"].schema["examples"][0] == "lastline_target"


def test_a_server_fields_default_comes_first_and_once(connections, monkeypatch):
    connections("unit_b", "lastline")
    connections("unit_a", "lastline")
    monkeypatch.setenv("LASTLINE_CONNECTIONS", " unit_a , ,unit_b")
    assert [c for c in servers("source", "unit_b") if c.startswith("unit_")] == ["unit_b", "unit_a"]
    assert params(source_conn_id=Override("unit_b"))["source_conn_id"].schema["examples"][:2] == ["unit_b", "unit_a"]
    assert servers("staging", "unit_new_staging")[0] == "unit_new_staging"  # the field's default: of its kind


@pytest.mark.parametrize("change", [None, "what it means here"], ids=["as-defined", "a-dags-description"])
def test_the_backup_field_offers_latest_and_points_to_the_backups_page(change):
    param = params(backup=change)["backup"] if change else params("backup")["backup"]
    assert param.value.endswith("/latest") and param.schema["examples"] == [param.value]
    assert "the Backups page" in SPECS["backup"].description
    assert param.description == (change or SPECS["backup"].description)
