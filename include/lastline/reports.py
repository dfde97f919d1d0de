"""Where run reports live: a destination of their own, read by the UI, not one worker's disk.

`LASTLINE_REPORTS` is a storage URL (`file:///dir`, `s3://bucket/prefix`, `ssh://<ssh_conn_id>/<dir>`;
`LASTLINE_REPORTS_AWS_CONN_ID` for S3). Unset, reports go to `$LASTLINE_REPORT_DIR`, else
`<AIRFLOW_HOME>/lastline-reports` (a local folder: right for one machine; a deployment with workers on
several machines points every process at one shared URL). One folder per DAG run,
`<dag_id>/<run_id>/`, with an `index.json` listing what the run's tasks saved there; the api-server's
plugin (plugins/lastline_reports.py) serves them, as a link on each run.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime

from lastline.core.errors import StorageError
from lastline.storage import Storage, open_storage

INDEX = "index.json"
HISTORY = "_history.json"  # a history of one kind of run (restore drills), beside that DAG's run folders
# what a report may hold (no HTML: the UI's plugin serves these files under Airflow's own origin)
TYPES = {".svg": "image/svg+xml", ".json": "application/json", ".md": "text/markdown; charset=utf-8"}


def url() -> str:
    """The reports' storage URL (see the module)."""
    explicit = os.environ.get("LASTLINE_REPORTS")
    if explicit:
        return explicit
    base = os.environ.get("LASTLINE_REPORT_DIR") or os.path.join(os.environ.get("AIRFLOW_HOME", os.getcwd()), "lastline-reports")
    return f"file://{os.path.abspath(base)}"


def storage() -> Storage:
    return open_storage(url(), os.environ.get("LASTLINE_REPORTS_AWS_CONN_ID"))


def _safe(part: str) -> str:
    """A run id or DAG id as one key segment (`manual__2026-11-23T19:00:00+00:00` keeps its shape)."""
    out = "".join(ch if ch.isalnum() or ch in "-_.+" else "_" for ch in part).strip(".")
    return out or "run"


def folder(dag_id: str, run_id: str) -> str:
    """The run's key prefix: `<dag_id>/<run_id>`."""
    return f"{_safe(dag_id)}/{_safe(run_id)}"


def names(dag_id: str, run_id: str, store: Storage | None = None) -> list[str]:
    """The files a run saved, in the order they were saved (empty: none)."""
    store = store or storage()
    key = f"{folder(dag_id, run_id)}/{INDEX}"
    if not store.exists(key):
        return []
    return list(json.loads(store.read_bytes(key))["files"])


def save(dag_id: str, run_id: str, files: Mapping[str, bytes | str], lead: bool = False) -> str:
    """Save a task's report files into the run's folder and list them in its index; returns the folder's URL.
    `lead`: these files open the run's report (listed first, in their order), before what earlier tasks saved (a
    point-in-time restore's verdict before its base's restore). The tasks of one run that save reports run one after
    another (the index is read, then written)."""
    store = storage()
    base = folder(dag_id, run_id)
    listed = names(dag_id, run_id, store)
    for name, data in files.items():
        if "/" in name or name == INDEX or os.path.splitext(name)[1] not in TYPES:
            raise StorageError(f"report file name {name!r}: a plain name ending in {', '.join(TYPES)}")
        store.write_bytes(f"{base}/{name}", data.encode() if isinstance(data, str) else data)
        if name not in listed:
            listed.append(name)
    if lead:
        listed = [*files, *(n for n in listed if n not in files)]
    index = {"dag_id": dag_id, "run_id": run_id, "files": listed, "updated": datetime.now(UTC).isoformat()}
    store.write_bytes(f"{base}/{INDEX}", json.dumps(index, indent=1).encode())
    return store.location(base)


def save_aside(dag_id: str, run_id: str, name: str, data: bytes | str) -> None:
    """Save one file into the run's folder without listing it in its index (a file read by its own name, e.g. one
    per failed task: writers that may run at once never rewrite a shared file, and the index keeps every report)."""
    if "/" in name or name == INDEX or os.path.splitext(name)[1] not in TYPES:
        raise StorageError(f"report file name {name!r}: a plain name ending in {', '.join(TYPES)}")
    storage().write_bytes(f"{folder(dag_id, run_id)}/{name}", data.encode() if isinstance(data, str) else data)


def read_aside(dag_id: str, run_id: str, name: str) -> bytes | None:
    """A file saved with save_aside (None: there is none)."""
    store, key = storage(), f"{folder(dag_id, run_id)}/{name}"
    return store.read_bytes(key) if "/" not in name and store.exists(key) else None


def read(dag_id: str, run_id: str, name: str) -> bytes:
    """One file of a run's report (only the names its index lists)."""
    store = storage()
    if name not in names(dag_id, run_id, store):
        raise FileNotFoundError(f"{name} is not in the report of {dag_id} run {run_id}")
    return store.read_bytes(f"{folder(dag_id, run_id)}/{name}")


def history(name: str, store: Storage | None = None) -> list[dict]:
    """A history's entries, oldest first (e.g. every restore drill's RTO)."""
    store = store or storage()
    key = f"{_safe(name)}/{HISTORY}"
    return list(json.loads(store.read_bytes(key))) if store.exists(key) else []


def append_history(name: str, entry: dict, keep: int = 500) -> list[dict]:
    """Add an entry to the history `name` (the newest `keep` are kept); returns the history. Its writers run
    one at a time (a DAG with max_active_runs=1)."""
    store = storage()
    entries = (history(name, store) + [entry])[-keep:]
    store.write_bytes(f"{_safe(name)}/{HISTORY}", json.dumps(entries, indent=1).encode())
    return entries
