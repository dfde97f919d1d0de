"""The environment of every process lastline starts: what a tool needs to run, none of the worker's secrets.

An Airflow worker's environment holds secrets: `AIRFLOW_CONN_*` URIs with passwords, `AIRFLOW_VAR_*`,
`AIRFLOW__*__SECRET_KEY` or `*_PASSWORD` settings, AWS keys, a `MYSQL_PWD`. mariabackup, zstd, mbstream, the mariadb
clients, ssh, dd, the dump worker never need them, and a child's environment can be read by whoever runs as its user
(`/proc/<pid>/environ`) and by anything the child runs in turn. So every child gets `child_env()`: the names below
from the worker's environment, and nothing else. Credentials reach tools only through lastline's anonymous option
files and keys (core.hosts.memfd), never through the environment.
"""
from __future__ import annotations

import os

# what a command-line tool needs: where commands are, the user's home, language and time zone, where temporary files
# go, where its shared libraries are (a tool installed outside the system's folders)
PASSED = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH")
PASSED_PREFIXES = ("LC_",)  # LC_ALL, LC_CTYPE, ...
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process: PASSED (and LC_*) from this process's, a PATH always, and `extra` (what
    lastline sets on purpose for that child; never a secret)."""
    env = {k: v for k, v in os.environ.items() if k in PASSED or k.startswith(PASSED_PREFIXES)}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(extra or {})
    return env
