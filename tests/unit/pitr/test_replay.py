"""pitr.replay: a span of real binlogs (written on logical_source, archived in a local destination) replayed into the
shared logical_target, by the target's own applier and by `mariadb-binlog | mariadb`, compared with the source; a
stop at a GTID; a run that resumes from what the target committed, a finished run that returns its result again;
a logical base's replay reaching its databases only; the refusals, each before anything is applied (replication
configured, a pipe that died part way, a target that restarted, a logical base through the pipe, parallel where the
target would convert values, a database whose name holds a backtick); the teardown (the pipe's narrower account: test_pipe)."""
from __future__ import annotations

import json
import os

import pytest

from lastline.core.errors import Refusal
from lastline.core.sql import META_DB
from lastline.pitr import applier, pipe, replay
from lastline.pitr.events import gtid_map, includes
from lastline.pitr.plans import Cleaned, Replayed, ReplayPlan
from lastline.pitr.span import Span, resolve
from lastline.pitr.window import Until

from . import history as hist

QDB = "`unit replay.db`"  # a space and a dot
QOTHER = "`unit replay other`"
BIG = 17 << 20  # one value past the default 16 MiB max_allowed_packet
ROWS = f"SELECT id, LENGTH(v), MD5(v) FROM {QDB}.`t 1` ORDER BY id"


def _write(conn, big_file: str) -> None:
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE {QDB}")  # 0
    cur.execute(f"CREATE TABLE {QDB}.`t 1` (id INT PRIMARY KEY, v LONGBLOB) ENGINE=InnoDB")  # 1
    cur.execute(f"INSERT INTO {QDB}.`t 1` VALUES (1, 'row 1')")  # 2
    cur.execute(f"INSERT INTO {QDB}.`t 1` VALUES (2, 'row 2')")  # 3
    cur.execute(f"CREATE DATABASE {QOTHER}")  # 4: a statement on another database
    conn.autocommit(False)  # 5: one transaction of three statements
    cur.execute(f"UPDATE {QDB}.`t 1` SET v = 'changed' WHERE id = 1")
    cur.execute(f"INSERT INTO {QDB}.`t 1` VALUES (3, 'row 3')")
    cur.execute(f"DELETE FROM {QDB}.`t 1` WHERE id = 2")
    conn.commit()
    conn.autocommit(True)
    cur.execute(f"LOAD DATA LOCAL INFILE '{big_file}' INTO TABLE {QDB}.`t 1` CHARACTER SET binary "  # 6
                "FIELDS TERMINATED BY '\\t' ESCAPED BY '' LINES TERMINATED BY '\\n'")
    cur.execute(f"DROP DATABASE {QOTHER}")  # 7


@pytest.fixture(scope="module")
def history(logical_source, tmp_path_factory):
    """The history above, as written on logical_source (its rows as they ended and as they were after transaction 3),
    archived in a local destination."""
    folder = tmp_path_factory.mktemp("replay-history")
    big = folder / "big.tsv"
    big.write_bytes(b"4\t" + b"x" * BIG + b"\n")
    made = hist.written(logical_source, lambda conn: _write(conn, str(big)))
    big.unlink()
    server = logical_source.server()
    final = server.query(ROWS)
    server.query(f"DROP DATABASE {QDB}")
    assert len(made.transactions) == 8 and final[-1][1] == BIG
    root = str(folder / "archive")
    store, line = hist.archived(root, made)
    return {"made": made, "store": store, "line": line, "root": root, "final": final}


@pytest.fixture
def tgt(logical_target):
    """The shared target as the other tests expect it after each test: no test database, no replication connection,
    its GTID position, replay ledger and globals as they were."""
    server = logical_target.server()
    with server.session(autocommit=True) as cur:
        cur.execute("SELECT @@GLOBAL.gtid_slave_pos, @@GLOBAL.slave_type_conversions")
        slave_pos, conversions = cur.fetchone()
        cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (META_DB,))
        had_meta = bool(cur.fetchone()[0])
        settings = applier.settings(cur)
    try:
        yield server
    finally:
        with server.session(autocommit=True) as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            applier.put_back(cur, settings)
            cur.execute("SHOW ALL SLAVES STATUS")
            for (name,) in [r[:1] for r in cur.fetchall()]:
                cur.execute(f"RESET SLAVE '{name}' ALL")
            cur.execute(f"DROP DATABASE IF EXISTS {QDB}")
            cur.execute(f"DROP DATABASE IF EXISTS {QOTHER}")
            if had_meta:
                cur.execute(f"DELETE FROM {replay.LEDGER} WHERE run_id LIKE 'unit-replay-%'")
            else:
                cur.execute(f"DROP DATABASE IF EXISTS `{META_DB}`")
            cur.execute("SET GLOBAL slave_type_conversions = %s", (conversions,))
            cur.execute("SET GLOBAL gtid_slave_pos = %s", (slave_pos,))


def _relay_files(server) -> list[str]:
    """The replay's relay logs and index left in the target's datadir."""
    datadir = server.query("SELECT @@GLOBAL.datadir")[0][0]
    return sorted(n for n in os.listdir(datadir) if applier.CONNECTION in n)


def _has_db(server) -> bool:
    return bool(server.query("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'unit replay.db'")[0][0])


@pytest.mark.parametrize(("state", "text"), [
    pytest.param({}, "", id="empty"),
    pytest.param({0: 5}, "0-0-5", id="one-domain"),
    pytest.param({2: 1, 0: 17}, "0-0-17,2-0-1", id="domains-in-order"),
])
def test_gtid_text(state, text):
    assert replay._gtid_text(state) == text
    assert gtid_map(text) == state


@pytest.mark.parametrize("method", ["parallel", pytest.param("pipe", marks=pytest.mark.xfail(strict=True, raises=Refusal, reason=(
    "the pipe cannot replay a row past the target's max_allowed_packet: mariadb-binlog prints the 17 MiB row event as "
    "one BINLOG statement (base64, ~23 MB) and the target (default 16 MiB) drops the session, `ERROR 2006 Server has "
    "gone away`; the parallel method applies it (slave_max_allowed_packet)"))), "auto"])
def test_apply_replays_the_span_exactly_and_once(tgt, history, method):
    made = history["made"]
    span = hist.span(history["store"], history["line"], made)
    run_id = f"unit-replay-{method}"
    result = replay.apply(tgt, history["store"], span, run_id, method)
    assert tgt.query(ROWS) == history["final"]  # the 17 MiB value too
    assert not tgt.query(f"SHOW DATABASES LIKE {QOTHER.strip('`')!r}")  # made and dropped again, as on the source
    last = made.transactions[-1]
    assert result["method"] == ("parallel" if method == "auto" else method)
    assert (result["transactions"], result["last_gtid"], result["last_time"], result["resumed"]) == (8, last.gtid, last.time, False)
    assert includes(result["gtid_position"], last.gtid) and result["until"] == "latest"
    assert result["bytes"] > BIG and result["prepared_xa"] == [] and result["left_out_count"] == 0
    assert tgt.query("SHOW ALL SLAVES STATUS") == [] and _relay_files(tgt) == []
    assert replay.apply(tgt, history["store"], span, run_id, method) == result  # done: returned again, nothing applied
    assert tgt.query(f"SELECT method, state FROM {replay.LEDGER} WHERE run_id = %s", (run_id,)) == [(result["method"], "done")]
    assert not tgt.query("SELECT User FROM mysql.global_priv WHERE User = %s", (pipe.REPLAY_USER,))  # the pipe's, dropped


@pytest.mark.parametrize("method", ["parallel", "pipe"])
def test_apply_stops_at_a_gtid(tgt, history, method):
    made = history["made"]
    stop = made.transactions[3]
    span = hist.span(history["store"], history["line"], made, stop.gtid)
    result = replay.apply(tgt, history["store"], span, f"unit-replay-to-a-gtid-{method}", method)
    assert result["method"] == method
    assert tgt.query(f"SELECT id, v FROM {QDB}.`t 1` ORDER BY id") == [(1, b"row 1"), (2, b"row 2")]
    assert (result["transactions"], result["last_gtid"]) == (4, stop.gtid)
    assert result["not_applied"].startswith(f"from GTID {made.transactions[4].gtid}")
    assert gtid_map(result["gtid_position"]) == gtid_map(stop.gtid)


def _ledger_row(server, run_id: str, method: str, booted: int | None = None, leave_out: str = "") -> None:
    """What an attempt that died part way leaves: its ledger row, still applying (`leave_out`: a setting its lastline
    did not record)."""
    with server.session(autocommit=True) as cur:
        replay._ledger(cur)
        settings = {k: v for k, v in applier.settings(cur).items() if k != leave_out}
        cur.execute(f"INSERT INTO {replay.LEDGER} (run_id, method, base_gtid, state, settings, booted) VALUES "
                    "(%s, %s, '', 'applying', %s, %s)", (run_id, method, json.dumps(settings),
                                                        applier.booted(cur) if booted is None else booted))


def test_a_run_that_died_part_way_resumes_from_what_the_target_committed(tgt, history):
    made, store = history["made"], history["store"]
    replay.apply(tgt, store, hist.span(store, history["line"], made, made.transactions[3].gtid), "unit-replay-first", "parallel")
    before = tgt.query("SELECT @@GLOBAL.innodb_flush_log_at_trx_commit")[0][0]
    # the same target, committed up to transaction 3, by a lastline that recorded no flush setting (it changed none)
    _ledger_row(tgt, "unit-replay-resumed", "parallel", leave_out="innodb_flush_log_at_trx_commit")
    result = replay.apply(tgt, store, hist.span(store, history["line"], made), "unit-replay-resumed", "auto")
    assert result["resumed"] is True and result["method"] == "parallel"
    assert result["transactions"] == 4  # 4..7: none of 0..3 again
    assert tgt.query(ROWS) == history["final"]
    assert tgt.query("SELECT @@GLOBAL.innodb_flush_log_at_trx_commit")[0][0] == before  # put back all the same
    recorded = json.loads(tgt.query(f"SELECT settings FROM {replay.LEDGER} WHERE run_id='unit-replay-resumed'")[0][0])
    assert recorded["innodb_flush_log_at_trx_commit"] == before  # and recorded for the teardown


@pytest.mark.parametrize(("setup", "kwargs", "refused"), [
    pytest.param("replication", {}, r"has replication configured \(unit_other\): .* Detach it first", id="replication-configured"),
    pytest.param("pipe-died", {}, "an earlier attempt of this run replayed through mariadb-binlog | mariadb and did not finish",
                 id="a-pipe-that-died"),
    pytest.param("restarted", {}, "the target restarted during this run's replay", id="a-target-that-restarted"),
    pytest.param("logical", {"method": "pipe", "databases": ["unit replay.db"]},
                 "a logical base is rolled forward by the target's own applier only .* here it cannot: asked for",
                 id="a-logical-base-through-the-pipe"),
    pytest.param("conversions", {"method": "parallel"}, "replay method parallel: slave_type_conversions=ALL_LOSSY would convert",
                 id="parallel-where-it-would-convert"),
])
def test_apply_refuses_before_anything_is_applied(tgt, history, setup, kwargs, refused):
    made = history["made"]
    run_id = f"unit-replay-refused-{setup}"
    if setup == "replication":
        tgt.query("CHANGE MASTER 'unit_other' TO MASTER_HOST='replica-source.invalid', MASTER_PORT=9, MASTER_USER='none'")
    elif setup == "pipe-died":
        _ledger_row(tgt, run_id, "pipe")
    elif setup == "restarted":
        _ledger_row(tgt, run_id, "parallel", booted=12345)
    elif setup == "conversions":
        tgt.query("SET GLOBAL slave_type_conversions = 'ALL_LOSSY'")
    if setup == "logical":  # a logical base holds its databases
        tgt.query(f"CREATE DATABASE {QDB}")
    span = _after_ddl(history) if setup == "logical" else hist.span(history["store"], history["line"], made)
    with pytest.raises(Refusal, match=refused):
        replay.apply(tgt, history["store"], span, run_id, **kwargs)
    assert _has_db(tgt) == bool(kwargs.get("databases")) and _relay_files(tgt) == []
    ledger = tgt.query(f"SELECT state FROM {replay.LEDGER} WHERE run_id = %s", (run_id,))
    assert ledger == ([("applying",)] if setup in ("pipe-died", "restarted") else [])


def test_a_database_name_with_a_backtick_is_refused_before_anything_is_applied(tgt, logical_source, tmp_path):
    def write(conn):
        conn.cursor().execute("CREATE DATABASE `unit re``play`")
        conn.cursor().execute("DROP DATABASE `unit re``play`")

    made = hist.written(logical_source, write)
    store, line = hist.archived(str(tmp_path), made)
    with pytest.raises(Refusal, match=r"transaction .*: 'CREATE DATABASE `unit re``play`' reaches beyond data: its default "
                                      r"database is 'unit re`play'\. .* Nothing was applied"):
        replay.apply(tgt, store, hist.span(store, line, made), "unit-replay-backtick", "auto")
    assert not tgt.query("SHOW DATABASES LIKE 'unit re`play'") and _relay_files(tgt) == []


def _after_ddl(history) -> Span:
    """The span of a base that holds the database and its table (transactions 0 and 1), as a logical restore makes them."""
    ddl = history["made"].transactions[1]
    return resolve(history["store"], history["line"], history["made"].name, ddl.end, ddl.gtid, Until.parse("latest"))


def test_a_logical_bases_replay_reaches_its_databases_only(tgt, history):
    made, store = history["made"], history["store"]
    with tgt.session(autocommit=True) as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"CREATE DATABASE {QDB}")
        cur.execute(f"CREATE TABLE {QDB}.`t 1` (id INT PRIMARY KEY, v LONGBLOB) ENGINE=InnoDB")
    span = _after_ddl(history)
    result = replay.apply(tgt, store, span, "unit-replay-logical", "auto", databases=["unit replay.db"])
    assert tgt.query(ROWS) == history["final"]
    assert result["method"] == "parallel" and result["transactions"] == 6
    assert result["left_out_count"] == 2 and [s["gtid"] for s in result["left_out"]] == [
        made.transactions[4].gtid, made.transactions[7].gtid]  # the other database's statements never ran
    assert not tgt.query(f"SHOW DATABASES LIKE {QOTHER.strip('`')!r}")


def test_run_is_the_dags_task_and_cleanup_its_teardown(tgt, history):
    made = history["made"]
    span = hist.span(history["store"], history["line"], made)
    plan = ReplayPlan(target_conn_id="t_ltarget", destination=f"file://{history['root']}", span=span.to_dict(),
                      method="parallel", threads=2)
    assert replay.cleanup(plan, "unit-replay-never-ran") == Cleaned(False)
    got = replay.run(plan, "unit-replay-task")
    assert isinstance(got, Replayed) and (got.method, got.transactions, got.last_gtid) == ("parallel", 8, made.transactions[-1].gtid)
    assert tgt.query(ROWS) == history["final"]
    # a worker killed mid-replay leaves the connection and the globals it changed: the teardown puts them back
    with tgt.session(autocommit=True) as cur:
        before = applier.settings(cur)
        cur.execute(f"CHANGE MASTER '{applier.CONNECTION}' TO MASTER_HOST='lastline-replay.invalid', MASTER_PORT=9, MASTER_USER='none'")
        cur.execute("SET GLOBAL slave_parallel_threads = 9")
    assert replay.cleanup(plan, "unit-replay-task") == Cleaned(True)
    with tgt.session(autocommit=True) as cur:
        assert applier.settings(cur) == before
    assert tgt.query("SHOW ALL SLAVES STATUS") == []


XA_IDS = [  # as written in XA START, and as the server prints it for XA COMMIT/ROLLBACK (X'..' where not printable)
    ("'zoo-xa-1'", "'zoo-xa-1'"),
    ("'a b','c',7", "'a b','c',7"),
    ("'x','y',1", "'x','y'"),
    ("X'00ff','',1", "X'00ff'"),
    ("'it''s'", "X'69742773'"),
    ("'q\\\\z'", "X'715c7a'"),
    ("X'0a',X'0b',3", "X'0a',X'0b',3"),
    ("'é'", "X'c3a9'"),
]


def test_prepared_xa_names_each_transaction_as_xa_commit_takes_it(tgt):
    """A prepared XA transaction left at the stop point is named by the id an operator pastes into XA COMMIT or
    XA ROLLBACK (never a Python bytes repr): each form printed ends its transaction on the server."""
    with tgt.session(autocommit=True) as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"CREATE DATABASE {QDB}")
        cur.execute(f"CREATE TABLE {QDB}.`t 1` (id INT PRIMARY KEY) ENGINE=InnoDB")
    for i, (xid, _) in enumerate(XA_IDS):
        conn = tgt.connect()
        try:
            cur = conn.cursor()
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"XA START {xid}")
            cur.execute(f"INSERT INTO {QDB}.`t 1` VALUES ({i})")
            cur.execute(f"XA END {xid}")
            cur.execute(f"XA PREPARE {xid}")
        finally:
            conn.close()  # the transaction stays prepared, as a replay leaves one
    with tgt.session(autocommit=True) as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        shown = replay.prepared_xa(cur)
        try:
            assert sorted(shown) == sorted(printed for _, printed in XA_IDS)
            assert not any(x.startswith("b'") for x in shown)
        finally:
            for xid in shown:
                cur.execute(f"XA ROLLBACK {xid}")  # pasted as shown
        assert replay.prepared_xa(cur) == []
        assert tgt.query(f"SELECT COUNT(*) FROM {QDB}.`t 1`")[0][0] == 0


SDB = "`unit savepoint.db`"  # a space and a dot


def _nested(conn) -> None:
    """An ORM's nested transactions on InnoDB, and one whose ROLLBACK TO the server logs (a MyISAM table changed after
    the savepoint: the InnoDB rows it undoes stay in the binlog before it)."""
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE {SDB}")  # 0
    cur.execute(f"CREATE TABLE {SDB}.`t` (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB")  # 1
    cur.execute(f"CREATE TABLE {SDB}.`m` (id INT) ENGINE=MyISAM")  # 2
    conn.autocommit(False)
    for sql in ("SAVEPOINT sa_savepoint_1", f"INSERT INTO {SDB}.t VALUES (1, 'rolled back')",
                "ROLLBACK TO SAVEPOINT sa_savepoint_1", f"INSERT INTO {SDB}.t VALUES (2, 'kept')", "SAVEPOINT `sp 2`",
                f"INSERT INTO {SDB}.t VALUES (3, 'released')", "RELEASE SAVEPOINT `sp 2`", "COMMIT",
                f"INSERT INTO {SDB}.t VALUES (4, 'outer')", "SAVEPOINT a", f"INSERT INTO {SDB}.t VALUES (5, 'inner')",
                "SAVEPOINT b", f"UPDATE {SDB}.t SET v = 'undone' WHERE id = 4", "ROLLBACK TO SAVEPOINT b", "COMMIT",
                f"INSERT INTO {SDB}.t VALUES (6, 'before')", "SAVEPOINT c", f"INSERT INTO {SDB}.m VALUES (1)",
                f"INSERT INTO {SDB}.t VALUES (7, 'undone, logged')", "ROLLBACK TO SAVEPOINT c",
                f"INSERT INTO {SDB}.t VALUES (8, 'after')", "COMMIT"):
        cur.execute(sql)
    conn.autocommit(True)


def test_a_logical_bases_replay_passes_savepoints_and_equals_the_source(tgt, logical_source, tmp_path):
    """Savepoints inside row transactions (an ORM's nested transactions) roll a logical base forward exactly: the
    rows a ROLLBACK TO undid are not applied, whether the server left them out of the binlog or logged them with the
    ROLLBACK TO after them."""
    made = hist.written(logical_source, _nested)
    src = logical_source.server()
    try:
        expected = {t: src.query(f"SELECT * FROM {SDB}.{t} ORDER BY 1") for t in ("t", "m")}
    finally:
        src.query(f"DROP DATABASE {SDB}")
    assert list(expected["t"]) == [(2, "kept"), (3, "released"), (4, "outer"), (5, "inner"), (6, "before"), (8, "after")]
    assert b"ROLLBACK TO `c`" in made.data and b"undone, logged" in made.data  # the case the applier must undo
    store, line = hist.archived(str(tmp_path / "archive"), made)
    ddl = made.transactions[2]
    span = resolve(store, line, made.name, ddl.end, ddl.gtid, Until.parse("latest"))
    try:
        with tgt.session(autocommit=True) as cur:  # the base: the database and its tables, as a logical restore makes
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"CREATE DATABASE {SDB}")
            cur.execute(f"CREATE TABLE {SDB}.`t` (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB")
            cur.execute(f"CREATE TABLE {SDB}.`m` (id INT) ENGINE=MyISAM")
        result = replay.apply(tgt, store, span, "unit-replay-savepoints", "auto", databases=["unit savepoint.db"])
        assert result["method"] == "parallel" and result["transactions"] == len(made.transactions) - 3
        assert {t: tgt.query(f"SELECT * FROM {SDB}.{t} ORDER BY 1") for t in ("t", "m")} == expected
    finally:
        with tgt.session(autocommit=True) as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"DROP DATABASE IF EXISTS {SDB}")
