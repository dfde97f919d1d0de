"""A failed task explains itself where the user looks.

- In its log: `explained` (every lastline task's callable goes through it, see steps) logs one ERROR line with the
  whole reason just before Airflow's traceback, so the log's error opens with what went wrong, uncut.
- In the run's Report tab: `record`, every lastline task's `on_failure_callback` (defaults.default_args), saves
  `failed-<task>.md` (for a person reading the report folder) and `failed-<task>.json` (what the UI's plugin and the
  alert read; `<task>@<map index>` for a mapped task) into the run's folder: the failed task, the reason, what to
  do, and the path of the task's log in Airflow's UI. One file per task instance, outside the run's index: mapped
  lanes failing at once never rewrite one file. Which tasks failed is Airflow's database's word (a task cleared
  and passed since has an old file here, which no one shows). It runs in the task's own process, after its last
  try failed: alike under `airflow dags test` and a scheduler. Reasons go through Airflow's secrets masker.
"""
from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from airflow.sdk._shared.secrets_masker import redact  # what airflow.sdk.log masks with (3.3's path)

from lastline import reports
from lastline.core.errors import LastlineError, PreflightError, Refusal

log = logging.getLogger(__name__)


def file_name(task_id: str, map_index: int = -1, ext: str = ".json") -> str:
    """A task instance's failure file: `failed-<task>.json`, `failed-<task>@<map index>.json` ("@" is in no task id)."""
    return f"failed-{task_id}" + (f"@{map_index}" if map_index >= 0 else "") + ext


def reason(exc: BaseException | None) -> str:
    """The error as one whole line: lastline's own message as it is, any other error with its kind."""
    if exc is None:
        return ("the task's process ended without an error (killed, out of memory, its worker lost, or a timeout): "
                "its log says what it did last")
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if isinstance(exc, LastlineError):
        said = text or type(exc).__name__
    else:
        said = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return str(redact(said))  # a password this process's connections registered is "***" here too


def advice(exc: BaseException | None, tries: int = 1, task_id: str = "") -> str:
    """What to do about a failure of this kind (in a preflight: before anything was changed)."""
    if isinstance(exc, PreflightError) or (isinstance(exc, Refusal) and task_id.rpartition(".")[2] == "preflight"):
        return ("A check before any change refused: nothing was touched. Fix what the reason names (the run's form, "
                "a connection, the backup) and trigger a new run; a retry would fail the same way.")
    if isinstance(exc, Refusal):
        return ("A refusal, not retried (waiting cannot fix it). Fix what the reason names (the run's form, a "
                "connection, the backup), then clear this task or trigger a new run: each step is safe to re-run.")
    retried = f"it was tried {tries} times, " if tries > 1 else ""
    kind = "a transient error (a connection, a stream, the storage)" if isinstance(exc, LastlineError) else "an error"
    return (f"This was {kind}: {retried}and it failed each time. Once the cause is fixed, clear this task in Airflow "
            "(each step is safe to re-run and resumes where it can) or trigger a new run.")


def log_path(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """The task's page in Airflow 3's UI (its log), as a path from the UI's root."""
    path = f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/{quote(task_id, safe='')}"
    return f"{path}/mapped/{map_index}" if map_index is not None and map_index >= 0 else path


def explained(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` logging one ERROR line with the whole reason when it raises (before Airflow logs the traceback)."""
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if (isinstance(exc, LastlineError) or not _airflow_flow(exc)) and not getattr(exc, "_lastline_said", False):
                log.error("%s", reason(exc))
                try:
                    exc._lastline_said = True  # type: ignore[attr-defined]  # once, where callables nest
                except AttributeError:  # an exception type with __slots__: said twice at worst
                    pass
            raise

    return call


def _airflow_flow(exc: BaseException) -> bool:
    """An Airflow exception that is the task's control flow or Airflow's own words (a skip, a deferral, a timeout)."""
    return any(c.__module__.startswith(("airflow.", "airflow_")) for c in type(exc).__mro__[:-2])


def _entry(context: Any) -> dict[str, Any]:
    ti = context.get("ti") or context.get("task_instance")
    exc = context.get("exception")
    exc = exc if isinstance(exc, BaseException) else (RuntimeError(exc) if exc else None)
    index = getattr(ti, "map_index", None)
    map_index = -1 if index is None else int(index)
    dag_id, run_id, task_id = str(ti.dag_id), str(ti.run_id), str(ti.task_id)
    tries = int(getattr(ti, "try_number", 1) or 1)
    return {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index,
            "reason": reason(exc), "what_to_do": advice(exc, tries, task_id), "kind": type(exc).__name__ if exc else "",
            "tries": tries, "log": log_path(dag_id, run_id, task_id, map_index), "at": datetime.now(UTC).isoformat()}


def recorded(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict[str, Any] | None:
    """The failure a task instance recorded (None: none, or no report storage to read)."""
    try:
        data = reports.read_aside(dag_id, run_id, file_name(task_id, map_index))
        entry = json.loads(data) if data is not None else None
        return entry if isinstance(entry, dict) else None
    except Exception as exc:  # noqa: BLE001 - a report that cannot be read is not a second failure
        log.warning("the failure of %s in %s run %s cannot be read (%s)", task_id, dag_id, run_id, type(exc).__name__)
        return None


def markdown(failures: list[dict[str, Any]]) -> str:
    """A failure file's Markdown (failed-<task>.md): each failed task, its reason, what to do, its log."""
    out = []
    for f in failures:
        task = f["task_id"] + (f"[{f['map_index']}]" if f.get("map_index", -1) >= 0 else "")
        out += [f"# Failed: task `{task}`", "", f"**Reason:** {f['reason']}", "", f"**What to do:** {f['what_to_do']}",
                "", f"**Log:** `{f['log']}` in Airflow's UI", ""]
    return "\n".join(out)


def record(context: Any) -> None:
    """A task's on_failure_callback: save this failure as the task instance's own failed-<task>.md and .json.
    Never raises."""
    try:
        entry = _entry(context)
        dag_id, run_id, name = entry["dag_id"], entry["run_id"], file_name(entry["task_id"], entry["map_index"], "")
        reports.save_aside(dag_id, run_id, f"{name}.json", json.dumps(entry, indent=1))
        reports.save_aside(dag_id, run_id, f"{name}.md", markdown([entry]))
    except Exception as exc:  # noqa: BLE001 - recording a failure must not hide it
        log.warning("the failure could not be saved into the run's report (%s: %s)", type(exc).__name__, redact(str(exc)))
