"""pitr.pipe on the shared logical_target: the pipe's narrower account holds data rights only (no file, global
setting, replication connection or shutdown) and is dropped after; the client's sandbox mode where it has it. The pipe
itself replays in test_replay and, forged, in the point-in-time trust tests."""
from __future__ import annotations

import MySQLdb
import pytest

from lastline.core.hosts import LOCAL
from lastline.pitr import pipe


def test_the_pipes_account_holds_data_rights_only_and_is_dropped(logical_target):
    tgt = logical_target.server()
    assert pipe.sandbox(LOCAL) == ["--sandbox"]  # this machine's client has it
    with pipe.account(tgt) as narrow:
        assert narrow.user == pipe.REPLAY_USER and narrow.password != tgt.password
        with narrow.session() as cur:
            cur.execute("SHOW GRANTS")
            grants = " ".join(r[0] for r in cur.fetchall())
            # a file, a global setting, a replication connection, a shutdown (an account is not among them: INSERT on
            # mysql.* lets CREATE USER run; there the event check is the line)
            for denied in ("SELECT 1 INTO OUTFILE '/tmp/unit-replay-never'", "SET GLOBAL read_only = 0",
                           "CHANGE MASTER 'unit_never' TO MASTER_HOST='never.invalid'", "SHUTDOWN"):
                with pytest.raises(MySQLdb.OperationalError, match="Access denied|privilege"):
                    cur.execute(denied)
        assert "BINLOG REPLAY" in grants and not any(p in grants for p in (" FILE", "SUPER", "SHUTDOWN", "GRANT OPTION"))
    assert not tgt.query("SELECT User FROM mysql.global_priv WHERE User = %s", (pipe.REPLAY_USER,))
