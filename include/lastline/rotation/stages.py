"""key_rotation's steps: the preflight (the destination, its backups, what the rotation wraps under), the batches the
DAG maps a task over, each batch's backups re-wrapped, the archive's branches, and the report, which fails the run
while any encrypted backup is left under an older key (dropping that key now would make it unreadable)."""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from lastline import reports
from lastline.core.errors import ConfigError, IntegrityError
from lastline.core.plans import Conf, RunParams
from lastline.core.progress import plural
from lastline.manifest import MANIFEST, backup_time
from lastline.rotation.archive import rotate_archive
from lastline.rotation.manifests import Pin, Rotation, wraps_to
from lastline.rotation.plans import Outcome, RotationPlan, outcomes, summary
from lastline.storage import auth, open_storage, require_allowed
from lastline.storage.encryption_keys import KEY_CONN_ENV, deployment_encryption_keys

log = logging.getLogger(__name__)
BATCH = 100  # backups a task re-wraps (a manifest takes milliseconds; a task, seconds to start)
MAX_TASKS = 1000  # under Airflow's [core] max_map_length (1024 by default)
RUNNING_HOURS = 24  # a backup folder without a manifest younger than this may still be being written


def preflight(conf: RunParams) -> RotationPlan:
    """The destination (under the deployment's roots), its backup folders with a manifest (oldest first), and what
    the deployment's encryption key connection wraps under; refused when it holds keys but none to write with."""
    params = Conf(conf)
    aws_conn_id = params.text("aws_conn_id") or None
    place = require_allowed(params.required("destination"), "destination", aws_conn_id)
    storage = open_storage(place, aws_conn_id)
    keys = deployment_encryption_keys()
    if keys is not None and not wraps_to(keys):
        raise ConfigError(f"the encryption key connection ({KEY_CONN_ENV}) has no key to re-wrap under: give it the new "
                          "key as its login and password (the old one in extras `keys`), or extras `recipients`.")
    folders = [b for b in storage.list_backups() if backup_time(b)]
    complete = [b for b in folders if storage.exists(f"{b}/{MANIFEST}")]
    plan = RotationPlan(place, aws_conn_id, complete, wraps_to(keys), auth.deployment_keys() is not None,
                        params.flag("dry_run"))
    log.info("rotation of %s: %s to look at, re-wrapped under %s%s", place, plural(len(complete), "backup"),
             plan.wraps_to or f"nothing (no encryption key connection, {KEY_CONN_ENV})",
             " (a dry run: nothing is written)" if plan.dry_run else "")
    return plan


def batches(plan: RotationPlan, size: int = BATCH, most: int = MAX_TASKS) -> list[list[str]]:
    """The plan's backups in runs of `size` consecutive ones (more, where `size` would make over `most` tasks)."""
    size = max(size, -(-len(plan.backups) // most), 1)
    return [plan.backups[i:i + size] for i in range(0, len(plan.backups), size)]


def _rotation(plan: RotationPlan, pin: Pin | None) -> Rotation:
    storage = open_storage(plan.destination, plan.aws_conn_id)
    return Rotation(storage, deployment_encryption_keys(), plan.storage_key, plan.dry_run, pin)


def rotate_backups(plan: RotationPlan, backup_ids: list[str], pin: Pin | None = None) -> list[Outcome]:
    """Each backup of a batch re-wrapped (rotation.manifests), or why not, logged one line each."""
    rot = _rotation(plan, pin)
    done = [rot.rotate(b) for b in backup_ids]
    for o in done:
        log.info("rotation: %s", o.describe())
    return done


def rotate_branches(plan: RotationPlan, record_head: Callable[[dict[str, Any] | None], None] | None = None) -> list[Outcome]:
    """The binlog archive's branches re-wrapped (rotation.archive); `record_head(head)`: Airflow's record of it."""
    done = rotate_archive(_rotation(plan, None), record_head)
    for o in done:
        log.info("rotation: %s", o.describe())
    return done


def markdown(found: dict[str, Any]) -> str:
    """The report page: the verdict, the figures, then a row per backup and branch."""
    counts = ", ".join(f"{n} {status}" for status, n in sorted(found["counts"].items()))
    head = (f"# Key rotation of {found['destination']}{' (dry run)' if found['dry_run'] else ''}: "
            + (plural(len(found["problems"]), "backup") + " left under an older key" if found["problems"] else "done"))
    lines = [head, "", f"Wrapped under: {found['wraps_to'] or 'nothing (no encryption key connection)'}. {counts}. "
             f"{found['bytes_written']:,} bytes written (manifests and chains only: no data object is rewritten)."]
    lines += [""] + [f"**Problem:** {p}" for p in found["problems"]]
    lines += ["", "| backup | kind | status | was | now | bytes | Airflow's pin | why |", "|---|---|---|---|---|---:|---|---|"]
    for o in map(Outcome.of, found["outcomes"]):
        lines.append(f"| {o.backup_id} | {o.kind or '?'} | {o.status} | {o.was or '-'} | {o.now or '-'} | {o.bytes:,} | "
                     f"{'updated' if o.pinned else '-'} | {o.why.replace('|', '/') or '-'} |")
    return "\n".join(lines) + "\n"


def record(plan: RotationPlan, found: Any, archive: Any, dag_id: str, run_id: str) -> dict[str, Any]:
    """Save the run's report; return its summary (its `problems` fail the run: fail_if_bad)."""
    done = summary(plan, outcomes(found), outcomes(archive) if archive is not None else None)
    done["problems"] += late(plan)
    done["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    where = reports.save(dag_id, run_id, {"key_rotation.md": markdown(done),
                                          "key_rotation.json": json.dumps(done, indent=1)}, lead=True)
    log.info("rotation of %s: %s; %s bytes written; report %s/key_rotation.md", plan.destination,
             "; ".join(done["problems"]) or "done", f"{done['bytes_written']:,}", where)
    return {k: v for k, v in done.items() if k != "outcomes"}


def late(plan: RotationPlan, now: float | None = None) -> list[str]:
    """Backups the preflight's listing did not hold: one completed since (sealed, perhaps, under the older key it
    started with) and one still being written (no manifest yet, started within RUNNING_HOURS): the run fails, to be run
    again once they are done, before the older key is dropped."""
    storage = open_storage(plan.destination, plan.aws_conn_id)
    now = time.time() if now is None else now
    out = []
    for b in storage.list_backups():
        started = backup_time(b)
        if started is None or b in plan.backups:
            continue
        if storage.exists(f"{b}/{MANIFEST}"):
            out.append(f"backup {b} completed after the rotation listed the destination: run the rotation again")
        elif now - started.timestamp() < RUNNING_HOURS * 3600:
            out.append(f"backup {b} is still being written (it may seal under the older key): run the rotation again "
                       "once it has ended")
    return out


def fail_if_bad(found: dict[str, Any]) -> None:
    """A run that left any encrypted backup under an older key fails (after its report was saved): keep that key."""
    if found["problems"]:
        raise IntegrityError(f"key rotation of {found['destination']}: {len(found['problems'])} left under an older key: "
                             + "; ".join(found["problems"][:5]) + (" ..." if len(found["problems"]) > 5 else "")
                             + ". Keep the older keys in the connection until a run re-wraps them (the report names why).")
