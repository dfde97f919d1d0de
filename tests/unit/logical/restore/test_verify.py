"""logical.restore.verify: which tables are checked chunk by chunk as they load; and with the tiny backup (conftest)
restored into the suite's logical target: every table's rows and checksum equal the manifest's, the checks kept for
verify (per table, or the sums of the chunks' checks on the ledger), verify passing (again on a re-run) and dropping
what force set aside, and refusing, by name, a changed row, a missing object, a view where a table should be and a
setting that did not come back."""
from __future__ import annotations

import dataclasses
import re

import pytest

from lastline.core.errors import IntegrityError
from lastline.core.sql import META_DB
from lastline.logical.format import dialect
from lastline.logical.format.dialect import qualified, quote_ident
from lastline.logical.restore.backup_files import target_server
from lastline.logical.restore.finalize import objects
from lastline.logical.restore.plans import ConfigSnapshot
from lastline.logical.restore.target_state import aside_name, ensure_ledger
from lastline.logical.restore.verify import (
    chunk_checks,
    ensure_checks,
    forget_checks,
    keep_chunk_sums,
    record_check,
    recorded_checks,
    table_checksum,
    verify,
)
from lastline.manifest import ChunkInfo, LogicalManifest, LogicalTable

from .conftest import DB, EMPTY, MYISAM, PARENT, VIEW, fresh_target, root


def _table(engine: str = "InnoDB", chunks: list[tuple] = (), chunking: str = "primary key ranges") -> LogicalTable:
    return LogicalTable("d b", "t.`x", engine, None, None, True, chunking, ["id"], [], 0, "", 0, 0, 0.0,
                        chunks=[ChunkInfo(f"data/d/t/{i}", 1, 1, 1, "", lower, upper, checksum)
                                for i, (lower, upper, checksum) in enumerate(chunks)])


def _manifest(checksum: str = dialect.CHECKSUM) -> LogicalManifest:
    return LogicalManifest("b1", "src", "11.4", "", "+00:00", "tsv", "zstd", 1000, 2, [], "schema.json", "", "", "", 0.0,
                           0.0, 0, 0, 0, 0.0, checksum=checksum)


RANGES = [(None, ["10"], "1"), (["10"], ["20"], "2"), (["20"], None, "3")]


@pytest.mark.parametrize(("manifest", "table", "wheres"), [
    (_manifest(), _table(chunks=RANGES), 3),
    (_manifest(), _table(chunks=[(None, None, "1")]), [None]),
    (_manifest(), _table(), []),
    (_manifest(), _table("MyISAM", RANGES), None),
    (_manifest(), _table("Aria", [(None, None, "1")]), None),
    (_manifest(), _table(chunks=[*RANGES[:2], (["20"], None, None)]), None),
    (_manifest("crc32-of-the-dump"), _table(chunks=RANGES), None),
    (_manifest(), _table(chunks=RANGES, chunking="unique key ranges"), None),
], ids=["key-ranges", "one-chunk-the-whole-table", "no-chunk", "myisam-shares-no-transaction", "aria",
        "a-chunk-without-its-checksum", "a-backup-before-row-hashes", "not-primary-key-ranges"])
def test_chunk_checks(manifest, table, wheres):
    got = chunk_checks(manifest, table)
    if isinstance(wheres, int):
        assert len(got) == wheres and all(isinstance(w, str) and "`id`" in w for w in got)
    else:
        assert got == wheres


# --- on the logical target --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def restored(restore_plan, logical_target, tiny_backup):
    """The tiny backup restored by every step but verify: (plan, its config snapshot, the opened backup)."""
    from conftest import restore_steps

    backup = fresh_target(logical_target, tiny_backup)
    plan = restore_plan()
    return plan, restore_steps(plan, "unit verify"), backup


def _table_of(backup, name: str) -> LogicalTable:
    return next(t for t in backup.logical.tables if t.name == name)


def test_every_table_hashes_as_the_manifest_says(restored, logical_target):
    _plan, _snap, backup = restored
    with logical_target.server().session() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        for t in backup.logical.tables:
            assert table_checksum(cur, backup.logical, t) == (t.rows, t.checksum), t.name
        parent = _table_of(backup, PARENT)
        wheres = chunk_checks(backup.logical, parent)
        assert len(wheres) == len(parent.chunks) == 3
        for where, chunk in zip(wheres, parent.chunks):  # each chunk's own check, over its key range
            assert table_checksum(cur, backup.logical, parent, where) == (chunk.rows, chunk.checksum)


def test_checks_are_kept_per_table_or_summed_from_the_chunks_on_the_ledger(restored, logical_target):
    _plan, _snap, backup = restored
    manifest = dataclasses.replace(backup.logical, backup_id="unit-verify-checks")
    parent, myisam = _table_of(backup, PARENT), _table_of(backup, MYISAM)
    server = logical_target.server()
    try:
        with server.session() as cur:
            ensure_checks(cur)
            ensure_ledger(cur)
            assert record_check(cur, manifest, myisam) == (myisam.rows, myisam.checksum)
            assert recorded_checks(server, manifest.backup_id) == {(DB, MYISAM): (myisam.rows, myisam.checksum)}
            assert keep_chunk_sums(cur, manifest, [parent, myisam]) == set()  # no chunk of this backup checked yet
            cur.executemany(f"INSERT INTO {META_DB}.ledger (backup_id, file, rows_loaded, checksum_seen) VALUES (%s, %s, %s, %s)",
                            [(manifest.backup_id, c.file, c.rows, c.checksum) for c in parent.chunks[:2]])
            cur.connection.commit()
            assert keep_chunk_sums(cur, manifest, [parent]) == set()  # one chunk not checked: the table is checked whole
            c = parent.chunks[2]
            cur.execute(f"INSERT INTO {META_DB}.ledger (backup_id, file, rows_loaded, checksum_seen) VALUES (%s, %s, %s, %s)",
                        (manifest.backup_id, c.file, c.rows, c.checksum))
            cur.connection.commit()
            assert keep_chunk_sums(cur, manifest, [parent, myisam]) == {(DB, PARENT)}  # MyISAM: never by its chunks
            assert keep_chunk_sums(cur, manifest, []) == set()
            assert recorded_checks(server, manifest.backup_id)[(DB, PARENT)] == (parent.rows, parent.checksum)
            forget_checks(cur, manifest.backup_id)
            assert recorded_checks(server, manifest.backup_id) == {}
    finally:
        with server.session() as cur:
            cur.execute(f"DELETE FROM {META_DB}.ledger WHERE backup_id = %s", (manifest.backup_id,))
            forget_checks(cur, manifest.backup_id)
            cur.connection.commit()


def test_verify_passes_again_on_a_re_run_and_drops_what_force_set_aside(restored, logical_target):
    plan, snap, backup = restored
    with root(logical_target).session() as cur:  # the old tables a forced run kept
        cur.execute(f"CREATE DATABASE {quote_ident(aside_name(DB))}")
        cur.execute(f"CREATE TABLE {qualified(aside_name(DB), 'old t')} (id INT)")
    done = verify(plan, snap)
    assert (done.tables, done.rows, done.row_hashes) == (4, sum(t.rows for t in backup.logical.tables), True)
    assert done.objects == {"views": 1, "triggers": 1, "routines": 1, "events": 1, "sequences": 1}
    assert not logical_target.server().query("SHOW DATABASES LIKE %s", (aside_name(DB),))
    assert recorded_checks(logical_target.server(), backup.logical.backup_id) == {}  # the checks are forgotten
    again = verify(plan, None)  # no snapshot (a restore that took none): every checksum computed anew
    assert (again.tables, again.rows, again.objects) == (done.tables, done.rows, done.objects)


def _fails(plan, snap, *said: str) -> str:
    with pytest.raises(IntegrityError) as err:
        verify(plan, snap)
    message = str(err.value)
    assert message.startswith("verify failed:\n  ") and all(s in message for s in said), message
    assert message.endswith(f"are kept ({DB} in {aside_name(DB)}); a re-run that verifies drops them.")
    return message


def test_verify_names_a_changed_row(restored, logical_target):
    plan, snap, backup = restored
    parent = _table_of(backup, PARENT)
    server = logical_target.server()
    with server.session() as cur:
        cur.execute(f"UPDATE {qualified(DB, PARENT)} SET name = 'changed' WHERE id = 7")
        cur.connection.commit()
    try:
        message = _fails(plan, snap, f"{DB}.{PARENT}: {parent.rows} rows, checksum ")
        assert re.search(rf"; backup: {parent.rows} rows, checksum {parent.checksum}\n", message)
        assert message.count(f"\n  {DB}.") == 1  # the other tables are as the backup had them
    finally:
        with server.session() as cur:
            cur.execute(f"UPDATE {qualified(DB, PARENT)} SET name = 'n`7' WHERE id = 7")
            cur.connection.commit()
    verify(plan, snap)


def test_verify_names_a_missing_object_a_view_for_a_table_and_a_setting_not_back(restored, logical_target):
    plan, snap, backup = restored
    server = logical_target.server()
    server.query(f"DROP VIEW {qualified(DB, VIEW)}")
    server.query(f"RENAME TABLE {qualified(DB, EMPTY)} TO {qualified(DB, 'was empty t')}")
    server.query(f"CREATE VIEW {qualified(DB, EMPTY)} AS SELECT 1 AS id")
    (value,) = server.query("SELECT @@GLOBAL.max_connections")[0]
    before = ConfigSnapshot({**snap.variables, "max_connections": str(value + 1)}, False, snap.taken_at, snap.run_id)
    try:
        _fails(plan, before, f"view {DB}.{VIEW} is missing", f"{DB}.{EMPTY}: is view on the target, not a table",
               f"configuration: max_connections is '{value}', was '{value + 1}' before the restore")
    finally:
        server.query(f"DROP VIEW {qualified(DB, EMPTY)}")
        server.query(f"RENAME TABLE {qualified(DB, 'was empty t')} TO {qualified(DB, EMPTY)}")
        objects(target_server(plan), backup.schema, [DB], kinds=("views",))
    assert verify(plan, snap).tables == 4
