"""Roll a restored base forward with the archived binlogs (issue 29): exactly the transactions of a resolved
:class:`~lastline.pitr.window.Span` that the target does not hold yet, never a part of one.

Two ways, one result:
- `parallel` (the default where it can): the archived files, cut to the span, are handed to the target as the
  relay logs of a replication connection of its own (`lastline_pitr`, no source host ever contacted), and the
  server's own parallel applier runs them (`slave_parallel_threads`). It records each transaction it commits in
  `mysql.gtid_slave_pos` in the same transaction, so a replay killed mid-way (the worker or the target) resumes
  from exactly there: the files are cut again, leaving out what the target holds.
- `pipe`: `mariadb-binlog FILES | mariadb`, one session, binary logging off in it: the fallback, and what the
  bench compares with. It records nothing per transaction, so a pipe replay that died mid-way is not resumed:
  the base is restored again.

`auto` takes `parallel` unless the target would skip or filter events there (its server_id is one the binlogs
carry, replication filters or `slave_skip_errors` are set) or would write them to its own binlog
(`log_slave_updates`); it says which and why.
"""
from __future__ import annotations

import json
import logging
import posixpath
import time
from collections.abc import Iterator
from typing import Any

from lastline import connections
from lastline.core.errors import IntegrityError, PipelineError, Refusal, ServerError
from lastline.core.hosts import Host, Stage
from lastline.core.option_files import option_file
from lastline.core.pipeline import run_pipeline
from lastline.core.servers import Server
from lastline.core.sql import META_DB
from lastline.pitr import events
from lastline.pitr.window import Span, _state, segment_chunks, utc
from lastline.storage import Storage, open_allowed

log = logging.getLogger(__name__)

CONNECTION = "lastline_pitr"  # the replication connection the parallel replay uses (never connects anywhere)
LEDGER = f"`{META_DB}`.`pitr_replay`"
METHODS = ("auto", "parallel", "pipe")


def _gtid_text(state: dict[int, int]) -> str:
    """A {domain: seq} state as a GTID list (server ids unknown: 0; only domains and sequence numbers compare)."""
    return ",".join(f"{d}-0-{n}" for d, n in sorted(state.items()))


def _ledger(cur: Any) -> None:
    cur.execute("SET SESSION sql_log_bin=0")
    cur.execute(f"CREATE DATABASE IF NOT EXISTS `{META_DB}`")
    cur.execute(f"CREATE TABLE IF NOT EXISTS {LEDGER} (run_id VARCHAR(250) PRIMARY KEY, method VARCHAR(16) NOT NULL, "
                "base_gtid TEXT NOT NULL, state VARCHAR(16) NOT NULL, result TEXT, settings TEXT, booted BIGINT) "
                "ENGINE=InnoDB")


SETTINGS = ("slave_parallel_threads", "slave_exec_mode")  # what the parallel replay changes, put back after it


def _settings(cur: Any) -> dict[str, Any]:
    cur.execute("SELECT " + ", ".join(f"@@GLOBAL.{n}" for n in SETTINGS))
    return dict(zip(SETTINGS, cur.fetchone()))


def _booted(cur: Any) -> int:
    """When the target's server process started (UTC seconds)."""
    cur.execute("SELECT UNIX_TIMESTAMP() - VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                "WHERE VARIABLE_NAME = 'UPTIME'")
    return int(cur.fetchone()[0])


def _put_back(cur: Any, settings: dict[str, Any]) -> None:
    """The connection dropped, and the globals the replay changed set as they were before its first attempt."""
    _drop_connection(cur)
    cur.execute("SET GLOBAL slave_parallel_threads=%s", (int(settings["slave_parallel_threads"]),))
    cur.execute("SET GLOBAL slave_exec_mode=%s", (str(settings["slave_exec_mode"]),))


def _gtid_slave_pos(cur: Any) -> str:
    cur.execute("SELECT @@GLOBAL.gtid_slave_pos")
    return str(cur.fetchone()[0] or "")


def choose_method(cur: Any, wanted: str, server_ids: set[int]) -> tuple[str, str]:
    """(method, why) for this target: `parallel` unless it would skip, filter or re-log what it applies."""
    cur.execute("SELECT @@GLOBAL.server_id, @@GLOBAL.log_bin, @@GLOBAL.log_slave_updates, @@GLOBAL.slave_skip_errors, "
                "@@GLOBAL.slave_run_triggers_for_rbr, @@GLOBAL.replicate_events_marked_for_skip, "
                "@@GLOBAL.slave_type_conversions, @@GLOBAL.replicate_do_db, @@GLOBAL.replicate_ignore_db, "
                "@@GLOBAL.replicate_do_table, @@GLOBAL.replicate_ignore_table, @@GLOBAL.replicate_wild_do_table, "
                "@@GLOBAL.replicate_wild_ignore_table, @@GLOBAL.replicate_rewrite_db")
    server_id, log_bin, log_updates, skip, triggers, marked, conversions, *filters = cur.fetchone()
    reasons = []
    if str(triggers or "NO").upper() != "NO":
        reasons.append(f"slave_run_triggers_for_rbr={triggers} would fire triggers a second time on replayed rows")
    if str(marked or "REPLICATE").upper() != "REPLICATE":
        reasons.append(f"replicate_events_marked_for_skip={marked} would skip some transactions")
    if str(conversions or ""):
        reasons.append(f"slave_type_conversions={conversions} would convert values")
    if int(server_id) in server_ids:
        reasons.append(f"the target's server_id {server_id} wrote some of these binlogs (its applier would skip them)")
    if str(skip or "OFF").upper() != "OFF":
        reasons.append(f"slave_skip_errors={skip} would hide errors")
    if any(f for f in filters):
        reasons.append("replication filters or rewrites (replicate_*) are set")
    if int(log_bin or 0) and int(log_updates or 0):
        reasons.append("log_slave_updates would write the replayed transactions to the target's binlog")
    if wanted == "pipe":
        return "pipe", "asked for"
    if reasons and wanted == "parallel":
        raise Refusal(f"replay method parallel: {'; '.join(reasons)}. Use method pipe (or auto).")
    if reasons:
        return "pipe", "; ".join(reasons)
    return "parallel", "the server's parallel applier"


def _cut_files(storage: Storage, span: Span, applied: dict[int, int], host: Host, folder: str,
               base: str) -> tuple[list[str], list[events.Transaction], int]:
    """Write each file of the span, cut to what is still to apply, as `<base>.NNNNNN` in `folder` on `host`; every
    archived segment read is checked against its sha256 before the replay starts. Returns the paths, the
    transactions kept, and the bytes written."""
    paths: list[str] = []
    kept: list[events.Transaction] = []
    written = 0
    for k, f in enumerate(span.files, start=1):
        cutter = events.Cutter(f.name, f.start, f.stop, applied)
        needed = [s for i, s in enumerate(f.segments) if i == 0 or (
            s["offset"] + s["size"] > f.start and (f.stop is None or s["offset"] < f.stop))]
        path = posixpath.join(folder, f"{base}.{k:06d}")

        def chunks(f=f, needed=needed, cutter=cutter) -> Iterator[bytes]:
            for seg in needed:
                if seg["offset"]:
                    cutter.jump(seg["offset"])
                for chunk in segment_chunks(storage, f.branch, f.name, seg):  # its sha256 checked at its end, before
                    cutter.feed(chunk)  # anything is applied (the replay starts once every file is cut)
                    yield cutter.take()
            if cutter.stopped:
                raise IntegrityError(f"{f.name}: the archived bytes cannot be read as binlog events from byte "
                                     f"{cutter.pos} on: the archive is damaged there; nothing was applied.")
            if cutter._open is not None and f is not span.files[-1]:
                raise IntegrityError(f"{f.name}: the archived bytes end inside transaction {cutter._open[0]}, and "
                                     "later files follow: the archive is damaged there; nothing was applied.")

        result = run_pipeline([Stage("write", ["dd", f"of={path}", "bs=1M", "status=none"])], source=chunks(),
                              label=f"binlog {f.name}", progress_every=None, host=host)
        written += result.bytes_in
        kept += cutter.kept
        paths.append(path)
        log.info("%s: %d transactions to apply (%s bytes) of bytes [%d, %s)", f.name, len(cutter.kept),
                 f"{result.bytes_in:,}", f.start, f.stop if f.stop is not None else "end")
    return paths, kept, written


def _slave_status(cur: Any) -> dict[str, Any]:
    cur.execute(f"SHOW SLAVE '{CONNECTION}' STATUS")
    row = cur.fetchone()
    return dict(zip([d[0] for d in cur.description], row)) if row else {}


def _relay_base(cur: Any, datadir: str, host: Host) -> tuple[str, str]:
    """(the path without its sequence number of this connection's relay logs, and the folder prefix the server
    writes their names with in its index): it creates the connection once to see, then removes it again."""
    cur.execute(f"CHANGE MASTER '{CONNECTION}' TO MASTER_HOST='lastline-replay.invalid', MASTER_PORT=9, MASTER_USER='none'")
    relay = str(_slave_status(cur)["Relay_Log_File"])
    path = relay if relay.startswith("/") else posixpath.normpath(posixpath.join(datadir, relay))
    base = path.rsplit(".", 1)[0]
    first = host.sh('head -n 1 -- "$1.index"', base).strip()
    cur.execute(f"RESET SLAVE '{CONNECTION}' ALL")
    return base, posixpath.dirname(first)


def _drop_connection(cur: Any) -> None:
    cur.execute("SHOW ALL SLAVES STATUS")
    names = [str(r[0]) for r in cur.fetchall()]
    if CONNECTION in names:
        cur.execute(f"STOP SLAVE '{CONNECTION}'")
        cur.execute(f"RESET SLAVE '{CONNECTION}' ALL")


def _parallel(server: Server, paths: list[str], kept: list[events.Transaction], threads: int) -> dict[str, Any]:
    """Replay relay logs cut from the archive through the target's own applier; waits until the target holds the
    last transaction kept (or its applier stops, or idles short of it). The caller drops the connection and puts
    the globals back."""
    started = time.monotonic()
    with server.session(autocommit=True) as cur:
        cur.execute(f"CHANGE MASTER '{CONNECTION}' TO MASTER_HOST='lastline-replay.invalid', MASTER_PORT=9, "
                    f"MASTER_USER='none', RELAY_LOG_FILE='{paths[0]}', RELAY_LOG_POS=4")
        cur.execute("SET GLOBAL slave_parallel_threads=%s", (int(threads),))
        cur.execute("SET GLOBAL slave_exec_mode='STRICT'")
        cur.execute(f"START SLAVE '{CONNECTION}' SQL_THREAD")
        _wait(cur, events.gtid_state("", kept), started)
    return {"seconds": round(time.monotonic() - started, 3)}


def _wait(cur: Any, want: str, started: float, every: float = 10.0, idle: float = 30.0) -> None:
    """Until gtid_slave_pos holds `want` in every domain; progress every `every` s; the applier's error raised, and
    an applier that has read everything and moved nothing for `idle` s."""
    target = _state(want)
    first = seen = _state(_gtid_slave_pos(cur))
    last_log = moved = time.monotonic()
    while True:
        now = _state(_gtid_slave_pos(cur))
        if all(now.get(d, -1) >= n for d, n in target.items()):
            return
        status = _slave_status(cur)
        if status.get("Slave_SQL_Running") != "Yes":
            err = status.get("Last_SQL_Error") or status.get("Slave_SQL_Running_State") or "it stopped"
            raise ServerError(f"the target's applier stopped during the replay: {err} (at "
                              f"{status.get('Relay_Master_Log_File')}:{status.get('Exec_Master_Log_Pos')}). A retry "
                              "resumes after the last transaction it committed.")
        if now != seen:
            seen, moved = now, time.monotonic()
        elif ("read all relay log" in str(status.get("Slave_SQL_Running_State")) and time.monotonic() - moved > idle
              and not _applying(cur)):
            raise IntegrityError(f"the target's applier has read every relay log and applied nothing for {idle:.0f} s, "
                                 f"short of {want}: a transaction of the archive is incomplete. Nothing more is "
                                 "applied; restore the base again.")
        if time.monotonic() - last_log >= every:
            done = sum(max(0, now.get(d, 0) - first.get(d, 0)) for d in target)
            todo = sum(max(0, n - first.get(d, 0)) for d, n in target.items())
            rate = done / max(time.monotonic() - started, 1e-6)
            eta = (todo - done) / rate if rate else float("inf")
            log.info("replay: %s of %s transactions (%.0f/s), ETA %.0f s", f"{done:,}", f"{todo:,}", rate, eta)
            last_log = time.monotonic()
        time.sleep(0.2)


def _applying(cur: Any) -> int:
    """How many of the target's replication threads are doing something (not waiting for work or events): a long
    transaction keeps a worker busy while gtid_slave_pos stands still."""
    cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'system user' AND COMMAND <> 'Daemon' "
                "AND COALESCE(STATE, '') NOT LIKE 'Waiting for work%' AND COALESCE(STATE, '') NOT LIKE '%read all relay log%' "
                "AND COALESCE(STATE, '') NOT LIKE 'Waiting for%master%'")
    return int(cur.fetchone()[0])


def _pipe(server: Server, paths: list[str]) -> dict[str, Any]:
    """mariadb-binlog FILES | mariadb, one session (temporary tables live across files), binary logging off."""
    started = time.monotonic()
    with option_file(server, on_host=True) as opt:
        # the files are cut to what the target lacks, so a domain's sequence starts past the file's Gtid_list: the
        # tool's own continuity check would refuse that (the cut itself is checked, transaction by transaction)
        stages = [Stage("mariadb-binlog", ["mariadb-binlog", "--skip-gtid-strict-mode", *paths]),
                  Stage("mariadb", ["mariadb", f"--defaults-extra-file={opt}", "--binary-mode",
                                    "--init-command=SET SESSION sql_log_bin=0"])]
        try:
            run_pipeline(stages, label="binlog replay", host=server.runner())
        except PipelineError as exc:
            raise Refusal(f"the replay through mariadb-binlog | mariadb failed part way: {exc}\nWhat it applied is "
                          "not recorded per transaction: restore the base again (re-run this DAG).") from exc
    return {"seconds": round(time.monotonic() - started, 3)}


def apply(server: Server, storage: Storage, span: Span, run_id: str, method: str = "auto",
          threads: int = 4) -> dict[str, Any]:
    """Replay `span` into `server` (a restored base), once: a re-run of the same run resumes (parallel) or refuses
    (a pipe that died part way, a target that restarted mid-replay); a finished run returns its result again."""
    host = server.runner()
    with server.session(autocommit=True) as cur:
        _ledger(cur)
        cur.execute(f"SELECT method, state, result, settings, booted FROM {LEDGER} WHERE run_id=%s", (run_id,))
        row = cur.fetchone()
        if row and row[1] == "done":
            log.info("replay: this run already replayed the binlogs: %s", row[2])
            return dict(json.loads(row[2]))
        settings = json.loads(row[3]) if row and row[3] else _settings(cur)
        if row:
            _put_back(cur, settings)  # an earlier attempt's applier stops here, at a transaction's end
        cur.execute("SHOW ALL SLAVES STATUS")
        others = [str(r[0]) or "(default)" for r in cur.fetchall()]
        if others:
            raise Refusal(f"{server.describe()} has replication configured ({', '.join(others)}): it could apply or "
                          "consume transactions during the replay. Detach it first (replica_detach).")
        if row:  # an earlier attempt of this run: resume from what the target committed
            if row[0] == "pipe":
                raise Refusal("an earlier attempt of this run replayed through mariadb-binlog | mariadb and did not "
                              "finish: what it applied is unknown. Restore the base again (re-run the DAG).")
            if abs(_booted(cur) - int(row[4] or 0)) > 2:
                raise Refusal("the target restarted during this run's replay: its applier may have started again by "
                              "itself from a position it does not record with the data, and applied a transaction "
                              "twice. Restore the base again (re-run the DAG).")
            applied = _state(_gtid_slave_pos(cur))
            log.info("replay: resuming; the target holds %s", _gtid_slave_pos(cur))
        else:
            applied = _state(span.base_gtid)
        cur.execute("SELECT @@GLOBAL.datadir")
        base, named = _relay_base(cur, str(cur.fetchone()[0]), host)
    folder, name = posixpath.split(base)
    host.sh('rm -f -- "$1".[0-9]* "$1".index', base)
    try:
        paths, kept, written = _cut_files(storage, span, applied, host, folder, name)
        with server.session(autocommit=True) as cur:
            if row:
                chosen, why = str(row[0]), "resuming this run's replay"
            else:
                chosen, why = choose_method(cur, method, {t.server_id for t in kept})
                cur.execute("SET GLOBAL gtid_slave_pos=%s", (span.base_gtid,))
                cur.execute(f"INSERT INTO {LEDGER} (run_id, method, base_gtid, state, settings, booted) "
                            "VALUES (%s, %s, %s, 'applying', %s, %s)",
                            (run_id, chosen, span.base_gtid, json.dumps(settings), _booted(cur)))
        log.info("replay: %s transactions (%s bytes) by %s (%s)", f"{len(kept):,}", f"{written:,}", chosen, why)
        result: dict[str, Any] = {"seconds": 0.0}
        if kept and chosen == "parallel":
            names = [posixpath.join(named, posixpath.basename(p)) for p in paths]  # as the server writes them
            host.sh('b=$1; shift; printf "%s\\n" "$@" > "$b.index" && cd "$(dirname "$b")" && '
                    'chown --reference . "$@" "$b.index"', base, *names)
            try:
                result = _parallel(server, [posixpath.basename(p) for p in paths], kept, threads)
            finally:
                with server.session(autocommit=True) as cur:
                    _put_back(cur, settings)
        elif kept:
            result = _pipe(server, paths)
    finally:
        host.sh('rm -f -- "$1".[0-9]* "$1".index', base)
    end = events.gtid_state(span.base_gtid if not row else _gtid_text(applied), kept)
    with server.session(autocommit=True) as cur:
        holds = _gtid_slave_pos(cur)
        if kept and chosen == "pipe":  # the pipe records nothing itself: the target's position is set once it is done
            cur.execute("SET GLOBAL gtid_slave_pos=%s", (end,))
            holds = end
        cur.execute("XA RECOVER")
        prepared = [str(r[3]) for r in cur.fetchall()]
    if not all(_state(holds).get(d, -1) >= n for d, n in _state(end).items()):
        raise IntegrityError(f"after the replay the target holds GTID position {holds!r}, short of {end!r}: it did not "
                             "apply every transaction. A retry resumes.")
    if prepared:  # as on the source at that point: prepared, their XA COMMIT after the stop
        log.warning("replay: XA transactions left prepared (their XA COMMIT comes after until, as on the source at that "
                    "point): %s. XA COMMIT or XA ROLLBACK them on the target.", ", ".join(prepared))
    result.update(method=chosen, gtid_position=holds, transactions=len(kept), bytes=written, until=span.until,
                  not_applied=span.not_applied, prepared_xa=prepared,
                  last_gtid=kept[-1].gtid if kept else None, last_time=kept[-1].time if kept else None,
                  last_time_utc=utc(kept[-1].time) if kept else None)
    with server.session(autocommit=True) as cur:
        cur.execute("SET SESSION sql_log_bin=0")
        cur.execute(f"UPDATE {LEDGER} SET state='done', result=%s WHERE run_id=%s", (json.dumps(result), run_id))
    log.info("replay done: %s transactions by %s in %s s; last applied %s at %s; not applied: %s",
             f"{len(kept):,}", chosen, result["seconds"], result["last_gtid"], result["last_time_utc"], span.not_applied)
    return result


def cleanup(plan: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The DAG's teardown after the replay, however it ended: the replay's replication connection gone and the
    globals it changed put back as they were before its first attempt (a worker killed mid-replay leaves both)."""
    server = connections.server(plan["target_conn_id"])
    with server.session(autocommit=True) as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME='pitr_replay'",
                    (META_DB,))
        if not cur.fetchone()[0]:
            return {"cleaned": False}
        cur.execute(f"SELECT settings FROM {LEDGER} WHERE run_id=%s", (run_id,))
        row = cur.fetchone()
        if not row or not row[0]:
            return {"cleaned": False}
        _put_back(cur, json.loads(row[0]))
    return {"cleaned": True}


def run(plan: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The point_in_time_restore DAG's replay task."""
    server = connections.server(plan["target_conn_id"])
    storage = open_allowed(plan["destination"], plan.get("aws_conn_id"))
    return apply(server, storage, Span.of(plan["span"]), run_id, plan.get("method", "auto"), int(plan.get("threads", 4)))


