"""The restore's unit tests share two small logical backups, each taken once a session with lastline's own logical
backup from the suite's logical source: `restore_backup` (small_backup: two databases, a keyed table over 1 MiB and a
17 MiB value, for the lanes, the load and the stages) and `tiny_backup` (one database whose name holds a space, a dot
and a backtick, and in it tables, a sequence, a view, a trigger, a routine and an event whose names do too, for
create, finalize, verify and the target's state). `restore_plan` makes a plan for the tiny one with the real preflight
(force: every module restores into the same database of the logical target)."""
from __future__ import annotations

from pathlib import Path

import pytest

from lastline.backups import BackupRef, OpenedBackup, open_backup
from lastline.core.servers import Server
from lastline.logical.backup import stages as logical_backup
from lastline.logical.format.dialect import qualified, quote_ident
from lastline.logical.restore import stages as logical_restore
from lastline.logical.restore.plans import RestorePlan
from lastline.logical.restore.target_state import aside_name, clear_state, ensure_ledger, ensure_state

from .small_backup import taken

DB = "unit rst.d`b"
PARENT, CHILD, MYISAM, EMPTY, SEQ = "pa.rent", "ch`ild", "my isam", "empty t", "se.q"
VIEW, TRIGGER, PROC, EVENT = "v iew", "tr.g", "pr`oc", "ev ent"
CHUNK_ROWS = 1000  # the least a backup takes
PARENT_ROWS = 2500  # `pa.rent` in three chunks


def root(inst) -> Server:
    """The sandbox's root account (creates and drops any database)."""
    return Server(conn_id="root", socket=str(inst.sock), user="root")


def drop(inst, *dbs: str) -> None:
    with root(inst).session() as cur:
        for db in dbs:
            cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(db)}")


SOURCE_SQL = [
    f"CREATE DATABASE {quote_ident(DB)} CHARACTER SET utf8mb4",
    f"CREATE TABLE {qualified(DB, PARENT)} (id INT PRIMARY KEY, name VARCHAR(20), body TEXT, KEY `k name` (name), "
    "FULLTEXT KEY `ft.body` (body)) ENGINE=InnoDB",
    f"INSERT INTO {qualified(DB, PARENT)} SELECT seq, CONCAT('n`', seq), CONCAT('body text ', seq) FROM mysql.seq_1_to_{PARENT_ROWS}",
    f"CREATE TABLE {qualified(DB, CHILD)} (id INT AUTO_INCREMENT PRIMARY KEY, parent_id INT, KEY `k par` (parent_id), "
    f"CONSTRAINT `fk par` FOREIGN KEY (parent_id) REFERENCES {quote_ident(PARENT)} (id)) ENGINE=InnoDB",
    f"INSERT INTO {qualified(DB, CHILD)} (parent_id) SELECT 1 + seq % 50 FROM mysql.seq_1_to_40",
    f"DELETE FROM {qualified(DB, CHILD)} WHERE id > 30",  # the counter (41) is past the last row
    f"CREATE TABLE {qualified(DB, MYISAM)} (id INT PRIMARY KEY, v VARCHAR(10)) ENGINE=MyISAM",
    f"INSERT INTO {qualified(DB, MYISAM)} SELECT seq, CONCAT('v', seq) FROM mysql.seq_1_to_10",
    f"CREATE TABLE {qualified(DB, EMPTY)} (id INT PRIMARY KEY) ENGINE=InnoDB",
    f"CREATE SEQUENCE {qualified(DB, SEQ)} START WITH 100 INCREMENT BY 5",
    f"SELECT NEXTVAL({qualified(DB, SEQ)})",
    f"CREATE VIEW {qualified(DB, VIEW)} AS SELECT id, name FROM {qualified(DB, PARENT)}",
    f"CREATE TRIGGER {qualified(DB, TRIGGER)} BEFORE INSERT ON {qualified(DB, CHILD)} FOR EACH ROW "
    "SET NEW.parent_id = COALESCE(NEW.parent_id, 1)",
    f"CREATE PROCEDURE {qualified(DB, PROC)}() SELECT COUNT(*) FROM {qualified(DB, PARENT)}",
    f"CREATE EVENT {qualified(DB, EVENT)} ON SCHEDULE EVERY 1 DAY STARTS '2030-01-01 00:00:00' ENABLE "
    f"DO DELETE FROM {qualified(DB, CHILD)} WHERE id < 0",
]


@pytest.fixture(scope="session")
def tiny_backup(logical_source, tmp_path_factory) -> Path:
    """The folder of one logical backup of DB (chunks of CHUNK_ROWS rows: `pa.rent` comes in several)."""
    drop(logical_source, DB)
    with root(logical_source).session() as cur:
        for sql in SOURCE_SQL:
            cur.execute(sql)
            cur.fetchall()
    dest = tmp_path_factory.mktemp("unit-restore")
    try:
        logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}",
                                                      "databases": [DB], "chunk_rows": CHUNK_ROWS}))
    finally:
        drop(logical_source, DB)
    return dest


def conf(dest: Path, **kw) -> dict:
    return {"target_conn_id": "t_ltarget", "backup": f"file://{dest}/latest", "databases": [DB], "parallel": 2,
            "tune": False, "restart_allowed": False, "defer_indexes": True, "force": True, "aws_conn_id": None, **kw}


def afresh(logical_target, backup: OpenedBackup) -> None:
    """No state of an earlier run of `backup`'s restore on the target (its state and ledger rows), and no DB nor its
    aside copy (before a preflight)."""
    with logical_target.server().session() as cur:
        ensure_ledger(cur)
        ensure_state(cur)
        clear_state(cur, backup.logical, [DB])
        cur.connection.commit()
    drop(logical_target, DB, aside_name(DB))


def fresh_target(logical_target, tiny_backup: Path) -> OpenedBackup:
    """The tiny backup, opened, with the target afresh for its restore."""
    backup = open_backup(BackupRef.parse(conf(tiny_backup)["backup"], "logical"))
    afresh(logical_target, backup)
    return backup


@pytest.fixture(scope="module")
def restore_plan(tiny_backup, logical_target):
    """`make(**conf)`: a plan for the tiny backup by the real preflight; DB and its aside dropped from the target, and
    every plan's run account dropped, at the module's end."""
    plans: list[RestorePlan] = []

    def make(**kw) -> RestorePlan:
        plans.append(logical_restore.preflight(conf(tiny_backup, **kw)))
        return plans[-1]

    drop(logical_target, DB, aside_name(DB))
    yield make
    for plan in plans:
        logical_restore.revert(plan)
    drop(logical_target, DB, aside_name(DB))


@pytest.fixture(scope="session")
def restore_backup(logical_source, tmp_path_factory) -> Path:
    """The backup's folder (`file://<folder>/latest` is the backup; see small_backup)."""
    with taken(logical_source.server(), tmp_path_factory.mktemp("unit-restore")) as dest:
        yield dest
