"""airflow.params: a DAG picks its Params by name and says what one means there; what may be left empty accepts
null (its default applies), an Override changes a default, an enum or the examples; a server field offers only the
connections of its kind; the backup field offers `latest` and the newest complete backups of a local destination."""
from __future__ import annotations

import json

import pytest

from lastline import manifest
from lastline.airflow import params as params_module
from lastline.airflow.params import SPECS, Override, params, recent_backups, servers
from lastline.storage import auth
from lastline.storage.file import FileStorage


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
    """Server connections in the environment (as a deployment defines them), each id asked anew."""
    monkeypatch.setattr(params_module, "_SEEN", {})
    monkeypatch.delenv("LASTLINE_CONNECTIONS", raising=False)

    def add(conn_id: str, conn_type: str, **extra):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}",
                           json.dumps({"conn_type": conn_type, "host": "db.example", "extra": extra}))
    return add


@pytest.mark.parametrize(("role", "offered"), [
    ("source", ["unit_plain", "unit_mysql", "unit_protected", "unit_typo"]),
    ("target", ["unit_plain", "unit_mysql"]),
    ("drill", ["unit_drill"]),
    ("staging", ["unit_staging"]),
], ids=["source-any-without-a-role", "target-not-protected-nor-unreadable", "drill-its-role", "staging-its-role"])
def test_a_server_field_offers_the_connections_of_its_kind(connections, role, offered):
    connections("unit_plain", "lastline")
    connections("unit_mysql", "mysql", role="")
    connections("unit_protected", "mariadb", protected="true")
    connections("unit_typo", "lastline", protected="ture")
    connections("unit_drill", "lastline", role="drill")
    connections("unit_staging", "lastline", role=" Staging ")
    connections("unit_http", "http")
    assert [c for c in servers(role) if c.startswith("unit_")] == offered


def test_a_server_fields_default_comes_first_and_once(connections, monkeypatch):
    connections("unit_b", "lastline")
    connections("unit_a", "lastline")
    monkeypatch.setenv("LASTLINE_CONNECTIONS", " unit_a , ,unit_b")
    assert [c for c in servers("source", "unit_b") if c.startswith("unit_")] == ["unit_b", "unit_a"]
    assert params(source_conn_id=Override("unit_b"))["source_conn_id"].schema["examples"][:2] == ["unit_b", "unit_a"]


def test_recent_backups_offer_latest_then_the_newest_complete_of_a_local_destination(tmp_path, monkeypatch):
    monkeypatch.setattr(auth, "deployment_keys", lambda: None)
    monkeypatch.setattr(params_module, "DESTINATION", f"file://{tmp_path}/")
    store = FileStorage(str(tmp_path))
    ids = ["20261128T101432Z-000000", "20261128T111432Z-000000", "20261128T121432Z-000000"]
    fields = dict(source_conn_id="src", server_version="11.4.2", tool_version="11.4.2", artifact="backup.mbstream.zst",
                  compression="zstd", bytes=10, sha256="0" * 64, started_at="a", finished_at="b", seconds=1.0,
                  mb_per_s=1.0, parallel=2, datadir_bytes=100, tables=[])
    for backup_id in ids[:2]:
        manifest.write_manifest(store, manifest.PhysicalManifest(backup_id=backup_id, **fields))
    store.write_bytes(f"{ids[2]}/part", b"x")  # incomplete: not offered
    offer = recent_backups("physical", "which backup", limit=1)
    assert offer.examples == [f"file://{tmp_path}/latest", f"file://{tmp_path}/{ids[1]}"]
    assert offer.description == "which backup"
    assert recent_backups("logical").examples == [f"file://{tmp_path}/latest"]


@pytest.mark.parametrize("destination", ["s3://bucket/prefix", "file:///nonexistent/unit_params"], ids=["s3-not-listed", "missing-folder"])
def test_recent_backups_offer_only_latest_where_listing_costs_or_fails(monkeypatch, destination):
    monkeypatch.setattr(params_module, "DESTINATION", destination)
    assert recent_backups(None).examples == [f"{destination}/latest"]
