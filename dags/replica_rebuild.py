"""
### replica_rebuild: rebuild a replica from its source in one stream, node to node

preflight (target not `protected`; source has a binlog and a server_id; versions and tools fit on
both hosts; target datadir empty unless `force` or the approval below; room; the replication user) → approve
(when the replica's data would be replaced and the deployment or its connection asks: a person approves, shown
its tables) → stop_target →
**stream** (ONE pipeline: `mariabackup --backup --stream | compress` on the source's host
`| ssh target "decompress | mbstream -x --parallel -C datadir"`, byte count and CRC-32 compared at
both ends) → prepare (on the target's host) → start_target → attach (`CHANGE MASTER` from the
backup's own coordinates: `gtid_slave_pos` + `MASTER_USE_GTID=slave_pos`, or binlog file/position;
`START SLAVE`) → catch_up (a sensor in reschedule mode: `MASTER_GTID_WAIT` for up to 20 s a poke, no worker
slot held between pokes, up to `catch_up_timeout`) → verify (a marker row written
on the source now arrives on the replica) → finish → report.

The target's commands run on the host of its connection's `ssh_conn_id`; the replication connection
gives the source's address as the replica sees it and the replication user's credentials. A cut
stream fails the run with the target stopped and its datadir marked unfinished: it is never started
on partial data, and a retry streams again.
"""
from __future__ import annotations

from airflow.sdk import PokeReturnValue, chain, dag

from lastline.airflow.approval import ApproveReplacement
from lastline.airflow.defaults import REPLICA_CONN_ID, dag_args
from lastline.airflow.params import FORCE_OFF, Override, params
from lastline.airflow.routing import on_server
from lastline.airflow.steps import step, task, typed_call
from lastline.core.compression import CODECS
from lastline.replication import rebuild


@dag(
    dag_id="replica_rebuild",
    **dag_args(schedule=None),
    doc_md=__doc__,
    tags=["lastline", "physical", "replication"],
    params=params(
        "source_conn_id", "target_conn_id", "replication_conn_id", "compression", "parallel", "use_memory",
        "max_mb_per_s", "catch_up_timeout", "force",
        compression=Override(rebuild.STREAM_COMPRESSION, enum=list(CODECS), description="compression on the wire (zstd-fast: nothing is kept)"),
        parallel="mariabackup, compressor and mbstream threads",
        force=f"move a non-empty target datadir aside (deleted after verify) where no person is asked to "
              f"approve it, as an unattended run needs; {FORCE_OFF}",
        target_conn_id=Override(REPLICA_CONN_ID, description="the replica's lastline connection: its datadir is replaced"),
    ),
)
def replica_rebuild():
    @task.sensor(poke_interval=15, timeout=7 * 24 * 3600, mode="reschedule")
    def catch_up(plan: dict, attached: dict) -> PokeReturnValue:  # each poke checks catch_up_timeout, a Param
        waited = typed_call(rebuild.caught_up)(plan, attached)
        return PokeReturnValue(is_done=waited is not None, xcom_value=waited)

    plan = step(rebuild.preflight, multiple_outputs=True)()
    approved = ApproveReplacement(task_id="approve", plan=plan)  # only when data would be replaced
    stopped, prepared, started = (step(f, **on_server("target_conn_id"))(plan) for f in (rebuild.stop_target, rebuild.prepare, rebuild.start_target))
    streamed = step(rebuild.stream, **on_server("source_conn_id"))(plan)  # source | ssh target: runs where mariabackup does
    attached = step(rebuild.attach)(plan, streamed)
    caught_up = catch_up(plan, attached)
    verified = step(rebuild.verify)(plan)
    chain(plan, approved, stopped, streamed, prepared, started, attached, caught_up, verified)
    step(rebuild.finish)(plan, streamed, verified)
    step(rebuild.report)(plan, stopped, streamed, prepared, started, attached, caught_up, verified)


replica_rebuild()
