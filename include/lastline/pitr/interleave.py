"""A logical base's roll-forward through row transactions and statements, in span order (issue 47).

Row transactions go to the target's own applier in the rebuilt relay logs (pitr.split); each statement that may change
a restored database runs in one client session of the replay's own account (pitr.statement_run), and in the relay logs
its place holds an empty transaction with its GTID. The order is the archive's: the applier is started `UNTIL` the
relay position of the next statement's empty transaction, and the statement runs once it stopped there holding every
transaction before it (and not the statement's own GTID: checked); the next batch starts after the statement
committed, its empty transaction first (which moves the applier's position past it).

The account (`lastline_run_<hex>`, named after the run, so the DAG's teardown finds it) holds SELECT, INSERT, UPDATE,
DELETE and EXECUTE on the restored databases, INSERT on this run's ledger table and nothing else: no FILE, no SUPER,
no DDL, no `mysql.*`, no other database. It is dropped after each attempt, always (and by the teardown after a kill).

**Exactly once.** A statement's transaction commits with a row naming its GTID in this run's ledger
(`_lastline.pitr_statements_<hex>`, InnoDB); a resumed attempt runs none of the statements its ledger holds (their
empty transactions still move the applier's position). The ledger is dropped when the replay is done.

**A forged archive and the ledger.** The account may INSERT into its own run's ledger table only: it cannot read,
change or delete a row, and no other run's ledger is granted to it. A forged statement can add rows there (so that a
resume of this run skips later statements) or add its own GTID first (its transaction then fails on the duplicate
key: the run stops, named). Either way it changes only which archived statements run in the restored databases,
which whoever can forge the archive decides anyway; nothing outside them, nor another run's resume.
"""
from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

from lastline.core import accounts, stopping
from lastline.core.errors import IntegrityError, ServerError
from lastline.core.servers import Server
from lastline.core.sql import META_DB
from lastline.pitr import applier, events
from lastline.pitr.events import gtid_map
from lastline.pitr.statement_run import Session, Statement

log = logging.getLogger(__name__)


def account(run_id: str) -> str:
    """The replay account of run `run_id` (the same run, the same name: the teardown drops it)."""
    return accounts.RUN_PREFIX + hashlib.sha256(f"pitr {run_id}".encode()).hexdigest()[:12]


def ledger_of(user: str) -> str:
    """The run's ledger table, quoted."""
    return f"`{META_DB}`.`pitr_statements_{user[len(accounts.RUN_PREFIX):]}`"


def done(admin: Server, run_id: str) -> set[str]:
    """The ledger made (if missing) and the GTIDs it holds: statements an earlier attempt of this run committed."""
    with admin.session() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{META_DB}`")
        cur.execute(f"CREATE TABLE IF NOT EXISTS {ledger_of(account(run_id))} (gtid VARCHAR(64) NOT NULL PRIMARY KEY, "
                    "at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB")
        cur.execute(f"SELECT gtid FROM {ledger_of(account(run_id))}")
        return {str(r[0]) for r in cur.fetchall()}


def forget(admin: Server, run_id: str) -> None:
    """After the replay is done: its account and its ledger gone."""
    accounts.drop(admin, account(run_id))
    with admin.session() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DROP TABLE IF EXISTS {ledger_of(account(run_id))}")


def run(server: Server, paths: list[str], kept: list[events.Transaction], statements: list[Statement], threads: int,
        databases: list[str], run_id: str) -> dict[str, Any]:
    """Replay relay logs `paths` (names, no folder) through the target's applier, running `statements` in their
    places (see the module); waits until the target holds the last transaction kept. The caller drops the connection
    and puts the globals back."""
    started = time.monotonic()
    ran = set(done(server, run_id))
    to_run = {st.gtid: st for st in statements if st.gtid not in ran}
    if ran & {st.gtid for st in statements}:
        log.info("replay: %d statements were committed by an earlier attempt of this run (its ledger): not run again",
                 len(ran & {st.gtid for st in statements}))
    session, stop = None, None
    user = account(run_id)
    try:
        if to_run:
            narrow = accounts.replay_account(server, user, databases, ledger_of(user))
            conn = narrow.connect()
            session = Session(conn, ledger_of(user))
            accounts.unlogged(session.cur)
            session.cur.execute("SELECT CONNECTION_ID()")
            stop = stopping.add(f"replay: KILL QUERY on the statement session of {user}",
                                stopping.kill_query(server, int(session.cur.fetchone()[0])))
        with server.session(autocommit=True) as cur:
            applier.configure(cur, paths[0], threads, databases)
            rows = False  # a transaction for the applier lies between the last stop and here
            for i, t in enumerate(kept):
                st = to_run.get(t.gtid)
                if st is None:
                    rows = rows or t.gtid not in ran
                    continue
                if rows:
                    until(cur, st, events.gtid_state("", kept[:i]), started)
                    rows = False
                assert session is not None
                session.run(st)
                log.info("replay: statement transaction %s run (%s)", st.gtid, st.head())
            cur.execute(f"START SLAVE '{applier.CONNECTION}' SQL_THREAD")
            applier.wait(cur, events.gtid_state("", kept), started)
    finally:
        if stop is not None:
            stopping.remove(stop)
        if session is not None:
            session.conn.close()
        if to_run:
            accounts.drop(server, user)
    return {"seconds": round(time.monotonic() - started, 3), "statements_run": len(to_run)}


def until(cur: Any, st: Statement, want: str, started: float, idle: float = 30.0) -> None:
    """The applier run up to statement `st`'s empty transaction: when it stopped there, the target holds `want` (every
    transaction before it) and not `st` itself; its error raised."""
    cur.execute(f"START SLAVE '{applier.CONNECTION}' SQL_THREAD UNTIL RELAY_LOG_FILE = %s, RELAY_LOG_POS = %s",
                (st.relay, st.offset))
    moved, seen = time.monotonic(), applier.gtid_slave_pos(cur)
    while True:
        status = applier.slave_status(cur)
        if not status:
            raise ServerError(f"the target's applier stopped during the replay: its replication connection "
                              f"'{applier.CONNECTION}' no longer exists. A retry resumes.")
        if status.get("Slave_SQL_Running") != "Yes":
            break
        now = applier.gtid_slave_pos(cur)
        if now != seen:
            seen, moved = now, time.monotonic()
        elif time.monotonic() - moved > idle and "read all relay log" in str(status.get("Slave_SQL_Running_State")):
            raise IntegrityError(f"the target's applier read every relay log short of statement transaction {st.gtid}: "
                                 "the archive is incomplete there. Nothing more is applied; restore the base again.")
        time.sleep(0.05)
    if status.get("Last_SQL_Errno"):
        raise ServerError(f"the target's applier stopped during the replay: {status.get('Last_SQL_Error')}. A retry "
                          "resumes after the last transaction it committed.")
    holds = gtid_map(applier.gtid_slave_pos(cur))
    if not all(holds.get(d, -1) >= n for d, n in gtid_map(want).items()) or holds.get(int(st.gtid.split("-")[0]), -1) >= \
            int(st.gtid.split("-")[2]):
        raise IntegrityError(f"the target's applier stopped at {applier.gtid_slave_pos(cur)}, not just before statement "
                             f"transaction {st.gtid} (it must hold {want} and not that one): the order cannot be "
                             "kept; nothing of that statement was run. Restore the base again.")
    log.info("replay: %.1f s: the applier holds %s, before statement transaction %s", time.monotonic() - started,
             want, st.gtid)
