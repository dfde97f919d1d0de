"""Roll a restored base forward with the archived binlogs (issue 29): exactly the transactions of a resolved
:class:`~lastline.pitr.span.Span` that the target does not hold yet, never a part of one.

Two ways, one result:
- `parallel` (the default where it can): the archived files, cut to the span, are handed to the target as the
  relay logs of a replication connection of its own (`lastline_pitr`, no source host ever contacted), and the
  server's own parallel applier runs them (:mod:`lastline.pitr.applier`). It records each transaction it commits
  in `mysql.gtid_slave_pos` in the same transaction, so a replay whose worker died mid-way resumes from exactly
  there: the files are cut again, leaving out what the target holds. A target that restarted mid-replay is
  refused (its applier may have started again by itself from a position it does not keep with the data).
- `pipe`: `mariadb-binlog FILES | mariadb`, one session, binary logging off in it: the fallback, and what the
  bench compares with. It records nothing per transaction, so a pipe replay that died mid-way is not resumed:
  the base is restored again.

`auto` takes `parallel` unless the target would skip or filter events there (its server_id is one the binlogs
carry, replication filters or `slave_skip_errors` are set) or would write them to its own binlog
(`log_slave_updates`); it says which and why, as a warning.

Both run what the archive holds with every privilege, so for a physical base every event kept passes
:mod:`lastline.pitr.event_check` while the span is cut, before either method starts: one that reaches beyond data
refuses the replay, named. The pipe's client never reads a local file or runs a client command (no LOCAL INFILE,
sandbox mode, binary mode, comments sent as written, no option file but lastline's own, Annotate_rows never printed).
"""
from __future__ import annotations

import json
import logging
import posixpath
from typing import Any

from lastline import connections
from lastline.core import accounts
from lastline.core.errors import IntegrityError, Refusal, ServerError
from lastline.core.hosts import Host
from lastline.core.servers import Server
from lastline.core.sql import META_DB, as_text
from lastline.pitr import applier, events, interleave, pipe, scoped
from lastline.pitr.event_check import CheckedCutter
from lastline.pitr.events import gtid_map, includes
from lastline.pitr.plans import Cleaned, Replayed, ReplayPlan
from lastline.pitr.sealed import Seals
from lastline.pitr.span import Span
from lastline.pitr.split import write_relay
from lastline.pitr.statement_run import Statement
from lastline.pitr.window import utc
from lastline.storage import Storage, open_allowed

log = logging.getLogger(__name__)

LEDGER = f"`{META_DB}`.`pitr_replay`"
METHODS = ("auto", "parallel", "pipe")
LOST = "temp_lost"  # the ledger's state of a replay that stopped while its applier held temporary tables
TEMPORARY_LOST = ("The replay stopped while the target's applier held temporary tables of the source (a statement-"
                  "format session's CREATE TEMPORARY TABLE applied, its DROP not yet). They went with the applier's "
                  "connection, and the transactions still to apply may read them, so this replay cannot resume where "
                  "it stopped. Restore the base again (re-run the DAG).")


def _gtid_text(state: dict[int, int]) -> str:
    """A {domain: seq} state as a GTID list (server ids unknown: 0; only domains and sequence numbers compare)."""
    return ",".join(f"{d}-0-{n}" for d, n in sorted(state.items()))


def prepared_xa(cur: Any) -> list[str]:
    """The XA transactions prepared on a server, each id as `XA COMMIT` and `XA ROLLBACK` take it: the server's own
    `XA RECOVER FORMAT='SQL'` ('gtrid'[,'bqual'[,formatID]], each part as X'..' where it is not printable)."""
    cur.execute("XA RECOVER FORMAT='SQL'")
    return [as_text(r[3]) for r in cur.fetchall()]


def _ledger(cur: Any) -> None:
    cur.execute("SET SESSION sql_log_bin=0")
    cur.execute(f"CREATE DATABASE IF NOT EXISTS `{META_DB}`")
    cur.execute(f"CREATE TABLE IF NOT EXISTS {LEDGER} (run_id VARCHAR(250) PRIMARY KEY, method VARCHAR(16) NOT NULL, "
                "base_gtid TEXT NOT NULL, state VARCHAR(16) NOT NULL, result TEXT, settings TEXT, booted BIGINT) "
                "ENGINE=InnoDB")


def _mark_lost(cur: Any, run_id: str) -> None:
    """Record that this run's replay lost its applier's temporary tables (see TEMPORARY_LOST): a resume refuses."""
    cur.execute("SET SESSION sql_log_bin=0")
    cur.execute(f"UPDATE {LEDGER} SET state=%s WHERE run_id=%s AND state <> 'done'", (LOST, run_id))


def _cut_files(storage: Storage, span: Span, applied: dict[int, int], host: Host, folder: str,
               base: str, seals: Seals) -> tuple[list[str], list[events.Transaction], int]:
    """Write each file of the span, cut to what is still to apply, as `<base>.NNNNNN` in `folder` on `host`; every
    archived segment read is checked against its sha256 (a sealed one opened, each chunk authenticated, by `seals`: the
    relay logs are where its plaintext goes, as a plain archive's), and every event kept passes the physical base's check
    (event_check), before the replay starts. Returns the paths, the transactions kept, and the bytes written."""
    paths: list[str] = []
    kept: list[events.Transaction] = []
    written = 0
    for k, f in enumerate(span.files, start=1):
        cutter = CheckedCutter(f.name, f.start, f.stop, applied)
        path = posixpath.join(folder, f"{base}.{k:06d}")
        written += write_relay(storage, f, cutter, f is span.files[-1], host, path, seals)
        kept += cutter.kept
        paths.append(path)
    return paths, kept, written


def apply(server: Server, storage: Storage, span: Span, run_id: str, method: str = "auto", threads: int = 4,
          databases: list[str] | None = None) -> dict[str, Any]:
    """Replay `span` into `server` (a restored base), once: a re-run of the same run resumes (parallel) or refuses
    (a pipe that died part way, a target that restarted mid-replay); a finished run returns its result again.
    `databases`: a logical base's, whose replay reaches those databases only (pitr.scoped)."""
    host = server.runner()
    with server.session(autocommit=True) as cur:
        _ledger(cur)
        cur.execute(f"SELECT method, state, result, settings, booted FROM {LEDGER} WHERE run_id=%s", (run_id,))
        row = cur.fetchone()
        if row and row[1] == "done":
            log.info("replay: this run already replayed the binlogs: %s", row[2])
            return dict(json.loads(row[2]))
        settings = applier.as_before(cur, json.loads(row[3]) if row and row[3] else None)
        if row and settings != json.loads(row[3] or "{}"):  # a setting its row lacks, recorded for the teardown too
            cur.execute(f"UPDATE {LEDGER} SET settings=%s WHERE run_id=%s", (json.dumps(settings), run_id))
        lost = row is not None and row[1] == LOST
        if row and applier.put_back(cur, settings):  # an earlier attempt's applier stops here, at a transaction's end
            _mark_lost(cur, run_id)
            lost = True
        cur.execute("SHOW ALL SLAVES STATUS")
        others = [str(r[0]) or "(default)" for r in cur.fetchall()]
        if others:
            raise Refusal(f"{server.describe()} has replication configured ({', '.join(others)}): it could apply or "
                          "consume transactions during the replay. Detach it first (replica_detach).")
        if row:  # an earlier attempt of this run: resume from what the target committed
            if row[0] == "pipe":
                raise Refusal("an earlier attempt of this run replayed through mariadb-binlog | mariadb and did not "
                              "finish: what it applied is unknown. Restore the base again (re-run the DAG).")
            if abs(applier.booted(cur) - int(row[4] or 0)) > 2:
                raise Refusal("the target restarted during this run's replay: its applier may have started again by "
                              "itself from a position it does not record with the data, and applied a transaction "
                              "twice. Restore the base again (re-run the DAG).")
            applied = gtid_map(applier.gtid_slave_pos(cur))
            log.info("replay: resuming; the target holds %s", applier.gtid_slave_pos(cur))
        else:
            applied = gtid_map(span.base_gtid)
        cur.execute("SELECT @@GLOBAL.datadir")
        base, named = applier.relay_base(cur, str(cur.fetchone()[0]), host)
    folder, name = posixpath.split(base)
    host.sh('rm -f -- "$1".[0-9]* "$1".index', base)
    seals = span.seals()  # a sealed archive: refused here, naming the key ids, before anything is cut or applied
    seals.require(set(span.envelopes))
    try:
        left_out: list[dict[str, str]] = []
        statements: list[Statement] = []
        if databases:  # every segment checked and every transaction classified before anything is applied
            left_out, _ = scoped.collect(storage, span, applied, databases, seals)
            with server.session() as cur:
                scoped.refuse_foreign_keys(cur, databases)
            paths, kept, written, statements = scoped.cut_files(storage, span, applied, databases, host, folder, name,
                                                                seals)
        else:
            paths, kept, written = _cut_files(storage, span, applied, host, folder, name, seals)
        with server.session(autocommit=True) as cur:
            if row and lost and kept:
                raise Refusal(TEMPORARY_LOST)
            if row:
                chosen, why = str(row[0]), "resuming this run's replay"
            else:
                chosen, why = applier.choose_method(cur, method, {t.server_id for t in kept})
                if method == "auto" and chosen != "parallel":
                    log.warning("replay: auto chose %s, not the target's applier: %s", chosen, why)
                if databases and chosen != "parallel":
                    raise Refusal(f"a logical base is rolled forward by the target's own applier only (mariadb-binlog | "
                                  f"mariadb would run every event with full rights), and here it cannot: {why}.")
                cur.execute("SET GLOBAL gtid_slave_pos=%s", (span.base_gtid,))
                cur.execute(f"INSERT INTO {LEDGER} (run_id, method, base_gtid, state, settings, booted) "
                            "VALUES (%s, %s, %s, 'applying', %s, %s)",
                            (run_id, chosen, span.base_gtid, json.dumps(settings), applier.booted(cur)))
        log.info("replay: %s transactions by %s (%s)", f"{len(kept):,}", chosen, why)
        result: dict[str, Any] = {"seconds": 0.0}
        if kept and chosen == "parallel":
            applier.write_index(host, base, named, paths)
            stopped = False
            try:
                try:
                    names = [posixpath.basename(p) for p in paths]
                    result = (interleave.run(server, names, kept, statements, threads, databases, run_id) if databases
                              else applier.run_parallel(server, names, kept, threads))
                finally:
                    with server.session(autocommit=True) as cur:
                        stopped = applier.put_back(cur, settings) > 0
                        if stopped:
                            _mark_lost(cur, run_id)
            except ServerError as exc:
                if stopped:  # it cannot resume: said now, not by the retry
                    raise Refusal(f"{exc}\n{TEMPORARY_LOST}") from exc
                raise
        elif kept:
            result = pipe.run(server, paths)
    finally:
        host.sh('rm -f -- "$1".[0-9]* "$1".index', base)
    end = events.gtid_state(span.base_gtid if not row else _gtid_text(applied), kept)
    with server.session(autocommit=True) as cur:
        holds = applier.gtid_slave_pos(cur)
        if kept and chosen == "pipe":  # the pipe records nothing itself: the target's position is set once it is done
            cur.execute("SET GLOBAL gtid_slave_pos=%s", (end,))
            holds = end
        prepared = prepared_xa(cur)
    if not includes(holds, end):
        raise IntegrityError(f"after the replay the target holds GTID position {holds!r}, short of {end!r}: it did not "
                             "apply every transaction. A retry resumes.")
    if prepared:  # as on the source at that point: prepared, their XA COMMIT after the stop
        log.warning("replay: XA transactions left prepared (their XA COMMIT comes after until, as on the source at that "
                    "point): %s. End each on the target with XA COMMIT <id> or XA ROLLBACK <id>, the id as shown.",
                    "; ".join(prepared))
    if left_out:
        log.warning("replay: %d statements on other databases than the restored ones were left out (a logical base's "
                    "replay runs only those that may change a restored database): %s", len(left_out), "; ".join(f"{s['gtid']} {s['statement'][:80]!r}"
                                                                          for s in left_out[:10]))
    result.update(left_out=left_out[:100], left_out_count=len(left_out))
    result.update(method=chosen, gtid_position=holds, transactions=len(kept), bytes=written, until=span.until,
                  resumed=bool(row),
                  not_applied=span.not_applied, prepared_xa=prepared,
                  last_gtid=kept[-1].gtid if kept else None, last_time=kept[-1].time if kept else None,
                  last_time_utc=utc(kept[-1].time) if kept else None)
    with server.session(autocommit=True) as cur:
        cur.execute("SET SESSION sql_log_bin=0")
        cur.execute(f"UPDATE {LEDGER} SET state='done', result=%s WHERE run_id=%s", (json.dumps(result), run_id))
    if databases:
        interleave.forget(server, run_id)
    log.info("replay done: %s transactions by %s in %s s; last applied %s at %s; not applied: %s",
             f"{len(kept):,}", chosen, result["seconds"], result["last_gtid"], result["last_time_utc"], span.not_applied)
    return result


def cleanup(plan: ReplayPlan, run_key: str) -> Cleaned:
    """The DAG's teardown after the replay, however it ended: the replay's replication connection gone and the
    globals it changed put back as they were before its first attempt (a worker killed mid-replay leaves both).
    `run_key`: the run whose replay it was (an Airflow run id)."""
    server = connections.server(plan.target_conn_id)
    with server.session(autocommit=True) as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME='pitr_replay'",
                    (META_DB,))
        if not cur.fetchone()[0]:
            return Cleaned(False)
        cur.execute(f"SELECT settings FROM {LEDGER} WHERE run_id=%s", (run_key,))
        row = cur.fetchone()
        if not row or not row[0]:
            return Cleaned(False)
        if applier.put_back(cur, json.loads(row[0])):  # a killed worker's applier went on alone
            _mark_lost(cur, run_key)
    pipe.drop_account_of(server)
    if plan.databases:  # a logical base's statements ran under a run account of this run: gone, even after a kill
        accounts.drop(server, interleave.account(run_key))
    return Cleaned(True)


def run(plan: ReplayPlan, run_key: str) -> Replayed:
    """The point_in_time_restore DAG's replay task (`run_key`: the Airflow run id, the replay ledger's key): apply's
    result, as the ledger records it."""
    server = connections.server(plan.target_conn_id)
    storage = open_allowed(plan.destination, plan.aws_conn_id)
    return Replayed.of_result(apply(server, storage, Span.of(plan.span), run_key, plan.method, plan.threads, plan.databases))
