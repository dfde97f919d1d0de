"""`make demo`: start a source and a target sandbox; physical backup + restore, then logical backup +
restore (with its report), through the DAGs; compare every table after each restore; then archive the
source's binlogs once; then an encrypted backup, a key rotation, a verify and the restore of it, in a folder of
their own (lastline_dev.demo_encryption). It leaves a deployment where every DAG, triggered from its form with the form's
defaults, succeeds: the connections each default names (a staging, a drill and a replica server among them),
the masking rules of the demo's data (the Variable lastline_masking_rules) and a binlog archive.

Everything lives under `.demo/` in the repo (LASTLINE_DEMO_DIR: elsewhere); the machine's own MariaDB is never
touched.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

from lastline.get_provider_info import field_defaults
from lastline.logical.format.chunk_files import private_file
from lastline.manifest import complete_backups, read_manifest
from lastline.storage import open_storage
from lastline_dev.compare import compare, table_checksums
from lastline_dev.dataset import DATABASE, DEFAULT_SEED
from lastline_dev.demo_encryption import ENCRYPTION_CONN, key_connection, showcase
from lastline_dev.sandbox import Instance, bulk_rows, quiet_port

ROOT = Path(__file__).resolve().parents[2]
DEMO = Path(os.environ.get("LASTLINE_DEMO_DIR") or ROOT / ".demo")
SEED = int(os.environ.get("LASTLINE_DEMO_SEED", DEFAULT_SEED))  # the store dataset's seed


def say(text: str) -> None:
    """Print a demo line at once."""
    print(f"demo: {text}", flush=True)


def run_dag(dag_id: str, conf: dict, env: dict) -> float:
    """`bin/airflow dags test DAG -c CONF`, output to .demo/logs/DAG.log; return seconds."""
    log = DEMO / "logs" / f"{dag_id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    shown = log.relative_to(ROOT) if log.is_relative_to(ROOT) else log
    say(f"bin/airflow dags test {dag_id} -c '{json.dumps(conf)}'   (log: {shown})")
    t0 = time.monotonic()
    with open(log, "w") as fh:
        proc = subprocess.run([str(ROOT / "bin/airflow"), "dags", "test", dag_id, "-c", json.dumps(conf)],
                              stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    seconds = time.monotonic() - t0
    text = log.read_text()
    for line in text.splitlines():
        if any(k in line for k in ("preflight ok", "stream done", "manifest written", "extract ok", "prepare ok",
                                   "verify ok", "started in", "stopped in", "Task failed", "Error", "snapshot opened",
                                   "logical backup complete", "tune: set", "plan:", "revert: restored", "report:",
                                   "finalize:", "[lastline.airflow.failures]")):  # a failed step: its whole reason
            say("  " + line.split("] ", 1)[-1].split(" [lastline")[0].strip())  # whole: a line cut mid-value says less than none
        elif re.match(r"\s+total\s", line):  # the last line of the restore report
            say("  restore" + line.split(" [lastline")[0])
    if proc.returncode != 0 or "state=success" not in text:
        say(f"{dag_id} FAILED; see {log}")
        sys.exit(1)
    return seconds


SERVERS = ("source", "target", "staging", "drill")  # the demo's sandboxes; staging and drill empty until a DAG fills them
REPLICA = "replica"  # a fifth: a replica's host, its datadir empty and its server stopped until replica_rebuild builds it
REPLICATION_USER = "lastline_repl"  # the replica's account on the source (REPLICATION SLAVE only)
# the demo deployment's masking rules (the Airflow Variable lastline_masking_rules): every column of the store and
# bulk databases the PII guard flags, with the strategy staging_refresh's refusal on the demo's data suggests, but
# "keep" (on the record) where the demo knows the column holds nothing personal (the bulk tables' generated hex, a
# few values of which pass Luhn's check; film categories; languages), and "name" (two made-up words) for first and
# last names: the dataset's names are made of syllables as first_name's and last_name's made-up ones are, and one
# of those can equal another row's original, which the masking's verification refuses. So a refresh with the
# form's defaults, or one a backup starts, succeeds
ODD = "store.`gift card's \"ledger\".v2 ``x```"  # the dataset's table with quotes, dots and spaces in its names
MASKING_RULES = {
    **{f"bulk.{table}.{column}": "keep" for table in bulk_rows(1) for column in ("c", "pad")},
    "store.actor.first_name": "name", "store.actor.last_name": "name",
    "store.address.address": "hash", "store.address.address2": "hash", "store.address.postal_code": "hash",
    "store.address.phone": "phone",
    "store.category.name": "keep", "store.language.name": "keep",
    "store.customer.first_name": "name", "store.customer.last_name": "name", "store.customer.email": "email",
    "store.film_poster.image": "fixed:",
    f"{ODD}.`card no.`": "keep",  # the table's integer primary key: a card's number in name only
    f"{ODD}.`holder's \"name\"`": "name",
    "store.staff.first_name": "name", "store.staff.last_name": "name", "store.staff.email": "email",
    "store.staff.picture": "null", "store.staff.username": "name",
}


STORAGE_KEY_CONN = "lastline_storage_key"
# every connection the demo stores: each connection a DAG's form names by default is one of them (tests/e2e/test_demo_forms.py)
CONNECTION_IDS = (*(f"lastline_{name}" for name in (*SERVERS, REPLICA)), "lastline_replication", "lastline_masking",
                  STORAGE_KEY_CONN, ENCRYPTION_CONN)


def servers() -> dict[str, Instance]:
    return {name: Instance(DEMO / "sandbox", name) for name in SERVERS}


def replica() -> Instance:
    """The replica's sandbox (see REPLICA)."""
    return Instance(DEMO / "sandbox", REPLICA)


def connections(found: dict[str, Instance], host: Instance) -> dict[str, dict]:
    """Every connection the DAGs' form defaults name (CONNECTION_IDS): the four servers, the replica, the
    replication account (the source as the replica reaches it), the masking key and the storage key."""
    conns = {f"lastline_{name}": inst.connection(f"lastline_{name}") for name, inst in found.items()}
    for name in ("staging", "drill"):
        conns[f"lastline_{name}"]["extra"]["role"] = name
    conns[f"lastline_{REPLICA}"] = host.connection(f"lastline_{REPLICA}")
    for name, what in (("source", "the demo's source: the store dataset and generated rows; the backups are taken here"),
                       ("target", "the demo's target: restores write here"),
                       ("staging", "the demo's staging server (role staging): staging_refresh writes here, masked"),
                       ("drill", "the demo's drill server (role drill): restore_drill replaces its data each time"),
                       (REPLICA, "the demo's replica of the source: replica_rebuild builds it (its datadir is empty "
                                 "until then), replica_detach cuts it off")):
        conns[f"lastline_{name}"]["description"] = what
    conns["lastline_replication"] = {
        "conn_type": "lastline", "host": "127.0.0.1", "port": found["source"].meta()["port"], "login": REPLICATION_USER,
        "password": _key("replication"), "extra": field_defaults(),
        "description": "the source as the demo's replica reaches it, and the replica's account there (REPLICATION SLAVE)"}
    conns["lastline_masking"] = {"conn_type": "generic", "password": _key("masking"),
                                 "description": "the demo's masking key (staging_refresh): a key of its own"}
    conns[STORAGE_KEY_CONN] = {"conn_type": "generic", "login": "demo-1", "password": _key("storage"),
                               "description": "the demo's storage key: signs every manifest and archive file "
                                              "(LASTLINE_STORAGE_KEY_CONN_ID); its login is the key's id"}
    conns[ENCRYPTION_CONN] = key_connection(_key)  # the demo's encrypted backups only (demo_encryption)
    if sorted(conns) != sorted(CONNECTION_IDS):
        raise AssertionError(f"the demo's connections {sorted(conns)} are not its CONNECTION_IDS: update both")
    return conns


def save_connections(found: dict[str, Instance]) -> None:
    """Put the demo servers' connections into the project's Airflow database (`bin/airflow connections
    import`), where the UI (`make ui`) and every `bin/airflow` command find them: `lastline_source`,
    `lastline_target`, `lastline_staging` (role staging), `lastline_drill` (role drill), `lastline_replica`,
    `lastline_replication`, the masking key `lastline_masking`, the storage key and the encryption key
    `lastline_encryption` as its rotation leaves it (keys of the demo's own, kept in .demo/*.key); and the masking
    rules, the Variable `lastline_masking_rules`: every DAG can be triggered from its form with its defaults."""
    put_connections(connections(found, replica()))
    variable = subprocess.run([str(ROOT / "bin/airflow"), "variables", "set", "--description",
                               "the demo's masking rules: every column of its data that looks personal (staging_refresh)",
                               "lastline_masking_rules", json.dumps(MASKING_RULES)], capture_output=True, text=True, cwd=ROOT)
    if variable.returncode:
        raise SystemExit(f"demo: could not store the masking rules in the Airflow database:\n{variable.stderr[-2000:]}")


def put_connections(conns: dict[str, dict]) -> None:
    """Store `conns` in the project's Airflow database (`bin/airflow connections import --overwrite`). Their
    passwords are written into an anonymous file (linked nowhere: a kill -9 leaves none of it) that the import reads
    through a link to this process's descriptor (`connections-<pid>.json`, named for the import's format: a kill
    leaves only the link, dangling)."""
    DEMO.mkdir(parents=True, exist_ok=True)
    fd = private_file(str(DEMO))
    link = DEMO / f"connections-{os.getpid()}.json"
    try:
        with open(fd, "w", closefd=False) as fh:
            json.dump(conns, fh, indent=1)
        link.unlink(missing_ok=True)
        link.symlink_to(f"/proc/{os.getpid()}/fd/{fd}")
        proc = subprocess.run([str(ROOT / "bin/airflow"), "connections", "import", "--overwrite", str(link)],
                              capture_output=True, text=True, cwd=ROOT)
    finally:
        link.unlink(missing_ok=True)
        os.close(fd)
    if proc.returncode:
        raise SystemExit(f"demo: could not store the connections in the Airflow database:\n{proc.stderr[-2000:]}")


def _key(name: str) -> str:
    """One of the demo's keys (masking, storage, the replication account's password): made once, kept 0600 in
    the demo's folder."""
    path = DEMO / f"{name}.key"
    if not path.exists() or not path.read_text().strip():  # an empty one: a try killed before it was written
        DEMO.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)  # an empty file found there keeps its own mode through O_TRUNC
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def _usable(inst: Instance) -> bool:
    """Whether a sandbox an earlier try left starts and lets lastline's account in (a try killed while it was
    being created leaves one that does not)."""
    try:
        inst.start()
        inst.server().query("SELECT 1")
        return True
    except Exception as exc:  # noqa: BLE001 - any failure means: make it anew
        say(f"the {inst.name} sandbox an earlier try left does not answer ({str(exc).splitlines()[0][:200]}): making it anew")
        return False


def _fill_source(source: Instance, bulk_mb: int) -> None:
    """Load what the source lacks: the store dataset (checked by its marker and row counts) and the bulk rows.

    An earlier try that failed or was killed half way leaves a source without them; it is filled again here, so
    that no later step compares two empty servers and calls them equal."""
    if amiss := source.holds_store(SEED):
        say(f"loading the store dataset (seed {SEED}) into the source: {amiss}")
        source.load_store(SEED)
        if still := source.holds_store(SEED):
            raise SystemExit(f"demo: the store dataset did not load whole ({still}); run `make clean` and try again")
    bulk = bulk_rows(bulk_mb)
    if amiss := source.holds_tables("bulk", bulk):
        say(f"generating {bulk_mb} MB of rows in bulk.* on the source: {amiss}")
        source.load_tables("bulk", bulk)


def _replication_user(source: Instance) -> None:
    """The replica's account on the source (REPLICATION SLAVE only), its password the demo's key: made, or made
    to match the key again."""
    password = _key("replication")
    with source.server().session() as cur:
        cur.execute(f"CREATE USER IF NOT EXISTS '{REPLICATION_USER}'@'127.0.0.1' IDENTIFIED BY %s", (password,))
        cur.execute(f"ALTER USER '{REPLICATION_USER}'@'127.0.0.1' IDENTIFIED BY %s", (password,))
        cur.execute(f"GRANT REPLICATION SLAVE ON *.* TO '{REPLICATION_USER}'@'127.0.0.1'")


def start_replica(fresh: bool) -> Instance:
    """The replica's host: made when missing; `fresh` (`make demo`): emptied when an earlier rebuild filled it, so
    that replica_rebuild's defaults (no force) find an empty datadir; else a replica a rebuild made is started."""
    host = replica()
    if host.exists() and fresh:
        if host.holds_server() or host.pid():
            say(f"emptying the {REPLICA} sandbox an earlier run rebuilt: replica_rebuild builds it again from the source")
        host.destroy()
    if not host.exists():
        host.destroy()  # what a killed try left
        say(f"creating the {REPLICA} sandbox (.demo/sandbox/{REPLICA}): an empty datadir, stopped, for replica_rebuild")
        host.create_host(port=quiet_port(str(host.dir.resolve())))  # free when the rebuild starts it
    elif host.holds_server():
        try:
            host.start()
        except Exception as exc:  # noqa: BLE001 - a rebuild that failed half way: the next one (with force) replaces it
            say(f"the {REPLICA} sandbox does not start ({str(exc).splitlines()[0][:200]}): rebuild it with force")
    return host


def start_servers(fresh_replica: bool = False) -> dict[str, Instance]:
    """The demo's four sandboxes, created when missing or unusable, started; the source holds the store dataset
    and the generated rows (loaded again when an earlier try left them incomplete) and the replica's account; the
    replica's host (see start_replica)."""
    bulk_mb = int(os.environ.get("LASTLINE_DEMO_BULK_MB", "50"))
    found = servers()
    for name, inst in found.items():
        if inst.exists() and not _usable(inst):
            inst.destroy()
        if not inst.exists():
            inst.destroy()  # what a try killed before the instance was whole left (a datadir half made, a server)
            say(f"creating the {name} sandbox (.demo/sandbox/{name})"
                + (f": the store dataset + {bulk_mb} MB of generated rows" if name == "source" else ": empty"))
            try:
                inst.create()
            except BaseException:
                inst.destroy()  # nothing half made is left for the next try to reuse
                raise
    _fill_source(found["source"], bulk_mb)
    _replication_user(found["source"])
    start_replica(fresh_replica)
    return found


def main() -> int:
    """Run the demo end to end and print what it did."""
    t0 = time.monotonic()
    found = start_servers(fresh_replica=True)
    source, target = found["source"], found["target"]
    say(", ".join(f"{name} on 127.0.0.1:{inst.meta()['port']}" for name, inst in found.items())
        + f" ({time.monotonic() - t0:.1f} s)")
    save_connections(found)
    say("connections lastline_source, lastline_target, lastline_staging (role staging), lastline_drill (role drill), "
        "lastline_replica, lastline_replication, the keys lastline_masking, lastline_storage_key and lastline_encryption, "
        "and the masking rules "
        "(the Variable lastline_masking_rules) are in the project's Airflow database: every DAG can be triggered from "
        "`make ui` with its form's defaults")
    dest = f"file://{DEMO / 'backups'}"  # both kinds of backup: `latest` picks the newest of the restore's kind
    # the demo's deployment settings: its folder is where runs may keep backups, and it runs unattended (the
    # approval a person gives in the UI before data is replaced is a setting of the deployment, not of a run)
    # and its backups are signed with its storage key (a physical restore refuses an unsigned one)
    env = {**os.environ, "LASTLINE_DESTINATION": dest, "LASTLINE_APPROVAL": "false",
           "LASTLINE_STORAGE_KEY_CONN_ID": STORAGE_KEY_CONN}
    b = run_dag("physical_backup", {"source_conn_id": "lastline_source", "destination": dest}, env)
    storage = open_storage(dest)
    m = read_manifest(storage, complete_backups(storage, "physical")[-1], require=False)  # the restore checks its MAC
    say(f"backup {m.backup_id}: {m.bytes / 1e6:.1f} MB ({m.compression}) of a {m.datadir_bytes / 1e6:.0f} MB datadir, "
        f"sha256 {m.sha256[:16]}..., binlog {m.binlog_file}:{m.binlog_position}, GTID {m.gtid}, {len(m.tables)} tables")
    r = run_dag("physical_restore", {"target_conn_id": "lastline_target", "backup": f"{dest}/latest", "force": True}, env)

    sums = table_checksums(source.server())
    if not any(name.startswith(f"{DATABASE}.") for name in sums) or not any(name.startswith("bulk.") for name in sums):
        say(f"the source holds no {DATABASE}.* or bulk.* tables: a comparison would prove nothing; run `make clean`")
        return 1
    diff = compare(source.server(), target.server())
    say(f"CHECKSUM TABLE on {len(sums)} tables: " + ("all equal on source and target" if not diff else f"DIFFER: {diff}"))
    for name in (f"{DATABASE}.film", f"{DATABASE}.payment", "bulk.t1"):
        if name in sums:
            say(f"  {name:<16} {sums[name]}")
    say(f"physical: backup DAG {b:.1f} s, restore DAG {r:.1f} s (wall time of `airflow dags test`, start-up included)")

    lb = run_dag("logical_backup", {"source_conn_id": "lastline_source", "destination": dest}, env)
    lr = run_dag("logical_restore", {"target_conn_id": "lastline_target", "backup": f"{dest}/latest", "force": True,
                                     "redo_log_bytes": 256 << 20}, env)
    ldiff = compare(source.server(), target.server())
    say(f"after the logical restore, CHECKSUM TABLE on {len(sums)} tables: "
        + ("all equal on source and target" if not ldiff else f"DIFFER: {ldiff}"))
    say(f"logical: backup DAG {lb:.1f} s, restore DAG {lr:.1f} s; the restore's report and chart are named above")
    # the archive a point-in-time restore rolls forward with: its form's default (until latest) needs one
    ba = run_dag("binlog_archive", {"source_conn_id": "lastline_source", "destination": dest, "until_current": True}, env)
    say(f"binlog archive: the source's binlogs up to now in {dest}/binlogs ({ba:.1f} s): point_in_time_restore "
        "can roll a backup forward to latest")
    sealed = showcase(DEMO, source, target, env, _key, put_connections, run_dag, say)
    say("the sandboxes keep running: `.venv/bin/python -m lastline_dev.sandbox --root .demo/sandbox "
        "status`; `make clean` stops and removes them")
    say("next: `make ui` opens Airflow's UI on these servers (http://127.0.0.1:8080, or the next free port: it says "
        "which): trigger a restore from its form")
    return 1 if diff or ldiff or not sealed else 0


if __name__ == "__main__":
    sys.exit(main())
