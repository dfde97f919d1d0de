"""The point-in-time replay's fallback method, the pipe: `mariadb-binlog FILES | mariadb`, one session, binary
logging off in it, under a short-lived account with data rights only (no FILE, SUPER, SHUTDOWN, grants or replication
admin), its client reading no local file and running no client command. What it records is nothing per transaction:
a pipe that died part way is not resumed (pitr.replay). Also what the bench compares the parallel replay with.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import Iterator
from typing import Any

from lastline.core.errors import PipelineError, Refusal
from lastline.core.hosts import Host, Stage
from lastline.core.option_files import option_file
from lastline.core.pipeline import run_pipeline
from lastline.core.servers import Server

log = logging.getLogger(__name__)

REPLAY_USER = "lastline_pitr_replay"  # the pipe's session: data rights; no FILE, SUPER, SHUTDOWN, grants
REPLAY_PRIVILEGES = ("SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, REFERENCES, INDEX, ALTER, CREATE TEMPORARY TABLES, "
                     "LOCK TABLES, EXECUTE, CREATE VIEW, SHOW VIEW, CREATE ROUTINE, ALTER ROUTINE, EVENT, TRIGGER, "
                     "DELETE HISTORY, RELOAD, BINLOG REPLAY, BINLOG ADMIN, SET USER")


def _drop_account(cur: Any) -> None:
    cur.execute("SET SESSION sql_log_bin=0")
    cur.execute("SELECT Host FROM mysql.global_priv WHERE User=%s", (REPLAY_USER,))
    for (host,) in cur.fetchall():
        cur.execute("DROP USER IF EXISTS %s@%s", (REPLAY_USER, host))


@contextlib.contextmanager
def account(server: Server) -> Iterator[Server]:
    """`server` as a short-lived account that holds what mariadb-binlog's output needs and no FILE, SUPER, SHUTDOWN,
    PROCESS, CREATE USER, GRANT OPTION or replication admin: an archived statement that slipped past the check is
    denied a file, a global setting, a grant, a replication connection, a shutdown. Not an account or a write to
    mysql.* (data rights on *.* include mysql.*, and INSERT there lets CREATE USER run; BINLOG REPLAY applies row
    events to any table): there the check is the line. Where the target cannot make it (an account
    without those grants, a server before MariaDB 10.5.2), the connection's own account, with a warning. Dropped
    after; a worker killed mid-replay leaves it (its password never stored), and the next pipe or the DAG's
    teardown drops it."""
    password, made = secrets.token_urlsafe(24), True
    try:
        with server.session(autocommit=True) as cur:
            _drop_account(cur)
            cur.execute("SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', -1)")
            for host in sorted({str(cur.fetchone()[0]), "localhost"}):
                cur.execute("CREATE USER %s@%s IDENTIFIED BY %s", (REPLAY_USER, host, password))
                cur.execute(f"GRANT {REPLAY_PRIVILEGES} ON *.* TO %s@%s", (REPLAY_USER, host))
    except Exception as exc:  # noqa: BLE001 - any refusal by the target: its own account runs the pipe, said so
        log.warning("replay: the pipe runs under %s's own account: the target could not make a narrower one (%s)",
                    server.describe(), str(exc).replace(password, "***"))
        made = False
        drop_account_of(server)
    try:
        yield dataclasses.replace(server, user=REPLAY_USER, password=password) if made else server
    finally:
        if made:
            drop_account_of(server)


def drop_account_of(server: Server) -> None:
    """The pipe's account dropped; a failure said, not raised (the account's password was never stored)."""
    try:
        with server.session(autocommit=True) as cur:
            _drop_account(cur)
    except Exception as exc:  # noqa: BLE001 - a teardown step: what to do is logged
        log.warning("replay: could not drop the account %s on %s (%s): DROP USER it there.", REPLAY_USER,
                    server.describe(), exc)


def sandbox(host: Host) -> list[str]:
    """`--sandbox` where the host's mariadb client has it (MariaDB 10.5.25, 10.6.18, 10.11.8, 11.0.6 on): no client
    command that touches files or runs programs; an older client is said (binary mode still parses none of them)."""
    if host.sh('mariadb --help 2>/dev/null | grep -c -e "--sandbox" || true').strip() not in ("", "0"):
        return ["--sandbox"]
    log.warning("replay: the mariadb client on %s has no --sandbox; the pipe relies on --binary-mode alone to parse no "
                "client command. Upgrade the client.", host.name)
    return []


def run(server: Server, paths: list[str]) -> dict[str, Any]:
    """mariadb-binlog FILES | mariadb, one session (temporary tables live across files), binary logging off. The
    client reads only lastline's option file, never a local file (LOCAL INFILE off) and no client command but
    DELIMITER (binary mode; sandbox mode refuses the ones that touch files or run programs); its session is a
    narrower account (account)."""
    started = time.monotonic()
    with account(server) as narrow, option_file(narrow, on_host=True) as opt:
        # the files are cut to what the target lacks, so a domain's sequence starts past the file's Gtid_list: the
        # tool's own continuity check would refuse that (the cut itself is checked, transaction by transaction)
        stages = [Stage("mariadb-binlog", ["mariadb-binlog", "--skip-gtid-strict-mode", "--skip-annotate-row-events",
                                           *paths]),
                  Stage("mariadb", ["mariadb", f"--defaults-file={opt}", "--local-infile=0", *sandbox(server.runner()),
                                    "--binary-mode", "--batch", "--comments",
                                    "--init-command=SET SESSION sql_log_bin=0"])]
        try:
            run_pipeline(stages, label="binlog replay", host=server.runner())
        except PipelineError as exc:
            raise Refusal(f"the replay through mariadb-binlog | mariadb failed part way: {exc}\nWhat it applied is "
                          "not recorded per transaction: restore the base again (re-run this DAG).") from exc
    return {"seconds": round(time.monotonic() - started, 3)}
