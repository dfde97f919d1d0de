"""What backup_verify's tests read back (the unit tests' conftest and the DAG's end-to-end test take it once each): one
destination holding a real physical backup of the suite's source, a real logical backup of a database of it whose
names carry a backtick, a dot and a space, and the binlog archive shipped from the source after both (its real
binlogs, as binlog_archive ships them). Each test reads a copy it may damage."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from lastline.core.servers import Server
from lastline.core.sql import qualified, quote_ident
from lastline.logical.backup import stages as logical_backup
from lastline.manifest import complete_backups, read_manifest
from lastline.physical import backup as physical_backup
from lastline.pitr import archive
from lastline.storage import open_storage

DB, TABLE = "ll_verify`d b.x", "t.1 `x` y"


@dataclass(frozen=True)
class Made:
    """The destination's folder, and its physical and logical backup ids."""

    folder: Path
    physical: str
    logical: str

    def copy(self, to: Path) -> Path:
        """A copy of the whole destination at `to` (a test damages its own)."""
        shutil.copytree(self.folder, to)
        return to


def _root(inst) -> Server:
    return Server(conn_id="root", socket=str(inst.sock), user="root")


def take(source, dest: Path) -> Made:
    """The destination `dest` made from `source` (the suite's `source` sandbox, as t_source)."""
    with _root(source).session() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(DB)}")
        cur.execute(f"CREATE DATABASE {quote_ident(DB)}")
        cur.execute(f"CREATE TABLE {qualified(DB, TABLE)} (id INT PRIMARY KEY, v VARCHAR(200))")
        cur.execute(f"INSERT INTO {qualified(DB, TABLE)} SELECT seq, CONCAT('v\\t`', seq, REPEAT('y', 100)) "
                    f"FROM {quote_ident(DB)}.seq_1_to_3500")
        cur.connection.commit()
    try:
        plan = physical_backup.preflight({"source_conn_id": "t_source", "destination": f"file://{dest}",
                                          "compression": "zstd"})
        physical_backup.finish(plan, physical_backup.stream(plan))
        logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_source", "destination": f"file://{dest}",
                                                      "databases": [DB], "chunk_rows": 1000}))
        with _root(source).session() as cur:
            cur.execute(f"INSERT INTO {qualified(DB, TABLE)} VALUES (4000, 'after the backups')")
            cur.connection.commit()
        archive.ship(source.server(), open_storage(f"file://{dest}"))
    finally:
        with _root(source).session() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(DB)}")
    storage = open_storage(f"file://{dest}")
    ids = {kind: complete_backups(storage, kind) for kind in ("physical", "logical")}
    assert read_manifest(storage, ids["logical"][0], "logical").authenticity.ok  # signed with the tests' key
    return Made(dest, ids["physical"][0], ids["logical"][0])
