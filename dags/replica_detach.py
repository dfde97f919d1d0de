"""
### replica_detach: cut a server off from replication for good

One task group, `detach_replication` (also used by staging refresh and promotions):
check (read-only) → detach → verify → open_for_writes.

- **check** refuses, naming file and line, any `master-host` / `master-user` / `master-password` /
  `master-port` in an option file the server reads: it would re-attach the server at its next start.
- **detach** by version and flavour: MariaDB and MySQL 5.5+ `STOP SLAVE; RESET SLAVE ALL` (MariaDB:
  every named connection, then `gtid_slave_pos` cleared); MySQL 8.0.22+ `STOP REPLICA; RESET REPLICA
  ALL`; 5.0/5.1 `STOP SLAVE; CHANGE MASTER TO MASTER_HOST=''; RESET SLAVE`.
- **verify**: no replication connection and an empty `gtid_slave_pos`, and (with `restart`) the same
  after a restart of the server.
- **open_for_writes**: `read_only=OFF`, at the very end and only with `read_only_off`.
"""
from __future__ import annotations

from airflow.sdk import dag

from lastline.airflow.defaults import REPLICA_CONN_ID, dag_args
from lastline.airflow.params import Override, params
from lastline.airflow.task_groups import detach_replication


@dag(
    dag_id="replica_detach",
    **dag_args(schedule=None),
    doc_md=__doc__,
    tags=["lastline", "replication"],
    params=params("target_conn_id", "restart", "read_only_off",
                  target_conn_id=Override(REPLICA_CONN_ID, description="the lastline connection of the server to detach")),
)
def replica_detach():
    detach_replication("{{ params.target_conn_id }}", "{{ params.restart }}", "{{ params.read_only_off }}")


replica_detach()
