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

from airflow.sdk import chain, dag, task

from lastline.airflow.approval import ApproveReplacement
from lastline.airflow.defaults import dag_args
from lastline.airflow.params import params, recent_backups
from lastline.airflow.routing import on_server
from lastline.physical import restore as pr


@dag(
    dag_id="physical_restore",
    **dag_args(schedule=None),
    doc_md=__doc__,
    tags=["lastline", "physical", "restore"],
    params=params(
        "target_conn_id", "backup", "parallel", "use_memory", "force", "approval", "restore_into_source", "aws_conn_id",
        parallel="decompress and mbstream threads", force="move a non-empty target datadir aside (deleted after verify)",
        backup=recent_backups("physical"),
    ),
)
def physical_restore():
    @task(**on_server("target_conn_id", long=False))
    def preflight(params=None) -> dict:
        return pr.preflight(dict(params))

    plan = preflight()
    approved = ApproveReplacement(task_id="approve", plan=plan)  # only when data would be replaced
    stop, ext, prep, start = (task(step, **on_server("target_conn_id"))(plan) for step in (pr.stop_target, pr.extract, pr.prepare, pr.start_target))
    ver = task(pr.verify, **on_server("target_conn_id"))(plan, ext)
    chain(plan, approved, stop, ext, prep, start, ver)
    task(pr.report)(plan, stop=stop, extract=ext, prepare=prep, start=start, verify=ver, dag_id="{{ dag.dag_id }}")  # run_id: from the context


physical_restore()
