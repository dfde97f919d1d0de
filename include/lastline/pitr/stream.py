"""The binlog archive's stream, held open (issue 47): the binlog_archive DAG's task keeps one stream per source for
`stream_minutes` (60), shipping what the source commits within a second, and the DAG's `@continuous` schedule starts
the next run as soon as one ends (one at a time). Another run of the DAG queued behind it (one triggered by hand) ends
it early: every WAITING_EVERY seconds it asks (`waiting`, the task layer's question to Airflow) and, when one is,
ends after the round it is in, as at its normal end, so that run waits seconds, not the rest of the hour.

Each round is pitr.archive.ship with the stream's state kept in memory (pitr.held): one look at the source over a
connection kept open (its settled time and `SHOW BINARY LOGS`; a file's start GTID state is asked once), nothing
written when nothing is new, else the new bytes as one segment and the chain after it, as every run writes them
(exactly once, holes and forks as pitr.chain plans them). A round that fails for a reason that passes (the source
restarting, the network to its host cut) drops that state and is tried again, backing off up to 5 s: the next round
starts from what storage holds, as a new run would. A refusal (a forged chain, a source without binlogs) fails the
task. When nothing could be shipped for longer than `rpo_alert_seconds`, one alert goes out (lastline.core.alerting:
the deployment's `lastline_alerts`), and another when the stream ships again. The archive's head is handed to
`on_head` (Airflow records it: anti-rollback, pitr.catalog.check_head) every HEAD_EVERY seconds; the DAG records it
again when the run ends. SIGTERM ends the stream at once (core.stopping): what was shipped is in the chain, what was
not is shipped by the next run, to the same keys.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from lastline import connections
from lastline.core import alerting
from lastline.core.errors import LastlineError, Refusal
from lastline.core.plans import Conf, RunParams
from lastline.core.stopping import TaskStopped, stops_cleanly
from lastline.pitr import archive
from lastline.pitr.catalog import head
from lastline.pitr.held import Held
from lastline.storage import Storage, open_allowed
from lastline.storage.encryption_keys import deployment_encryption_keys

log = logging.getLogger(__name__)

HEAD_EVERY = 300.0  # seconds between the head's records during a run
LOG_EVERY = 60.0  # seconds between the stream's progress lines
BACKOFF_MAX = 5.0  # the longest wait between rounds that fail
KEYS_EVERY = 60.0  # seconds between reads of the encryption key connection (a changed key seals new branches)
# a run refused sooner than this after its start waits out the rest before it fails: the continuous schedule starts the
# next run at once, and a refusal (a source without binlogs, a wrong password) would otherwise fail and alert in a loop
REFUSED_PAUSE = 300.0
BY_HAND_MINUTES = 1.0  # the longest a run triggered by hand streams (its form's stream_minutes, at most this)
WAITING_EVERY = 10.0  # seconds between asks whether another run of the DAG is queued (an API call: not every round)
FAILED_PAUSE = 300.0  # seconds to the next ask after one failed


class Stall:
    """Whether a stream has shipped nothing for longer than `after` seconds: one alert when it has, one when it ships
    again."""

    def __init__(self, after: float, details: dict[str, Any], clock: Callable[[], float] = time.monotonic) -> None:
        self.after, self.details, self.clock = after, details, clock
        self.since, self.alerted = clock(), False

    def shipped(self) -> None:
        """A round brought the archive up to the source's position."""
        if self.alerted:
            alerting.alert("binlog_chain", f"lastline: the binlog archive's stream ships again, after "
                           f"{self.clock() - self.since:.0f} s without", {**self.details, "stalled": False})
            self.alerted = False
        self.since = self.clock()

    def failed(self, why: str) -> None:
        """A round shipped nothing (`why`): an alert once the stall is longer than `after`."""
        stalled = self.clock() - self.since
        if not self.alerted and stalled > self.after:
            alerting.alert("binlog_chain", f"lastline: the binlog archive's stream has shipped nothing for {stalled:.0f} s "
                           f"(rpo_alert_seconds {self.after:g}): the RPO is at risk: {why}",
                           {**self.details, "stalled": True, "seconds": round(stalled), "error": why})
            self.alerted = True


class Handover:
    """Whether another run of the DAG is queued behind this stream (`waiting`: the task layer asks Airflow; one run at
    a time, so it waits for this one), asked at most every WAITING_EVERY seconds. A question that fails is logged
    once and counts as no: it never stops the stream; the next one comes FAILED_PAUSE later (a question to an API that
    is down can block the stream for as long as its client retries, up to a minute)."""

    def __init__(self, waiting: Callable[[], bool] | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.waiting, self.clock, self.failed = waiting, clock, False
        self.next = clock() + WAITING_EVERY

    def due(self) -> bool:
        """Whether to end now (another run is queued); False until the next ask is due."""
        if self.waiting is None or self.clock() < self.next:
            return False
        try:
            answer = bool(self.waiting())
        except TaskStopped:  # SIGTERM while asking: the task ends, as anywhere else in the stream
            raise
        except Exception as exc:  # noqa: BLE001 - Airflow's API down: the stream goes on to its deadline
            self.next = self.clock() + FAILED_PAUSE
            if not self.failed:
                self.failed = True
                log.warning("binlog archive: could not ask whether another run is queued (%s: %s); streaming on "
                            "(asked again in %g s, this not logged again)", type(exc).__name__, str(exc)[:300],
                            FAILED_PAUSE)
            return False
        self.next = self.clock() + WAITING_EVERY
        return answer


def _transient() -> tuple[type[BaseException], ...]:
    import MySQLdb

    return LastlineError, OSError, MySQLdb.Error


@stops_cleanly
def run(conf: RunParams, stop: Any = None, on_head: Callable[[dict[str, Any] | None], Any] | None = None,
        by_hand: bool = False, waiting: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The binlog_archive DAG's ship task: the stream held open (see the module doc) for `stream_minutes`, a round
    every `ship_every_seconds` (0.5); `until_current`: ship up to the source's position at the start of the run, then
    end (tests, drills, catching up by hand). `stop` (a threading.Event) ends it early; `on_head` is given the
    archive's head every HEAD_EVERY seconds. Compaction (pitr.compaction): `merge_after_segments` (120),
    `retired_grace_seconds` (3600), `compact` (true). A streaming run refused (a source without binlogs, a wrong
    password, a forged chain) fails no sooner than REFUSED_PAUSE after it began. `by_hand` (a run a person triggered)
    streams for BY_HAND_MINUTES at most: the held stream is the schedule's. `waiting` (asked every WAITING_EVERY
    seconds: is another run of the DAG queued?) ends it early, between rounds, when it answers true; the result's
    `ended` says why the run ended."""
    begun = time.monotonic()
    once = by_hand or Conf(conf).flag("until_current", False)  # no loop of runs to slow: fail at once
    try:
        return _run(conf, stop, on_head, BY_HAND_MINUTES if by_hand else 60, Handover(waiting))
    except Refusal:
        if not once:
            _pause_before_failing(begun, stop)
        raise


def _run(conf: RunParams, stop: Any, on_head: Callable[[dict[str, Any] | None], Any] | None,
         most_minutes: float, handover: Handover) -> dict[str, Any]:
    params = Conf(conf)
    server = connections.server(params.required("source_conn_id"))
    storage = open_allowed(params.required("destination"), params.text("aws_conn_id"))
    keys, keys_read = deployment_encryption_keys(), time.monotonic()  # read once a minute, not once a round
    compaction = archive.Compaction(int(params.number("merge_after_segments", 120, minimum=2, maximum=100_000)),
                                    params.number("retired_grace_seconds", 3600, minimum=0),
                                    params.flag("compact", True))
    if params.flag("until_current", False):
        result = archive.ship(server, storage, keys=keys, compaction=compaction)
        archive.log_result(storage, result)
        return {**result, "head": head(storage)}
    every = params.number("ship_every_seconds", 0.5, minimum=0.1, maximum=60)
    # a run that never ended would hold the archive from the next one, and its head would never be recorded
    minutes = min(params.number("stream_minutes", 60, minimum=0.1, maximum=60), most_minutes)
    begun = time.monotonic()
    deadline = begun + 60 * minutes
    stall = Stall(params.number("rpo_alert_seconds", 600, minimum=1), {"destination": storage.location(archive.PREFIX)})
    total: dict[str, Any] = {"bytes": 0, "holes": [], "forks": [], "proven_empty": [], "rounds": 0, "failed": 0}
    held = Held()
    recorded = logged = time.monotonic()
    failures = 0
    try:
        while True:
            started = time.monotonic()
            try:
                if time.monotonic() - keys_read >= KEYS_EVERY:
                    keys, keys_read = deployment_encryption_keys(), time.monotonic()
                result = archive.ship(server, storage, held, keys, compaction)
            except (Refusal, TaskStopped):
                raise
            except _transient() as exc:
                held.drop()  # the next round reads the source and the archive anew
                failures += 1
                total["failed"] += 1
                why = f"{type(exc).__name__}: {str(exc)[:300]}"
                log.warning("binlog archive: a round failed (%s); trying again", why)
                stall.failed(why)
                wait = min(BACKOFF_MAX, every * 2 ** failures)
            else:
                failures = 0
                stall.shipped()
                _add(total, result)
                if result["holes"] or result["forks"] or result["proven_empty"]:
                    archive.log_result(storage, result)
                wait = max(0.0, every - (time.monotonic() - started))
            if time.monotonic() - logged >= LOG_EVERY:
                logged = time.monotonic()
                log.info("binlog archive: streaming, %d rounds, %s bytes so far, at %s", total["rounds"],
                         f"{total['bytes']:,}", total.get("position"))
            if on_head is not None and time.monotonic() - recorded >= HEAD_EVERY:
                recorded = time.monotonic()
                _record(on_head, storage)
            if handover.due():  # between rounds: what was shipped is in the chain, as at the deadline
                ended = f"another run of binlog_archive is queued: handing over after {time.monotonic() - begun:.0f} s"
                break
            if time.monotonic() + wait >= deadline:
                ended = f"its {minutes:g} minutes (stream_minutes) are over"
                break
            if stop is not None and stop.wait(wait):
                ended = "told to stop"
                break
            if stop is None:
                time.sleep(wait)
    finally:
        held.drop()
    log.info("binlog archive: streamed for %d rounds (%d failed), %s bytes, at %s; ended: %s", total["rounds"],
             total["failed"], f"{total['bytes']:,}", total.get("position"), ended)
    return {**total, "ended": ended, "head": head(storage)}  # recorded in Airflow by the DAG (anti-rollback: catalog.check_head)


def _add(total: dict[str, Any], result: dict[str, Any]) -> None:
    total.update(branch=result["branch"], position=result["position"], rounds=total["rounds"] + 1,
                 bytes=total["bytes"] + result["bytes"], holes=total["holes"] + result["holes"],
                 forks=total["forks"] + result["forks"], proven_empty=total["proven_empty"] + result["proven_empty"])


def _pause_before_failing(begun: float, stop: Any) -> None:
    """Wait until REFUSED_PAUSE seconds after the run began (at once when told to stop), so that a refusal fails runs
    of the continuous schedule (and alerts) at most that often."""
    left = REFUSED_PAUSE - (time.monotonic() - begun)
    if left > 0:
        log.error("binlog archive: refused; the run fails in %.0f s (runs follow each other at once)", left)
        if stop is not None:
            stop.wait(left)
        else:
            time.sleep(left)


def _record(on_head: Callable[[dict[str, Any] | None], Any], storage: Storage) -> None:
    """Hand the archive's head to `on_head`; a failure is logged (the run's end records it again)."""
    try:
        on_head(head(storage))
    except Exception as exc:  # noqa: BLE001 - Airflow's API down: the stream goes on
        log.warning("binlog archive: the head could not be recorded (%s: %s); the run's end records it",
                    type(exc).__name__, exc)
