"""Staging fails closed, on real servers: between the restore and a verified mask nobody but lastline reads
staging (its readers are locked out, their sessions killed), a refresh that fails before its mask is verified
leaves no unmasked row behind, the masking key reaches no statement text (the general log is on here), and
what verify_masking compares against is keyed, not a plain hash of personal data."""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time

import pytest

from conftest import set_conn
from lastline.core.servers import Server
from lastline.logical.backup import stages as logical_backup
from lastline.logical.restore.target_state import aside_name
from lastline.staging import masking, quarantine

pytestmark = pytest.mark.e2e

RULES = {"sc_crm.customers.email": "email", "sc_crm.customers.full_name": "name"}
KEY = "the staging key: s3cret-Ünï"
N = 300


@pytest.fixture(scope="module")
def staged(logical_source, logical_target, tmp_path_factory):
    """A small CRM on the source, its backup, a staging connection on the shared target, a reader account
    there, and an account that can read nothing (USAGE only: never locked)."""
    src, tgt = logical_source.server(), logical_target.server()
    src.query("CREATE DATABASE IF NOT EXISTS sc_crm")
    src.query("CREATE TABLE IF NOT EXISTS sc_crm.customers (id INT PRIMARY KEY, email VARCHAR(120) NOT NULL, full_name VARCHAR(80), "
              "UNIQUE KEY email (email)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci")
    # an ordinary audit trigger (and what a planted one could do): it would copy the originals, and the key's pads
    # from the masking session's variables, if it fired on the mask's UPDATE
    src.query("CREATE TABLE IF NOT EXISTS sc_crm.change_log (id INT AUTO_INCREMENT PRIMARY KEY, what TEXT)")
    src.query("CREATE OR REPLACE TRIGGER sc_crm.audit_customers AFTER UPDATE ON sc_crm.customers FOR EACH ROW "
              "INSERT INTO sc_crm.change_log (what) VALUES (CONCAT_WS(' ', OLD.email, OLD.full_name, HEX(@lastline_ipad)))")
    conn = src.connect()
    conn.cursor().executemany("REPLACE INTO sc_crm.customers VALUES (%s, %s, %s)",
                              [(i, f"person.{i}@mail.example.net", f"Person Number{i}") for i in range(1, N + 1)])
    conn.commit()
    conn.close()
    dest = tmp_path_factory.mktemp("staging-closed")
    plan = logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["sc_crm"]})
    logical_backup.dump(plan)
    set_conn("t_sc_staging", logical_target, role="staging")
    os.environ["AIRFLOW_CONN_T_SC_KEY"] = json.dumps({"conn_type": "generic", "password": KEY})
    for sql in ("CREATE OR REPLACE USER 'sc_reader'@'127.0.0.1' IDENTIFIED BY 'reader-pw'",
                "GRANT SELECT ON `sc\\_crm`.* TO 'sc_reader'@'127.0.0.1'",
                "CREATE OR REPLACE USER 'sc_nobody'@'127.0.0.1' IDENTIFIED BY 'nobody-pw'",
                "CREATE OR REPLACE USER ''@'127.0.0.1'",  # anonymous: any user name logs in
                "GRANT SELECT ON `sc\\_crm`.* TO PUBLIC"):  # ...and reads what PUBLIC may
        tgt.query(sql)
    yield f"file://{dest}/{plan.backup_id}", {f"person.{i}@mail.example.net" for i in range(1, N + 1)}
    for sql in ("DROP USER IF EXISTS 'sc_reader'@'127.0.0.1'", "DROP USER IF EXISTS 'sc_nobody'@'127.0.0.1'",
                "DROP USER IF EXISTS ''@'127.0.0.1'", "REVOKE SELECT ON `sc\\_crm`.* FROM PUBLIC",
                "DROP DATABASE IF EXISTS sc_crm", f"DROP DATABASE IF EXISTS `{aside_name('sc_crm')}`",
                "SET GLOBAL read_only = OFF", "SET GLOBAL general_log = OFF"):
        tgt.query(sql)


def _conf(backup: str, **kw) -> dict:
    return {"target_conn_id": "t_sc_staging", "backup": backup, "databases": ["sc_crm"], "masking_rules": RULES,
            "open_for_writes": True, "parallel": 2, "tune": True, "defer_indexes": True,
            "index_build": "after_all", "force": True, "restart": False, "redo_log_bytes": 128 << 20, "aws_conn_id": None, **kw}


class Reader(threading.Thread):
    """An application account reading staging every 50 ms for as long as the refresh runs: every value it ever
    got, and every error it was given."""

    def __init__(self, port: int, user: str = "sc_reader", password: str = "reader-pw") -> None:
        super().__init__(daemon=True)
        self.server = Server("reader", host="127.0.0.1", port=port, user=user, password=password)
        self.seen: set[str] = set()
        self.errors: set[int] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        conn = None
        while not self.stop.is_set():
            try:
                if conn is None:
                    conn = self.server.connect(connect_timeout=2)
                cur = conn.cursor()
                cur.execute("SELECT email FROM sc_crm.customers")
                self.seen |= {r[0] for r in cur.fetchall()}
            except Exception as exc:  # noqa: BLE001 - recorded
                code = getattr(exc, "args", (0,))[0]
                self.errors.add(code if isinstance(code, int) else -1)
                if "locked" in str(exc):
                    self.errors.add(4151)
                try:
                    if conn is not None:
                        conn.close()
                except Exception:  # noqa: BLE001
                    pass
                conn = None
            time.sleep(0.05)


def test_readers_never_see_an_original_value_and_the_key_reaches_no_statement(run_dag, staged, logical_target, monkeypatch):
    backup, originals = staged
    monkeypatch.setenv("LASTLINE_MASKING_KEY_CONN_ID", "t_sc_key")
    tgt = logical_target.server()
    tgt.query("SET GLOBAL log_output = 'TABLE'")
    tgt.query("TRUNCATE TABLE mysql.general_log")
    tgt.query("SET GLOBAL general_log = ON")
    kept: dict[str, list] = {}
    real_mark = quarantine.mark_verified

    def snapshot_then_mark(server, run_key):  # what verify_masking compared against, as it was kept on the server
        kept["h"] = [r[0] for r in tgt.query("SELECT h FROM _lastline.mask_originals")]
        return real_mark(server, run_key)

    monkeypatch.setattr(quarantine, "mark_verified", snapshot_then_mark)
    port = logical_target.meta()["port"]
    # an application account, an anonymous login and a USAGE-only account (both reach what PUBLIC may read)
    readers = [Reader(port), Reader(port, "whoever", ""), Reader(port, "sc_nobody", "nobody-pw")]
    idle = readers[0].server.connect()  # a session open before the lock: killed by it, not left reading
    for r in readers:
        r.start()
    try:
        state, tis, logs = run_dag("staging_refresh", _conf(backup))
    finally:
        for r in readers:
            r.stop.set()
            r.join(10)
        tgt.query("SET GLOBAL general_log = OFF")
    assert state == "success", (tis, logs[-3000:])
    assert tis["lock"] == "success" and tis["close"] == "success"
    with pytest.raises(Exception, match="gone away|Lost connection|killed"):
        idle.cursor().execute("SELECT 1")
    for r in readers:
        assert not r.seen & originals, r.server.user  # not once, at any moment of the refresh
        assert 4151 in r.errors, (r.server.user, r.errors)  # "this account is locked": shut out while unmasked
    final = {r[0] for r in tgt.query("SELECT email FROM sc_crm.customers")}
    assert len(final) == N and all(e.endswith("@example.com") for e in final)
    assert Server("r", host="127.0.0.1", port=logical_target.meta()["port"], user="sc_reader", password="reader-pw").query(
        "SELECT COUNT(*) FROM sc_crm.customers")[0][0] == N  # open again once verified
    assert "ACCOUNT LOCK" not in tgt.query("SHOW CREATE USER 'sc_nobody'@'127.0.0.1'")[0][0]  # unlocked again
    # the audit trigger exists (created once the masking was verified) and never fired on the mask
    assert tgt.query("SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'sc_crm'")[0][0] == 1
    assert tgt.query("SELECT COUNT(*) FROM sc_crm.change_log")[0][0] == 0
    # the key, its HMAC pads and the pads of the originals' key are in no statement the server saw
    k = KEY.encode()
    k = k.ljust(64, b"\0") if len(k) <= 64 else hashlib.sha256(k).digest().ljust(64, b"\0")
    secrets_ = [KEY.encode(), bytes(b ^ 0x36 for b in k).hex().encode(), bytes(b ^ 0x5C for b in k).hex().encode()]
    secrets_ += [s.upper() for s in secrets_[1:]]
    log_text = b"\n".join(r[0] for r in tgt.query("SELECT CAST(argument AS BINARY) FROM mysql.general_log"))
    assert b"staging_refresh" in log_text or b"mask" in log_text or len(log_text) > 1000  # the log did record the run
    assert not [s for s in secrets_ if s in log_text]
    assert KEY not in logs
    # the hashes verify compared against are keyed: none is the plain SHA-256 of an original value
    assert kept["h"]
    plain = {hashlib.sha256(e.lower().encode()).digest() for e in originals}
    assert not plain & {bytes(h) for h in kept["h"]}
    assert tgt.query("SELECT COUNT(*) FROM _lastline.mask_originals")[0][0] == 0  # and none is kept past open


def test_a_refresh_that_fails_before_a_verified_mask_leaves_no_unmasked_row_and_unlocks(run_dag, staged, logical_target, monkeypatch):
    backup, originals = staged
    monkeypatch.setenv("LASTLINE_MASKING_KEY_CONN_ID", "t_sc_key")
    tgt = logical_target.server()

    def broken(*a, **k):
        raise RuntimeError("masking broke (injected)")

    monkeypatch.setattr(masking, "mask_table", broken)
    try:
        state, tis, logs = run_dag("staging_refresh", _conf(backup))
    finally:
        tgt.query("SET GLOBAL read_only = OFF")
    assert state == "failed" and tis["mask"] == "failed" and tis["close"] == "success", tis
    assert tis["restore.verify"] == "success"  # the unmasked copy was there, complete...
    assert not tgt.query("SHOW DATABASES LIKE 'sc\\_crm'")  # ...and is gone: nothing unmasked is left to read
    assert "dropped sc_crm (restored, unmasked)" in logs
    reader = Server("r", host="127.0.0.1", port=logical_target.meta()["port"], user="sc_reader", password="reader-pw")
    assert reader.query("SELECT 1") == [(1,)]  # unlocked again
    assert not tgt.query("SELECT COUNT(*) FROM _lastline.staging_locks WHERE phase <> 'closed'")[0][0]
