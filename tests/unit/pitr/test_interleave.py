"""pitr.interleave: the replay account and ledger of a run (named after the run, so a teardown finds them), the ledger
read back and dropped on a real server, and the account's grants: rows of the restored databases, INSERT on its own
ledger, nothing else (a statement reaching further is denied by the server)."""
from __future__ import annotations

import pytest

from lastline.core import accounts
from lastline.core.sql import META_DB
from lastline.pitr import interleave

DB = "unit_interleave"


def test_account_and_ledger_are_named_after_the_run():
    user = interleave.account("manual__2026-11-28T00:00:00")
    assert user.startswith(accounts.RUN_PREFIX) and len(user) == len(accounts.RUN_PREFIX) + 12
    assert user == interleave.account("manual__2026-11-28T00:00:00") != interleave.account("another run")
    assert interleave.ledger_of(user) == f"`{META_DB}`.`pitr_statements_{user[len(accounts.RUN_PREFIX):]}`"


@pytest.fixture
def restored(target):
    server = target.server()
    with server.session() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for db in (DB, DB + "_other"):
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
            cur.execute(f"CREATE DATABASE {db}")
            cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)")
    try:
        yield server
    finally:
        interleave.forget(server, "unit run")
        with server.session() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            for db in (DB, DB + "_other"):
                cur.execute(f"DROP DATABASE IF EXISTS {db}")


def test_the_ledger_and_the_account_reach_the_restored_database_and_their_own_ledger_only(restored):
    assert interleave.done(restored, "unit run") == set()
    user = interleave.account("unit run")
    narrow = accounts.replay_account(restored, user, [DB], interleave.ledger_of(user))
    with narrow.session() as cur:
        accounts.unlogged(cur)
        cur.execute(f"INSERT INTO {DB}.t VALUES (1)")
        cur.execute(f"INSERT INTO {interleave.ledger_of(user)} (gtid) VALUES ('0-1-9')")
        cur.connection.commit()
        for sql, code in ((f"INSERT INTO {DB}_other.t VALUES (1)", 1142), ("SELECT * FROM mysql.user", 1142),
                          (f"SELECT * FROM {interleave.ledger_of(user)}", 1142), (f"DROP TABLE {DB}.t", 1142),
                          ("SET GLOBAL read_only = 1", 1227), ("SET SESSION sql_log_bin = 1", 1227)):
            with pytest.raises(Exception, match=".") as denied:  # noqa: PT011 - the code is checked below
                cur.execute(sql)
                raise AssertionError(f"{sql} ran")
            assert denied.value.args[0] == code, (sql, denied.value)
    assert interleave.done(restored, "unit run") == {"0-1-9"}
    interleave.forget(restored, "unit run")
    assert restored.query("SELECT COUNT(*) FROM mysql.global_priv WHERE User = %s", (user,)) == [(0,)]
    assert restored.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME LIKE "
                          "'pitr\\_statements\\_%%'", (META_DB,)) == [(0,)]
