"""The sessions that run a logical base's statements (:mod:`lastline.pitr.statements` read them), as the run account,
which can touch the restored databases only: one session per source session (its thread id), so temporary tables
live across transactions and files; each statement's context sent as SET statements of literals (only what
changed since the session's last statement), its default database, then its text byte for byte.

What the server refuses the account (a statement on a database not restored, a default database not restored, an
account statement, an object definition, reading `mysql.*`) is rolled back and, as the run says
(`refused_statements`), fails the replay or is skipped and named. `_lastline.pitr_statements` records each
transaction applied (with it, where it is transactional), so a retry applies none twice (a DDL that commits by
itself is recorded just after it: a crash between the two leaves it to run again, and fail).
"""
from __future__ import annotations

import logging
from typing import Any

from lastline.core.accounts import unlogged
from lastline.core.errors import IntegrityError, Refusal, ServerError
from lastline.core.servers import Server
from lastline.core.sql import META_DB, quote_ident
from lastline.pitr.statements import Prepared, Query, StatementGroup

log = logging.getLogger(__name__)

LEDGER = f"`{META_DB}`.`pitr_statements`"
# what the server answers a statement that reaches past the account's grants (1045: a GRANT on *.*; the account's
# own login happens before, outside this; 1419: a trigger or function without SUPER while binary logging is on;
# 1618: DATA/INDEX DIRECTORY, which NO_DIR_IN_CREATE refuses in strict mode)
DENIED = {1044, 1045, 1142, 1143, 1227, 1370, 1410, 1211, 1419, 1449, 1618}
TRANSIENT = {1053, 1205, 1213, 1927, 2006, 2013, 2055}  # a lost connection, a lock wait or deadlock: a retry resumes


class Sessions:
    """Sessions of the run account, one per source session; applies prepared statement groups in order."""

    def __init__(self, account: Server, run_id: str, skip_refused: bool) -> None:
        self.account, self.run_id, self.skip_refused = account, run_id, skip_refused
        self._conns: dict[int, Any] = {}
        self._state: dict[int, dict[str, str]] = {}  # per session: the SET clause last sent for each variable
        self.skipped: list[dict[str, Any]] = []
        self.applied = 0

    def _cursor(self, thread_id: int) -> Any:
        if thread_id not in self._conns:
            conn = self.account.connect()
            conn.autocommit(True)  # as the source's sessions: BEGIN opens a transaction, a statement alone commits
            unlogged(conn.cursor())  # binary logging off for this session (the account's one procedure for it)
            self._conns[thread_id] = conn
            self._state[thread_id] = {}
        return self._conns[thread_id].cursor()

    def close(self) -> None:
        for conn in self._conns.values():
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a connection already gone
                pass
        self._conns.clear()

    def done(self) -> set[str]:
        """The GTIDs this run has applied or skipped already (a retry leaves them out)."""
        with self.account.session() as cur:
            cur.execute(f"SELECT gtid FROM {LEDGER} WHERE run_id=%s", (self.run_id,))
            return {str(r[0]) for r in cur.fetchall()}

    def _set(self, cur: Any, thread: int, query: Query, pending: list[str]) -> None:
        """The session's context for `query`: only what differs from what this session was last given."""
        state = self._state[thread]
        wanted = {"timestamp": f"timestamp={query.ts}.{query.status.micro:06d}", **query.status.settings()}
        if query.db and state.get("db") != query.db:
            if not query.db.isascii() and state.get("charset"):  # the name is sent in utf8
                cur.execute("SET SESSION character_set_client=utf8mb4")
                state.pop("charset")
            cur.execute(f"USE {quote_ident(query.db)}".encode("utf-8", "surrogateescape"))
            state["db"] = query.db
        changed = [clause for key, clause in wanted.items() if state.get(key) != clause]
        if changed:
            cur.execute("SET SESSION " + ", ".join(changed))
            state.update({k: v for k, v in wanted.items() if v in changed})
        for clause in pending:  # insert ids, seeds, user variables: for this statement only
            cur.execute(f"SET {clause}" if clause.startswith("@") else f"SET SESSION {clause}")

    def apply(self, prepared: Prepared) -> bool:
        """Run one prepared transaction; False if the server refused it to the account and the run skips such."""
        import MySQLdb

        group, thread = prepared.group, prepared.thread_id
        cur = self._cursor(thread)
        pending: list[str] = []
        ledgered = False
        first = next((p for k, p in prepared.steps if k == "query"), None)
        try:
            for kind, payload in prepared.steps:
                if kind == "context":
                    pending.append(payload)
                elif kind == "commit" or (kind == "query" and payload.text == b"COMMIT"):
                    self._ledger(cur, group, "applied")
                    ledgered = True
                    cur.execute("COMMIT")
                else:
                    self._set(cur, thread, payload, pending)
                    pending = []
                    try:
                        cur.execute(payload.text)
                    except MySQLdb.Error as exc:
                        if not payload.error_code or exc.args[0] != payload.error_code:
                            raise
        except MySQLdb.Error as exc:
            code = exc.args[0] if exc.args else 0
            try:
                cur.execute("ROLLBACK")
            except MySQLdb.Error:
                pass
            if code in TRANSIENT:
                raise ServerError(f"the replay's statement session failed on transaction {group.gtid} ({exc}); a retry "
                                  "resumes after the last transaction applied.") from exc
            if code not in DENIED:
                raise IntegrityError(f"the target refused transaction {group.gtid} as the source ran it: {exc}. The "
                                     "restored base and the source differ there (or the archive is damaged); nothing "
                                     "after it was applied. Restore the base again, or roll forward a physical base."
                                     ) from exc
            reason = str(exc.args[-1]) if exc.args else str(exc)
            text = first.text[:300].decode("utf-8", "replace") if first else ""
            if not self.skip_refused:
                raise Refusal(f"transaction {group.gtid} ({text!r}) was refused to the restore's account, which can touch "
                              f"the restored databases only: {reason}. It reaches another database (or defines an object, "
                              "or manages accounts). Nothing after it was applied. To leave such statements out (as "
                              "replicate_do_db does), re-run with refused_statements: skip; or roll forward a physical base."
                              ) from exc
            self.skipped.append({"gtid": group.gtid, "reason": reason, "statement": text})
            log.warning("replay: transaction %s skipped, the server refused it to the restore's account: %s", group.gtid, reason)
            self._ledger(cur, group, "skipped")
            return False
        if not ledgered:  # a statement on its own (DDL, a non-transactional write): recorded after it
            self._ledger(cur, group, "applied")
        self.applied += 1
        return True

    def _ledger(self, cur: Any, group: StatementGroup, state: str) -> None:
        cur.execute(f"INSERT INTO {LEDGER} (run_id, gtid, state) VALUES (%s, %s, %s)", (self.run_id, group.gtid, state))
        if state == "skipped" or not group.transactional:
            cur.connection.commit()
