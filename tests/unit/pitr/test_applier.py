"""pitr.applier: the target's own replication applier as the parallel replay uses it, on a real target (the shared
logical_target) fed relay logs cut from real binlogs of another real server (logical_source): the method chosen from
the target's settings (and the refusal of `parallel` where it would skip, filter, convert or fire triggers), the
globals read and put back, the connection made to find where its relay logs go and dropped with its filter, the index
written as the server writes it, a parallel pass compared with the source, and the wait's errors: an applier that
stopped on an error, one that never ran, and one that read everything short of the last transaction."""
from __future__ import annotations

import posixpath
import time

import pytest

from lastline.core.errors import IntegrityError, Refusal, ServerError
from lastline.core.hosts import LOCAL
from lastline.pitr import applier
from lastline.pitr.event_check import CheckedCutter
from lastline.pitr.events import gtid_map
from lastline.pitr.split import write_relay
from lastline.replicas import backup_source

from . import history as hist

QDB = "`unit applier.db`"  # a space and a dot (a backtick in a database's name is refused by the replay's check)
CHANGED = ("slave_run_triggers_for_rbr", "replicate_events_marked_for_skip", "slave_type_conversions", "replicate_do_db",
           "replicate_ignore_table", "replicate_rewrite_db", *applier.SETTINGS)


@pytest.fixture
def tgt(logical_target):
    """The shared target's cursor (autocommit); its globals, replication connections and GTID position put back after."""
    server = logical_target.server()
    with server.session(autocommit=True) as cur:
        cur.execute("SELECT " + ", ".join(f"@@GLOBAL.{n}" for n in CHANGED) + ", @@GLOBAL.gtid_slave_pos")
        *before, slave_pos = cur.fetchone()
        try:
            yield cur
        finally:
            applier.drop_connection(cur)
            cur.execute(f"DROP DATABASE IF EXISTS {QDB}")
            for name, value in zip(CHANGED, before):
                cur.execute(f"SET GLOBAL {name} = %s", (value,))
            cur.execute("SET GLOBAL gtid_slave_pos = %s", (slave_pos,))


@pytest.mark.parametrize(("wanted", "change", "server_ids", "chosen"), [
    pytest.param("auto", {}, set(), ("parallel", "the server's parallel applier"), id="auto-on-a-plain-target"),
    pytest.param("parallel", {}, {1, 2}, ("parallel", "the server's parallel applier"), id="parallel-on-a-plain-target"),
    pytest.param("pipe", {"slave_type_conversions": "ALL_LOSSY"}, set(), ("pipe", "asked for"), id="pipe-asked-for"),
    pytest.param("auto", {}, "own", ("pipe", "the target's server_id {sid} wrote some of these binlogs (its applier "
                                     "would skip them)"), id="auto-its-own-server-id"),
    pytest.param("auto", {"slave_run_triggers_for_rbr": "YES"}, set(),
                 ("pipe", "slave_run_triggers_for_rbr=YES would fire triggers a second time on replayed rows"),
                 id="auto-triggers-on-rbr"),
    pytest.param("auto", {"replicate_events_marked_for_skip": "FILTER_ON_SLAVE"}, set(),
                 ("pipe", "replicate_events_marked_for_skip=FILTER_ON_SLAVE would skip some transactions"),
                 id="auto-marked-for-skip"),
    pytest.param("auto", {"slave_type_conversions": "ALL_NON_LOSSY"}, set(),
                 ("pipe", "slave_type_conversions=ALL_NON_LOSSY would convert values"), id="auto-type-conversions"),
    pytest.param("auto", {"replicate_do_db": "shop"}, set(),
                 ("pipe", "replication filters or rewrites (replicate_*) are set"), id="auto-a-filter"),
    pytest.param("auto", {"replicate_rewrite_db": "a->b"}, set(),
                 ("pipe", "replication filters or rewrites (replicate_*) are set"), id="auto-a-rewrite"),
    pytest.param("auto", {"slave_type_conversions": "ALL_LOSSY", "replicate_ignore_table": "a.b"}, "own",
                 ("pipe", "slave_type_conversions=ALL_LOSSY would convert values; the target's server_id {sid} wrote some "
                  "of these binlogs (its applier would skip them); replication filters or rewrites (replicate_*) are set"),
                 id="auto-every-reason-said"),
])
def test_choose_method(tgt, wanted, change, server_ids, chosen):
    sid = _server_id(tgt)
    for name, value in change.items():
        tgt.execute(f"SET GLOBAL {name} = %s", (value,))
    got = applier.choose_method(tgt, wanted, {sid} if server_ids == "own" else server_ids)
    assert got == (chosen[0], chosen[1].format(sid=sid))


@pytest.mark.parametrize(("change", "server_ids", "refused"), [
    pytest.param({}, "own", "replay method parallel: the target's server_id {sid} wrote some of these binlogs", id="own-server-id"),
    pytest.param({"slave_run_triggers_for_rbr": "LOGGING"}, set(), "replay method parallel: slave_run_triggers_for_rbr=LOGGING",
                 id="triggers"),
    pytest.param({"replicate_do_db": "x"}, set(), "replay method parallel: replication filters", id="a-filter"),
])
def test_choose_method_refuses_parallel_where_it_would_not_apply_everything_as_written(tgt, change, server_ids, refused):
    sid = _server_id(tgt)
    for name, value in change.items():
        tgt.execute(f"SET GLOBAL {name} = %s", (value,))
    with pytest.raises(Refusal, match=refused.format(sid=sid).replace("(", r"\(") + r".*Use method pipe \(or auto\)\."):
        applier.choose_method(tgt, "parallel", {sid} if server_ids == "own" else server_ids)


def _connections(cur) -> list[str]:
    cur.execute("SHOW ALL SLAVES STATUS")
    return [str(r[0]) for r in cur.fetchall()]


def _server_id(cur) -> int:
    cur.execute("SELECT @@GLOBAL.server_id")
    return int(cur.fetchone()[0])


def test_settings_are_read_and_put_back_with_the_connection_gone(tgt):
    before = applier.settings(tgt)
    assert set(before) == set(applier.SETTINGS)
    tgt.execute(f"CHANGE MASTER '{applier.CONNECTION}' TO MASTER_HOST='lastline-replay.invalid', MASTER_PORT=9, MASTER_USER='none'")
    tgt.execute("SET GLOBAL slave_parallel_threads = 7")
    tgt.execute("SET GLOBAL slave_exec_mode = 'IDEMPOTENT'")
    tgt.execute("SET GLOBAL innodb_flush_log_at_trx_commit = 0")
    assert applier.settings(tgt) == {"slave_parallel_threads": 7, "slave_exec_mode": "IDEMPOTENT",
                                     "innodb_flush_log_at_trx_commit": 0}
    applier.put_back(tgt, before)
    assert applier.settings(tgt) == before
    assert _connections(tgt) == []


def test_put_back_of_settings_recorded_before_the_flush_setting_was_one_of_them(tgt):
    before = applier.settings(tgt)
    tgt.execute("SET GLOBAL innodb_flush_log_at_trx_commit = 2")
    try:  # an earlier attempt's ledger row, written by a lastline that did not change it: it is left as it is
        applier.put_back(tgt, {k: v for k, v in before.items() if k != "innodb_flush_log_at_trx_commit"})
        assert applier.settings(tgt)["innodb_flush_log_at_trx_commit"] == 2
    finally:
        applier.put_back(tgt, before)


@pytest.mark.parametrize(("was", "during"), [(1, 2), (3, 2), (2, 2), (0, 0)])
def test_the_replay_flushes_the_redo_log_once_a_second_never_less_often_than_the_target_did(tgt, was, during):
    before = applier.settings(tgt)
    try:
        tgt.execute("SET GLOBAL innodb_flush_log_at_trx_commit = %s", (was,))
        tgt.execute(f"SET GLOBAL innodb_flush_log_at_trx_commit = {applier.DURING}")
        assert applier.settings(tgt)["innodb_flush_log_at_trx_commit"] == during
    finally:
        applier.put_back(tgt, before)
    assert applier.settings(tgt) == before


def test_booted_is_when_the_server_process_started(tgt):
    tgt.execute("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'")
    uptime = int(tgt.fetchone()[0])
    first = applier.booted(tgt)
    assert abs(first - (time.time() - uptime)) <= 2
    assert abs(applier.booted(tgt) - first) <= 1  # the same however often it is read


def test_relay_base_finds_where_the_server_writes_this_connections_relay_logs_and_leaves_no_connection(tgt, logical_target):
    tgt.execute("SELECT @@GLOBAL.datadir")
    datadir = str(tgt.fetchone()[0])
    base, named = applier.relay_base(tgt, datadir, LOCAL)
    assert posixpath.dirname(base) == posixpath.normpath(datadir)
    assert posixpath.basename(base).endswith(applier.CONNECTION)  # the connection's own relay logs
    assert named in (".", posixpath.normpath(datadir))  # how the server names them in its index
    assert _connections(tgt) == []


def test_drop_connection_clears_its_filter_and_does_nothing_without_one(tgt):
    assert applier.drop_connection(tgt) == 0  # none: nothing to do, no temporary table lost
    tgt.execute(f"CHANGE MASTER '{applier.CONNECTION}' TO MASTER_HOST='lastline-replay.invalid', MASTER_PORT=9, MASTER_USER='none'")
    tgt.execute(f"SET GLOBAL {applier.CONNECTION}.replicate_do_db = 'a,b'")
    assert applier.slave_status(tgt)["Replicate_Do_DB"] == "a,b"
    tgt.execute(f"SELECT @@{applier.CONNECTION}.replicate_do_db")
    assert tgt.fetchone()[0] == "a,b"
    assert applier.drop_connection(tgt) == 0 == backup_source.open_temp_tables(tgt)  # it applied nothing: held none
    assert _connections(tgt) == []
    tgt.execute(f"SELECT @@{applier.CONNECTION}.replicate_do_db")
    assert not tgt.fetchone()[0]  # kept by name beyond RESET SLAVE ALL, and cleared


@pytest.mark.parametrize(("named", "paths", "lines"), [
    pytest.param(".", ["relay.000001"], ["./relay.000001"], id="one-file-named-relative"),
    pytest.param("{folder}", ["x/relay.000001", "x/relay.000002"], ["{folder}/relay.000001", "{folder}/relay.000002"],
                 id="two-files-named-by-the-folder-with-a-space"),
])
def test_write_index_names_the_files_as_the_server_does(tmp_path, named, paths, lines):
    folder = tmp_path / "relay logs"
    folder.mkdir()
    for p in paths:
        (folder / posixpath.basename(p)).write_bytes(b"")
    base = str(folder / "relay")
    applier.write_index(LOCAL, base, named.format(folder=folder), [str(folder / posixpath.basename(p)) for p in paths])
    assert (folder / "relay.index").read_text().splitlines() == [n.format(folder=folder) for n in lines]
    assert (folder / "relay.index").stat().st_uid == folder.stat().st_uid


@pytest.fixture(scope="module")
def history(logical_source, tmp_path_factory):
    """A real binlog of logical_source: the test database made, rows written, changed and deleted, a transaction of
    several statements; archived in a local destination."""
    def write(conn):
        cur = conn.cursor()
        cur.execute(f"CREATE DATABASE {QDB}")
        cur.execute(f"CREATE TABLE {QDB}.`t 1` (id INT PRIMARY KEY, v VARCHAR(40)) ENGINE=InnoDB")
        for i in range(1, 6):
            cur.execute(f"INSERT INTO {QDB}.`t 1` VALUES (%s, %s)", (i, f"row {i}"))
        conn.autocommit(False)
        cur.execute(f"UPDATE {QDB}.`t 1` SET v = 'changed' WHERE id = 2")
        cur.execute(f"DELETE FROM {QDB}.`t 1` WHERE id = 3")
        conn.commit()

    made = hist.written(logical_source, write)
    logical_source.server().query(f"DROP DATABASE {QDB}")
    store, line = hist.archived(str(tmp_path_factory.mktemp("applier-archive")), made)
    return made, store, hist.span(store, line, made)


def _relay_logs(cur, history, applied: dict[int, int]):
    """The span cut to relay logs where this connection's relay logs go; returns their names, the kept transactions."""
    made, store, span = history
    cur.execute("SELECT @@GLOBAL.datadir")
    base, named = applier.relay_base(cur, str(cur.fetchone()[0]), LOCAL)
    paths, kept = [], []
    for k, f in enumerate(span.files, start=1):
        cutter = CheckedCutter(f.name, f.start, f.stop, applied)
        path = f"{base}.{k:06d}"
        write_relay(store, f, cutter, f is span.files[-1], LOCAL, path)
        paths.append(path)
        kept += cutter.kept
    applier.write_index(LOCAL, base, named, paths)
    return base, [posixpath.basename(p) for p in paths], kept


def _rows(server) -> list[tuple]:
    return server.query(f"SELECT id, v FROM {QDB}.`t 1` ORDER BY id")


def test_run_parallel_applies_every_transaction_kept_and_waits_for_the_last(tgt, logical_target, history):
    made, _, span = history
    before = applier.settings(tgt)
    tgt.execute("SET GLOBAL gtid_slave_pos = %s", (span.base_gtid,))
    base, names, kept = _relay_logs(tgt, history, gtid_map(span.base_gtid))
    assert [t.gtid for t in kept] == [t.gtid for t in made.transactions]
    try:
        result = applier.run_parallel(logical_target.server(), names, kept, threads=3)
        assert result["seconds"] >= 0
        assert applier.settings(tgt) == {"slave_parallel_threads": 3, "slave_exec_mode": "STRICT",  # the caller puts back
                                         "innodb_flush_log_at_trx_commit": 2 if before["innodb_flush_log_at_trx_commit"] else 0}
        assert gtid_map(applier.gtid_slave_pos(tgt)) == gtid_map(kept[-1].gtid)
        assert _rows(logical_target.server()) == [(1, "row 1"), (2, "changed"), (4, "row 4"), (5, "row 5")]
        assert applier.applying(tgt) == 0  # nothing left to do: every thread waits
        # asked for more than the relay logs hold: read everything, nothing moves, refused once idle
        beyond = f"{kept[-1].gtid.rsplit('-', 1)[0]}-{int(kept[-1].gtid.rsplit('-', 1)[1]) + 1}"
        with pytest.raises(IntegrityError, match=f"has read every relay log and applied nothing for 1 s, short of {beyond}: a "
                                                 "transaction of the archive is incomplete"):
            applier.wait(tgt, beyond, time.monotonic(), every=0.1, idle=1)
    finally:
        applier.put_back(tgt, before)
        LOCAL.sh('rm -f -- "$1".[0-9]* "$1".index', base)
    assert applier.settings(tgt) == before and _connections(tgt) == []


def test_wait_stops_on_the_appliers_error(tgt, logical_target, history):
    made, _, span = history
    before = applier.settings(tgt)
    after_ddl = made.transactions[1].gtid  # the database and its table made: the replay starts at the first INSERT
    tgt.execute("SET GLOBAL gtid_slave_pos = %s", (after_ddl,))
    tgt.execute("SET SESSION sql_log_bin = 0")
    tgt.execute(f"CREATE DATABASE {QDB}")
    tgt.execute(f"CREATE TABLE {QDB}.`t 1` (id INT PRIMARY KEY, v VARCHAR(40)) ENGINE=InnoDB")
    tgt.execute(f"INSERT INTO {QDB}.`t 1` VALUES (2, 'here before')")  # the history's second INSERT meets it
    base, names, kept = _relay_logs(tgt, history, gtid_map(after_ddl))
    assert kept[0].gtid == made.transactions[2].gtid
    try:
        with pytest.raises(ServerError, match=r"the target's applier stopped during the replay: .*Duplicate entry .* A "
                                              "retry resumes after the last transaction it committed"):
            applier.run_parallel(logical_target.server(), names, kept, threads=2)
    finally:
        applier.put_back(tgt, before)
        LOCAL.sh('rm -f -- "$1".[0-9]* "$1".index', base)
    assert applier.gtid_slave_pos(tgt) == kept[0].gtid  # the first INSERT committed, with its position
    assert _rows(logical_target.server()) == [(1, "row 1"), (2, "here before")]


@pytest.mark.parametrize(("want", "raised"), [
    pytest.param("", None, id="nothing-wanted"),
    pytest.param("held", None, id="already-held"),
    pytest.param("beyond", "the target's applier stopped during the replay: its replication connection 'lastline_pitr' "
                 "no longer exists", id="no-applier-running"),
])
def test_wait_without_an_applier(tgt, want, raised):
    tgt.execute("SET GLOBAL gtid_slave_pos = '7-1-40'")
    wanted = {"": "", "held": "7-9-40", "beyond": "7-1-41"}[want]
    if raised:
        with pytest.raises(ServerError, match=raised):
            applier.wait(tgt, wanted, time.monotonic())
    else:
        applier.wait(tgt, wanted, time.monotonic())
    assert applier.gtid_slave_pos(tgt) == "7-1-40"


def test_as_before_takes_what_a_ledger_row_recorded_and_a_setting_it_lacks_as_it_is_now(tgt):
    now = applier.settings(tgt)
    assert applier.as_before(tgt, None) == now  # the first attempt: as the target is
    recorded = {"slave_parallel_threads": 0, "slave_exec_mode": "STRICT"}  # a row of a lastline that changed no flush
    assert applier.as_before(tgt, recorded) == {**recorded, "innodb_flush_log_at_trx_commit": now["innodb_flush_log_at_trx_commit"]}
    whole = {**recorded, "innodb_flush_log_at_trx_commit": 1}
    assert applier.as_before(tgt, whole) == whole  # what it recorded wins over what a killed attempt left
