"""
### physical_restore: restore a physical backup into a target server

preflight (target not `protected`, manifest present, artifact whole, datadir empty unless `force`,
free disk, tools; read-only) → stop_target → extract (**one pipeline**: fetch | decompress |
`mbstream -x --parallel`, sha256 checked while reading) → prepare (`mariabackup --prepare
--use-memory`, ownership) → start_target → verify (every table of the manifest, plausible row counts)
→ report.

The target never starts on half-restored data: the extract step leaves a marker in the datadir that
only a successful prepare removes. With `force`, the old datadir contents are moved aside and deleted
only once the restored server is verified. `backup` is `<destination>/<backup_id>` or
`<destination>/latest` (the newest complete backup).
"""
from __future__ import annotations

from airflow.sdk import Param, chain, dag, task

from lastline.airflow.defaults import DESTINATION, TARGET_CONN_ID, dag_args
from lastline.physical import restore as pr


@dag(
    dag_id="physical_restore",
    **dag_args(schedule=None),
    doc_md=__doc__,
    tags=["lastline", "physical", "restore"],
    params={
        "target_conn_id": Param(TARGET_CONN_ID, type="string", description="mysql connection of the target"),
        "backup": Param(f"{DESTINATION}/latest", type="string", description="<destination>/<backup_id> or <destination>/latest"),
        "parallel": Param(2, type="integer", minimum=1, description="decompress and mbstream threads"),
        "use_memory": Param(None, type=["null", "integer"], description="bytes for --prepare (default: a quarter of free RAM, max 8 GiB)"),
        "force": Param(False, type="boolean", description="move a non-empty target datadir aside"),
        "restore_into_source": Param("", type="string", description="the target's connection id, to allow restoring into the server the backup came from"),
        "aws_conn_id": Param(None, type=["null", "string"], description="AWS connection for s3:// backups"),
    },
)
def physical_restore():
    @task
    def preflight(params=None) -> dict:
        return pr.preflight(dict(params))

    plan = preflight()
    stop, ext, prep, start = (task(step)(plan) for step in (pr.stop_target, pr.extract, pr.prepare, pr.start_target))
    ver = task(pr.verify)(plan, ext)
    chain(stop, ext, prep, start, ver)
    task(pr.report)(plan, stop=stop, extract=ext, prepare=prep, start=start, verify=ver)


physical_restore()
