"""The deployment files stay valid and consistent (no Docker engine here: checked by reading)."""
from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_compose_has_the_distributed_stack():
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "s3", "mariadb-source", "mariadb-target", "airflow-apiserver",
            "airflow-scheduler", "airflow-dag-processor", "airflow-worker"} <= set(services)
    env = services["airflow-worker"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert "PYTHONPATH" not in env  # the image installs the package (pip install .)
    for name in ("AIRFLOW_CONN_LASTLINE_SOURCE", "AIRFLOW_CONN_LASTLINE_TARGET", "AIRFLOW_CONN_LASTLINE_S3",
                 "AIRFLOW_CONN_LASTLINE_STAGING"):
        assert yaml.safe_load(env[name])["conn_type"] in ("mysql", "aws")
    assert yaml.safe_load(env["AIRFLOW_CONN_LASTLINE_STAGING"])["extra"]["role"] == "staging"
    assert env["AIRFLOW_CONN_LASTLINE_MASKING"].startswith("${")  # the masking key comes from outside the file


def test_requirements_are_pinned():
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-c"):
            assert "==" in line, f"unpinned requirement: {line}"
