"""
### binlog_archive: the source's binary logs, shipped to the destination as they are written

ship → check_chain. `ship` holds one stream to the source open for `stream_minutes` (60): every
`ship_every_seconds` (0.5) it looks at the source (one `SHOW BINARY LOGS` over a connection kept open) and
ships what was committed since, exactly once and in order (a file still being written goes in pieces), into
`<destination>/binlogs/<branch>/`, indexed (transactions, GTIDs, times); the `@continuous` schedule starts the
next run as soon as one ends. A source restart or a network cut is waited out (the stream resumes from what the
archive holds); when nothing could be shipped for longer than `rpo_alert_seconds`, an alert goes out (the
connection `lastline_alerts`), and again when the stream ships again. The archive's head is recorded in Airflow
every 5 minutes and at the end (anti-rollback). A run triggered by hand (the form) streams for a minute at most:
the held stream is the schedule's; a run queued behind the one streaming (one at a time: one triggered by hand)
ends it early, at its next check (every 10 s), as at its normal end: that run waits seconds, not the rest of the
hour. `until_current: true`: ship up to the source's position at the start of the run, then end (tests, drills,
catching up by hand). Files the source purged before they were shipped are recorded as holes, named; a server
that writes its binlogs anew under the same names (a restore, `RESET MASTER`, a failover) starts a new branch:
nothing is overwritten.

check_chain (when the stream ends): for every complete base backup, up to which time and GTID it can be rolled
forward without a hole (the run's Report); the Asset `lastline_binlog_archive` carries the recoverable window; an
alert goes out when the chain breaks after the newest base or the archive falls more than `rpo_alert_seconds`
behind, and again when that changes.

Schedule: `LASTLINE_BINLOG_ARCHIVE_SCHEDULE` (default `@continuous`; a cron, or `none`); one run at a time;
catchup off. The archive stays within a second or two of the source (`make bench-pitr` measures it).
"""
from __future__ import annotations

from functools import partial

from airflow.sdk import dag, get_current_context

from lastline.airflow.alerts import send
from lastline.airflow.assets import BINLOG_ARCHIVE, record_archive_head
from lastline.airflow.defaults import dag_args, queued, schedule
from lastline.airflow.params import params
from lastline.airflow.routing import on_server
from lastline.airflow.steps import step
from lastline.core.plans import Conf
from lastline.pitr import check, stream


@dag(
    dag_id="binlog_archive",
    **dag_args(schedule=schedule("BINLOG_ARCHIVE_SCHEDULE", "@continuous")),
    doc_md=__doc__,
    tags=["lastline", "pitr"],
    params=params("source_conn_id", "destination", "aws_conn_id", "until_current", "ship_every_seconds", "stream_minutes",
                  "rpo_alert_seconds", "merge_after_segments", "retired_grace_seconds"),
)
def binlog_archive():
    def check_chain(shipped: dict, conf: Conf) -> dict:
        context = get_current_context()
        record_archive_head(conf.required("destination"), shipped.get("head"), conf.text("aws_conn_id"))  # anti-rollback (pitr.catalog.check_head)
        result = check.run(conf, context["dag"].dag_id, context["run_id"])
        newest = result["windows"][-1] if result["windows"] else {}
        context["outlet_events"][BINLOG_ARCHIVE].extra = {**{k: newest.get(k) for k in ("branch", "to_time", "to_gtid")},
                                                          "head": shipped.get("head")}
        if result["alert"]:
            send("binlog_chain", "lastline: " + ("; ".join(result["problems"]) or "the binlog archive is whole again"),
                 {"dag_id": context["dag"].dag_id, "run_id": context["run_id"], "problems": result["problems"]})
        return {"problems": result["problems"], "window": newest}

    def ship(conf: Conf) -> dict:
        # the head recorded every few minutes too, not only when the run ends (anti-rollback); a run a person
        # triggered streams a minute at most: the held stream is the schedule's; and a run queued behind this one (one
        # at a time) ends it early: the stream asks every few seconds, through the task's supervisor
        context = get_current_context()
        by_hand = str(context["dag_run"].run_type).lower().endswith("manual")
        return stream.run(conf, on_head=partial(record_archive_head, conf.required("destination"),
                                                aws_conn_id=conf.text("aws_conn_id")), by_hand=by_hand,
                          waiting=partial(queued, context["ti"], context["dag"].dag_id))

    shipped = step(ship, multiple_outputs=True, **on_server("source_conn_id", long=False))()
    step(check_chain, outlets=[BINLOG_ARCHIVE], multiple_outputs=True)(shipped)


binlog_archive()
