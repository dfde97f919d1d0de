"""
### physical_restore: restore a physical backup into a target server

preflight (target not `protected`, manifest present, artifact whole, datadir empty unless `force` or the
approval below, free disk, tools; read-only) → approve (when data would be replaced and the deployment or the
target connection asks: a person approves, shown what would be replaced and the backup's age; without `force`,
the approval is what lets it replace them) → stop_target → extract (**one pipeline**: fetch | decompress |
`mbstream -x --parallel`, sha256 checked while reading) → prepare (`mariabackup --prepare
--use-memory`, ownership) → start_target → verify (every table of the manifest, plausible row counts)
→ report.

The target never starts on half-restored data: the extract step leaves a marker in the datadir that
only a successful prepare removes. With `force` (or once approved), the old datadir contents are moved aside and deleted
only once the restored server is verified. `backup` is `<destination>/<backup_id>` or
`<destination>/latest` (the newest complete backup).
"""
from __future__ import annotations

from airflow.sdk import dag

from lastline.airflow.defaults import dag_args
from lastline.airflow.params import FORCE_OFF, params
from lastline.airflow.task_groups import physical_restore_steps


@dag(
    dag_id="physical_restore",
    **dag_args(schedule=None),
    doc_md=__doc__,
    tags=["lastline", "physical", "restore"],
    params=params(
        "target_conn_id", "backup", "parallel", "use_memory", "force", "restore_into_source", "aws_conn_id",
        parallel="decompress and mbstream threads",
        force=f"move a non-empty target datadir aside (deleted after verify) where no person is asked to "
              f"approve it, as an unattended run needs; {FORCE_OFF}",
    ),
)
def physical_restore():
    # the steps are a task group shared with restore_drill; here their ids stay plain (preflight, extract, ...)
    physical_restore_steps.override(prefix_group_id=False)()


physical_restore()
