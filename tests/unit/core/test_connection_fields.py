"""The extras of a server's connection are declared once (lastline.core.connection_fields); the connection form, the
Server, the routing policy, the bounds and docs/connections.md's table are held to that declaration here, so a new
extra cannot be added to one of them and forgotten in the others."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lastline.core import bounds
from lastline.core.connection_fields import FIELDS, LIMIT_EXTRAS, Field, form_fields
from lastline.core.errors import ConfigError
from lastline.core.servers import Server

DOCS = Path(__file__).resolve().parents[3] / "docs" / "connections.md"
DECLARED = {name for f in FIELDS for name in (f.name, *f.aliases)}


class _Asked(dict):
    """Extras that remember every key asked of them."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.asked: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.asked.add(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.asked.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.asked.add(str(key))
        return super().__contains__(key)


def _server(extra: dict) -> Server:
    return Server.from_connection(SimpleNamespace(conn_id="c", host="db", port=3306, login="u", password="p", extra_dejson=extra))


def _routing_reads(extra: dict, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The keys the routing policy asks of a connection's extras."""
    from airflow.models.dagrun import DagRun

    from lastline.airflow import routing

    asked = _Asked(extra)
    monkeypatch.setattr(routing, "connection_extras", lambda conn_id, session: asked)
    ti = SimpleNamespace(task=SimpleNamespace(params={}), executor_config=routing.on_server("p")["executor_config"],
                         queue="default", pool="default_pool")
    routing.route(ti, DagRun(dag_id="d", run_id="r", conf={"p": "c"}))
    return asked.asked


def _docs_names() -> set[str]:
    """The extras docs/connections.md's table names (every backticked name in its first column)."""
    names: set[str] = set()
    for line in DOCS.read_text().splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([a-z_]+)`", line.split("|")[1]))
    return names


def _sample(field: Field) -> Any:
    """A value of `field` other than its default (an extra the form has no field for is a dict: ssl's)."""
    if not field.form:
        return {"ca": "/etc/ssl/ca.pem"}
    if field.kind == "flag":
        return True
    if field.choices:
        return field.choices[-1]
    return "7"


@pytest.mark.parametrize("field", FIELDS, ids=[f.name for f in FIELDS])
def test_each_declared_extra_is_documented_and_read_by_its_reader(field: Field, monkeypatch: pytest.MonkeyPatch):
    assert field.name in _docs_names(), f"docs/connections.md's table does not list {field.name}"
    if field.read_by == "routing":
        assert field.name in _routing_reads({}, monkeypatch)
        return
    for name in (field.name, *field.aliases):
        try:
            changed = vars(_server({name: _sample(field)})) != vars(_server({}))
        except (ConfigError, ValueError):
            changed = True  # refused as it was read (a flag's or a dict's text)
        assert changed, f"Server.from_connection does not read the extra {name}"


CROSS_CHECKS = {
    "the docs table lists only declared extras": lambda mp: _docs_names() - DECLARED,
    "the Server reads only declared extras": lambda mp: _server_asks() - DECLARED,
    "the routing policy reads only declared routing extras": lambda mp: _routing_reads({}, mp) - {f.name for f in FIELDS if f.read_by == "routing"},
    "every bound of a run's conf is a declared bound extra": lambda mp: {s.extra for s in _bound_settings()} ^ set(LIMIT_EXTRAS),
    "each bound's form description names its deployment setting":
        lambda mp: {s.extra for s in _bound_settings() if f"LASTLINE_{s.env}" not in form_fields()[s.extra]["description"]},
    "the provider's form is the declared form": lambda mp: set() if _provider_fields() == form_fields() else {"differs"},
}


def _server_asks() -> set[str]:
    asked = _Asked({"unrelated": None})  # not empty: `extra_dejson or {}` would pass over an empty one
    _server(asked)
    return asked.asked


def _bound_settings() -> list[bounds.Setting]:
    return [v for v in vars(bounds).values() if isinstance(v, bounds.Setting)]


def _provider_fields() -> dict:
    from lastline.get_provider_info import get_provider_info

    return get_provider_info()["connection-types"][0]["conn-fields"]


@pytest.mark.parametrize("check", CROSS_CHECKS, ids=list(CROSS_CHECKS))
def test_no_list_of_extras_drifts_from_the_declaration(check: str, monkeypatch: pytest.MonkeyPatch):
    assert CROSS_CHECKS[check](monkeypatch) == set(), check
