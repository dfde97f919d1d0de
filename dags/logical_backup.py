"""
### logical_backup: nightly logical backup, one consistent snapshot, parallel chunked TSV

preflight (credentials, databases, privileges, destination; read-only) → dump → prune.

**dump** holds `FLUSH TABLES WITH READ LOCK` only while `parallel` dump worker processes each open
`START TRANSACTION WITH CONSISTENT SNAPSHOT` on their own connection and the binlog/GTID position is
read (non-transactional tables are dumped before the lock is released): all workers read the same
instant, and the parallelism lives **inside this one task**. The workers take chunk jobs (key ranges
of the primary or a unique not-null key; chunks of big tables first, so one huge table keeps every
worker busy) and escape every value on the client in one linear pass, whatever its size. Each chunk
is one compressed TSV file in an exact dialect (NULL vs 'NULL' vs '\\N', binary, every charset,
full-precision floats, invisible columns included, generated ones left out); a warning on a dump
query fails the chunk. `schema.json` keeps databases, tables, views (dependency order), triggers,
routines, events and sequences apart; `manifest.json` is written **last**, with every file's sha256,
per-table row counts and checksums of a row hash the source computes from its stored values (verify
recomputes it on the target), and the binlog/GTID coordinates.
A folder without a manifest is incomplete and is never restored.

Schedule: `LASTLINE_LOGICAL_BACKUP_SCHEDULE` (cron, default 03:00 UTC daily); catchup off.
"""
from __future__ import annotations

from airflow.sdk import Param, dag, task

from lastline.airflow.defaults import DESTINATION, SOURCE_CONN_ID, dag_args, env
from lastline.logical import backup as lb


@dag(
    dag_id="logical_backup",
    **dag_args(schedule=env("LOGICAL_BACKUP_SCHEDULE", "0 3 * * *")),
    doc_md=__doc__,
    tags=["lastline", "logical", "backup"],
    params={
        "source_conn_id": Param(SOURCE_CONN_ID, type="string", description="mysql connection of the source"),
        "destination": Param(DESTINATION, type="string", description="file:///dir or s3://bucket/prefix"),
        "databases": Param([], type="array", items={"type": "string"}, description="empty: every non-system database"),
        "chunk_rows": Param(lb.DEFAULT_CHUNK_ROWS, type="integer", minimum=1000, description="rows per chunk file"),
        "compression": Param("zstd", enum=["zstd", "pigz", "none"], description="per chunk file"),
        "parallel": Param(2, type="integer", minimum=1, description="snapshot connections dumping at once"),
        "include_grants": Param(False, type="boolean", description="also back up users and grants"),
        "lock_nontransactional": Param(True, type="boolean", description="dump MyISAM/Aria tables under the lock"),
        "aws_conn_id": Param(None, type=["null", "string"], description="AWS connection for s3:// (endpoint, keys)"),
        "keep": Param(7, type="integer", minimum=1, description="complete logical backups to keep"),
        "incomplete_grace_hours": Param(24, type="number", minimum=0, description="age before an incomplete backup is removed"),
    },
)
def logical_backup():
    @task
    def preflight(params=None) -> dict:
        return lb.preflight(dict(params))

    @task
    def prune(params=None) -> list[str]:
        return lb.prune(dict(params))

    task(lb.dump)(preflight()) >> prune()


logical_backup()
