"""A logical base's replay, reaching the restored databases only (see :mod:`lastline.pitr.split` for why each
transaction goes where it goes): a first pass reads every archived segment of the span (its sha256 checked) and
proves each transaction one of the two kinds before anything is applied; then, in commit order, each batch of row
transactions runs through the target's parallel applier with `replicate_do_db` set to the restored databases, and
each statement transaction through the run account's sessions, the target's `gtid_slave_pos` moved past it.
"""
from __future__ import annotations

import dataclasses
import logging
import posixpath
import time
from typing import Any

from lastline.core import accounts
from lastline.core.errors import ConfigError, Refusal
from lastline.core.hosts import Host
from lastline.core.servers import Server
from lastline.core.sql import META_DB
from lastline.pitr import applier, events
from lastline.pitr.sessions import LEDGER, Sessions
from lastline.pitr.span import FileSpan, Span
from lastline.pitr.split import Splitter, cut, write_relay
from lastline.pitr.statements import Prepared
from lastline.storage import Storage

log = logging.getLogger(__name__)


def check_names(databases: list[str]) -> None:
    """replicate_do_db takes a comma-separated list: a name with a comma cannot be filtered on."""
    bad = [d for d in databases if "," in d or not d]
    if bad:
        raise ConfigError(f"database name(s) {bad!r}: a logical base's replay filters on the restored databases by name, "
                          "and a name holding a comma cannot be filtered on. Restore a physical base instead.")


def collect(storage: Storage, span: Span, applied: dict[int, int]) -> tuple[list[Prepared], list[events.Transaction]]:
    """The first pass: every segment read and checked, every transaction to apply classified and every statement
    parsed whole (a refusal names the first one lastline does not pass on); the statement groups and all the
    transactions kept, in order."""
    groups: list[Prepared] = []
    kept: list[events.Transaction] = []
    for k, f in enumerate(span.files):
        splitter = Splitter(f.name, f.start, f.stop, applied, collect=True, index=k)
        for _ in cut(storage, f, splitter, f is span.files[-1]):
            pass
        groups += splitter.statements
        kept += splitter.kept
    return groups, kept


def batches(span: Span, groups: list[Prepared]) -> list[tuple[list[tuple[int, FileSpan]], Prepared | None]]:
    """The parts of the span's files between statement groups (the row transactions a batch applies), each followed
    by the statement group after it (None after the last)."""
    out: list[tuple[list[tuple[int, FileSpan]], Prepared | None]] = []
    at, pos = 0, span.files[0].start
    for prepared in [*groups, None]:
        group = prepared.group if prepared else None
        last, stop = (group.index, group.start) if group else (len(span.files) - 1, span.files[-1].stop)
        part = []
        for i in range(at, last + 1):
            f = span.files[i]
            lo = pos if i == at else f.start
            hi = stop if i == last else f.stop
            if hi is None or lo < hi:
                part.append((i, dataclasses.replace(f, start=lo, stop=hi)))
        out.append((part, prepared))
        if group:
            at, pos = group.index, group.end
    return out


def run_account(admin: Server, user: str, databases: list[str]) -> Server:
    """The replay's run account (core.accounts: the restored databases only, no BINLOG REPLAY, no SUPER), with rows of
    its own in the statements ledger."""
    with admin.session(autocommit=True) as cur:
        cur.execute("SET SESSION sql_log_bin=0")
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{META_DB}`")
        cur.execute(f"CREATE TABLE IF NOT EXISTS {LEDGER} (run_id VARCHAR(250) NOT NULL, gtid VARCHAR(64) NOT NULL, "
                    "state VARCHAR(8) NOT NULL, PRIMARY KEY (run_id, gtid)) ENGINE=InnoDB")
    account = accounts.run_account(admin, user, databases, privileges=accounts.REPLAY_PRIVILEGES)
    with admin.session(autocommit=True) as cur:
        cur.execute("SET SESSION sql_log_bin=0")
        cur.execute(f"GRANT SELECT, INSERT ON {LEDGER} TO {accounts.account_sql(user, accounts.admin_host(cur))}")
    return account


def refuse_cascades(cur: Any, databases: list[str]) -> None:
    """A foreign key of another database's table onto a restored one would carry a replayed delete or update out of
    the restored databases (InnoDB cascades are not filtered): refused before anything is applied."""
    marks = ", ".join(["%s"] * len(databases))
    cur.execute("SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, UNIQUE_CONSTRAINT_SCHEMA, REFERENCED_TABLE_NAME "
                f"FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE UNIQUE_CONSTRAINT_SCHEMA IN ({marks}) "
                f"AND CONSTRAINT_SCHEMA NOT IN ({marks})", (*databases, *databases))
    found = cur.fetchall()
    if found:
        names = "; ".join(f"{r[0]}.{r[1]} ({r[2]}) references {r[3]}.{r[4]}" for r in found[:5])
        raise Refusal(f"tables outside the restored databases have foreign keys onto them ({names}): a replayed change "
                      "would cascade into them. Drop those keys first, or roll forward a physical base.")


def _moved_past(cur: Any, gtid: str) -> None:
    """The target's gtid_slave_pos moved to `gtid` in its domain (the applier is stopped between batches)."""
    cur.execute("SELECT @@GLOBAL.gtid_slave_pos")
    state = {int(g.split("-")[0]): g for g in str(cur.fetchone()[0] or "").split(",") if g}
    state[int(gtid.split("-")[0])] = gtid
    cur.execute("SET GLOBAL gtid_slave_pos=%s", (",".join(state[d] for d in sorted(state)),))


def run(server: Server, storage: Storage, span: Span, applied: dict[int, int], groups: list[Prepared],
        run_id: str, threads: int, databases: list[str], account: str, host: Host, base: str, named: str,
        skip_refused: bool = False) -> dict[str, Any]:
    """Apply the span in commit order: row batches by the applier (rebuilt for `databases` and filtered to them),
    statement groups by the run account `account` (a statement it is refused fails the replay, or is skipped:
    `skip_refused`). The caller has run `collect` (nothing is applied before every segment was checked)."""
    started = time.monotonic()
    with server.session() as cur:
        refuse_cascades(cur, databases)
    sessions = Sessions(run_account(server, account, databases), run_id, skip_refused)
    names = frozenset(d.encode("utf-8") for d in databases)
    done = sessions.done()
    written, rows = 0, 0
    folder, name = posixpath.split(base)
    try:
        for part, prepared in batches(span, groups):
            paths, kept = [], []
            for k, (i, f) in enumerate(part, start=1):
                splitter = Splitter(f.name, f.start, f.stop, applied, collect=False, index=i, databases=names)
                path = posixpath.join(folder, f"{name}.{k:06d}")
                written += write_relay(storage, f, splitter, i == len(span.files) - 1, host, path)
                paths.append(path)
                kept += splitter.kept
            try:
                if kept:
                    applier.write_index(host, base, named, paths)
                    applier.run_parallel(server, [posixpath.basename(p) for p in paths], kept, threads, databases)
                    rows += len(kept)
            finally:
                with server.session(autocommit=True) as cur:
                    applier.drop_connection(cur)
                host.sh('rm -f -- "$1".[0-9]* "$1".index', base)
            if prepared is None:
                continue
            if prepared.group.gtid not in done:
                sessions.apply(prepared)
            with server.session(autocommit=True) as cur:
                _moved_past(cur, prepared.group.gtid)
    finally:
        sessions.close()
    if sessions.skipped:
        log.warning("replay: %d statement transactions were refused to the restore's account and skipped (they reach "
                    "past the restored databases): %s", len(sessions.skipped),
                    "; ".join(f"{s['gtid']}: {s['reason']}" for s in sessions.skipped[:10]))
    log.info("replay (databases %s): %s row transactions by the applier, %s statement transactions by the run account, "
             "%s skipped", ", ".join(databases), f"{rows:,}", f"{sessions.applied:,}", len(sessions.skipped))
    return {"seconds": round(time.monotonic() - started, 3), "written": written, "statements": sessions.applied,
            "skipped": sessions.skipped}
