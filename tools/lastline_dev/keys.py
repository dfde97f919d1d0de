"""A throwaway storage key for the benchmarks: their backups are signed and checked as a deployment's are (a
physical or point-in-time restore refuses an unsigned backup), with a key that lives in this process's
environment only and dies with it."""
from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable

CONN_ID = "lastline_bench_storage_key"


def throwaway_storage_key() -> None:
    """Give this process and its children a random storage key, unless the deployment's environment names one."""
    if os.environ.get("LASTLINE_STORAGE_KEY_CONN_ID"):
        return
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
        {"conn_type": "generic", "login": f"bench-{secrets.token_hex(4)}", "password": secrets.token_hex(32)})
    os.environ["LASTLINE_STORAGE_KEY_CONN_ID"] = CONN_ID


def encryption_connection(setenv: Callable[[str, str], object], conn_id: str, login: str, password: str,
                          **extra: object) -> None:
    """Name `conn_id` as the deployment's encryption key connection and define it (generic: login the key id,
    password the key, `extra` its older keys, recipients, identities), through `setenv` (a test's
    monkeypatch.setenv, or os.environ.__setitem__)."""
    from lastline.storage.encryption_keys import KEY_CONN_ENV

    setenv(KEY_CONN_ENV, conn_id)
    setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
        {"conn_type": "generic", "login": login, "password": password, "extra": extra}))
