"""The small logical backup the restore's unit tests share (taken once a session: conftest's `restore_backup`), and
restores of it into the suite's logical target that leave nothing behind.

The backup holds two databases whose names carry a backtick, a dot and a space: SMALL (a keyed InnoDB table of over
1 MiB in several chunks, whose secondary index defer_indexes holds back; a MyISAM table; an empty table) and BIG (one
value of 17 MiB, past the server's 16 MiB packet, and a small one)."""
from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Iterator
from pathlib import Path

from lastline.backups import open_backup
from lastline.core import accounts
from lastline.core.servers import Server
from lastline.core.sql import META_DB, table_exists
from lastline.logical.backup import stages as logical_backup
from lastline.logical.format.dialect import qualified, quote_ident
from lastline.logical.restore import stages as logical_restore
from lastline.logical.restore.backup_files import run_server, selected, target_server
from lastline.logical.restore.create import Creates, create_schema, table_creates
from lastline.logical.restore.plans import RestorePlan
from lastline.logical.restore.target_state import aside_name, clear_state
from lastline.logical.restore.work_units import WorkUnit, plan_units
from lastline.manifest import LogicalManifest, LogicalTable, read_manifest
from lastline.storage import Storage, open_storage

SMALL = "unit`lr.a b"
BIG = "unit`lr big"
KEYED, MYISAM, EMPTY, BLOBS = "t.1 `x`", "my isam", "empty", "blob.s"
KEYED_ROWS, MYISAM_ROWS = 2500, 1200
MIB = 1 << 20
BIG_VALUE = (b"a\tb\\c\n" * (17 * MIB // 6 + 1))[:17 * MIB]  # 17 MiB raw, more once escaped


def _escape(value: bytes) -> bytes:
    return value.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n")


@contextlib.contextmanager
def taken(source: Server, dest: Path) -> Iterator[Path]:
    """The backup, taken by lastline's logical backup into `dest` from `source` (the suite's logical source, as
    t_lsource); its databases are dropped from the source after the block."""
    conn = source.connect(local_infile=1)
    cur = conn.cursor()
    try:
        for db in (SMALL, BIG):
            cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(db)}")
            cur.execute(f"CREATE DATABASE {quote_ident(db)} CHARACTER SET utf8mb4")
        cur.execute(f"CREATE TABLE {qualified(SMALL, KEYED)} (id INT PRIMARY KEY, v VARCHAR(500) NOT NULL, k INT NULL, "
                    "KEY `k.1 x` (k)) ENGINE=InnoDB")
        cur.execute(f"INSERT INTO {qualified(SMALL, KEYED)} SELECT seq, CONCAT('v\\t`', seq, '.', REPEAT('x', 450)), seq % 7 "
                    f"FROM {quote_ident(SMALL)}.seq_1_to_{KEYED_ROWS}")
        cur.execute(f"CREATE TABLE {qualified(SMALL, MYISAM)} (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=MyISAM")
        cur.execute(f"INSERT INTO {qualified(SMALL, MYISAM)} SELECT seq, IF(seq % 5, CONCAT('m ', seq), NULL) "
                    f"FROM {quote_ident(SMALL)}.seq_1_to_{MYISAM_ROWS}")
        cur.execute(f"CREATE TABLE {qualified(SMALL, EMPTY)} (id INT PRIMARY KEY) ENGINE=InnoDB")
        cur.execute(f"CREATE TABLE {qualified(BIG, BLOBS)} (id INT PRIMARY KEY, b LONGBLOB NOT NULL) ENGINE=InnoDB")
        with tempfile.NamedTemporaryFile(suffix=".tsv") as fh:  # an INSERT of it would not fit the 16 MiB packet
            fh.write(b"1\t" + _escape(BIG_VALUE) + b"\n2\tsmall\n")
            fh.flush()
            cur.execute(f"LOAD DATA LOCAL INFILE '{fh.name}' INTO TABLE {qualified(BIG, BLOBS)} CHARACTER SET binary "
                        "FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n'")
        assert conn.warning_count() == 0
        conn.commit()
        plan = logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}",
                                         "databases": [SMALL, BIG], "chunk_rows": 1000})
        logical_backup.dump(plan)
        yield dest
    finally:
        for db in (SMALL, BIG):
            cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(db)}")
        conn.close()


def manifest_of(dest: Path) -> LogicalManifest:
    storage = open_storage(f"file://{dest}")
    return read_manifest(storage, storage.list_backups()[-1], "logical")


def conf(dest: Path, **kw) -> dict:
    """A restore of the backup into the logical target (every Param spelled out)."""
    return {"target_conn_id": "t_ltarget", "backup": f"file://{dest}/latest", "redo_log_bytes": 128 << 20,
            "databases": [SMALL], "parallel": 2, "tune": False, "restart_allowed": False, "defer_indexes": True,
            "force": True, "aws_conn_id": None, **kw}


@contextlib.contextmanager
def restoring(dest: Path, **kw) -> Iterator[RestorePlan]:
    """A restore's plan (its preflight run); after the block, nothing of it stays on the target: its databases (and
    what force set aside), its state, work units and ledger rows, its run account, and a tuning it left."""
    plan = logical_restore.preflight(conf(dest, **kw))
    try:
        yield plan
    finally:
        server = target_server(plan)
        logical_restore.revert(plan)  # the run account dropped, a tuning put back (nothing, when none was taken)
        with server.session() as cur:
            if all(table_exists(cur, META_DB, t) for t in ("restore_state", "work_units", "ledger")):  # a finalize drops the ledger
                clear_state(cur, manifest_of(dest), plan.databases)
            for db in plan.databases:
                cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(db)}")
                cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(aside_name(db))}")
            cur.connection.commit()
        assert accounts.drop(server, plan.restore_account) is False  # revert dropped it


@dataclasses.dataclass
class Prepared:
    """A restore prepared up to its load: its databases and ledger made on the target, its tables left to the lanes
    (`creates`), its work units planned (not recorded)."""

    plan: RestorePlan
    storage: Storage
    manifest: LogicalManifest
    schema: dict
    run: Server  # the run account, as the lanes load
    admin: Server
    creates: Creates | None
    units: list[WorkUnit]

    def table(self, db: str, name: str) -> LogicalTable:
        return next(t for t in self.manifest.tables if (t.schema, t.name) == (db, name))

    def rows(self, db: str, name: str) -> int:
        return int(self.admin.query(f"SELECT COUNT(*) FROM {qualified(db, name)}")[0][0])

    def ledger(self) -> int:
        """The ledger rows of this backup."""
        return int(self.admin.query("SELECT COUNT(*) FROM `_lastline`.`ledger` WHERE backup_id = %s",
                                    (self.manifest.backup_id,))[0][0])


@contextlib.contextmanager
def prepared(dest: Path, **kw) -> Iterator[Prepared]:
    """A restore of `dest` run through create_schema (see Prepared); nothing of it stays after (see restoring)."""
    with restoring(dest, **kw) as plan:
        backup = open_backup(plan.backup)
        create_schema(plan, backup)
        manifest = backup.logical
        yield Prepared(plan, backup.storage, manifest, backup.schema, run_server(plan), target_server(plan),
                       table_creates(plan, manifest, backup.schema),
                       plan_units(manifest, selected(manifest, plan.databases), plan.parallel))
