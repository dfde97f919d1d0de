"""The target's own replication applier, as the parallel replay uses it: a connection of its own
(`lastline_pitr`, which never connects anywhere) whose relay logs are files cut from the archive; the settings
that must not skip, filter, rewrite or re-log what it applies; the wait for it to reach the end, with progress
and its errors; and putting the target back as it was (the connection gone, the settings it changed restored).
"""
from __future__ import annotations

import logging
import posixpath
import time
from typing import Any

from lastline.core.errors import IntegrityError, Refusal, ServerError
from lastline.core.hosts import Host
from lastline.core.servers import Server
from lastline.pitr import events
from lastline.pitr.events import gtid_map
from lastline.replicas import backup_source

log = logging.getLogger(__name__)

CONNECTION = "lastline_pitr"  # the replication connection the parallel replay uses (never connects anywhere)
# what the parallel replay changes, put back after it
SETTINGS = ("slave_parallel_threads", "slave_exec_mode", "innodb_flush_log_at_trx_commit")
# While it replays, the target writes its redo log at each commit and flushes it to disk once a second, not at every
# commit (innodb_flush_log_at_trx_commit 1 -> 2; 0 stays 0): the replay committed 1.65x the transactions a second here
# (bench/pitr_bench.py). A crash of the target's server loses nothing this way; a crash of the machine loses at most
# the last second, and the replay refuses to resume on a target that restarted (replay.apply): the base is restored
# again. It is the server's setting: on a logical base's server, its other databases' commits are flushed once a
# second too while the replay runs (as while the logical restore loads, where tune sets 0).
DURING = "IF(@@GLOBAL.innodb_flush_log_at_trx_commit IN (1, 3), 2, @@GLOBAL.innodb_flush_log_at_trx_commit)"


def settings(cur: Any) -> dict[str, Any]:
    cur.execute("SELECT " + ", ".join(f"@@GLOBAL.{n}" for n in SETTINGS))
    return dict(zip(SETTINGS, cur.fetchone()))


def as_before(cur: Any, recorded: dict[str, Any] | None) -> dict[str, Any]:
    """The settings before a replay's first attempt: as `recorded` (its ledger row; None: this is the first) says, and
    a setting it lacks (recorded by a lastline that never changed that one) as it is now."""
    now = settings(cur)
    return now if recorded is None else {**now, **recorded}


def booted(cur: Any) -> int:
    """When the target's server process started (UTC seconds)."""
    cur.execute("SELECT UNIX_TIMESTAMP() - VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                "WHERE VARIABLE_NAME = 'UPTIME'")
    return int(cur.fetchone()[0])


def put_back(cur: Any, settings: dict[str, Any]) -> int:
    """The connection dropped, and the globals the replay changed set as they were before its first attempt. Returns
    how many temporary tables of the source the connection held when it went (see drop_connection)."""
    lost = drop_connection(cur)
    cur.execute("SET GLOBAL slave_parallel_threads=%s", (int(settings["slave_parallel_threads"]),))
    cur.execute("SET GLOBAL slave_exec_mode=%s", (str(settings["slave_exec_mode"]),))
    if "innodb_flush_log_at_trx_commit" in settings:  # a ledger row written before the replay changed it has none
        cur.execute("SET GLOBAL innodb_flush_log_at_trx_commit=%s", (int(settings["innodb_flush_log_at_trx_commit"]),))
    return lost


def gtid_slave_pos(cur: Any) -> str:
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


def slave_status(cur: Any) -> dict[str, Any]:
    """The replay connection's SHOW SLAVE STATUS as a dict; {} when the connection does not exist (error 1617)."""
    import MySQLdb

    try:
        cur.execute(f"SHOW SLAVE '{CONNECTION}' STATUS")
    except MySQLdb.OperationalError as exc:
        if exc.args and exc.args[0] == 1617:
            return {}
        raise
    row = cur.fetchone()
    return dict(zip([d[0] for d in cur.description], row)) if row else {}


def relay_base(cur: Any, datadir: str, host: Host) -> tuple[str, str]:
    """(the path without its sequence number of this connection's relay logs, and the folder prefix the server
    writes their names with in its index): it creates the connection once to see, then removes it again."""
    cur.execute(f"CHANGE MASTER '{CONNECTION}' TO MASTER_HOST='lastline-replay.invalid', MASTER_PORT=9, MASTER_USER='none'")
    relay = str(slave_status(cur)["Relay_Log_File"])
    path = relay if relay.startswith("/") else posixpath.normpath(posixpath.join(datadir, relay))
    base = path.rsplit(".", 1)[0]
    first = host.sh('head -n 1 -- "$1.index"', base).strip()
    cur.execute(f"RESET SLAVE '{CONNECTION}' ALL")
    return base, posixpath.dirname(first)


def drop_connection(cur: Any) -> int:
    """The replay's connection stopped and removed, its relay logs with it, and its database filter cleared (the
    server keeps a connection's filters by name, beyond RESET SLAVE ALL). Returns how many temporary tables its applier
    held then (a statement-format session's CREATE TEMPORARY TABLE applied, its DROP not yet): they go with it, and a
    resume from the position the target holds would run their later statements without them (0: no connection)."""
    cur.execute("SHOW ALL SLAVES STATUS")
    names = [str(r[0]) for r in cur.fetchall()]
    if CONNECTION not in names:
        return 0
    cur.execute(f"STOP SLAVE '{CONNECTION}'")
    held = backup_source.open_temp_tables(cur)  # the replay refuses a target with another connection: its applier's
    cur.execute(f"SET GLOBAL {CONNECTION}.replicate_do_db=''")
    cur.execute(f"RESET SLAVE '{CONNECTION}' ALL")
    return held



def write_index(host: Host, base: str, named: str, paths: list[str]) -> None:
    """The relay log index naming `paths` (written as the server writes them: under `named`), owned as the folder."""
    names = [posixpath.join(named, posixpath.basename(p)) for p in paths]
    host.sh('b=$1; shift; printf "%s\\n" "$@" > "$b.index" && cd "$(dirname "$b")" && chown --reference . "$@" "$b.index"',
            base, *names)


def run_parallel(server: Server, paths: list[str], kept: list[events.Transaction], threads: int,
                 databases: list[str] | None = None) -> dict[str, Any]:
    """Replay relay logs cut from the archive through the target's own applier; waits until the target holds the
    last transaction kept (or its applier stops, or idles short of it). `databases`: the only ones its row events
    may change (the server's replicate_do_db on this connection; None: every one). The caller drops the connection
    and puts the globals back."""
    started = time.monotonic()
    with server.session(autocommit=True) as cur:
        configure(cur, paths[0], threads, databases)
        cur.execute(f"START SLAVE '{CONNECTION}' SQL_THREAD")
        wait(cur, events.gtid_state("", kept), started)
    return {"seconds": round(time.monotonic() - started, 3)}


def configure(cur: Any, first: str, threads: int, databases: list[str] | None) -> None:
    """The replay's connection made, reading relay log `first` (a name, no folder) from its start, and the settings
    it runs with (see SETTINGS); not started."""
    cur.execute(f"CHANGE MASTER '{CONNECTION}' TO MASTER_HOST='lastline-replay.invalid', MASTER_PORT=9, "
                f"MASTER_USER='none', RELAY_LOG_FILE='{first}', RELAY_LOG_POS=4")
    cur.execute(f"SET GLOBAL {CONNECTION}.replicate_do_db=%s", (",".join(databases or []),))
    cur.execute("SET GLOBAL slave_parallel_threads=%s", (int(threads),))
    cur.execute("SET GLOBAL slave_exec_mode='STRICT'")
    cur.execute(f"SET GLOBAL innodb_flush_log_at_trx_commit = {DURING}")  # see DURING


def wait(cur: Any, want: str, started: float, every: float = 10.0, idle: float = 30.0) -> None:
    """Until gtid_slave_pos holds `want` in every domain; progress every `every` s; the applier's error raised, and
    an applier that has read everything and moved nothing for `idle` s."""
    target = gtid_map(want)
    first = seen = gtid_map(gtid_slave_pos(cur))
    last_log = moved = time.monotonic()
    while True:
        now = gtid_map(gtid_slave_pos(cur))
        if all(now.get(d, -1) >= n for d, n in target.items()):
            return
        status = slave_status(cur)
        if not status:
            raise ServerError(f"the target's applier stopped during the replay: its replication connection "
                              f"'{CONNECTION}' no longer exists (removed on the target while the replay ran). A retry "
                              "creates it again and resumes after the last transaction it committed.")
        if status.get("Slave_SQL_Running") != "Yes":
            err = status.get("Last_SQL_Error") or status.get("Slave_SQL_Running_State") or "it stopped"
            raise ServerError(f"the target's applier stopped during the replay: {err} (at "
                              f"{status.get('Relay_Master_Log_File')}:{status.get('Exec_Master_Log_Pos')}). A retry "
                              "resumes after the last transaction it committed.")
        if now != seen:
            seen, moved = now, time.monotonic()
        elif ("read all relay log" in str(status.get("Slave_SQL_Running_State")) and time.monotonic() - moved > idle
              and not applying(cur)):
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


def applying(cur: Any) -> int:
    """How many of the target's replication threads are doing something (not waiting for work or events): a long
    transaction keeps a worker busy while gtid_slave_pos stands still."""
    cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'system user' AND COMMAND <> 'Daemon' "
                "AND COALESCE(STATE, '') NOT LIKE 'Waiting for work%' AND COALESCE(STATE, '') NOT LIKE '%read all relay log%' "
                "AND COALESCE(STATE, '') NOT LIKE 'Waiting for%master%'")
    return int(cur.fetchone()[0])
