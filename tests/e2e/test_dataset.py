"""lastline's own dataset (tools/lastline_dev/dataset.py): the same seed gives the same data, a load holds every
object the other tests rely on, a load that stopped half way is found, and the demo fills a source an earlier
try left incomplete. Sakila, when $LASTLINE_SAKILA_DIR names it, is an optional extra round trip."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import _instance, restore_steps, set_conn
from lastline.core.option_files import option_file
from lastline.core.servers import Server
from lastline.core.sql import qualified
from lastline_dev import dataset
from lastline_dev.compare import compare, table_checksums
from lastline_dev.sandbox import Instance, bulk_rows


def test_the_same_seed_gives_the_same_sql_and_another_seed_other_data():
    fresh = dataset.generate.__wrapped__  # past the cache: generated anew each time
    a, b, other = fresh(dataset.DEFAULT_SEED), fresh(dataset.DEFAULT_SEED), fresh(dataset.DEFAULT_SEED + 1)
    assert a.sql == b.sql and a.rows == b.rows
    assert other.sql != a.sql
    # the shapes the other tests and the benchmarks rely on
    rows = a.rows
    assert rows["actor"] == 200 and rows["film"] == rows["film_text"] == 1000 and rows["language"] == 6
    assert 15_000 < rows["rental"] <= rows["payment"] < 17_000 and 4_000 < rows["inventory"] < 5_000
    assert rows[dataset.ODD_TABLE] > 0 and rows[dataset.MARKER] == 1
    assert "shared" not in a.sql and "sakila" not in a.sql.lower()  # written here, read from nowhere
    assert "WITH SYSTEM VERSIONING" not in a.sql and "WITH SYSTEM VERSIONING" in fresh(dataset.DEFAULT_SEED, True).sql


@pytest.fixture(scope="module")
def loaded(sandbox_root):
    """A sandbox holding the dataset, with its system-versioned database."""
    inst = _instance(sandbox_root, "dataset")
    inst.load_store(versioned=True)
    yield inst
    inst.destroy()


def _names(server, sql: str, *args) -> set[str]:
    return {r[0] for r in server.query(sql, args or None)}


@pytest.mark.e2e
def test_a_load_holds_every_kind_of_object_and_they_work(loaded):
    s = loaded.server()
    assert loaded.holds_store() is None
    kinds = dict(s.query("SELECT TABLE_TYPE, COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'store' GROUP BY 1"))
    assert kinds["BASE TABLE"] == len(dataset.generate().rows) - 1 and kinds["SEQUENCE"] == 1 and kinds["VIEW"] >= 7
    index = "SELECT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = 'store' AND TABLE_NAME = %s AND INDEX_TYPE = %s"
    assert _names(s, index, "address", "SPATIAL") == {"idx_location"}
    assert _names(s, index, "film_text", "FULLTEXT") == {"idx_title_description"}
    assert "idx_actor_last_name" in _names(s, index, "actor", "BTREE")
    assert s.query("SELECT COUNT(*) FROM store.film_text WHERE MATCH (title, description) AGAINST ('astronaut')")[0][0] > 0
    assert s.query("SELECT COUNT(*) FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = 'store'")[0][0] >= 20
    assert _names(s, "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'store'") >= {
        "ins_film", "upd_film", "del_film", "customer_create_date"}
    assert _names(s, "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'store'") >= {
        "inventory_in_stock", "get_customer_balance", "film_in_stock", "rewards_report"}
    assert _names(s, "SELECT EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA = 'store'") == {"purge_rental_log"}
    assert s.query("SELECT COUNT(DISTINCT PARTITION_NAME) FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = 'store' "
                   "AND TABLE_NAME = 'rental_log'")[0][0] == 3
    gen = "SELECT COLUMN_NAME, IS_GENERATED FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'store' AND TABLE_NAME = %s"
    assert dict(s.query(gen, ("customer_preference",)))["max_rate"] == "ALWAYS"
    assert s.query("SELECT COUNT(*) FROM store.customer_preference WHERE genre IS NULL OR JSON_VALID(prefs) = 0")[0][0] == 0
    assert s.query("SELECT MIN(LENGTH(image)) FROM store.film_poster")[0][0] > 1000
    assert s.query("SELECT COUNT(*) FROM store_history.rental_rate FOR SYSTEM_TIME ALL")[0][0] > \
        s.query("SELECT COUNT(*) FROM store_history.rental_rate")[0][0]  # it has history
    assert s.query(f"SELECT COUNT(*) FROM {qualified('store', dataset.ODD_TABLE)}")[0][0] == 64
    # the objects work: a trigger writes film_text, a view and a function answer
    conn = s.connect()
    conn.cursor().execute("INSERT INTO store.film (film_id, title, language_id) VALUES (30000, 'T', 1)")
    conn.commit()
    assert s.query("SELECT title FROM store.film_text WHERE film_id = 30000") == [("T",)]
    conn.cursor().execute("DELETE FROM store.film WHERE film_id = 30000")
    conn.commit()
    conn.close()
    assert s.query("SELECT COUNT(*) FROM store.film_text WHERE film_id = 30000") == [(0,)]
    assert s.query("SELECT COUNT(*) FROM store.actor_info")[0][0] == 200
    assert s.query("SELECT store.inventory_in_stock(1)")[0][0] in (0, 1)


@pytest.mark.e2e
def test_a_second_load_of_the_seed_gives_the_same_tables(loaded, sandbox_root):
    other = _instance(sandbox_root, "dataset2")
    try:
        other.load_store(versioned=True)
        assert table_checksums(other.server()) == table_checksums(loaded.server())
        assert compare(other.server(), loaded.server()) == []
    finally:
        other.destroy()


@pytest.mark.e2e
def test_a_load_that_stopped_half_way_or_lost_rows_is_found(sandbox_root):
    inst = _instance(sandbox_root, "dataset3")
    try:
        sql = dataset.generate().sql.encode()
        with option_file(inst.server()) as opt:  # the client killed half way through its input
            subprocess.run(["mariadb", f"--defaults-extra-file={opt}"], input=sql[: len(sql) // 2], capture_output=True)
        assert "no store.dataset_info" in inst.holds_store()
        inst.load_store()
        assert inst.holds_store() is None
        assert "seed" in inst.holds_store(seed=7)  # another seed's dataset is not this one
        conn = inst.server().connect()
        conn.cursor().execute("DELETE FROM store.payment WHERE payment_id > 16000")
        conn.commit()
        conn.close()
        assert "store.payment has 16000 rows" in inst.holds_store()
    finally:
        inst.destroy()


@pytest.mark.e2e
def test_the_demo_fills_a_source_an_earlier_try_left_empty_or_half_loaded(sandbox_root, monkeypatch):
    """The issue's case: a try that died after creating the source left it without data, and the next "passed" a
    round trip of nothing. The demo now loads what the source lacks, and makes anew a sandbox that does not answer."""
    from lastline_dev import demo

    inst = _instance(sandbox_root, "demosource")
    try:
        demo._fill_source(inst, 1)
        assert inst.holds_store(demo.SEED) is None and inst.holds_tables("bulk", bulk_rows(1)) is None
        inst.server().query("DROP TABLE store.dataset_info")  # as a load killed before its end leaves it
        inst.server().query("DROP TABLE bulk.t3")
        demo._fill_source(inst, 1)
        assert inst.holds_store(demo.SEED) is None and inst.holds_tables("bulk", bulk_rows(1)) is None
        # a sandbox whose creation was killed before its account existed does not let lastline in: made anew
        broken = _instance(sandbox_root, "demobroken")
        Server(conn_id="root", socket=str(broken.sock), user="root").query("DROP USER 'lastline'@'127.0.0.1'")
        # and one killed before it was whole (no instance.json): its leftovers are removed first
        half = Instance(sandbox_root, "demohalf")
        (half.datadir / "junk").mkdir(parents=True)
        monkeypatch.setattr(demo, "servers", lambda: {"source": inst, "target": broken, "staging": half})
        monkeypatch.setenv("LASTLINE_DEMO_BULK_MB", "1")
        found = demo.start_servers()
        assert found["target"].server().query("SELECT 1") == [(1,)] == found["staging"].server().query("SELECT 1")
    finally:
        for made in (inst, Instance(sandbox_root, "demobroken"), Instance(sandbox_root, "demohalf")):
            made.destroy()


@pytest.mark.e2e
@pytest.mark.skipif(not os.environ.get("LASTLINE_SAKILA_DIR"), reason="optional: set LASTLINE_SAKILA_DIR to a Sakila folder")
def test_sakila_round_trips_when_present(sandbox_root, logical_target, tmp_path):
    from lastline.logical.backup import stages as logical_backup
    from lastline.logical.restore import stages as logical_restore

    inst = _instance(sandbox_root, "sakila")
    try:
        inst.load_sakila()
        set_conn("t_sakila", inst)
        logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_sakila", "destination": f"file://{tmp_path}", "databases": ["sakila"]}))
        plan = logical_restore.preflight({"target_conn_id": "t_ltarget", "backup": f"file://{tmp_path}/latest", "databases": ["sakila"],
                             "force": True, "redo_log_bytes": 128 << 20})
        assert logical_restore.verify(plan, restore_steps(plan))
        ours = {k: v for k, v in table_checksums(inst.server()).items() if k.startswith("sakila.")}
        theirs = {k: v for k, v in table_checksums(logical_target.server()).items() if k.startswith("sakila.")}
        assert ours == theirs and len(ours) == 16
    finally:
        inst.destroy()


def _code_files(root: Path, folders: tuple[str, ...]) -> list[Path]:
    """The project's own files in `folders` (in a git checkout: tracked or new, never what git ignores, such as a
    benchmark's results; elsewhere every file)."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--", *folders], cwd=root,
                            capture_output=True, text=True)
    if listed.returncode == 0:
        return [root / line for line in listed.stdout.splitlines() if (root / line).is_file()]
    return [p for d in folders for p in (root / d).rglob("*") if p.is_file()]


def test_nothing_reads_a_folder_beside_the_repository():
    root = Path(__file__).resolve().parents[2]
    code = [p for p in _code_files(root, ("include", "dags", "plugins", "tools", "tests", "bench", "scripts", "bin", ".ci"))
            if p.suffix in ("", ".py", ".sh")]
    assert any(p.name == "conftest.py" for p in code)  # the listing found the code
    for path in [*code, root / "Makefile"]:
        text = path.read_text()
        assert "shared" + "/datasets" not in text and "../" + "shared" not in text, path
