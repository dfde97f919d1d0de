"""get_provider_info: what Airflow's providers manager reads of lastline: its connection type with every field
described, and hooks that exist."""
from __future__ import annotations

import importlib

from lastline.core.connection_fields import form_fields
from lastline.get_provider_info import CONN_FIELDS, field_defaults, get_provider_info


def test_the_connection_type_names_a_hook_that_exists():
    info = get_provider_info()
    (conn,) = info["connection-types"]
    module, _, name = conn["hook-class-name"].rpartition(".")
    assert getattr(importlib.import_module(module), name).conn_type == conn["connection-type"] == "lastline"
    for hook in info["hooks"]:
        for module in hook["python-modules"]:
            importlib.import_module(module)
    assert info["versions"] and info["package-name"] == "lastline"


def test_every_field_is_described_and_has_its_default():
    assert CONN_FIELDS == form_fields() and CONN_FIELDS
    for name, field in CONN_FIELDS.items():
        assert field["label"] and field["schema"].get("type"), name
    assert set(field_defaults()) == set(CONN_FIELDS)
    assert all(field_defaults()[n] == f["schema"].get("default") for n, f in CONN_FIELDS.items())
