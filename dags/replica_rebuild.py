"""
### replica_rebuild: rebuild a replica from its source in one stream, node to node

preflight (target not `protected`; source has a binlog and a server_id; versions and tools fit on
both hosts; target datadir empty unless `force`; room; the replication user) → stop_target →
**stream** (ONE pipeline: `mariabackup --backup --stream | compress` on the source's host
`| ssh target "decompress | mbstream -x --parallel -C datadir"`, byte count and CRC-32 compared at
both ends) → prepare (on the target's host) → start_target → attach (`CHANGE MASTER` from the
backup's own coordinates: `gtid_slave_pos` + `MASTER_USE_GTID=slave_pos`, or binlog file/position;
`START SLAVE`) → catch_up (`MASTER_GTID_WAIT`, up to `catch_up_timeout`) → verify (a marker row written
on the source now arrives on the replica) → finish → report.

The target's commands run on the host of its connection's `ssh_conn_id`; the replication connection
gives the source's address as the replica sees it and the replication user's credentials. A cut
stream fails the run with the target stopped and its datadir marked unfinished: it is never started
on partial data, and a retry streams again.
"""
from __future__ import annotations

from airflow.sdk import Param, chain, dag, task

from lastline.airflow.defaults import SOURCE_CONN_ID, TARGET_CONN_ID, dag_args, env
from lastline.physical.tools import CODECS
from lastline.replication import rebuild as rr


@dag(
    dag_id="replica_rebuild",
    **dag_args(schedule=None),
    doc_md=__doc__,
    tags=["lastline", "physical", "replication"],
    params={
        "source_conn_id": Param(SOURCE_CONN_ID, type="string", description="mysql connection of the source"),
        "target_conn_id": Param(TARGET_CONN_ID, type="string", description="mysql connection of the replica (ssh_conn_id, datadir, service commands)"),
        "replication_conn_id": Param(env("REPLICATION_CONN_ID", "lastline_replication"), type="string",
                                     description="the source as the replica reaches it, and the replication user"),
        "compression": Param(rr.STREAM_COMPRESSION, enum=list(CODECS), description="compression on the wire (zstd-fast: nothing is kept)"),
        "parallel": Param(2, type="integer", minimum=1, description="mariabackup, compressor and mbstream threads"),
        "use_memory": Param(None, type=["null", "integer"], description="bytes for --prepare (default: a quarter of free RAM, max 8 GiB)"),
        "max_mb_per_s": Param(0, type="number", minimum=0, description="cap the stream on the wire (MB/s, pv -L on the source); 0: no cap"),
        "catch_up_timeout": Param(3600, type="number", minimum=1, description="seconds to wait for the replica to catch up"),
        "force": Param(False, type="boolean", description="move a non-empty target datadir aside (deleted after verify)"),
    },
)
def replica_rebuild():
    @task
    def preflight(params=None) -> dict:
        return rr.preflight(dict(params))

    plan = preflight()
    stopped, streamed, prepared, started = (task(f)(plan) for f in (rr.stop_target, rr.stream, rr.prepare, rr.start_target))
    attached = task(rr.attach)(plan, streamed)
    caught_up, verified = task(rr.catch_up)(plan), task(rr.verify)(plan)
    chain(stopped, streamed, prepared, started, attached, caught_up, verified)
    task(rr.finish)(plan, streamed, verified)
    task(rr.report)(plan, stopped, streamed, prepared, started, attached, caught_up, verified)


replica_rebuild()
