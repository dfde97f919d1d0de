"""Point-in-time restore on real servers (issue 29): a physical base taken while a multi-table workload writes,
the binlog archive shipped as it goes, and restores to a second, to a GTID and to latest that each give exactly
the source's state at that point (the test records it while it runs); a temporary table living across a binlog
rotation; a replay stopped half way that resumes without applying a transaction twice; the refusals (a hole,
past the end, before the base) made before anything is touched."""
from __future__ import annotations

import json
import math
import random
import re
import threading
import time
from pathlib import Path

import pytest

from conftest import set_conn
from lastline import connections
from lastline.core.errors import Refusal, ServerError
from lastline.manifest import read_manifest
from lastline.physical import backup as physical_backup
from lastline.pitr import applier, archive, check, replay, report, window
from lastline.pitr import restore as pitr
from lastline.pitr import span as span_of
from lastline.pitr.plans import Replayed, ReplayPlan
from lastline.storage import open_storage
from lastline_dev.sandbox import Instance

pytestmark = pytest.mark.e2e
TABLES = ("orders", "stock", "accounts")
RETRIED = (1205, 1213)  # lock wait timeout, deadlock: the server rolled the transaction (or its statement) back


class Writer:
    """`threads` sessions, each committing multi-table transactions (an order, a stock update, a balance, now and
    then a delete) until stopped, retrying one the server rolls back as a deadlock (the delete scans `orders` while
    the others insert into it); `pause()` returns once every session is between transactions."""

    def __init__(self, inst: Instance, threads: int = 4) -> None:
        self.inst, self.n = inst, threads
        self.go, self.stop = threading.Event(), threading.Event()
        self.idle = threading.Semaphore(0)
        self.commits = self.retried = 0
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def start(self) -> Writer:
        self.go.set()
        for t in self.threads:
            t.start()
        return self

    def _run(self, k: int) -> None:
        rnd = random.Random(k)
        try:
            with self.inst.server().session() as cur:
                while not self.stop.is_set():
                    if not self.go.is_set():
                        self.idle.release()
                        self.go.wait()
                        continue
                    item = rnd.randint(1, 50)
                    try:
                        cur.execute("INSERT INTO shop.orders (item, qty, note) VALUES (%s, %s, %s)",
                                    (item, rnd.randint(1, 5), f"t{k} " + "x" * rnd.randint(0, 200)))
                        cur.execute("UPDATE shop.stock SET qty = qty - 1 WHERE id = %s", (item,))
                        cur.execute("UPDATE shop.accounts SET balance = balance + %s WHERE id = %s",
                                    (rnd.randint(-100, 100), rnd.randint(1, 20)))
                        if rnd.random() < 0.1:
                            cur.execute("DELETE FROM shop.orders WHERE item = %s ORDER BY id LIMIT 1", (item,))
                        cur.connection.commit()
                    except Exception as exc:  # noqa: BLE001 - a deadlock or lock wait is retried, as an application does
                        if not exc.args or exc.args[0] not in RETRIED:
                            raise
                        cur.connection.rollback()
                        self.retried += 1
                        continue
                    self.commits += 1
                    time.sleep(0.002)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)
            self.idle.release()

    def pause(self) -> None:
        self.go.clear()
        for _ in range(self.n):  # past a lock wait (innodb_lock_wait_timeout: 50 s) that a loaded machine can cause
            if not self.idle.acquire(timeout=120):
                shown = self.inst.server().query("SELECT ID, TIME, STATE, LEFT(INFO, 120) FROM information_schema.PROCESSLIST "
                                                 "WHERE COMMAND <> 'Sleep'")
                raise AssertionError(f"a writer did not finish its transaction in 120 s; errors {self.errors}; "
                                     f"the server's sessions: {shown}")

    def resume(self) -> None:
        self.go.set()

    def finish(self) -> None:
        self.pause()
        self.stop.set()
        self.go.set()
        for t in self.threads:
            t.join(10)
        assert not self.errors, self.errors


def _shop(server, stock: int, accounts: int) -> None:
    """The workload's tables: orders, 50 stock rows holding `stock` each, `accounts` accounts at 0."""
    with server.session() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, item INT, qty INT, note TEXT)")
        cur.execute("CREATE TABLE shop.stock (id INT PRIMARY KEY, qty INT NOT NULL)")
        cur.execute("CREATE TABLE shop.accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)")
        cur.executemany("INSERT INTO shop.stock VALUES (%s, %s)", [(i, stock) for i in range(1, 51)])
        cur.executemany("INSERT INTO shop.accounts VALUES (%s, 0)", [(i,) for i in range(1, accounts + 1)])
        cur.connection.commit()


INSIDE = "written while a temporary table lives"  # an order's note


def temporary_table_across_a_rotation(server, statement_format: bool) -> None:
    """A transaction whose temporary table lives across a binlog rotation (in statement format the table itself is in
    the binlog; in row format only its effect is, as rows); an order noted INSIDE is written while it lives."""
    with server.session() as cur:
        if statement_format:
            cur.execute("SET SESSION binlog_format='STATEMENT'")
        cur.execute("CREATE TEMPORARY TABLE shop.tmp_moves (id INT, qty INT)")
        cur.execute("INSERT INTO shop.tmp_moves VALUES (1, 7), (2, 9)")
        cur.connection.commit()
        with server.session() as other:
            other.execute("INSERT INTO shop.orders (item, qty, note) VALUES (0, 0, %s)", (INSIDE,))
            other.connection.commit()
        server.query("FLUSH BINARY LOGS")
        cur.execute("UPDATE shop.stock s JOIN shop.tmp_moves m ON s.id = m.id SET s.qty = s.qty + m.qty")
        cur.connection.commit()


def state(inst: Instance, tables: tuple[str, ...] = TABLES) -> dict[str, tuple]:
    """Every table's (of `shop`, or `tables` of it) row count and checksum."""
    out = {}
    with inst.server().session() as cur:
        for t in tables:
            cur.execute(f"SELECT COUNT(*) FROM shop.{t}")
            n = cur.fetchone()[0]
            cur.execute(f"CHECKSUM TABLE shop.{t}")
            out[t] = (n, cur.fetchone()[1])
    return out


def mark(inst: Instance, writer: Writer) -> tuple[str, str, dict]:
    """Pause the writers between transactions, cross a second boundary, and record the source's state: every
    transaction committed so far is stamped at or before the second returned, every later one after it."""
    writer.pause()
    now = time.time()
    time.sleep(math.ceil(now) - now + 0.05)
    second = math.floor(time.time()) - 1
    recorded = state(inst)
    gtid = inst.server().query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]
    writer.resume()
    return window.utc(second), gtid, recorded


@pytest.fixture(scope="module")
def history(sandbox_root, tmp_path_factory):
    """A source with a physical base taken under load and an archive shipped as it goes; the points recorded."""
    src, tgt = Instance(sandbox_root, "pitr_src"), Instance(sandbox_root, "pitr_tgt")
    src.create()
    tgt.create()
    writer = None
    try:
        set_conn("t_pitr_src", src)
        set_conn("t_pitr_tgt", tgt)
        dest = tmp_path_factory.mktemp("pitr")
        storage = open_storage(f"file://{dest}")
        server = connections.server("t_pitr_src")
        _shop(server, stock=100000, accounts=20)
        archive.ship(server, storage)
        writer = Writer(src).start()
        time.sleep(1)
        plan = physical_backup.preflight({"source_conn_id": "t_pitr_src", "destination": f"file://{dest}"})
        physical_backup.finish(plan, physical_backup.stream(plan))  # the base, taken while the writers write
        archive.ship(server, storage)
        time.sleep(1)
        server.query("FLUSH BINARY LOGS")
        time.sleep(1)
        points = {"time": mark(src, writer)}
        archive.ship(server, storage)
        writer.pause()  # every order up to this one committed before the temporary table was made
        before_temporary = server.query("SELECT MAX(id) FROM shop.orders")[0][0]
        writer.resume()
        temporary_table_across_a_rotation(server, statement_format=True)
        time.sleep(1)
        points["gtid"] = mark(src, writer)
        time.sleep(1)
        writer.finish()
        points["latest"] = ("latest", src.server().query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0], state(src))
        archive.ship(server, storage)
        assert writer.commits > 300
        yield {"dest": f"file://{dest}", "storage": storage, "points": points, "src": src, "tgt": tgt,
               "base": plan.backup_id, "before_temporary": before_temporary}
    finally:
        if writer is not None:
            writer.stop.set()
            writer.go.set()
        src.destroy()
        tgt.destroy()


def _restore(run_dag, history, until: str, method: str = "auto") -> dict:
    state_, tis, logs = run_dag("point_in_time_restore", {
        "target_conn_id": "t_pitr_tgt", "destination": history["dest"], "until": until, "base": "auto",
        "base_kind": "any", "databases": [], "branch": "", "replay_method": method, "parallel": 2, "force": True, "restore_into_source": "",
        "aws_conn_id": None})
    assert state_ == "success", (tis, logs[-4000:])
    return {"logs": logs, "tis": tis}


def pitr_report(logs: str, tgt: Instance, until: str, method: str = "parallel") -> list[str]:
    """The run's report: it opens the Report tab (first in the index) with the roll-forward's verdict, whose figures
    are the real ones: `until` as asked, the transactions the replay applied, the GTID the target holds last and the
    recoverable window, and how it was verified by the replay's method (the pipe records no position itself: lastline
    sets it, so it claims no check of it); returns its lines."""
    saved = Path(re.findall(r"report: file://(\S+/point_in_time_restore\.md)", logs)[-1])
    assert json.loads((saved.parent / "index.json").read_text())["files"][0] == "point_in_time_restore.md"
    lines = saved.read_text().splitlines()
    replayed = int(re.findall(r"replay done: ([0-9,]+) transactions", logs)[-1].replace(",", ""))
    last = tgt.server().query("SELECT @@GLOBAL.gtid_slave_pos")[0][0]  # one domain: the last transaction applied
    shown = f"GTID {until}" if re.fullmatch(r"\d+-\d+-\d+", until) else until
    assert lines[0].startswith(f"# Point-in-time restore of t_pitr_tgt to {shown}: {replayed:,} transaction"), lines[:3]
    assert f"the last GTID {last}, committed at 20" in lines[0] and replayed > 0, lines[0]
    assert lines[2].startswith("**Restored physical base ") and "in this attempt" not in lines[0] + lines[2]
    verified, pipe = "Verified: the target's GTID position", "The pipe ended without error; lastline set the GTID position"
    assert (pipe in lines[2] and verified not in lines[2]) if method == "pipe" else verified in lines[2], lines[2]
    assert any(line.startswith("- **Recoverable window** the archive offered this base: from 20") for line in lines)
    assert any("matched the sha256 its manifest records" in line for line in lines)  # the base's own verification
    return lines


def test_a_restore_to_a_second_gives_the_source_at_that_second(run_dag, history):
    until, _, recorded = history["points"]["time"]
    out = _restore(run_dag, history, until)
    assert state(history["tgt"]) == recorded
    assert "by parallel (the server's parallel applier)" in out["logs"]  # auto chose the target's own applier
    lines = pitr_report(out["logs"], history["tgt"], until)
    committed = re.search(r"committed at (\S+Z)", lines[0])[1]
    assert committed <= until  # resolved to the last transaction at or before the second asked
    assert "by the target's own parallel applier" in "\n".join(lines)


def test_a_restore_to_a_gtid_and_to_latest_are_exact_also_through_the_pipe(run_dag, history):
    _, gtid, recorded = history["points"]["gtid"]
    out = _restore(run_dag, history, gtid, method="pipe")  # the temporary table's transaction spans a rotation before it
    assert state(history["tgt"]) == recorded
    lines = pitr_report(out["logs"], history["tgt"], gtid, method="pipe")
    assert f"the last GTID {gtid}, committed" in lines[0]  # through the GTID asked, exactly
    assert "by mariadb-binlog | mariadb" in "\n".join(lines)
    _, _, final = history["points"]["latest"]
    out = _restore(run_dag, history, "latest")
    assert state(history["tgt"]) == final
    pitr_report(out["logs"], history["tgt"], "latest")
    assert state(history["tgt"]) == state(history["src"])


def _in_the_way(server, order_id: int, put: bool) -> None:
    """An order the replay will insert, put on the target first (unlogged) so that its applier stops on it; or gone."""
    with server.session() as cur:
        cur.execute("SET SESSION sql_log_bin=0")
        if put:
            cur.execute("INSERT INTO shop.orders (id, item, qty, note) VALUES (%s, 0, 0, 'in the way')", (order_id,))
        else:
            cur.execute("DELETE FROM shop.orders WHERE id = %s AND note = 'in the way'", (order_id,))
        cur.connection.commit()


def _base_restored(history) -> tuple:
    """The point-in-time plan to latest and the target, its base restored (physical_restore's steps, `force`): what
    the replay tests start from."""
    plan = pitr.preflight({"target_conn_id": "t_pitr_tgt", "destination": history["dest"], "until": "latest"})
    from lastline.physical import restore as physical_restore
    rplan = physical_restore.preflight({**plan.physical, "force": True})
    for step in (physical_restore.stop_target, physical_restore.extract, physical_restore.prepare, physical_restore.start_target):
        step(rplan)
    return plan, connections.server("t_pitr_tgt")


def test_a_replay_stopped_half_way_resumes_without_applying_a_transaction_twice(history):
    storage, tgt = history["storage"], history["tgt"]
    plan, server = _base_restored(history)
    # a row the replay will insert later, put there first: the applier stops on it half way
    src_ids = history["src"].server().query("SELECT id FROM shop.orders ORDER BY id")
    base_max = server.query("SELECT MAX(id) FROM shop.orders")[0][0]
    later = [r[0] for r in src_ids if r[0] > base_max]
    before = [i for i in later if i <= history["before_temporary"]]  # its stop leaves no temporary table behind
    blocker = before[len(before) // 2]
    server.query("SET GLOBAL slave_exec_mode='IDEMPOTENT'")  # settings of the target's own, put back after the replay
    _in_the_way(server, blocker, True)
    span = span_of.Span.of(plan.replay["span"])
    with pytest.raises(ServerError, match="applier stopped"):
        replay.apply(server, storage, span, "resume-test", "parallel")
    held = server.query("SELECT @@GLOBAL.gtid_slave_pos")[0][0]
    assert held != span.base_gtid  # it applied part of the span
    assert server.query("SELECT @@GLOBAL.slave_exec_mode, @@GLOBAL.slave_parallel_threads") == [("IDEMPOTENT", 0)]
    assert server.query("SHOW ALL SLAVES STATUS") == []  # no connection left to apply or consume anything
    _in_the_way(server, blocker, False)
    result = replay.apply(server, storage, span, "resume-test", "parallel")
    assert result["transactions"] < len(later)  # what it had applied was left out
    # the report counts this attempt's transactions, and says so
    said = report.verdict(plan, Replayed.of_result(result), "t_pitr_tgt")
    assert result["resumed"] and f"{result['transactions']:,} transaction" in said and "replayed in this attempt" in said
    assert state(tgt) == history["points"]["latest"][2]
    assert replay.apply(server, storage, span, "resume-test", "parallel") == result  # done: a re-run changes nothing
    assert replay.cleanup(ReplayPlan("t_pitr_tgt", history["dest"], {}), "resume-test").cleaned
    assert server.query("SELECT @@GLOBAL.slave_exec_mode, @@GLOBAL.slave_parallel_threads") == [("IDEMPOTENT", 0)]
    # a target that would apply triggers a second time, or skip or rewrite events, is never handed the relay logs
    server.query("SET GLOBAL slave_run_triggers_for_rbr='YES'")
    try:
        with server.session() as cur:
            assert applier.choose_method(cur, "auto", set())[0] == "pipe"
            with pytest.raises(Refusal, match="slave_run_triggers_for_rbr"):
                applier.choose_method(cur, "parallel", set())
            own = int(server.query("SELECT @@GLOBAL.server_id")[0][0])
        server.query("SET GLOBAL slave_run_triggers_for_rbr='NO'")
        with server.session() as cur:
            assert applier.choose_method(cur, "auto", {own}) == ("pipe", f"the target's server_id {own} wrote some of "
                                                                "these binlogs (its applier would skip them)")
    finally:
        server.query("SET GLOBAL slave_run_triggers_for_rbr='NO'")
        server.query("SET GLOBAL slave_exec_mode='STRICT'")


def test_a_replay_stopped_while_a_temporary_table_lives_refuses_to_resume(history):
    """The applier stops while it holds a temporary table of the source (statement format: made by one transaction,
    read by a later one): the table goes with its connection, so the replay says it cannot resume, at once and on
    every retry, and applies nothing more; the target's settings are put back."""
    storage = history["storage"]
    plan, server = _base_restored(history)
    before = server.query("SELECT @@GLOBAL.slave_parallel_threads, @@GLOBAL.slave_exec_mode")
    blocker = history["src"].server().query("SELECT id FROM shop.orders WHERE note = %s", (INSIDE,))[0][0]
    _in_the_way(server, blocker, True)  # the order written while the temporary table lives, put there first
    span = span_of.Span.of(plan.replay["span"])
    with pytest.raises(Refusal, match="(?s)applier stopped.*Duplicate.*held temporary tables of the source"):
        replay.apply(server, storage, span, "temporary-test", "parallel")
    held = server.query("SELECT @@GLOBAL.gtid_slave_pos")[0][0]
    assert held != span.base_gtid  # it applied part of the span, the temporary table's CREATE among it
    assert server.query("SHOW ALL SLAVES STATUS") == []
    assert server.query("SELECT @@GLOBAL.slave_parallel_threads, @@GLOBAL.slave_exec_mode") == before
    _in_the_way(server, blocker, False)
    with pytest.raises(Refusal, match="cannot resume where it stopped. Restore the base again"):
        replay.apply(server, storage, span, "temporary-test", "parallel")  # the retry: refused before it applies
    assert server.query("SELECT @@GLOBAL.gtid_slave_pos")[0][0] == held
    assert server.query("SELECT COUNT(*) FROM shop.orders WHERE id = %s", (blocker,))[0][0] == 0
    assert server.query("SELECT state FROM _lastline.pitr_replay WHERE run_id = 'temporary-test'") == [("temp_lost",)]


def test_a_worker_killed_mid_replay_resumes_to_the_exact_result(history):
    """The replay's worker is killed (SIGKILL) while the target's applier waits on a row lock: the applier keeps
    its connection and the changed settings behind; the retry stops it, puts the settings back and resumes."""
    import os
    import signal
    import subprocess
    import sys

    storage = history["storage"]
    plan, server = _base_restored(history)
    before = server.query("SELECT @@GLOBAL.slave_parallel_threads, @@GLOBAL.slave_exec_mode")
    lock = server.connect()
    cur = lock.cursor()
    cur.execute("BEGIN")
    cur.execute("SELECT * FROM shop.stock FOR UPDATE")  # every transaction of the workload updates a stock row
    worker = subprocess.Popen([sys.executable, "-c", (
        "import json, sys; from lastline import connections; from lastline.pitr import replay; from lastline.pitr import span as span_of; "
        "from lastline.storage import open_storage; "
        f"replay.apply(connections.server('t_pitr_tgt'), open_storage({history['dest']!r}), "
        f"span_of.Span.of(json.loads(sys.stdin.read())), 'killed', 'parallel')")],
        stdin=subprocess.PIPE, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, text=True)
    worker.stdin.write(json.dumps(plan.replay["span"]))
    worker.stdin.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the applier waits on the lock
        if server.query("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND = 'Slave_worker' "
                        "AND STATE LIKE '%find_row%'")[0][0]:
            break
        time.sleep(0.2)
    else:
        worker.kill()
        pytest.fail(f"the applier never reached the locked rows (worker exit {worker.poll()}): "
                    f"{server.query('SELECT USER, COMMAND, STATE, INFO FROM information_schema.PROCESSLIST')}")
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    assert server.query("SELECT @@GLOBAL.slave_parallel_threads")[0][0] != before[0][0]  # left changed
    lock.rollback()
    lock.close()
    result = replay.apply(server, storage, span_of.Span.of(plan.replay["span"]), "killed", "parallel")
    assert state(history["tgt"]) == history["points"]["latest"][2]
    assert server.query("SELECT @@GLOBAL.slave_parallel_threads, @@GLOBAL.slave_exec_mode") == before
    assert server.query("SHOW ALL SLAVES STATUS") == []
    assert result["method"] == "parallel"


def test_refusals_come_before_anything_is_touched(history, tmp_path):
    conf = {"target_conn_id": "t_pitr_tgt", "destination": history["dest"]}
    with pytest.raises(Refusal, match="past the binlog archive's end"):
        pitr.preflight({**conf, "until": window.utc(time.time() + 3600)})
    with pytest.raises(Refusal, match="no base backup .* can be rolled forward to until .* started after"):
        pitr.preflight({**conf, "until": "2001-01-01T00:00:00Z"})
    # a base taken just after a rotation holds transactions of the file before: a time before them is refused
    import shutil
    copy = tmp_path / "d"
    shutil.copytree(history["dest"].removeprefix("file://"), copy)
    src = connections.server("t_pitr_src")
    with src.session() as cur:
        cur.execute("INSERT INTO shop.accounts VALUES (1000, 1)")
        cur.connection.commit()
        cur.execute("SELECT UNIX_TIMESTAMP()")
        written = int(cur.fetchone()[0])
    time.sleep(1.1)
    src.query("FLUSH BINARY LOGS")
    rotated = physical_backup.preflight({"source_conn_id": "t_pitr_src", "destination": f"file://{copy}"})
    physical_backup.finish(rotated, physical_backup.stream(rotated))
    copied = open_storage(f"file://{copy}")
    archive.ship(src, copied)
    file, position, gtid = pitr.coordinates(read_manifest(copied, rotated.backup_id))
    line = window.choose_line(copied, file, gtid, None, position)
    assert line.files[0][1].name != file  # the base sits at the top of a file, its transactions in the one before
    with pytest.raises(Refusal, match="before the base"):
        span_of.resolve(copied, line, file, position, gtid, window.Until("time", time=written - 1))
    with pytest.raises(Refusal, match="before the base"):  # named, a base begun after until says so too
        pitr.preflight({**conf, "destination": f"file://{copy}", "base": rotated.backup_id,
                        "until": window.utc(written - 1)})
    # a hole: a file of the chain marked as purged before it was archived
    storage = history["storage"]
    bid = archive.branches(storage)[-1]["id"]
    chain = archive.read_branch(storage, bid)
    damaged = chain.entries[-2]
    raw = storage.read_bytes(f"binlogs/{bid}/chain.json")
    try:
        damaged.missing = True
        archive.write_branch(storage, chain)
        with pytest.raises(Refusal, match=f"beyond a hole .*{damaged.name}"):
            pitr.preflight({**conf, "until": "latest"})
        broken = check.check(storage, max_age=3600)
        assert any(f"chain is broken after the newest base {history['base']}: {damaged.name}" in p
                   for p in broken["problems"]), broken["problems"]
        assert check.changed(storage, broken["problems"])  # an alert goes out once, not every minute
        assert not check.changed(storage, broken["problems"])
    finally:
        storage.write_bytes(f"binlogs/{bid}/chain.json", raw)
    windows = window.windows(storage)
    assert windows[-1]["holes"] == [] and windows[-1]["to_gtid"]
    whole = check.check(storage, max_age=3600)
    assert whole["problems"] == [] and [b["backup_id"] for b in whole["bases"] if b["to_gtid"]] == [history["base"]]
    assert whole["bases"][0]["to_gtid"] == history["points"]["latest"][1]  # the base reaches the source's end
    late = check.check(storage, max_age=60, now=time.time() + 600)
    assert any("behind" in p and "RPO is at risk" in p for p in late["problems"])
    assert "| base backup |" in check.markdown(whole)
    # the line the backup's report carries: how far the archive rolls this base forward
    assert check.base_window(storage, history["base"]).startswith(
        f"Point-in-time: rolls forward to {whole['bases'][0]['to_time']} (GTID {history['points']['latest'][1]})")


def test_prune_keeps_every_base_and_binlog_the_window_needs(history, tmp_path):
    import shutil

    from lastline.pruning import prune_physical as prune  # what the physical backup DAG's prune task runs

    shutil.copytree(history["dest"].removeprefix("file://"), tmp_path / "d")
    dest = f"file://{tmp_path / 'd'}"
    storage = open_storage(dest)
    plan = physical_backup.preflight({"source_conn_id": "t_pitr_src", "destination": dest})
    physical_backup.finish(plan, physical_backup.stream(plan))  # a second base, after every write
    archive.ship(connections.server("t_pitr_src"), storage)
    first, second = history["base"], plan.backup_id
    conf = {"destination": dest, "keep": 1, "incomplete_grace_hours": 24}
    # a week's window: both bases are inside it, so keep=1 deletes neither, nor any binlog
    kept = prune({**conf, "pitr_window_days": 7})
    assert kept["deleted"] == [] and set(kept["kept_for_the_window"]) == {first, second}
    assert kept["binlogs_deleted"] == []
    # a window that began after both: the newer base is what its start rolls forward from; the older one goes,
    # and so do the archived files only it needed
    tiny = prune({**conf, "pitr_window_days": 1e-9})
    assert tiny["deleted"] == [first] and list(tiny["kept_for_the_window"]) == [second]
    assert tiny["binlogs_deleted"], "the files before the kept base are no longer needed"
    second_file = pitr.coordinates(read_manifest(storage, second))[0]
    assert all(not name.endswith(second_file) for name in tiny["binlogs_deleted"])
    plan = pitr.preflight({"target_conn_id": "t_pitr_tgt", "destination": dest, "until": "latest"})
    assert plan.base == second  # the kept base still rolls forward to the end
    assert check.check(storage, max_age=3600)["problems"] == []
    with pytest.raises(Refusal, match="in no branch"):  # the deleted files are never read as if they were there
        window.choose_line(storage, "mariadb-bin.000001", "0-0-0")


def _writes(inst: Instance, n: int, tag: str) -> None:
    with inst.server().session() as cur:
        for i in range(n):
            cur.execute("INSERT INTO shop.orders (item, qty, note) VALUES (%s, %s, %s)", (i % 50 + 1, i, f"{tag} {i}"))
            cur.execute("UPDATE shop.stock SET qty = qty - %s WHERE id = %s", (i % 3, i % 50 + 1))
            cur.connection.commit()


def test_a_server_writing_reused_names_forks_the_archive_and_a_restore_on_either_branch_is_exact(
        run_dag, sandbox_root, tmp_path, history):
    src = Instance(sandbox_root, "pitr_fork")
    src.create()
    try:
        set_conn("t_pitr_fork", src)
        server = connections.server("t_pitr_fork")
        _shop(server, stock=1000, accounts=0)
        dest = f"file://{tmp_path}"
        storage = open_storage(dest)
        _writes(src, 40, "old")
        archive.ship(server, storage)
        old_base = physical_backup.preflight({"source_conn_id": "t_pitr_fork", "destination": dest})
        physical_backup.finish(old_base, physical_backup.stream(old_base))
        _writes(src, 60, "old")
        archive.ship(server, storage)
        old_gtid, old_state = server.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0], state(src)
        # as a restored server would: its binlogs begin again at .000001, and its GTIDs at 1, other transactions
        server.query("RESET MASTER")
        _writes(src, 30, "new")
        time.sleep(1.1)  # the new base's backup id must follow the old one's
        new_base = physical_backup.preflight({"source_conn_id": "t_pitr_fork", "destination": dest})
        physical_backup.finish(new_base, physical_backup.stream(new_base))
        _writes(src, 200, "new")  # past the old branch's sequence numbers: the GTIDs exist on both branches
        shipped = archive.ship(server, storage)
        assert shipped["forks"], shipped
        assert len(archive.branches(storage)) == 2
        new_state = state(src)
        base = {"target_conn_id": "t_pitr_tgt", "destination": dest, "base_kind": "any", "databases": [], "branch": "",
                "replay_method": "auto",
                "parallel": 2, "force": True, "restore_into_source": "", "aws_conn_id": None}
        state_, tis, logs = run_dag("point_in_time_restore", {**base, "until": "latest", "base": "auto"})
        assert state_ == "success", tis
        assert state(history["tgt"]) == new_state
        # the old branch, from the old base, to its last GTID (which the new branch reuses for another transaction)
        plan = pitr.preflight({**base, "until": old_gtid, "base": old_base.backup_id})
        assert plan.branch == archive.branches(storage)[0]["id"]
        state_, tis, logs = run_dag("point_in_time_restore", {**base, "until": old_gtid, "base": old_base.backup_id})
        assert state_ == "success", tis
        assert state(history["tgt"]) == old_state
        # binlogs purged on the source before they were archived: a gap, named; a restore across it is refused
        server.query("FLUSH BINARY LOGS")
        _writes(src, 5, "gap")
        server.query("FLUSH BINARY LOGS")
        _writes(src, 5, "after")
        _, files = archive.source_files(server)
        server.query(f"PURGE BINARY LOGS TO '{files[-1].name}'")
        shipped = archive.ship(server, storage)
        assert len(shipped["holes"]) == 2, shipped
        with pytest.raises(Refusal, match=f"beyond a hole .*{shipped['holes'][0]} after byte"):
            pitr.preflight({**base, "until": "latest", "base": new_base.backup_id})
        assert check.check(storage, 3600)["problems"][0].startswith(
            f"the chain is broken after the newest base {new_base.backup_id}: {shipped['holes'][0]}")
    finally:
        src.destroy()



def test_a_hole_proven_empty_is_crossed_exactly_and_a_real_hole_is_refused_naming_it(run_dag, sandbox_root, tmp_path):
    """A file closed and purged on the source before the archive shipped its Rotate event (and a file of no transaction
    purged with it) holds no lost transaction: the next file starts from the state the archive ends at. A restore
    crosses them and equals the source; a file purged with transactions unshipped is still refused, named with the
    GTIDs it lost."""
    src, tgt = Instance(sandbox_root, "pitr_empty"), Instance(sandbox_root, "pitr_empty_tgt")
    src.create()
    tgt.create()
    try:
        set_conn("t_pitr_empty", src)
        set_conn("t_pitr_empty_tgt", tgt)
        server = connections.server("t_pitr_empty")
        _shop(server, stock=1000, accounts=5)
        dest = f"file://{tmp_path}"
        storage = open_storage(dest)
        archive.ship(server, storage)
        base = physical_backup.preflight({"source_conn_id": "t_pitr_empty", "destination": dest})
        physical_backup.finish(base, physical_backup.stream(base))
        _writes(src, 20, "before")
        archive.ship(server, storage)
        server.query("FLUSH BINARY LOGS")  # the archive lacks only this file's Rotate event
        server.query("FLUSH BINARY LOGS")  # and a whole file that holds no transaction
        _writes(src, 20, "after")
        _, files = archive.source_files(server)
        server.query(f"PURGE BINARY LOGS TO '{files[-1].name}'")
        shipped = archive.ship(server, storage)
        assert shipped["holes"] == [] and shipped["proven_empty"] == [f.name for f in files[-3:-1]], shipped
        conf = {"target_conn_id": "t_pitr_empty_tgt", "destination": dest, "base_kind": "any", "databases": [],
                "branch": "", "replay_method": "auto", "parallel": 2, "force": True, "restore_into_source": "",
                "aws_conn_id": None, "until": "latest", "base": base.backup_id}
        state_, tis, logs = run_dag("point_in_time_restore", conf)
        assert state_ == "success", (tis, logs[-4000:])
        assert state(tgt) == state(src)
        whole = check.check(storage, 3600)
        assert whole["problems"] == [] and whole["bases"][0]["hole"] is None
        assert f"(crossed, proven empty: {', '.join(shipped['proven_empty'])})" in check.markdown(whole)
        # a file closed and purged with three transactions unshipped: refused, named
        domain, server_id, seq = server.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0].split("-")
        _writes(src, 3, "lost")
        server.query("FLUSH BINARY LOGS")
        _writes(src, 2, "past")
        _, files = archive.source_files(server)
        server.query(f"PURGE BINARY LOGS TO '{files[-1].name}'")
        shipped = archive.ship(server, storage)
        assert shipped["holes"] == [files[-2].name] and shipped["proven_empty"] == [], shipped
        lost = f"{domain}-{server_id}-{int(seq) + 1}..{domain}-{server_id}-{int(seq) + 3}"
        with pytest.raises(Refusal, match=rf"beyond a hole in the binlog archive: the rest of {files[-2].name} after "
                                          rf"byte \d+ was purged on the source before it was archived \(the GTIDs "
                                          rf"{re.escape(lost)} are missing\)"):
            pitr.preflight(conf)
        assert check.check(storage, 3600)["problems"][0].startswith(
            f"the chain is broken after the newest base {base.backup_id}: {files[-2].name}")
    finally:
        src.destroy()
        tgt.destroy()
