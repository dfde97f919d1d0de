"""airflow.embedded: the embedded Airflow takes docker-compose.yaml's Airflow environment key by key, but for the keys
that differ by design (each with its reason); what fits the machine scales with its cores; the script's lines say
which settings a caller may override."""
from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lastline.airflow import embedded

ROOT = Path(__file__).resolve().parents[3]
IMAGE_ROOT = "/opt/lastline"  # where docker/Dockerfile puts the checkout


def _compose_environment() -> dict[str, str]:
    return yaml.safe_load((ROOT / "docker-compose.yaml").read_text())["x-airflow"]["environment"]


def _by_design(key: str) -> str | None:
    return next((why for pattern, why in embedded.BY_DESIGN.items() if fnmatch.fnmatchcase(key, pattern)), None)


def test_the_embedded_airflow_takes_the_deployments_environment_key_by_key():
    compose = _compose_environment()
    ours = embedded.settings(IMAGE_ROOT, 2)
    differences = []
    for key, value in compose.items():
        if _by_design(key):
            if key in ours:
                differences.append(f"{key}: said to differ by design, yet set here too ({ours[key]!r})")
        elif key not in ours:
            differences.append(f"{key}: the deployment sets {value!r}, the embedded Airflow does not (nor says why)")
        elif ours[key] != str(value):
            differences.append(f"{key}: the deployment sets {value!r}, the embedded Airflow {ours[key]!r}")
    for key in embedded.DEPLOYMENT:
        if key not in compose:
            differences.append(f"{key}: declared as the deployment's, which no longer sets it")
    for pattern in embedded.BY_DESIGN:
        if not any(fnmatch.fnmatchcase(key, pattern) for key in compose):
            differences.append(f"{pattern}: listed as differing by design, but the deployment does not set it")
    for key in embedded.machine(2):
        if key in compose:
            differences.append(f"{key}: fitted to the machine here, but the deployment sets it ({compose[key]!r})")
    assert not differences, "docker-compose.yaml and lastline.airflow.embedded disagree:\n" + "\n".join(differences)


def test_each_difference_by_design_says_why():
    assert all(len(why) > 10 for why in embedded.BY_DESIGN.values())
    assert {"AIRFLOW__CORE__EXECUTOR", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CELERY__BROKER_URL"} <= set(embedded.BY_DESIGN)


@pytest.mark.parametrize(("cores", "tasks"), [(1, 4), (2, 4), (3, 6), (8, 16), (16, 32), (64, 32)],
                         ids=["one-core", "two-cores", "three-cores", "eight-cores", "sixteen-cores", "capped"])
def test_task_processes_and_the_default_pool_fit_the_cores(cores, tasks):
    fitted = embedded.machine(cores)
    assert fitted["AIRFLOW__CORE__DEFAULT_POOL_TASK_SLOT_COUNT"] == str(tasks)  # tasks at once
    # a process a task more: a slot can stay held a few seconds after its task ended (the pool's is free at once)
    assert fitted["AIRFLOW__CORE__PARALLELISM"] == str(2 * tasks)
    assert fitted["AIRFLOW__API__HOST"] == "127.0.0.1"


def test_the_cores_are_those_this_process_may_use():
    assert 1 <= embedded.cores() <= (os.cpu_count() or 1)


@pytest.mark.parametrize("root", ["/work/x", "/a dir/with spaces"], ids=["plain", "spaces"])
def test_the_folders_are_the_checkouts(root):
    ours = embedded.settings(root, 2)
    assert ours["AIRFLOW__CORE__DAGS_FOLDER"] == f"{root}/dags" and ours["AIRFLOW__CORE__PLUGINS_FOLDER"] == f"{root}/plugins"


def test_the_script_prints_each_setting_and_whether_a_caller_may_override_it(tmp_path):
    """As bin/airflow runs it: isolated (-I: no PYTHONPATH, no site), from its path, before anything is installed."""
    out = subprocess.run([sys.executable, "-I", str(ROOT / "include/lastline/airflow/embedded.py"), "/r"],
                         capture_output=True, text=True, check=True, cwd=tmp_path)
    lines = [line.split("\t") for line in out.stdout.splitlines()]
    assert {key: value for _, key, value in lines} == embedded.settings("/r")
    assert {key for how, key, _ in lines if how == "set"} == set(embedded.FIXED) == {"AIRFLOW__CORE__DAGS_FOLDER"}
    assert {how for how, _, _ in lines} == {"set", "default"}
