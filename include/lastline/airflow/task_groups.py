"""Reusable task groups: steps that several DAGs share (replica_detach, staging refresh, promotions)."""
from __future__ import annotations

from typing import Any

from airflow.sdk import task, task_group

from lastline.replication import detach as rd


@task_group(group_id="detach_replication")
def detach_replication(target_conn_id: Any, restart: Any = True, read_only_off: Any = False) -> Any:
    """check (read-only: flavour, connections, no master-* option lines) → detach (version-aware STOP/RESET
    ... ALL, every named connection, gtid_slave_pos cleared) → verify (nothing left, also after a
    restart) → open_for_writes (read_only=OFF, only if asked). Arguments may be values, XComArgs or
    templates such as "{{ params.target_conn_id }}"."""
    plan = task(rd.check, task_id="check")(target_conn_id, restart, read_only_off)
    detached = task(rd.detach, task_id="detach")(plan)
    verified = task(rd.verify, task_id="verify")(plan, detached)
    return task(rd.open_for_writes, task_id="open_for_writes")(plan, verified)
