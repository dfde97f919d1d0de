"""Issue 42, on real servers: someone who can write the binlog archive forges archived events (a statement-format
event's text rewritten in place, a table map's database renamed, each event's CRC32 and the segment's sha256 in
chain.json made to match, as the writer can) to reach beyond data on a point-in-time target with a physical base:
accounts, grants, files written and read by the server, the worker's environment through LOCAL INFILE, global
settings, plugins, replication, shutdown, the mysql schema. Through every replay method (parallel, pipe, auto) the
restore refuses, naming the event, before anything is applied, and nothing of it happened on the target. The
pipe's client, handed forged text past the check, reads no local file and runs no client command."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import set_conn
from lastline import connections
from lastline.core.errors import Refusal
from lastline.physical import backup as physical_backup
from lastline.physical import restore as physical_restore
from lastline.pitr import archive, events, pipe, replay
from lastline.pitr import restore as pitr
from lastline.pitr.span import Span
from lastline.pitr.split import write_relay
from lastline.storage import open_storage
from lastline_dev.sandbox import Instance

pytestmark = pytest.mark.e2e
PAD = 230  # the placeholder's COMMENT: room for the longest attack's text


def _placeholder(k: int) -> str:
    return f"CREATE TABLE shop.ph{k:02d} (a INT) COMMENT '{'x' * PAD}'"


def _attacks(root: Path) -> dict[str, str]:
    return {
        "account": "CREATE USER 'evil1'@'%' IDENTIFIED BY 'x'",
        "grant": "GRANT ALL ON *.* TO 'evil2'@'%' IDENTIFIED BY 'x' WITH GRANT OPTION",
        "outfile": f"SELECT 'pwned' INTO OUTFILE '{root / 'outfile.txt'}'",
        "load_file": f"CREATE TABLE shop.lf SELECT LOAD_FILE('{root / 'secret.txt'}') AS v",
        "local_infile": "LOAD DATA LOCAL INFILE '/proc/self/environ' INTO TABLE shop.env",
        "set_global": "SET GLOBAL max_connections=4242",
        "plugin": "INSTALL SONAME 'ha_archive'",
        "change_master": "CHANGE MASTER 'evil' TO MASTER_HOST='127.0.0.1', MASTER_PORT=9",
        "shutdown": "SHUTDOWN",
        "mysql_write": "INSERT INTO mysql.global_priv VALUES ('%', 'evil3', '{}')",
        "hidden": "INSERT INTO shop.notes (v) VALUES (1) /*!; GRANT ALL ON *.* TO 'evil4'@'%' IDENTIFIED BY 'x' */",
        "program_tail": "CREATE PROCEDURE shop.p() BEGIN SELECT 1; END; USE mysql; "
                        "INSERT INTO global_priv VALUES ('%', 'evil5', '{}')",
    }


@pytest.fixture(scope="module")
def forged_history(sandbox_root, tmp_path_factory):
    """A source with a physical base, then (archived) one harmless placeholder DDL per attack, statement-format
    data changes, and a row change on `mysqx.plugin` (a table map the row attack renames to mysql); a target
    with the base restored once (a refused replay leaves it as it is, so every attack reuses it)."""
    src, tgt = Instance(sandbox_root, "tp_src"), Instance(sandbox_root, "tp_tgt")
    src.create()
    tgt.create()
    try:
        set_conn("t_tp_src", src)
        set_conn("t_tp_tgt", tgt)
        root = tmp_path_factory.mktemp("trust_pitr")
        root.chmod(0o777)  # the servers write their OUTFILE here (if they ever did)
        (root / "secret.txt").write_text("the-worker-secret\n")
        dest = root / "dest"
        storage = open_storage(f"file://{dest}")
        server = connections.server("t_tp_src")
        with server.session() as cur:
            cur.execute("CREATE DATABASE shop")
            cur.execute("CREATE TABLE shop.env (line TEXT)")
            cur.execute("CREATE TABLE shop.notes (id INT AUTO_INCREMENT PRIMARY KEY, v TEXT)")
            cur.execute("CREATE DATABASE mysqx")
            cur.execute("CREATE TABLE mysqx.plugin (name VARCHAR(64) CHARACTER SET utf8mb3 NOT NULL DEFAULT '' "
                        "PRIMARY KEY, dl VARCHAR(128) CHARACTER SET utf8mb3 NOT NULL DEFAULT '') ENGINE=Aria")
        archive.ship(server, storage)
        plan = physical_backup.preflight({"source_conn_id": "t_tp_src", "destination": f"file://{dest}"})
        physical_backup.finish(plan, physical_backup.stream(plan))
        attacks = _attacks(root)
        with server.session() as cur:
            for k in range(len(attacks)):
                cur.execute(_placeholder(k))
            cur.execute("SET SESSION binlog_format='STATEMENT'")
            cur.execute("INSERT INTO shop.notes (v) VALUES ('it''s \\\\ fine'), (\"double\")")
            cur.connection.commit()
            cur.execute("SET SESSION binlog_format='ROW'")
            cur.execute("INSERT INTO mysqx.plugin VALUES ('evilplug', 'ha_archive.so')")
            cur.connection.commit()
        server.query("FLUSH BINARY LOGS")
        archive.ship(server, storage)
        conf = {"target_conn_id": "t_tp_tgt", "destination": f"file://{dest}", "until": "latest"}
        rplan = physical_restore.preflight({**pitr.preflight(conf).physical, "force": True})
        for step in (physical_restore.stop_target, physical_restore.extract, physical_restore.prepare, physical_restore.start_target):
            step(rplan)
        yield {"root": root, "dest": dest, "storage": storage, "conf": conf, "attacks": attacks, "tgt": tgt, "src": src}
    finally:
        src.destroy()
        tgt.destroy()


@contextlib.contextmanager
def forged(storage, dest: Path, old: bytes, new: bytes) -> Iterator[str]:
    """The archive with `old` (inside one event) rewritten to `new` (padded to its length with spaces), the event's
    CRC32 and its segment's sha256 in chain.json made to match; yields the archived file's name; puts every byte
    back afterwards."""
    assert len(new) <= len(old), (new, old)
    saved: dict[Path, bytes] = {}
    try:
        for branch in archive.branches(storage):
            chain_key = f"binlogs/{branch['id']}/chain.json"
            chain = archive.read_branch(storage, branch["id"])
            for entry in chain.entries:
                for seg in entry.segments:
                    path = dest / "binlogs" / branch["id"] / entry.name / f"{int(seg['offset']):012d}"
                    data = bytearray(path.read_bytes())
                    i = data.find(old)
                    if i < 0:
                        continue
                    at = 4 if int(seg["offset"]) == 0 else 0
                    while True:
                        size = struct.unpack_from("<I", data, at + 9)[0]
                        if at + size > i:
                            break
                        at += size
                    data[i:i + len(old)] = new.ljust(len(old), b" ")
                    data[at + size - 4:at + size] = struct.pack("<I", zlib.crc32(bytes(data[at:at + size - 4])))
                    saved[path] = path.read_bytes()
                    saved[dest / chain_key] = (dest / chain_key).read_bytes()
                    path.write_bytes(data)
                    seg["sha256"] = hashlib.sha256(data).hexdigest()
                    archive.write_branch(storage, chain)
                    yield entry.name
                    return
        raise AssertionError(f"{old!r} is in no archived segment")
    finally:
        for path, raw in saved.items():
            path.write_bytes(raw)


def effects(tgt: Instance, root: Path) -> dict:
    """What an attack would change on the target (or next to it)."""
    server = tgt.server()
    return {
        "accounts": server.query("SELECT User, Host FROM mysql.global_priv ORDER BY 1, 2"),
        "grants": server.query("SELECT GRANTEE, PRIVILEGE_TYPE, IS_GRANTABLE FROM information_schema.USER_PRIVILEGES "
                               "ORDER BY 1, 2"),
        "plugins": server.query("SELECT PLUGIN_NAME, PLUGIN_STATUS FROM information_schema.PLUGINS ORDER BY 1"),
        "mysql.plugin": server.query("SELECT name, dl FROM mysql.plugin ORDER BY 1"),
        "globals": server.query("SELECT @@GLOBAL.max_connections, @@GLOBAL.gtid_slave_pos, @@GLOBAL.read_only"),
        "replication": server.query("SHOW ALL SLAVES STATUS"),
        "tables": server.query("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA IN "
                               "('shop', 'mysqx') ORDER BY 1, 2"),
        "env rows": server.query("SELECT COUNT(*) FROM shop.env"),
        "notes": server.query("SELECT COUNT(*) FROM shop.notes"),
        "outfile": (root / "outfile.txt").exists(),
    }


ATTACKS = ["account", "grant", "outfile", "load_file", "local_infile", "set_global", "plugin", "change_master",
           "shutdown", "mysql_write", "hidden", "program_tail", "mysql_rows"]


def _unchecked_span(conf: dict, monkeypatch) -> dict:
    """The span preflight resolves, its own check of the events left out (what the replay's check alone meets)."""
    with monkeypatch.context() as m:
        m.setattr(pitr, "check_span", lambda *_: 0)
        return pitr.preflight(conf).replay["span"]


@pytest.mark.parametrize("method", ["parallel", "pipe", "auto"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_forged_archived_event_is_refused_by_name_before_anything_is_applied(forged_history, attack, method,
                                                                              monkeypatch):
    """Refused twice over: by the preflight, before the base is restored (the target untouched), and by the
    replay's own check while it cuts the span, before either method applies anything."""
    h = forged_history
    tgt, root, storage = h["tgt"], h["root"], h["storage"]
    if attack == "mysql_rows":
        old, new = b"\x05mysqx\x00\x06plugin\x00", b"\x05mysql\x00\x06plugin\x00"
        named = "row events on mysql.plugin"
    else:
        k = list(h["attacks"]).index(attack)
        old, new = _placeholder(k).encode(), h["attacks"][attack].encode()
        named = h["attacks"][attack][:30]
    server = connections.server("t_tp_tgt")
    before = effects(tgt, root)
    if method == "auto":  # a target whose applier would fire triggers again: auto takes the pipe
        server.query("SET GLOBAL slave_run_triggers_for_rbr='YES'")
    try:
        with forged(storage, h["dest"], old, new) as name:
            with pytest.raises(Refusal) as early:
                pitr.preflight({**h["conf"], "replay_method": method})
            span = _unchecked_span(h["conf"], monkeypatch)
            with pytest.raises(Refusal) as refused:
                replay.apply(server, storage, Span.of(span), f"forged-{attack}-{method}", method)
    finally:
        server.query("SET GLOBAL slave_run_triggers_for_rbr='NO'")
    for message in (str(early.value), str(refused.value)):
        assert f"{name} at byte " in message and "transaction 0-" in message and named in message, message
        assert "Nothing was applied" in message
    assert effects(tgt, root) == before  # no account, grant, file, row, plugin, setting, replica; still running
    assert server.query("SELECT COUNT(*) FROM _lastline.pitr_replay WHERE run_id LIKE 'forged-%'") == [(0,)]


def _relay(storage, span: Span, path: Path) -> list[str]:
    """The span cut to relay files WITHOUT the check (what reached the pipe's client before issue 42)."""
    paths = []
    for k, f in enumerate(span.files, start=1):
        cutter = events.Cutter(f.name, f.start, f.stop, events.gtid_map(span.base_gtid))
        out = path / f"relay.{k:06d}"
        write_relay(storage, f, cutter, f is span.files[-1], connections.server("t_tp_tgt").runner(), str(out))
        paths.append(str(out))
    return paths


@pytest.mark.parametrize("text", [
    "LOAD DATA LOCAL INFILE '/proc/self/environ' INTO TABLE shop.env",
    "INSERT INTO shop.notes (v) VALUES ('a')\n\\! touch {marker}\nsystem touch {marker}\n\\. /proc/self/environ\n",
    # past the check, the pipe's session itself may not: write a file, set a global, grant, replicate, shut down
    # (CREATE USER it may: MariaDB lets INSERT on mysql.* make accounts, and data rights on *.* include mysql.*)
    "SELECT 'pwned' INTO OUTFILE '{root}/outfile.txt'",
    "SET GLOBAL max_connections=4242",
    "GRANT ALL ON *.* TO 'probe_app'@'%' WITH GRANT OPTION",
    "CHANGE MASTER 'evil' TO MASTER_HOST='127.0.0.1', MASTER_PORT=9",
    "SHUTDOWN",
])
def test_the_pipe_client_reads_no_local_file_and_runs_no_client_command(forged_history, tmp_path, text, monkeypatch):
    """Past the check (forged text handed to the pipe directly): the client refuses LOCAL INFILE and never runs a
    program or sources a file; the worker's environment (with a secret in it) never reaches the target; the pipe's
    session is denied a file, a global setting, a grant, a replication connection and a shutdown."""
    h = forged_history
    monkeypatch.setenv("LASTLINE_TEST_SECRET", "s3cret-in-the-worker-env")
    marker = tmp_path / "ran"
    tmp_path.chmod(0o777)
    server = connections.server("t_tp_tgt")
    server.query("CREATE USER IF NOT EXISTS 'probe_app'@'%' IDENTIFIED BY 'x'")  # an application's account
    before = effects(h["tgt"], h["root"])
    with forged(h["storage"], h["dest"], _placeholder(0).encode(),
                text.format(marker=marker, root=h["root"]).encode()):
        span = Span.of(_unchecked_span(h["conf"], monkeypatch))
        paths = _relay(h["storage"], span, tmp_path)
    with pytest.raises(Refusal, match="failed part way"):
        pipe.run(server, paths)
    assert not marker.exists()
    assert effects(h["tgt"], h["root"]) == before  # no environment row: the forged event was the first, nothing ran
    assert server.query("SELECT COUNT(*) FROM mysql.global_priv WHERE User = %s", (pipe.REPLAY_USER,)) == [(0,)]


def test_an_honest_archive_with_statements_and_rows_still_rolls_forward_through_the_pipe(forged_history):
    h = forged_history
    server = connections.server("t_tp_tgt")
    span = Span.of(pitr.preflight(h["conf"]).replay["span"])
    result = replay.apply(server, h["storage"], span, "honest", "pipe")
    assert result["method"] == "pipe" and result["transactions"] >= len(h["attacks"]) + 2
    assert server.query("SELECT v FROM shop.notes ORDER BY id") == [("it's \\ fine",), ("double",)]
    assert server.query("SELECT name FROM mysqx.plugin") == [("evilplug",)]
    assert server.query("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'shop' AND "
                        "TABLE_NAME LIKE 'ph%'") == [(len(h["attacks"]),)]



def _killed_mid_use(tmp_path: Path, script: str, secret: str, env: dict[str, str], remote: str = "") -> list[Path]:
    """Run `script` (it prints `ready` once a child holds the credential), kill -9 it there, end its children by
    pid, and return every file under its temp dir (and the `remote` glob: an SSH host's temp files, here) that
    holds `secret`."""
    import signal
    import subprocess
    import sys
    import time

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **env, "TMPDIR": str(tmp), "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line and line[0] == "ready", line
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)  # the task process, where the credential used to be written from
    proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.kill(int(line[1]), signal.SIGKILL)  # its child (the client), started by this test's script
    time.sleep(1)  # the remote end sees its channel close
    found = [p for p in tmp.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    held = Path("/").glob(remote.lstrip("/")) if remote else iter(())
    return found + [p for p in held if p.is_file() and secret.encode() in p.read_bytes()]


def test_no_option_file_with_a_password_survives_a_kill_9(forged_history, tmp_path):
    """A task killed while its client runs with lastline's option file leaves no file holding the password; the
    client did read it (it logged in with it)."""
    import secrets

    password = "pw-" + secrets.token_hex(12)
    server = connections.server("t_tp_tgt")
    with server.session() as cur:
        cur.execute("CREATE USER IF NOT EXISTS 'secret_probe'@'127.0.0.1' IDENTIFIED BY %s", (password,))
        cur.execute("ALTER USER 'secret_probe'@'127.0.0.1' IDENTIFIED BY %s", (password,))
    port = server.port
    script = (
        "import subprocess\n"
        "from lastline.core.option_files import option_file\n"
        "from lastline.core.servers import Server\n"
        f"s = Server(conn_id='probe', host='127.0.0.1', port={port}, user='secret_probe', password={password!r})\n"
        "with option_file(s) as opt:\n"
        "    p = subprocess.Popen(['mariadb', f'--defaults-extra-file={opt}', '--unbuffered', '-N', '-e', "
        "\"SELECT 'ready', CONNECTION_ID(); SELECT SLEEP(60)\"], stdout=subprocess.PIPE, text=True)\n"
        "    print(p.stdout.readline().split()[0], p.pid, flush=True)\n"
        "    p.wait()\n")
    assert _killed_mid_use(tmp_path, script, password, {}) == []


def test_no_ssh_key_survives_a_kill_9(sshd, tmp_path):
    """A task killed while an SSH command runs leaves no file holding the connection's private key; ssh did use it
    (the command ran on the remote host)."""
    key = json.loads(os.environ["AIRFLOW_CONN_T_SSH"])["extra"]["private_key"]
    secret = key.strip().splitlines()[1]  # a line of the key's body
    script = (
        "import subprocess\n"
        "from lastline.hooks.ssh import ssh_host\n"
        "h = ssh_host('t_ssh')\n"
        "p = h.popen_script('echo ready; sleep 60')\n"
        "print(p.stdout.readline().decode().strip(), p.pid, flush=True)\n"
        "p.wait()\n")
    assert _killed_mid_use(tmp_path, script, secret, {}) == []


def test_no_option_file_on_an_ssh_host_survives_a_kill_9(sshd, tmp_path):
    """An option file lastline hands a tool on an SSH host (mariabackup, the pipe's client) is held open there with
    no name: the remote command reads it, and a kill -9 of the worker leaves no file with the password on the host."""
    import secrets

    password = "pw-" + secrets.token_hex(12)
    script = (
        "from lastline.hooks.ssh import ssh_host\n"
        "h = ssh_host('t_ssh')\n"
        f"with h.private_file('[client]\\npassword={password}\\n') as p:\n"
        f"    proc = h.popen_script('grep -c {password} \"$1\"; sleep 60', p)\n"
        "    print('ready' if proc.stdout.readline().strip() == b'1' else 'unreadable', proc.pid, flush=True)\n"
        "    proc.wait()\n")
    assert _killed_mid_use(tmp_path, script, password, {}, remote="/tmp/lastline-*") == []


NO_BACKSLASH, ANSI = 1 << 20, 1 << 2


@pytest.mark.parametrize("text, mode, charset, refused", [
    ("INSERT INTO shop.t VALUES ('it\\'s', \"GRANT\")", 0, 45, None),
    ("CREATE TABLE t (password VARCHAR(9), user INT, role INT) ENGINE=InnoDB COMMENT 'INTO OUTFILE'", 0, 45, None),
    ("UPDATE users SET password = 'x', user = 1 WHERE id = 2", 0, 45, None),
    ("CREATE TABLE t (a INT) WITH SYSTEM VERSIONING", 0, 45, None),
    ("CREATE DEFINER=`root`@`localhost` TRIGGER tr BEFORE INSERT ON t FOR EACH ROW BEGIN "
     "IF NEW.a > 1 THEN SET NEW.a = 1; END IF; END", 0, 45, None),
    ("XA END X'31',X'',1", 0, 45, None),
    ("ROLLBACK TO SAVEPOINT sp1", 0, 45, None),
    # the event's sql_mode decides where a string ends: without backslash escapes, 'a\' ends before LOAD_FILE
    ("INSERT INTO t VALUES ('a\\', LOAD_FILE('/etc/shadow'))", NO_BACKSLASH, 45, "it holds LOAD_FILE"),
    ("INSERT INTO t VALUES ('a\\', LOAD_FILE('/etc/shadow'))", 0, 45, "cannot read"),  # with them: not one string
    ('INSERT INTO "mysql".global_priv VALUES (1)', ANSI, 45, "it names mysql"),
    ("/*!99999 GRANT ALL ON *.* TO x */", 0, 45, "GRANT"),  # an executable comment is read as code
    ("INSERT INTO t VALUES (1) /* ' */ ; GRANT ALL ON *.* TO x", 0, 45, "second statement"),  # a quote in a comment
    ("SELECT @@global.max_connections", 0, 45, "@@global"),
    ("BEGIN NOT ATOMIC SELECT 1; END", 0, 45, "compound statement"),
    ("CREATE TABLE t (a INT) ENGINE=CONNECT TABLE_TYPE=CSV FILE_NAME='/etc/passwd'", 0, 45, "ENGINE CONNECT"),
    ("CREATE TABLE t (a INT) DATA DIRECTORY = '/tmp'", 0, 45, "DIRECTORY"),
    ("INSERT INTO t VALUES ('x/*!*/;')", 0, 45, "client"),  # mariadb-binlog's delimiter inside a string
    ("INSERT INTO t VALUES (0x27)", 0, 28, "character set"),  # gbk: a quote can hide in a multi-byte character
    # a review: a built-in function named in quotes is the same function
    ("INSERT INTO db1.t SELECT `load_file`('/etc/passwd')", 0, 45, "calls `load_file`"),
    ("CREATE DEFINER=`root`@`localhost` TRIGGER tr AFTER INSERT ON db1.o FOR EACH ROW INSERT INTO db1.log "
     "SELECT `load_file` ('/etc/passwd')", 0, 45, "calls `load_file`"),
    ("INSERT INTO t SELECT `upper`('x')", 0, 45, None),  # any other function, quoted or not, is a function
    # a password or role set inside a body, wherever its SET stands (a list, a handler)
    ("CREATE DEFINER=`root`@`localhost` PROCEDURE db1.p() SET @x=1, PASSWORD FOR app@localhost = PASSWORD('x')",
     0, 45, "sets a password"),
    ("CREATE PROCEDURE db1.p2() BEGIN DECLARE CONTINUE HANDLER FOR SQLEXCEPTION SET PASSWORD FOR app@localhost = "
     "PASSWORD('x'); SIGNAL SQLSTATE '45000'; END", 0, 45, "sets a password"),
    ("CREATE PROCEDURE db1.p3() SET @x=1, ROLE NONE", 0, 45, "sets a role"),
    ("CREATE PROCEDURE db1.p4() BEGIN DECLARE EXIT HANDLER FOR NOT FOUND SET PASSWORD = PASSWORD('x'); END", 0, 45,
     "sets a password"),
    ("CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET NEW.password = SHA2(NEW.password, 256)", 0, 45, None),
    ("FLUSH PRIVILEGES", 0, 45, "not a data change"),  # it would load rows written to mysql.* into the server
])
def test_the_statement_check_reads_as_the_server_does(text, mode, charset, refused):
    from lastline.pitr.statement_check import statement_problem
    from lastline.pitr.statements import Query, Status

    why = statement_problem(Query(0, 0, "shop", 0, Status(sql_mode=mode, charset=(charset, charset, charset)),
                                  text.encode()))
    assert why is None if refused is None else (why is not None and refused in why), why


def _descendants(pid: int) -> list[int]:
    """The pids of every process below `pid` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def test_no_secret_file_survives_a_kill_9_in_the_middle_of_a_physical_backup(forged_history, tmp_path):
    """A physical backup task killed (SIGKILL) while mariabackup streams, logged in with lastline's option file:
    no file under the task's temp dir holds the source's password."""
    import signal
    import subprocess
    import sys
    import time

    password = forged_history["src"].meta()["password"]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = ("from lastline.physical import backup as physical_backup\n"
              f"plan = physical_backup.preflight({{'source_conn_id': 't_tp_src', 'destination': 'file://{tmp_path / 'dest'}'}})\n"
              "physical_backup.finish(plan, physical_backup.stream(plan))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "TMPDIR": str(tmp),
                                                                  "PYTHONPATH": os.pathsep.join(sys.path)})
    deadline, below = time.monotonic() + 120, []
    while time.monotonic() < deadline and proc.poll() is None:
        below = _descendants(proc.pid)
        if any(b"mariabackup" in Path(f"/proc/{p}/cmdline").read_bytes() for p in below
               if Path(f"/proc/{p}/cmdline").exists()):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"mariabackup never ran (exit {proc.poll()})")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for pid in below:  # what the killed task had started (mariabackup, its pipeline)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    assert [p for p in tmp.rglob("*") if p.is_file() and password.encode() in p.read_bytes()] == []


def test_a_compressed_statement_is_checked_as_the_server_uncompresses_it(forged_history):
    """log_bin_compress on the source: its compressed statements pass the check uncompressed (an honest one goes
    through), and one rewritten to a compressed GRANT is refused by name."""
    from lastline.pitr.event_check import CheckedCutter

    src = forged_history["src"]
    server = src.server()
    server.query("SET GLOBAL log_bin_compress=ON")
    try:
        with server.session() as cur:
            cur.execute("SET SESSION binlog_format='STATEMENT'")
            cur.execute("INSERT INTO shop.notes (v) VALUES (%s)", ("compressed " * 60,))
            cur.connection.commit()
            cur.execute("SHOW MASTER STATUS")
            name = cur.fetchone()[0]
    finally:
        server.query("SET GLOBAL log_bin_compress=OFF")
    data = (src.datadir / name).read_bytes()
    at, found = 4, None
    while at < len(data):
        size, kind = struct.unpack_from("<I", data, at + 9)[0], data[at + 4]
        if kind == events.QUERY_COMPRESSED:
            found = (at, size)
        at += size
    assert found, "the source wrote no compressed statement"
    honest = CheckedCutter(name, 4, None, {})
    honest.feed(data)
    assert honest.out.transactions and not honest.stopped  # read through, nothing refused
    at, size = found
    event = bytearray(data[at:at + size])
    status_len = struct.unpack_from("<H", event, 19 + 11)[0]
    text_at = 19 + 13 + status_len + event[19 + 8] + 1
    grant = b"GRANT ALL ON *.* TO 'evil6'@'%' IDENTIFIED BY 'x' WITH GRANT OPTION"
    packed = bytes([0x82]) + len(grant).to_bytes(2, "big") + zlib.compress(grant)
    forged_event = bytearray(event[:text_at] + packed + b"\0\0\0\0")
    struct.pack_into("<I", forged_event, 9, len(forged_event))
    forged_event[-4:] = struct.pack("<I", zlib.crc32(bytes(forged_event[:-4])))
    with pytest.raises(Refusal, match=f"{name} at byte {at}, transaction 0-.*GRANT ALL ON.*reaches beyond data"):
        CheckedCutter(name, 4, None, {}).feed(data[:at] + bytes(forged_event) + data[at + size:])


def test_a_target_account_that_cannot_grant_runs_the_pipe_itself_and_says_so(forged_history, caplog):
    """Where the narrower account cannot be made (here: no GRANT OPTION, so CREATE USER runs and GRANT fails), the
    pipe runs under the connection's own account, with a warning, and no half-made account is left."""
    import dataclasses
    import logging

    server = connections.server("t_tp_tgt")
    server.query("CREATE USER IF NOT EXISTS 'nogrant'@'127.0.0.1' IDENTIFIED BY 'ng-pw'")
    server.query("GRANT ALL PRIVILEGES ON *.* TO 'nogrant'@'127.0.0.1'")
    limited = dataclasses.replace(server, user="nogrant", password="ng-pw", socket=None)
    with caplog.at_level(logging.WARNING, logger="lastline.pitr.pipe"), pipe.account(limited) as used:
        assert used is limited
    assert "the pipe runs under" in caplog.text and "could not make a narrower one" in caplog.text
    assert server.query("SELECT COUNT(*) FROM mysql.global_priv WHERE User = %s", (pipe.REPLAY_USER,)) == [(0,)]
    with pipe.account(server) as narrow:  # the connection's own account can: a narrower one, dropped after
        assert narrow.user == pipe.REPLAY_USER
        grants = " ".join(r[0] for r in narrow.query("SHOW GRANTS"))
        assert "FILE" not in grants and "SUPER" not in grants and "SHUTDOWN" not in grants and "GRANT OPTION" not in grants
    assert server.query("SELECT COUNT(*) FROM mysql.global_priv WHERE User = %s", (pipe.REPLAY_USER,)) == [(0,)]


def test_the_dag_refuses_a_forged_archive_before_the_target_is_touched(run_dag, forged_history):
    """Through the point_in_time_restore DAG: its plan task fails (a refusal: no retry) naming the event, and
    the target still holds what it held (no base restored over it, nothing applied)."""
    h = forged_history
    server = connections.server("t_tp_tgt")
    server.query("CREATE TABLE IF NOT EXISTS shop.untouched (a INT)")
    before = effects(h["tgt"], h["root"])
    k = list(h["attacks"]).index("grant")
    with forged(h["storage"], h["dest"], _placeholder(k).encode(), h["attacks"]["grant"].encode()) as name:
        state_, tis, logs = run_dag("point_in_time_restore", {
            "target_conn_id": "t_tp_tgt", "destination": f"file://{h['dest']}", "until": "latest", "base": "auto",
            "base_kind": "any", "databases": [], "branch": "", "replay_method": "auto", "parallel": 2, "force": True,
            "restore_into_source": "", "aws_conn_id": None})
    assert state_ == "failed", tis
    assert [t for t, s in tis.items() if s == "failed"] == ["plan"], tis  # the first task; nothing after it ran
    assert f"{name} at byte " in logs and "GRANT ALL ON *.* TO 'evil2'" in logs and "reaches beyond data" in logs
    assert effects(h["tgt"], h["root"]) == before  # shop.untouched still there: no base was restored over it
    server.query("DROP TABLE shop.untouched")


@pytest.mark.parametrize(("name", "raw", "read"), [
    ("a plain name", b"shop\x00", "shop"),
    ("a NUL inside: the server reads `mysql`, the length says more", b"mysql\x00x\x00", None),
    ("no terminator", b"mysqlx", None),
    ("not UTF-8", b"sh\xffop\x00", None),
    ("empty", b"\x00", None),
])
def test_a_table_map_name_is_read_as_the_server_reads_it(name, raw, read):
    """A review: a table map whose database was `mysql\\0x` (length 7) passed the check as `mysql\\0x` and wrote into
    `mysql.*`, the server reading the name up to its NUL; such a name is refused."""
    from lastline.pitr.event_check import _map_name

    assert _map_name(raw) == read
