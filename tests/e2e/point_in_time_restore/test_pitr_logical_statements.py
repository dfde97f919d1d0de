"""A logical base rolled forward through a MIXED workload (issue 47): MariaDB's default binlog_format logs most
changes as statements, so the statements on the restored database run, in order between the row transactions, in
one session of the replay's own account (its grants reach `shop` only); a statement on another database is left out.
The result equals the source (checksums). A forged statement that writes another database or `mysql.*` fails on the
server with "denied", named, nothing of it applied; a resume after it runs no statement twice (the ledger)."""
from __future__ import annotations

import time

import pytest

from conftest import set_conn
from lastline import connections
from lastline.logical.backup import stages as logical_backup
from lastline.pitr import archive, replay
from lastline.pitr import restore as pitr
from lastline.pitr.span import Span
from lastline.storage import open_storage
from lastline_dev.sandbox import Instance

from .test_pitr_logical import _forged_copy
from .test_pitr_restore import state

pytestmark = pytest.mark.e2e
TABLES = ("stock", "accounts", "orders", "audit")
PAD = " /* a statement of the MIXED workload, long enough to be rewritten by the forgery tests */"


def shop_state(inst: Instance) -> dict[str, tuple]:
    """Every table of `shop`: row count and CHECKSUM TABLE."""
    return state(inst, TABLES)


def _untouched(inst: Instance) -> dict:
    server = inst.server()
    return {"other": server.query("CHECKSUM TABLE other.t"),
            "tz": server.query("SELECT Name FROM mysql.time_zone_name ORDER BY 1"),
            "users": server.query("SELECT User, Host FROM mysql.global_priv WHERE User NOT LIKE 'lastline\\_%' ORDER BY 1, 2")}


def _trx(server, *sql: str, db: str | None = None, tz: str | None = None) -> str:
    """One transaction of `sql` on the source in MIXED format; its GTID."""
    with server.session(database=db) as cur:
        cur.execute("SET SESSION binlog_format = 'MIXED'")
        if tz:
            cur.execute("SET SESSION time_zone = %s", (tz,))
        for s in sql:
            cur.execute(s)
        cur.connection.commit()
        cur.execute("SELECT @@SESSION.last_gtid")
        return str(cur.fetchone()[0])


@pytest.fixture(scope="module")
def mixed(sandbox_root, tmp_path_factory):
    src, tgt = Instance(sandbox_root, "pitr_msrc"), Instance(sandbox_root, "pitr_mtgt")
    src.create()
    tgt.create()
    try:
        yield _history(src, tgt, tmp_path_factory.mktemp("pitr_mixed"))
    finally:
        src.destroy()
        tgt.destroy()


def _history(src: Instance, tgt: Instance, dest) -> dict:
    set_conn("t_pitr_msrc", src)
    set_conn("t_pitr_mtgt", tgt)
    storage = open_storage(f"file://{dest}")
    server = connections.server("t_pitr_msrc")
    with server.session() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.stock (id INT PRIMARY KEY, qty INT NOT NULL)")
        cur.execute("CREATE TABLE shop.accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)")
        cur.execute("CREATE TABLE shop.orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, item INT, note VARCHAR(200))")
        cur.execute("CREATE TABLE shop.audit (id BIGINT PRIMARY KEY, qty INT, at VARCHAR(40))")
        cur.executemany("INSERT INTO shop.stock VALUES (%s, %s)", [(i, 100 * i) for i in range(1, 21)])
        cur.executemany("INSERT INTO shop.accounts VALUES (%s, 0)", [(i,) for i in range(1, 21)])
        cur.execute("INSERT INTO shop.orders (item, note) VALUES (1, 'first'), (2, 'second')")
        cur.connection.commit()
    for inst, rows in ((src, ("source one", "source two")), (tgt, ("the target's own", "never replayed into"))):
        with inst.server().session() as cur:
            cur.execute("CREATE DATABASE other")
            cur.execute("CREATE TABLE other.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(40))")
            cur.executemany("INSERT INTO other.t (v) VALUES (%s)", [(r,) for r in rows])
            cur.connection.commit()
    archive.ship(server, storage)
    plan = logical_backup.preflight({"source_conn_id": "t_pitr_msrc", "destination": f"file://{dest}", "databases": ["shop"]})
    logical_backup.dump(plan)
    g: dict[str, str] = {}
    g["update"] = _trx(server, "UPDATE shop.stock SET qty = qty + 1 WHERE id <= 5" + PAD)
    g["rand_rows"] = _trx(server, "UPDATE shop.stock SET qty = FLOOR(RAND() * 1000) WHERE id = 9")  # unsafe: rows
    g["after_rows"] = _trx(server, "UPDATE shop.stock SET qty = qty * 2 WHERE id = 9" + PAD)  # order matters
    g["delete"] = _trx(server, "DELETE FROM shop.accounts WHERE id = 20" + PAD)
    g["insert_select"] = _trx(server, "INSERT INTO shop.audit (id, qty, at) SELECT id, qty, 'copied' FROM shop.stock "
                                      "WHERE id <= 3" + PAD)
    g["user_var"] = _trx(server, "SET @d = 3", "SET @label = _utf8mb4'gr\u00fc\u00df' COLLATE utf8mb4_bin",
                         "UPDATE shop.stock SET qty = qty - @d WHERE id = 6" + PAD,
                         "INSERT INTO shop.audit VALUES (100 + @d, @d, @label)" + PAD)
    g["now"] = _trx(server, "UPDATE shop.orders SET note = CONCAT('at ', NOW(), ' ', FROM_UNIXTIME(0)) WHERE id = 1" + PAD,
                    tz="+02:00")
    g["last_insert_id"] = _trx(server, "INSERT INTO shop.orders (item, note) VALUES (3, 'third')",
                               "INSERT INTO shop.audit VALUES (LAST_INSERT_ID() + 1000, 1, 'by id')" + PAD)
    g["default_db"] = _trx(server, "UPDATE accounts SET balance = balance + 7 WHERE id < 4" + PAD, db="shop")
    g["other"] = _trx(server, "UPDATE other.t SET v = 'changed on the source'" + PAD)
    g["two"] = _trx(server, "UPDATE shop.accounts SET balance = balance - 5 WHERE id = 5" + PAD,
                    "UPDATE shop.stock SET qty = qty + 5 WHERE id = 10" + PAD)
    g["second_in_a_row"] = _trx(server, "UPDATE shop.accounts SET balance = balance * 3 + 1 WHERE id = 5" + PAD)
    g["rows_last"] = _trx(server, "INSERT INTO shop.orders (item, note) SELECT 9, 'rows' FROM DUAL")
    time.sleep(1)
    archive.ship(server, storage)
    return {"dest": f"file://{dest}", "storage": storage, "src": src, "tgt": tgt, "gtids": g,
            "latest": server.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0], "state": shop_state(src),
            "untouched": _untouched(tgt)}


def _run(run_dag, h, until: str = "latest", dest: str | None = None) -> tuple[str, dict, str]:
    return run_dag("point_in_time_restore", {
        "target_conn_id": "t_pitr_mtgt", "destination": dest or h["dest"], "until": until, "base": "auto",
        "base_kind": "logical", "databases": [], "branch": "", "replay_method": "auto", "parallel": 2, "force": True,
        "restore_into_source": "", "aws_conn_id": None})


def test_a_logical_base_rolls_forward_through_a_mixed_workload_equal_to_the_source(run_dag, mixed):
    g = mixed["gtids"]
    state_, tis, logs = _run(run_dag, mixed)
    assert state_ == "success", (tis, logs[-4000:])
    assert shop_state(mixed["tgt"]) == mixed["state"]
    assert _untouched(mixed["tgt"]) == mixed["untouched"]  # other.t as the target had it: the statement on it left out
    for name in ("update", "after_rows", "delete", "user_var", "now", "last_insert_id", "default_db", "two",
                 "second_in_a_row"):
        assert f"statement transaction {g[name]} run" in logs, name
    assert f"statement transaction {g['rand_rows']} run" not in logs  # MIXED logged it as rows: the applier ran it
    assert "1 statements on other databases than the restored ones were left out" in logs and g["other"] in logs
    tgt = mixed["tgt"].server()
    assert tgt.query("SELECT COUNT(*) FROM mysql.global_priv WHERE User LIKE 'lastline\\_run\\_%'") == [(0,)]
    assert tgt.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '_lastline' AND TABLE_NAME "
                     "LIKE 'pitr\\_statements\\_%'") == [(0,)]


@pytest.mark.parametrize(("victim", "attack", "reached"), [
    ("delete", b"INSERT INTO other.t (v) SELECT 'forged' FROM shop.stock LIMIT 1", "other"),
    ("default_db", b"INSERT INTO mysql.time_zone_name (Name, Time_zone_id) VALUES ('Forged', 77)", "mysql"),
    ("second_in_a_row", b"UPDATE shop.stock s JOIN mysql.user u SET s.qty = 0, u.Host = 'evil'", "mysql"),
    ("default_db", b"SET GLOBAL read_only = 1", "global"),
], ids=["other-database", "mysql-with-default-db-shop", "mysql-in-a-join", "a-global-setting"])
def test_a_forged_statement_reaching_further_is_denied_by_the_server_and_a_resume_runs_nothing_twice(
        run_dag, mixed, tmp_path, victim, attack, reached):
    g = mixed["gtids"]
    dest = _forged_copy(mixed, tmp_path, {g[victim]: attack})
    state_, tis, logs = _run(run_dag, mixed, dest=dest)
    assert state_ == "failed" and tis["replay"] == "failed", tis
    assert f"transaction {g[victim]} (" in logs and "denied" in logs and attack[:20].decode() in logs
    assert _untouched(mixed["tgt"]) == mixed["untouched"]  # nothing of it applied, nothing outside shop reached
    tgt = mixed["tgt"].server()
    assert tgt.query("SELECT @@GLOBAL.read_only") == [(0,)], reached
    assert tgt.query("SELECT COUNT(*) FROM mysql.global_priv WHERE User LIKE 'lastline\\_run\\_%'") == [(0,)]
    # the same run resumed on the honest archive: the statements its ledger holds are not run again, the rest are
    (run_id,) = tgt.query("SELECT run_id FROM _lastline.pitr_replay WHERE state = 'applying'")[0]
    plan = pitr.preflight({"target_conn_id": "t_pitr_mtgt", "destination": mixed["dest"], "until": "latest",
                           "base_kind": "logical"})
    result = replay.apply(tgt, mixed["storage"], Span.of(plan.replay["span"]), run_id, "auto", 2, ["shop"])
    assert result["resumed"] and shop_state(mixed["tgt"]) == mixed["state"]
    assert _untouched(mixed["tgt"]) == mixed["untouched"]
    with tgt.session(autocommit=True) as cur:
        cur.execute("DELETE FROM _lastline.pitr_replay WHERE run_id = %s", (run_id,))


def test_a_forged_transaction_that_ends_its_own_transaction_runs_nothing_after_it(run_dag, mixed, tmp_path):
    """`SET autocommit = 1` then `XA COMMIT` of another session's prepared transaction, each naming `shop` in a comment
    the server ignores (so both run under the replay's account): any account may end any XA transaction once outside
    its own, so the statement that left lastline's transaction refuses the rest, and the application's XA stays
    prepared."""
    g = mixed["gtids"]
    dest = _forged_copy(mixed, tmp_path, {g["two"]: [b"SET autocommit = 1 /*!99999 shop */",
                                                     b"XA COMMIT 'lastline-app-xa' /*!99999 shop */"]})
    tgt = mixed["tgt"].server()
    conn = tgt.connect()
    try:
        cur = conn.cursor()
        cur.execute("XA START 'lastline-app-xa'")
        cur.execute("INSERT INTO other.t (v) VALUES ('an application decides this one')")
        cur.execute("XA END 'lastline-app-xa'")
        cur.execute("XA PREPARE 'lastline-app-xa'")
    finally:
        conn.close()  # prepared, left for its coordinator
    try:
        state_, tis, logs = _run(run_dag, mixed, dest=dest)
        assert state_ == "failed" and tis["replay"] == "failed", tis
        assert f"transaction {g['two']} (" in logs and "ended the transaction lastline runs it in" in logs
        assert [bytes(r[3]) for r in tgt.query("XA RECOVER")] == [b"lastline-app-xa"]  # still prepared
        assert ("an application decides this one",) not in [tuple(r[1:]) for r in tgt.query("SELECT * FROM other.t")]
    finally:
        with tgt.session(autocommit=True) as cur:
            cur.execute("XA ROLLBACK 'lastline-app-xa'")
            cur.execute("DELETE FROM _lastline.pitr_replay WHERE state = 'applying'")
