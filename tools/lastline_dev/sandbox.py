"""Throwaway MariaDB servers for the demo, the tests and the benchmarks.

Each instance lives in `<root>/<name>/`: its own datadir, socket, loopback port, pid file, error
log and an option file that includes a `conf.d/` folder. Instances are started as child daemons
and stopped by PID; the machine's own MariaDB service is never touched.

    python -m lastline_dev.sandbox --root .sandbox start source --store --bulk-mb 50
    python -m lastline_dev.sandbox --root .sandbox conn source     # the Airflow connection, as JSON
    python -m lastline_dev.sandbox --root .sandbox stop source
"""
from __future__ import annotations

import argparse
import getpass
import hashlib
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lastline.core.errors import ServerError
from lastline.core.option_files import option_file
from lastline.core.servers import Server
from lastline.core.sql import qualified
from lastline.get_provider_info import field_defaults
from lastline_dev import dataset

USER = "lastline"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quiet_port(name: str) -> int:
    """A port on 127.0.0.1 free right now and below the ephemeral range that free_port and every outgoing connection
    draw from, searched from a place `name` picks: for a server that starts long after its port is chosen (a
    replica's host that a rebuild fills), whose port another sandbox or a client's socket would otherwise take."""
    start = 20000 + int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") % 12000
    for port in [*range(start, 32000), *range(20000, start)]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise ServerError("no free port on 127.0.0.1 between 20000 and 32000")


def bulk_rows(megabytes: int, tables: int = 4) -> dict[str, int]:
    """The tables `load_bulk` makes for about `megabytes` MB, with their row counts."""
    row_bytes = 300  # id + ints + a 200-char payload + the secondary index, as InnoDB stores it
    rows = max(1, megabytes * 1_000_000 // row_bytes // tables)
    return {f"t{t}": rows for t in range(1, tables + 1)}


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by its parent, does not count)."""
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own child
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def find_sakila() -> Path | None:
    """The Sakila folder named by $LASTLINE_SAKILA_DIR, if it holds sakila-schema.sql: an optional extra, never
    looked for elsewhere (the demo and the tests use lastline's own dataset, `store`)."""
    cand = os.environ.get("LASTLINE_SAKILA_DIR")
    if cand and (Path(cand) / "sakila-schema.sql").exists():
        return Path(cand)
    return None


@dataclass
class Instance:
    """One sandbox server and its files."""

    root: Path
    name: str

    @property
    def dir(self) -> Path:
        return self.root / self.name

    @property
    def datadir(self) -> Path:
        return self.dir / "data"

    @property
    def cnf(self) -> Path:
        return self.dir / "my.cnf"

    @property
    def conf_d(self) -> Path:
        return self.dir / "conf.d"

    @property
    def pidfile(self) -> Path:
        return self.dir / "mariadbd.pid"

    @property
    def sock(self) -> Path:
        return self.dir / "mariadbd.sock"

    @property
    def errlog(self) -> Path:
        return self.dir / "error.log"

    def shared_password(self) -> str:
        """One password for every instance under a root, as a fleet shares its backup user.

        A physical restore brings the source's users along, so the target's connection keeps working.
        """
        path = self.root / ".password"
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(12) + "#'x")  # characters that need quoting
            path.chmod(0o600)
        return path.read_text()

    def meta(self) -> dict:
        """port, password and options chosen at creation."""
        return json.loads((self.dir / "instance.json").read_text())

    def exists(self) -> bool:
        return (self.dir / "instance.json").exists()

    def pid(self) -> int | None:
        """The running server's PID, if any."""
        try:
            pid = int(self.pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if alive(pid) else None

    def server(self, conn_id: str | None = None) -> Server:
        """This instance as a lastline Server (what its Airflow connection describes)."""
        meta = self.meta()
        return Server(
            conn_id=conn_id or f"sandbox_{self.name}",
            host="127.0.0.1",
            port=meta["port"],
            user=USER,
            password=meta["password"],
            datadir=str(self.datadir),
            config_dir=str(self.conf_d),
            service_start=self._service("start"),
            service_stop=self._service("stop"),
            protected=meta.get("protected", False),
        )

    def _service(self, verb: str) -> str:
        """The connection's service command (service.sh: plain shell, the stand-in for systemctl)."""
        return f"sh {shlex.quote(str(Path(__file__).with_name('service.sh')))} {verb} {shlex.quote(str(self.dir.resolve()))}"

    def connection(self, conn_id: str | None = None) -> dict:
        """The Airflow connection (JSON form of AIRFLOW_CONN_*)."""
        s = self.server(conn_id)
        extra = {
            "datadir": s.datadir,
            "config_dir": s.config_dir,
            "service_start": s.service_start,
            "service_stop": s.service_stop,
        }
        if s.protected:
            extra["protected"] = True
        extra = {**field_defaults(), **extra}  # every field of the connection form, so that editing it shows them all
        return {"conn_type": "lastline", "host": s.host, "port": s.port, "login": s.user, "password": s.password,
                "description": f"sandbox MariaDB {self.name} ({self.dir})", "extra": extra}

    # -- lifecycle -------------------------------------------------------------------------------

    def create(self, port: int | None = None, server_id: int | None = None, protected: bool = False) -> None:
        """Write the option file and initialise an empty datadir."""
        meta = self.configure(port, server_id)
        proc = subprocess.run(
            ["mariadb-install-db", f"--defaults-file={self.cnf}", "--auth-root-authentication-method=normal",
             "--skip-test-db"],
            capture_output=True, text=True,
        )
        if proc.returncode != 0:
            raise ServerError(f"mariadb-install-db failed for {self.dir}:\n{proc.stderr[-2000:]}")
        self._write_meta({**meta, "protected": protected})
        self.start()
        root = Server(conn_id="root", socket=str(self.sock), user="root")
        conn = root.connect()
        cur = conn.cursor()
        for host in ("127.0.0.1", "localhost"):
            cur.execute(f"CREATE USER '{USER}'@'{host}' IDENTIFIED BY %s", (meta["password"],))
            cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'{host}' WITH GRANT OPTION")
        conn.close()

    def create_host(self, port: int | None = None, server_id: int | None = None) -> None:
        """Write the option file and leave the datadir empty, the server stopped: a host waiting for a server
        (a replica that replica_rebuild builds from its source; the source's accounts come with it)."""
        self._write_meta({**self.configure(port, server_id), "protected": False})

    def holds_server(self) -> bool:
        """Whether the datadir holds a server's files (its system tables), not nothing."""
        return (self.datadir / "mysql").is_dir()

    def _write_meta(self, meta: dict) -> None:
        """instance.json, written last: an instance without it is half made."""
        path = self.dir / "instance.json"
        path.write_text(json.dumps(meta))
        path.chmod(0o600)

    def configure(self, port: int | None = None, server_id: int | None = None) -> dict:
        """The instance's folders and option file; returns what instance.json will hold (port, password, server_id)."""
        self.conf_d.mkdir(parents=True, exist_ok=True)
        self.datadir.mkdir(parents=True, exist_ok=True)
        (self.dir / "tmp").mkdir(exist_ok=True)  # its own tmpdir: servers of other test runs never share its temp files
        port = port or free_port()
        password = self.shared_password()
        server_id = server_id or (port % 100000) + 1
        self.cnf.write_text(
            "[mysqld]\n"
            f"datadir={self.datadir}\nsocket={self.sock}\nport={port}\nbind-address=127.0.0.1\n"
            f"pid-file={self.pidfile}\nlog-error={self.errlog}\nuser={getpass.getuser()}\n"
            f"skip-name-resolve\nlocal-infile=1\ntmpdir={self.dir / 'tmp'}\n"
            f"server-id={server_id}\nlog-bin=mariadb-bin\nbinlog-format=ROW\n"
            "innodb-buffer-pool-size=256M\ninnodb-log-file-size=64M\n"
            "character-set-server=utf8mb4\ncollation-server=utf8mb4_general_ci\n"
            f"!includedir {self.conf_d}\n"
        )
        return {"port": port, "password": password, "server_id": server_id}

    def start(self, timeout: float = 60) -> None:
        """Start the server (if not running) and wait until it answers."""
        pid = self.pid()
        deadline = time.monotonic() + timeout
        while pid and alive(pid) and time.monotonic() < deadline:  # starting up, or killed and not yet gone
            if self._answers():
                return
            time.sleep(0.2)
        with open(self.dir / "mariadbd.out", "ab") as out:
            subprocess.Popen(
                ["mariadbd", f"--defaults-file={self.cnf}"],
                stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sock.exists() and self.pid() and self._answers():
                return
            time.sleep(0.2)
        tail = self.errlog.read_text()[-2000:] if self.errlog.exists() else "(no error log)"
        raise ServerError(f"sandbox {self.name} did not start within {timeout} s; error log ends:\n{tail}")

    def _answers(self) -> bool:
        """Whether the server answers on its socket (as root; a wrong password still means it answers)."""
        try:
            Server(conn_id="root", socket=str(self.sock), user="root", password="").connect(connect_timeout=2).close()
            return True
        except ServerError as exc:
            return "wrong user or password" in str(exc) or "Access denied" in str(exc)

    def stop(self, timeout: float = 120) -> None:
        """Stop the server by PID (SIGTERM, then SIGKILL after `timeout`)."""
        pid = self.pid()
        if not pid:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not alive(pid):
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)

    def destroy(self) -> None:
        """Stop and remove every file of the instance."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- data ------------------------------------------------------------------------------------

    def load_sql_file(self, path: Path) -> None:
        """Feed an SQL file to the `mariadb` client."""
        self.load_sql(path.read_bytes(), str(path))

    def load_sql(self, sql: bytes, what: str = "SQL") -> None:
        """Feed SQL text to the `mariadb` client (on its stdin)."""
        with option_file(self.server()) as opt:
            proc = subprocess.run(["mariadb", f"--defaults-extra-file={opt}", "--comments"], input=sql, capture_output=True)
        if proc.returncode != 0:
            raise ServerError(f"loading {what} failed: {proc.stderr.decode()[-2000:]}")

    def load_store(self, seed: int = dataset.DEFAULT_SEED, versioned: bool = False) -> None:
        """(Re)create lastline's own dataset, the rental store `store`, from `seed` (`store_history` too when
        `versioned`); its marker table is written last."""
        self.load_sql(dataset.generate(seed, versioned).sql.encode(), f"the {dataset.DATABASE} dataset (seed {seed})")

    def holds_store(self, seed: int = dataset.DEFAULT_SEED) -> str | None:
        """None when this server holds the store dataset of `seed` whole, else what is amiss."""
        return dataset.holds(self.server(), seed)

    def load_sakila(self) -> None:
        """Load the Sakila sample database from $LASTLINE_SAKILA_DIR (an optional extra: nothing requires it)."""
        d = find_sakila()
        if d is None:
            raise FileNotFoundError("Sakila not found: set LASTLINE_SAKILA_DIR to the folder with sakila-schema.sql")
        self.load_sql_file(d / "sakila-schema.sql")
        self.load_sql_file(d / "sakila-data.sql")

    def load_bulk(self, megabytes: int, tables: int = 4) -> None:
        """Generate about `megabytes` MB of InnoDB rows in `bulk.t1..tN` (sequence engine, in-server)."""
        self.load_tables("bulk", bulk_rows(megabytes, tables))

    def holds_tables(self, database: str, rows: dict[str, int]) -> str | None:
        """None when `database` has each table of `rows` with that many rows, else what is amiss."""
        with self.server().session() as cur:
            for name, n in rows.items():
                cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                            (database, name))
                if not cur.fetchone()[0]:
                    return f"{database}.{name} is missing"
                cur.execute(f"SELECT COUNT(*) FROM {qualified(database, name)}")
                got = cur.fetchone()[0]
                if got != n:
                    return f"{database}.{name} has {got} rows, not {n}"
        return None

    def load_tables(self, database: str, rows: dict[str, int]) -> None:
        """(Re)create sysbench-shaped tables (id, k, c, pad; KEY k) with the given row counts, in-server."""
        conn = self.server().connect()
        cur = conn.cursor()
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")
        cur.execute(f"USE `{database}`")  # the seq_ tables of the sequence engine need a current database
        cur.execute("SET SESSION sql_log_bin=0")
        for name, n in rows.items():
            table = f"`{database}`.`{name}`"
            cur.execute(f"DROP TABLE IF EXISTS {table}")
            cur.execute(
                f"CREATE TABLE {table} (id BIGINT UNSIGNED PRIMARY KEY, k INT NOT NULL, "
                "c CHAR(120) NOT NULL, pad VARCHAR(80) NOT NULL, KEY k (k)) ENGINE=InnoDB"
            )
            step = 200_000
            for lo in range(1, n + 1, step):
                hi = min(n, lo + step - 1)
                cur.execute(
                    f"INSERT INTO {table} SELECT seq, FLOOR(RAND(seq)*1000000), "
                    "CONCAT_WS('-', MD5(seq), MD5(seq+1), MD5(seq+2)), CONCAT(SHA1(seq), SHA1(seq*3)) "
                    f"FROM seq_{lo}_to_{hi}"
                )
                conn.commit()
        conn.close()


def main(argv: list[str] | None = None) -> int:
    """Command line: create/start, stop, destroy, conn, status."""
    p = argparse.ArgumentParser(prog="python -m lastline_dev.sandbox", description=__doc__.split("\n")[0])
    p.add_argument("--root", default=os.environ.get("LASTLINE_SANDBOX_ROOT", ".sandbox"))
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="create (first time) and start an instance")
    s.add_argument("name")
    s.add_argument("--port", type=int)
    s.add_argument("--store", action="store_true", help="load lastline's own dataset (database store) on creation")
    s.add_argument("--seed", type=int, default=dataset.DEFAULT_SEED, help="the store dataset's seed")
    s.add_argument("--sakila", action="store_true", help="load Sakila from $LASTLINE_SAKILA_DIR on creation (optional)")
    s.add_argument("--bulk-mb", type=int, default=0, help="generate this many MB of bulk rows on creation")
    s.add_argument("--protected", action="store_true", help="mark the connection as production")
    for verb in ("stop", "destroy", "conn"):
        sub.add_parser(verb).add_argument("name")
    sub.add_parser("status")
    args = p.parse_args(argv)
    root = Path(args.root).resolve()
    if args.cmd == "status":
        for d in sorted(root.glob("*/instance.json")):
            inst = Instance(root, d.parent.name)
            print(f"{inst.name}: port {inst.meta()['port']}, pid {inst.pid() or '-'}, datadir {inst.datadir}")
        return 0
    inst = Instance(root, args.name)
    if args.cmd == "start":
        if inst.exists():
            inst.start()
        else:
            inst.create(port=args.port, protected=args.protected)
            if args.store:
                inst.load_store(args.seed)
            if args.sakila:
                inst.load_sakila()
            if args.bulk_mb:
                inst.load_bulk(args.bulk_mb)
        print(f"{inst.name}: running on 127.0.0.1:{inst.meta()['port']}, pid {inst.pid()}")
    elif args.cmd == "stop":
        inst.stop()
    elif args.cmd == "destroy":
        inst.destroy()
    elif args.cmd == "conn":
        print(json.dumps(inst.connection()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
