"""The embedded Airflow's settings: the Airflow that bin/airflow runs on one machine (the project's Airflow home that
`make setup` creates, `make demo`, `make ui`, the suite's standalone runs) is tuned like the deployment.

Declared once, here: DEPLOYMENT is what docker-compose.yaml's Airflow services set and this Airflow sets alike,
BY_DESIGN what they set and this one does not (with the reason), machine() what fits this machine's cores where the
deployment's values are for its workers. bin/airflow exports them as defaults (a caller's environment wins, but
for the DAGs folder, always the project's), and tests/unit/airflow/test_embedded.py holds DEPLOYMENT and BY_DESIGN
to docker-compose.yaml key by key. Run as a script by bin/airflow, before any Airflow or lastline import, so it
imports nothing but the standard library:

    python include/lastline/airflow/embedded.py ROOT    # lines `default|set <TAB> KEY <TAB> VALUE`
"""
from __future__ import annotations

import os
import sys

# docker-compose.yaml's own values, the same here; {root} is the checkout (/opt/lastline in the image)
DEPLOYMENT = {
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": "{root}/dags",
    # airflow_local_settings.py: the routing policy and the task code preloaded before Airflow forks a task
    # (lastline.airflow.preload); the Report tab and the Backups page
    "AIRFLOW__CORE__PLUGINS_FOLDER": "{root}/plugins",
    # a restore is a chain of short serial tasks: the scheduler does not sleep 1 s between them
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
    # DAG files change with a checkout, not every 30 s: parsing them less often leaves the cores to the work
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "300",
    # a person approves a restore that replaces data (lastline's own default too)
    "LASTLINE_APPROVAL": "true",
}
# always the project's, whatever the caller's environment says
FIXED = ("AIRFLOW__CORE__DAGS_FOLDER",)

# docker-compose.yaml's settings this Airflow does not take, and why (a key ending in * stands for its prefix)
BY_DESIGN = {
    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor: `airflow standalone` forces it and `dags test` runs in its own "
                               "process; the deployment's Celery workers sit next to its database servers",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "SQLite in the project's Airflow home, not the deployment's Postgres",
    "AIRFLOW__CELERY__RESULT_BACKEND": "no Celery here",
    "AIRFLOW__CELERY__BROKER_URL": "no Celery here (the deployment's broker is its Redis)",
    "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "no Celery workers here",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": "the deployment's api-server by its compose host name; standalone "
                                               "serves it on its own port (`make ui` names it)",
    "AIRFLOW__API_AUTH__JWT_SECRET": "a site's secret: the home's airflow.cfg holds one of its own, made with the home",
    "LASTLINE_DESTINATION": "the site's bucket; here the default local folder (`make demo`, `make ui`: the demo's)",
    "LASTLINE_REPORTS": "beside the site's backups; here in the Airflow home",
    "LASTLINE_BACKUP_ROOTS": "the site's bucket; here the destination alone",
    "LASTLINE_STORAGE_KEY_CONN_ID": "the storage key is a site's secret; `make demo` and `make ui` name the demo's",
    "LASTLINE_ENCRYPTION_KEY_CONN_ID": "the encryption key is a site's secret; `make demo` names the demo's for its "
                                       "encrypted backup, rotation and verify (.demo/backups-encrypted) only",
    "AIRFLOW_CONN_*": "the deployment's servers, storage and secrets; the demo's connections are in the home's "
                      "database (`make demo`)",
}


def cores() -> int:
    """The cores this process may run on (a container's or a taskset's limit, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def machine(n: int) -> dict[str, str]:
    """What fits a machine of `n` cores, where the deployment's values are for its workers (each has 4 task slots,
    `--concurrency 4`, for its database server's pool of 2): every task, source's and target's, runs here."""
    # tasks at once (the default pool): a task mostly waits on its server or on one tool, two per core, at least 4 (a
    # restore's serial chain beside a backup and the archive), at most Airflow's own default parallelism of 32
    tasks = min(32, max(4, 2 * n))
    return {
        # task processes: twice the tasks, since one's slot can stay held up to [workers] min_heartbeat_interval (5 s)
        # after its task ended (Airflow's task supervisor, once the task closed its sockets, can wait that long in
        # select before it reaps the process), while the pool's slot is free at once: with 4 on 2 cores, a restore's
        # second lane waited a second for a process
        "AIRFLOW__CORE__PARALLELISM": str(2 * tasks),
        # the default pool as setup creates the home (`db migrate`), not Airflow's 128
        "AIRFLOW__CORE__DEFAULT_POOL_TASK_SLOT_COUNT": str(tasks),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__HOST": "127.0.0.1",  # a local Airflow: never on the network unless asked
    }


def settings(root: str, n: int | None = None) -> dict[str, str]:
    """Every setting bin/airflow gives the embedded Airflow of the checkout `root`."""
    return {**{k: v.format(root=root) for k, v in DEPLOYMENT.items()}, **machine(cores() if n is None else n)}


def main(argv: list[str]) -> int:
    for key, value in settings(argv[1]).items():
        print(f"{'set' if key in FIXED else 'default'}\t{key}\t{value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
