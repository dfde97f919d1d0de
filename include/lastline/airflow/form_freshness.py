"""The restore forms' backup suggestions kept as fresh as the backups: a backup run that succeeds asks Airflow to parse
the DAG files whose forms offer backups again, at once.

A form's `backup` field offers the newest backups (lastline.airflow.params.recent_backups), read when its DAG file is
parsed; the DAG processor parses each file every `min_file_process_interval` (`make ui`: 300 s), so without this a
form offered a new backup only minutes after it was made. The alternatives cost more or do not work: a shorter interval
re-parses every DAG file all the time (and lists an S3 or SSH destination each time); a task cannot ask for a parse
itself (Airflow 3's workers have no metadata database, and the REST API's re-parse needs a user's token).

So the scheduler does it: this listener (registered by the Backups page's plugin) runs where a DAG run's success is
recorded, and adds a priority parsing request for each restore form's file to that very transaction, as the REST
API's `PUT /parseDagFile` does; the DAG processor parses those files next, before any other. Cheap: four small files
once per backup run. A backup made or removed outside Airflow shows in the forms at their next ordinary parse.
"""
from __future__ import annotations

import logging
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)

BACKUP_DAGS = ("physical_backup", "logical_backup")
# the DAGs whose forms offer backups (params.recent_backups)
FORMS_OFFERING_BACKUPS = ("physical_restore", "logical_restore", "staging_refresh", "restore_drill")


def request_parse(session: Any, dag_ids: tuple[str, ...] = FORMS_OFFERING_BACKUPS) -> list[str]:
    """Add, in `session`, a priority parsing request for the file of each of `dag_ids` that has none pending; returns
    the files asked for (bundle:path)."""
    from airflow.models.dag import DagModel
    from airflow.models.dagbag import DagPriorityParsingRequest
    from sqlalchemy import select
    from sqlalchemy.exc import IntegrityError

    asked: list[str] = []
    # all of it in a savepoint: the listener runs inside the scheduler's transaction (DagRun.update_state), which a
    # database error here must never abort; an error undoes this savepoint only, and is raised to the caller
    with session.begin_nested():
        files = session.execute(select(DagModel.bundle_name, DagModel.relative_fileloc)
                                .where(DagModel.dag_id.in_(dag_ids), DagModel.relative_fileloc.is_not(None))).all()
        pending = {(r.bundle_name, r.relative_fileloc) for r in session.scalars(select(DagPriorityParsingRequest))}
        for bundle, path in sorted(set(files) - pending):
            try:
                with session.begin_nested():  # a request another process added meanwhile undoes only this insert
                    session.add(DagPriorityParsingRequest(bundle_name=bundle, relative_fileloc=path))
                    session.flush()
                asked.append(f"{bundle}:{path}")
            except IntegrityError:
                pass
    return asked


class BackupFormsListener:
    """on_dag_run_success of a backup DAG: its new backup (and what its prune removed) reaches the forms now."""

    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str) -> None:
        if dag_run.dag_id not in BACKUP_DAGS:
            return
        from sqlalchemy.orm import object_session

        session = object_session(dag_run)
        try:
            if session is not None:  # the scheduler's transaction: committed with the run's state
                asked = request_parse(session)
            else:
                from airflow.utils.session import create_session

                with create_session() as own:
                    asked = request_parse(own)
            log.info("%s %s succeeded: the forms offering backups are parsed again (%s)", dag_run.dag_id,
                     dag_run.run_id, ", ".join(asked) or "already requested")
        except Exception:  # noqa: BLE001 - a listener must never fail the scheduler; the next parse catches up
            log.exception("could not ask for the restore forms to be parsed again after %s; they catch up at their "
                          "next parse", dag_run.run_id)


LISTENER = BackupFormsListener()
