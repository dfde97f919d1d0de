"""The grants page (docs/grants.md) is true: its `sql` blocks, run as they stand on real servers, make accounts that
take a logical and a physical backup, restore the logical one exactly, ship the binary logs and pass the rebuild's
replication-user check. A grant removed from the page that lastline needs fails here."""
from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

import pytest

from conftest import ROOT, restore_steps
from lastline import connections
from lastline.core.accounts import revoke_older_owners
from lastline.core.errors import ConfigError
from lastline.logical.backup import stages as logical_backup
from lastline.logical.restore import stages as logical_restore
from lastline.physical import backup as physical_backup
from lastline.pitr import archive
from lastline.replication import rebuild as replica_rebuild
from lastline.storage import open_storage

pytestmark = pytest.mark.e2e

PAGE = ROOT / "docs" / "grants.md"
ACCOUNT = re.compile(r"'(lastline_[a-z]+)'@'[^']*'")


def documented() -> dict[str, list[str]]:
    """The statements of each ```sql block of the page, by the account they name (the optional grants are in
    ```text blocks: not read)."""
    blocks = re.findall(r"^```sql\n(.*?)^```", PAGE.read_text(), re.S | re.M)
    out: dict[str, list[str]] = {}
    for block in blocks:
        text = "\n".join(line for line in block.splitlines() if not line.lstrip().startswith("--"))
        for statement in (s.strip() for s in text.split(";")):
            if statement:
                user = ACCOUNT.search(statement)
                assert user, f"a statement of {PAGE.name} names no lastline account: {statement}"
                out.setdefault(user[1], []).append(" ".join(statement.split()))
    return out


def create(server, user: str, statements: list[str]) -> str:
    """The account made with exactly the page's statements (host 127.0.0.1, a fresh password); its password."""
    password = secrets.token_urlsafe(18)
    with server.session(autocommit=True) as cur:
        cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")
        for statement in statements:
            sql = ACCOUNT.sub(f"'{user}'@'127.0.0.1'", statement).replace("'change-me'", "%s")
            cur.execute(sql, (password,) if "%s" in sql else None)
    return password


def as_account(conn_id: str, base: str, user: str, password: str) -> None:
    """The Airflow connection `conn_id`: the connection `base` logging in as `user`."""
    conn = json.loads(os.environ[f"AIRFLOW_CONN_{base.upper()}"])
    conn.update(login=user, password=password)
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(conn)


def test_the_page_names_each_account_once_with_its_grants():
    found = documented()
    assert set(found) == {"lastline_backup", "lastline_restore", "lastline_archive", "lastline_repl"}
    for user, statements in found.items():
        assert statements[0].startswith("CREATE USER") and any(s.startswith("GRANT ") for s in statements), user


def test_the_documented_accounts_back_up_restore_archive_and_replicate(logical_source, logical_target, tmp_path):
    found = documented()
    src, dst = logical_source.server(), logical_target.server()
    as_account("t_gbackup", "t_lsource", "lastline_backup", create(src, "lastline_backup", found["lastline_backup"]))
    as_account("t_garchive", "t_lsource", "lastline_archive", create(src, "lastline_archive", found["lastline_archive"]))
    as_account("t_grepl", "t_lsource", "lastline_repl", create(src, "lastline_repl", found["lastline_repl"]))
    as_account("t_grestore", "t_ltarget", "lastline_restore", create(dst, "lastline_restore", found["lastline_restore"]))
    try:
        # logical backup: the snapshot, the objects, the coordinates
        dest = tmp_path / "logical"
        plan = logical_backup.preflight({"source_conn_id": "t_gbackup", "destination": f"file://{dest}", "databases": ["store", "edge"]})
        logical_backup.dump(plan)
        # every trigger and event: information_schema lists only those the account may see (TRIGGER, EVENT)
        (schema,) = dest.glob("*/schema.json")
        carried = json.loads(schema.read_text())
        for kind, table in (("triggers", "TRIGGERS"), ("events", "EVENTS")):
            held = src.query(f"SELECT COUNT(*) FROM information_schema.{table} WHERE {kind[:-1].upper()}_SCHEMA IN ('store', 'edge')")[0][0]
            assert held and len(carried[kind]) == held, (kind, len(carried[kind]), held)
        # an objects owner an account with more privileges made (other restores of this suite's target): the documented
        # account may not revoke it (this one or one an earlier test left, on either database: whichever the server lists first), and says what an
        # administrator runs; a deployment restoring with one account has none
        dst.query("CREATE USER IF NOT EXISTS 'lastline_obj_feedfacefeedface'@'127.0.0.1' ACCOUNT LOCK")
        dst.query("GRANT ALL PRIVILEGES ON `store`.* TO 'lastline_obj_feedfacefeedface'@'127.0.0.1'")
        probe = logical_restore.preflight({"target_conn_id": "t_grestore", "backup": f"file://{dest}/latest", "databases": ["store", "edge"],
                              "force": True, "tune": False, "parallel": 2, "redo_log_bytes": 128 << 20})
        with pytest.raises(ConfigError, match=r"may not revoke what the objects owner of an earlier restore, lastline_obj_[0-9a-f]{16}"
                                              r"@127.0.0.1, holds on (store|edge) .*As an administrator, run `REVOKE ALL "
                                              r"PRIVILEGES ON `(store|edge)`"):
            revoke_older_owners(connections.server("t_grestore"), probe.databases)
        for user, host in dst.query("SELECT User, Host FROM mysql.db WHERE User LIKE 'lastline\\_obj\\_%%' AND Db IN ('store', 'edge')"):
            dst.query(f"DROP USER IF EXISTS '{user}'@'{host}'")  # what an administrator does, as the message says
        # logical restore into a target that holds them already (force), tuned: the run account and the objects owner
        restore = logical_restore.preflight({"target_conn_id": "t_grestore", "backup": f"file://{dest}/latest", "databases": ["store", "edge"],
                                "force": True, "tune": True, "parallel": 2, "redo_log_bytes": 128 << 20})
        assert logical_restore.verify(restore, restore_steps(restore))
        for table in ("store.rental", "store.payment", "store.customer"):
            assert dst.query(f"CHECKSUM TABLE {table}") == src.query(f"CHECKSUM TABLE {table}"), table
        # physical backup: mariabackup's own privilege check and its locks
        physical = physical_backup.preflight({"source_conn_id": "t_gbackup", "destination": f"file://{tmp_path / 'physical'}"})
        physical_backup.finish(physical, physical_backup.stream(physical))
        # the binlog archive: its listing of the source's binlogs and running statements
        shipped = archive.ship(connections.server("t_garchive"), open_storage(f"file://{tmp_path / 'archive'}"))
        assert shipped["bytes"] > 0
        # the rebuild's check of the replication user
        replica_rebuild.check_replication_user(connections.server("t_grepl"))
    finally:
        for server, users in ((src, ("lastline_backup", "lastline_archive", "lastline_repl")), (dst, ("lastline_restore",))):
            for user in users:  # other tests back up the source's accounts
                server.query(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")


def test_the_page_s_sql_blocks_are_all_read():
    """Every ```sql block names an account: none is silently skipped by the parser above."""
    text = Path(PAGE).read_text()
    assert text.count("```sql") == 4


def test_the_optional_grants_are_statements_the_server_takes(logical_target):
    """The GRANTs of the ```text blocks (what only some runs need) name privileges and objects the server knows."""
    blocks = re.findall(r"^```text\n(.*?)^```", PAGE.read_text(), re.S | re.M)
    grants = [" ".join(line.split()) for block in blocks for line in block.splitlines() if line.startswith("GRANT ")]
    assert len(grants) >= 5, grants
    server = logical_target.server()
    with server.session(autocommit=True) as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS _lastline")
        cur.execute("CREATE OR REPLACE USER 'lastline_grants_probe'@'127.0.0.1' ACCOUNT LOCK")
        try:
            for grant in grants:
                cur.execute(ACCOUNT.sub("'lastline_grants_probe'@'127.0.0.1'", grant.rstrip(";")))
        finally:
            cur.execute("DROP USER 'lastline_grants_probe'@'127.0.0.1'")
