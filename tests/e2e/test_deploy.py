"""The deployment files stay valid and consistent with what the distributed suite runs (no Docker engine
here: docker-compose.yaml is checked by reading it as compose would)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from lastline_dev.deployment import SHARED_SETTINGS

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yaml").read_text())


def test_compose_file_is_well_formed():
    """What `docker compose config` would reject or silently misread: unknown services in depends_on,
    undeclared named volumes, a volume line that is not `source:target`."""
    compose = _compose()
    services, volumes = compose["services"], set(compose.get("volumes") or {})
    for name, svc in services.items():
        assert set(svc.get("depends_on") or {}) <= set(services), name
        for line in svc.get("volumes") or []:
            assert re.fullmatch(r"[^\s:]+:[^\s:]+(:ro)?", line), f"{name}: volume line {line!r}"
            src = line.split(":")[0]
            assert src.startswith(".") or src in volumes, f"{name}: volume {src} is not declared"
            if src.startswith("."):
                assert (ROOT / src).is_dir(), f"{name}: {src} does not exist"
        env = svc.get("environment") or {}
        for key, value in env.items():
            if key.startswith("AIRFLOW_CONN_") and not str(value).startswith("${"):
                json.loads(value)  # a connection's JSON parses


def test_compose_runs_what_the_distributed_suite_proves():
    services = _compose()["services"]
    assert {"postgres", "redis", "s3", "mariadb-source", "mariadb-target", "airflow-apiserver", "airflow-scheduler",
            "airflow-dag-processor", "airflow-triggerer", "airflow-worker-source", "airflow-worker-target"} <= set(services)
    airflow = {n: s for n, s in services.items() if "build" in s}
    for name, svc in airflow.items():
        env = svc["environment"]
        for key, value in SHARED_SETTINGS.items():  # the same executor and settings as the suite's processes
            assert env[key] == value, (name, key)
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
        assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql+psycopg2://")
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://")
        assert "./plugins:/opt/lastline/plugins" in svc["volumes"]  # the routing policy and the reports plugin
        assert "PYTHONPATH" not in env  # the image installs the package (pip install .)
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"].startswith("${")  # no shared secret in the file
    env = airflow["airflow-worker-source"]["environment"]
    conns = {k: json.loads(v) for k, v in env.items() if k.startswith("AIRFLOW_CONN_") and not v.startswith("${")}
    assert conns["AIRFLOW_CONN_LASTLINE_STAGING"]["extra"]["role"] == "staging"
    assert env["AIRFLOW_CONN_LASTLINE_MASKING"].startswith("${")  # the masking key comes from outside the file
    # each server's queue is served by a worker that has that server's datadir
    workers = {n: s for n, s in airflow.items() if "worker" in s["command"]}
    for conn in conns.values():
        extra = conn.get("extra") or {}
        if "queue" not in extra:
            continue
        serving = [s for s in workers.values() if extra["queue"] in s["command"][s["command"].index("--queues") + 1].split(",")]
        assert serving, f"no worker serves queue {extra['queue']}"
        if "datadir" in extra:
            assert all(any(v.endswith(":" + extra["datadir"]) for v in s["volumes"]) for s in serving), extra
        assert extra["pool"] in services["airflow-init"]["command"][-1]  # the pool exists from the start


def test_image_installs_the_pins_the_suite_runs():
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "pip install --no-cache-dir -r /opt/lastline/requirements.txt" in dockerfile
    requirements = (ROOT / "requirements.txt").read_text()
    assert "-c constraints.txt" in requirements
    assert re.search(r"^apache-airflow-providers-celery==", requirements, re.M)


def test_image_builds_the_native_parts_as_setup_does():
    """Each C file is compiled in the image with the pkg-config modules `make setup` uses, and the image installs
    the headers of each (a library linked in one and not the other fails only where it is built)."""
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    built = dict(re.findall(r'^build (\S+\.c) \S+ "([^"]+)"', setup, re.M))
    assert len(built) == 2, built
    dev = {"libmariadb": "libmariadb-dev", "libzstd": "libzstd-dev", "zlib": "zlib1g-dev", "libcrypto": "libssl-dev"}
    for source, modules in built.items():
        found = re.search(re.escape("/opt/lastline/" + source) + r" \$\(pkg-config --cflags --libs ([^)]+)\)", dockerfile)
        assert found and found.group(1).split() == modules.split(), (source, modules)
        for module in modules.split():
            assert re.search(rf"\b{re.escape(dev[module])}\b", dockerfile) and re.search(rf"\b{re.escape(dev[module])}\b", setup), module


def test_requirements_are_pinned():
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-c"):
            assert "==" in line, f"unpinned requirement: {line}"


def test_processes_that_start_tasks_hold_the_task_code_before_they_fork(tmp_path):
    """An Airflow process started with the deployment's plugins folder (scheduler, Celery worker) has imported
    the task code once, through the local settings, so each forked task does not import it again; the local
    settings still give the routing policy."""
    import os
    import subprocess
    import sys

    probe = (
        "import sys, airflow.settings as s\n"
        "from lastline.airflow.preload import MODULES\n"
        "missing = [m for m in MODULES if m not in sys.modules]\n"
        "assert not missing, missing\n"
        "from lastline.airflow.routing import route\n"
        "assert sys.modules['airflow_local_settings'].task_instance_mutation_hook is route\n"
        "print('ok')\n"
    )
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_airflow_home_setup_creates_is_tuned_like_the_deployment(tmp_path):
    """bin/airflow, as `make setup` runs it (a newcomer's environment: no Airflow or lastline settings of its own),
    creates a home whose default pool fits the machine, and gives every command the embedded settings
    (lastline.airflow.embedded); a setting in the caller's environment wins, but for the DAGs folder."""
    import os
    import sqlite3
    import subprocess

    from lastline.airflow import embedded

    newcomer = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "LASTLINE_"))}
    newcomer["LASTLINE_AIRFLOW_HOME"] = str(tmp_path / "home")
    migrate = subprocess.run([str(ROOT / "bin/airflow"), "db", "migrate"], env=newcomer, capture_output=True, text=True,
                             cwd=tmp_path, timeout=300)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    wanted = embedded.settings(str(ROOT))
    with sqlite3.connect(tmp_path / "home" / "airflow.db") as db:
        (slots,) = db.execute("SELECT slots FROM slot_pool WHERE pool = 'default_pool'").fetchone()
    assert str(slots) == wanted["AIRFLOW__CORE__DEFAULT_POOL_TASK_SLOT_COUNT"]

    # a setting the caller leaves empty is no setting: the default holds (an empty API host would listen everywhere)
    caller = {**newcomer, "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "1", "AIRFLOW__CORE__DAGS_FOLDER": "/elsewhere",
              "AIRFLOW__API__HOST": ""}
    listed = subprocess.run([str(ROOT / "bin/airflow"), "config", "list", "--show-values", "--color", "off"], env=caller,
                            capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert listed.returncode == 0, listed.stderr[-3000:]
    config, section = {}, ""
    for line in listed.stdout.splitlines():
        if re.fullmatch(r"\[\w+\]", line.strip()):
            section = line.strip()[1:-1]
        elif " = " in line and not line.startswith("#"):
            key, value = line.split(" = ", 1)
            config[f"AIRFLOW__{section}__{key.strip()}".upper()] = value.strip()
    for key, value in wanted.items():
        if key.startswith("AIRFLOW__"):
            expected = "1" if key == "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME" else value
            assert config.get(key) == expected, (key, config.get(key), expected)
    assert config["AIRFLOW__CORE__DAGS_FOLDER"] == str(ROOT / "dags")
    assert config["AIRFLOW__API__HOST"] == "127.0.0.1"
