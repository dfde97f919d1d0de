"""The small-scale guard of what grows with the number of objects (the scale bench, `make bench-scale`, measures it
at 2,000 and 10,000 tables): a backup and a restore of N and 2N tables round-trip exactly, and the statements each
sends per table stay the same (a per-object query that crept in, or a step that walks every table for each table,
shows here as a count that grows faster than the tables)."""
from __future__ import annotations

import pytest

from lastline.logical.backup import stages as logical_backup
from lastline.logical.restore import stages as logical_restore
from lastline_dev.compare import table_checksums

pytestmark = pytest.mark.e2e
PER_DB = 25  # tables per tenant database, as the scale bench shapes them
# statements per table at most (measured 5.1 and 17.9): a new statement per table is a decision, made here
PER_TABLE = {"backup (source)": 6, "restore (target)": 20}


def _tenants(server, prefix: str, tables: int) -> list[str]:
    """`tables` tables in databases of PER_DB: small ones with a secondary index, some empty, a view and a trigger
    per database."""
    dbs = [f"{prefix}_{i:03d}" for i in range(tables // PER_DB)]
    with server.session() as cur:
        for db in dbs:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"USE `{db}`")  # seq_1_to_N: the sequence engine answers in the current database
            for t in range(PER_DB):
                cur.execute(f"CREATE TABLE `{db}`.t{t} (id INT PRIMARY KEY, v VARCHAR(40), n INT, KEY kn (n)) ENGINE=InnoDB")
                if t % 8:  # every eighth table stays empty
                    cur.execute(f"INSERT INTO `{db}`.t{t} SELECT seq, CONCAT('row ', seq), seq % 7 FROM seq_1_to_{20 + t * 3}")
            cur.execute(f"CREATE VIEW `{db}`.v AS SELECT id, v FROM `{db}`.t1")
            cur.execute(f"CREATE TRIGGER `{db}`.tr BEFORE INSERT ON `{db}`.t1 FOR EACH ROW SET NEW.n = NEW.n + 1")
        cur.connection.commit()
    return dbs


def _questions(server) -> int:
    """Statements the server has been sent (its Questions counter: client statements, not those inside routines)."""
    return int(server.query("SHOW GLOBAL STATUS LIKE 'Questions'")[0][1])


def _rows_sent(server) -> int:
    """Rows the server has sent its clients (its Rows_sent counter)."""
    return int(server.query("SHOW GLOBAL STATUS LIKE 'Rows_sent'")[0][1])


def _round_trip(source, target, tmp_path, prefix: str, tables: int) -> tuple[int, int, int]:
    """Back up and restore `tables` tables, check them exact; the statements the source and the target were sent,
    and the rows the target sent the load's lanes (a lane that read the whole ledger per table would send tables x
    chunks)."""
    src, tgt = source.server(), target.server()
    dbs = _tenants(src, prefix, tables)
    before = _questions(src)
    plan = logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{tmp_path / prefix}", "databases": dbs,
                         "parallel": 2})
    logical_backup.dump(plan)
    dumped = _questions(src) - before
    before = _questions(tgt)
    rplan = logical_restore.preflight({"target_conn_id": "t_ltarget", "backup": f"file://{tmp_path / prefix}/latest", "databases": dbs,
                          "force": True, "parallel": 2, "tune": False})
    snap = logical_restore.snapshot_config(rplan, prefix)
    _steps, lanes = logical_restore.prepare(rplan)
    rows = _rows_sent(tgt)
    for lane in lanes:
        logical_restore.load_lane(rplan, lane)
    lane_rows = _rows_sent(tgt) - rows
    logical_restore.finalize(rplan)
    logical_restore.revert(rplan)
    verified = logical_restore.verify(rplan, snap)
    restored = _questions(tgt) - before
    assert verified.tables == tables
    theirs = {k: v for k, v in table_checksums(src).items() if k.split(".")[0] in dbs}
    assert {k: v for k, v in table_checksums(tgt).items() if k.split(".")[0] in dbs} == theirs
    with src.session() as cur, tgt.session() as tcur:
        for db in dbs:
            cur.execute(f"DROP DATABASE `{db}`")
            tcur.execute(f"DROP DATABASE `{db}`")
    return dumped, restored, lane_rows


def test_statements_per_table_stay_constant_from_n_to_2n_tables(logical_source, logical_target, tmp_path):
    """100 and 200 tables (4 and 8 tenant databases): both round-trip exactly; the second costs each server at most
    twice the statements of the first (a per-table constant plus a fixed part; a count per pair of tables would make
    it four times), and each table no more statements than PER_TABLE says; the rows the lanes read grow as the tables
    do (a ledger read whole once per table would grow as tables x chunks)."""
    small = _round_trip(logical_source, logical_target, tmp_path, "sg_a", 100)
    large = _round_trip(logical_source, logical_target, tmp_path, "sg_b", 200)
    rows, rows2 = small[2], large[2]
    print(f"load lanes: the target sent {rows:,} rows for 100 tables, {rows2:,} for 200")
    assert rows2 <= 2 * rows + 50, f"the lanes read {rows} rows for 100 tables, {rows2} for 200: more than linear"
    for side, (n, n2) in zip(("backup (source)", "restore (target)"), zip(small[:2], large[:2])):
        per_table = (n2 - n) / 100
        print(f"{side}: {n:,} statements for 100 tables, {n2:,} for 200: {per_table:.1f} per table")
        assert n2 <= 2 * n + 50, f"{side}: {n} statements for 100 tables, {n2} for 200: more than linear"
        assert per_table <= PER_TABLE[side], f"{side}: {per_table:.1f} statements per table, over {PER_TABLE[side]}"
