"""airflow.preload: the modules imported before Airflow forks its task processes all import, and one that cannot is
named in a warning and left to the task that needs it, never stopping Airflow's own processes."""
from __future__ import annotations

import importlib
import logging

import pytest

from lastline.airflow import preload as preload_module
from lastline.airflow.preload import MODULES, preload


@pytest.mark.parametrize("name", [m for m in MODULES if m.startswith("lastline.")])
def test_each_preloaded_lastline_module_imports(name):
    importlib.import_module(name)


def test_a_module_that_fails_is_named_and_the_rest_still_load(monkeypatch, caplog):
    monkeypatch.setattr(preload_module, "MODULES", ("lastline.unit_preload_no_such_module", "lastline.airflow.defaults"))
    with caplog.at_level(logging.WARNING, logger=preload_module.__name__):
        preload()
    assert "could not preload lastline.unit_preload_no_such_module" in caplog.text
    assert "lastline.airflow.defaults" not in caplog.text
