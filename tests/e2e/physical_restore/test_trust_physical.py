"""Someone who can write backup storage forges a physical backup: a `backup-my.cnf` that tells `mariabackup --prepare`
to load a library shipped in the same stream, include other option files, or put InnoDB's files elsewhere, with the
manifest's sha256 and sizes rewritten so that every existing check passes. Real sandboxes, real mariabackup/mbstream.

The target's datadir belongs to the `mysql` OS user (the sandbox server itself runs as root): extract and prepare run
as that user, never as root."""
from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import set_conn
from lastline.core.errors import LastlineError
from lastline.manifest import read_manifest
from lastline.physical import backup as physical_backup
from lastline.physical import restore as physical_restore
from lastline.storage import open_storage
from lastline_dev.sandbox import Instance

pytestmark = pytest.mark.e2e

OWNER = "mysql"
EVIL_C = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void hit(void) {
  FILE *f = fopen(MARKER, "a");
  if (f) { fprintf(f, "loaded as uid %d\n", (int)getuid()); fclose(f); }
}
"""
SHIM = """#!/bin/sh
echo "$(basename "$0") uid=$(id -u) $*" >> {log}
exec {real} "$@"
"""


@pytest.fixture(scope="module")
def world() -> Iterator[Path]:
    """A folder every user may traverse (pytest's own tmp folder is root's alone), for the sandboxes and the marker."""
    try:
        pwd.getpwnam(OWNER)
    except KeyError:
        pytest.skip(f"no {OWNER} user on this host")
    path = Path(tempfile.mkdtemp(prefix="lastline-trust-physical-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def small_source(world: Path) -> Iterator[Instance]:
    """A small source: one InnoDB database and a MyISAM table."""
    inst = Instance(world / "sb", "psrc")
    inst.create()
    try:
        inst.load_tables("shop", {"orders": 3000, "items": 500})
        with inst.server().session() as cur:
            cur.execute("CREATE TABLE shop.notes (id INT PRIMARY KEY, t VARCHAR(20)) ENGINE=MyISAM")
            cur.execute("INSERT INTO shop.notes SELECT seq, CONCAT('n', seq) FROM mysql.seq_1_to_100")
        set_conn("t_psrc", inst)
        yield inst
    finally:
        inst.destroy()


@pytest.fixture(scope="module")
def owned_target(world: Path) -> Iterator[Instance]:
    """A target whose datadir belongs to the mysql OS user, as a packaged server's does."""
    inst = Instance(world / "sb", "ptgt")
    inst.create()
    try:
        inst.stop()
        subprocess.run(["chown", "-R", f"{OWNER}:{OWNER}", str(inst.datadir)], check=True)
        for p in (inst.dir.parent, inst.dir):
            p.chmod(0o755)
        inst.start()
        set_conn("t_ptgt", inst)
        yield inst
    finally:
        inst.destroy()


@pytest.fixture(scope="module")
def good(small_source: Instance, tmp_path_factory) -> Path:
    """One complete physical backup of the small source, made by the stage functions."""
    dest = tmp_path_factory.mktemp("physical-good")
    plan = physical_backup.preflight({"source_conn_id": "t_psrc", "destination": f"file://{dest}", "compression": "zstd"})
    physical_backup.finish(plan, physical_backup.stream(plan))
    return dest / plan.backup_id


@pytest.fixture(scope="module")
def evil_so(world: Path) -> tuple[bytes, Path]:
    """A tiny shared library whose constructor appends to a marker file (the proof that it was loaded)."""
    marker = world / "loaded.marker"
    src = world / "evil.c"
    src.write_text(EVIL_C)
    out = world / "evil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o", str(out), str(src)], check=True)
    return out.read_bytes(), marker


def forge(good: Path, tmp_path: Path, files: dict[str, bytes], manifest_change=None, drop: tuple[str, ...] = ()) -> Path:
    """A copy of `good` whose stream also holds `files` (replacing any of the same name) and lacks `drop`, re-packed
    and recompressed, with the manifest's sha256 and sizes rewritten to match, as a storage writer would, and signed
    with the deployment's storage key: these tests prove the second line, what prepare does with a stream that got
    past the MAC (a manifest changed without the key is refused first: test_storage_auth)."""
    folder = tmp_path / "forged" / good.name
    shutil.copytree(good, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    artifact = folder / manifest["artifact"]
    work = tmp_path / "unpacked"
    work.mkdir()
    raw = subprocess.run(["zstd", "-dc", str(artifact)], check=True, capture_output=True).stdout
    subprocess.run(["mbstream", "-x", "-C", str(work)], input=raw, check=True)
    for name, data in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    for name in drop:
        (work / name).unlink(missing_ok=True)
    names = sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file())
    packed = subprocess.run(["mbstream", "-c", *names], cwd=work, check=True, capture_output=True).stdout
    artifact.write_bytes(subprocess.run(["zstd", "-q", "-c"], input=packed, check=True, capture_output=True).stdout)
    data = artifact.read_bytes()
    manifest.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    if manifest_change:
        manifest_change(manifest)
    from lastline.storage import auth, control, open_storage

    signed = {k: v for k, v in manifest.items() if k != auth.FIELD}
    control.write(open_storage(folder.parent.as_uri()), f"{folder.name}/manifest.json", json.dumps(signed))
    return folder


def shims(world: Path, monkeypatch) -> Path:
    """mbstream, mariabackup and zstd, first on PATH, log the uid they run as before running the real tool."""
    folder = world / "shims"
    folder.mkdir(exist_ok=True)
    log = world / "shims.log"
    log.write_text("")
    log.chmod(0o666)
    for tool in ("mbstream", "mariabackup", "zstd"):
        real = shutil.which(tool, path=os.environ["PATH"].replace(f"{folder}:", ""))
        (folder / tool).write_text(SHIM.format(log=log, real=real))
        (folder / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return log


def restore(backup: Path) -> None:
    """Every step of a physical restore of `backup` into the owned target, in process."""
    plan = physical_restore.preflight({"target_conn_id": "t_ptgt", "backup": backup.as_uri(), "force": True})
    physical_restore.stop_target(plan)
    extracted = physical_restore.extract(plan)
    physical_restore.prepare(plan)
    physical_restore.start_target(plan)
    physical_restore.verify(plan, extracted)


def cnf(*lines: str) -> bytes:
    """A backup-my.cnf as mariabackup writes it, with `lines` added to its [mysqld] group."""
    return ("[mysqld]\ninnodb_checksum_algorithm=crc32\ninnodb_data_file_path=ibdata1:12M:autoextend\n"
            "innodb_log_file_size=67108864\ninnodb_page_size=16384\ninnodb_undo_directory=./\n"
            "innodb_undo_tablespaces=0\ninnodb_compression_level=6\n" + "".join(f"{line}\n" for line in lines)).encode()


ATTACKS = {
    # the finding: prepare loads the stream's library through plugin_dir/plugin_load
    "plugin_load": lambda d: {"backup-my.cnf": cnf(f"plugin_dir={d}", "plugin_load=evil=evil.so")},
    "plugin_load_relative": lambda d: {"backup-my.cnf": cnf("plugin_dir=.", "plugin_load=evil=evil")},
    "plugin-load-add": lambda d: {"backup-my.cnf": cnf(f"plugin-dir={d}", "plugin-load-add=evil=evil.so")},
    # another option file, shipped in the stream and included
    "include": lambda d: {"backup-my.cnf": cnf() + f"!include {d}/more.cnf\n".encode(),
                          "more.cnf": f"[mysqld]\nplugin_dir={d}\nplugin_load=evil=evil.so\n".encode()},
    "includedir": lambda d: {"backup-my.cnf": cnf() + f"!includedir {d}/conf.d\n".encode(),
                             "conf.d/x.cnf": f"[mysqld]\nplugin_dir={d}\nplugin_load=evil=evil.so\n".encode()},
    # InnoDB's files and temporary files elsewhere on the host
    "outside_dirs": lambda d: {"backup-my.cnf": cnf("innodb_data_home_dir={out}", "innodb_log_group_home_dir={out}",
                                                     "innodb_undo_directory={out}", "tmpdir={out}")},
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_forged_backup_cnf_never_configures_prepare(attack, good, owned_target, evil_so, world, tmp_path):
    """The backup's own backup-my.cnf is never read as configuration: lastline writes the one prepare reads, from the
    manifest's recorded options. The library never loads, nothing outside the datadir is touched, the restore is
    whole."""
    library, marker = evil_so
    marker.unlink(missing_ok=True)
    outside = world / f"outside-{attack}"
    outside.mkdir(mode=0o777, exist_ok=True)
    outside.chmod(0o777)
    datadir = owned_target.datadir
    files = {name: data.replace(b"{out}", str(outside).encode())
             for name, data in ATTACKS[attack](datadir).items()}
    backup = forge(good, tmp_path, {"evil.so": library, **files})
    restore(backup)
    assert not marker.exists(), f"prepare loaded the backup's library: {marker.read_text()}"
    assert not list(outside.iterdir()), f"prepare wrote outside the datadir: {list(outside.iterdir())}"
    written = (datadir / "backup-my.cnf").read_text()
    assert "plugin" not in written and "!include" not in written and str(outside) not in written, written
    assert owned_target.pid() is not None


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_forged_backup_cnf_without_recorded_options_is_refused(attack, good, owned_target, evil_so, world, tmp_path):
    """A manifest without recorded prepare options (older backups, or a storage writer who removed them): the
    extracted backup-my.cnf is read only through the allow-list, and any other option refuses the restore by name,
    before prepare runs, the library never loaded."""
    library, marker = evil_so
    marker.unlink(missing_ok=True)
    outside = world / f"outside-legacy-{attack}"
    outside.mkdir(mode=0o777, exist_ok=True)
    files = {name: data.replace(b"{out}", str(outside).encode())
             for name, data in ATTACKS[attack](owned_target.datadir).items()}
    backup = forge(good, tmp_path, {"evil.so": library, **files}, lambda m: m.pop("prepare_options", None))
    plan = physical_restore.preflight({"target_conn_id": "t_ptgt", "backup": backup.as_uri(), "force": True})
    physical_restore.stop_target(plan)
    physical_restore.extract(plan)
    with pytest.raises(LastlineError, match="backup-my.cnf") as err:
        physical_restore.prepare(plan)
    assert "never" in str(err.value) and "allow" in str(err.value), str(err.value)
    assert not marker.exists(), f"prepare loaded the backup's library: {marker.read_text()}"
    assert not list(outside.iterdir())
    assert owned_target.pid() is None  # a refused prepare leaves the target down, marked in progress
    restore(good)  # a good backup restores afterwards


@pytest.mark.parametrize("change", [
    {"plugin_load": "evil=evil.so"},
    {"innodb_data_file_path": "ibdata1:12M:autoextend\nplugin_load=evil=evil.so"},
    {"innodb_data_file_path": "/etc/ibdata1:12M:autoextend"},
    {"innodb_page_size": "16384\n!include /etc/shadow"},
    {"innodb_log_file_size": "-1"},
    {"innodb_checksum_algorithm": "crc32 plugin_load=x"},
])
def test_forged_recorded_options_are_refused(change, good, owned_target, evil_so, tmp_path):
    """The manifest's recorded options pass the same allow-list, each value checked for its type: a storage writer who
    rewrites them into another option, a path or a second line is refused by name, in preflight (target untouched)."""
    library, marker = evil_so
    marker.unlink(missing_ok=True)
    backup = forge(good, tmp_path, {"evil.so": library}, lambda m: m["prepare_options"].update(change))
    pid = owned_target.pid()
    with pytest.raises(LastlineError, match="prepare option") as err:
        physical_restore.preflight({"target_conn_id": "t_ptgt", "backup": backup.as_uri(), "force": True})
    assert next(iter(change)) in str(err.value)
    assert owned_target.pid() == pid
    assert not marker.exists()


def test_backup_records_prepare_options(good, small_source):
    """At backup time, on the trusted side, the options prepare needs are recorded in the manifest, read from the
    source's server variables, and nothing else."""
    manifest = read_manifest(open_storage(good.parent.as_uri()), good.name, "physical")
    options = manifest.prepare_options
    assert options is not None
    got = small_source.server().variables("innodb_page_size", "innodb_log_file_size", "innodb_undo_tablespaces")
    assert options["innodb_page_size"] == got["innodb_page_size"]
    assert options["innodb_log_file_size"] == got["innodb_log_file_size"]
    assert options["innodb_undo_tablespaces"] == got["innodb_undo_tablespaces"]
    assert options["innodb_data_file_path"] == "ibdata1:12M:autoextend"
    assert set(options) <= {"innodb_checksum_algorithm", "innodb_data_file_path", "innodb_log_file_size",
                            "innodb_page_size", "innodb_undo_tablespaces", "innodb_compression_level"}


def test_extract_and_prepare_run_as_the_datadirs_owner(good, owned_target, world, monkeypatch):
    """Extract (the decompressor and mbstream) and prepare (mariabackup) run as the datadir's owner, not as root: what
    a stream holds is parsed and written, and what prepare does is done, with that user's rights only."""
    log = shims(world, monkeypatch)
    restore(good)
    uid = pwd.getpwnam(OWNER).pw_uid
    lines = [line for line in log.read_text().splitlines() if " -x " in line or " --prepare " in line or " -d" in line]
    assert sorted(line.split()[0] for line in lines) == ["mariabackup", "mbstream", "zstd"], log.read_text()
    assert all(f"uid={uid} " in line for line in lines), lines


def test_an_older_manifest_without_recorded_options_restores_through_the_allow_list(good, owned_target, tmp_path):
    """A backup from before the options were recorded: mariabackup's own backup-my.cnf passes the allow-list (its
    undo folder written as the datadir itself), and the restore is whole."""
    backup = forge(good, tmp_path, {}, lambda m: m.pop("prepare_options"))
    restore(backup)
    assert "innodb_page_size=16384" in (owned_target.datadir / "backup-my.cnf").read_text()
    assert owned_target.pid() is not None


STRACE_SHIM = """#!/bin/sh
case " $* " in *" --prepare "*) exec strace -f -qq -e trace=openat,open -o {trace} {real} "$@";; esac
exec {real} "$@"
"""


def test_prepare_reads_no_option_file_but_lastlines(good, owned_target, world, monkeypatch):
    """mariabackup --prepare reads its options from <target-dir>/backup-my.cnf alone (no /etc/mysql, no ~/.my.cnf,
    no --defaults-extra-file): seen with strace, so lastline's file is the only configuration it gets."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    folder = world / "strace-shim"
    folder.mkdir(exist_ok=True)
    trace = world / "prepare.trace"
    trace.unlink(missing_ok=True)
    (folder / "mariabackup").write_text(STRACE_SHIM.format(trace=trace, real=shutil.which("mariabackup")))
    (folder / "mariabackup").chmod(0o755)
    world.chmod(0o777)  # strace, as the datadir's owner, writes the trace here
    try:
        monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
        restore(good)
    finally:
        world.chmod(0o755)
    opened = {os.path.join(owned_target.datadir, line.split('"')[1])  # relative: prepare works in the target dir
              for line in trace.read_text().splitlines() if '"' in line}
    options = {p for p in opened if p.endswith((".cnf", ".ini")) or "/mysql/" in p and "conf" in p}
    assert options == {f"{owned_target.datadir}/backup-my.cnf"}, sorted(options)


def test_a_forged_isl_never_points_the_restored_server_at_a_file_outside_its_datadir(good, small_source, owned_target,
                                                                                      tmp_path):
    """An .isl file (InnoDB's link to a tablespace elsewhere, as DATA DIRECTORY makes) in the stream, naming the
    source's own live tablespace on this host, the table's .ibd left out: the restored server would share that file
    with the source. lastline removes every .isl before prepare (tables restore into the datadir), so the server never
    opens it, and verify names the table the backup lacks."""
    from lastline.core.errors import IntegrityError

    victim = small_source.datadir / "shop" / "orders.ibd"
    backup = forge(good, tmp_path, {"shop/orders.isl": f"{victim}\n".encode()}, drop=("shop/orders.ibd", "shop/orders.new"))
    plan = physical_restore.preflight({"target_conn_id": "t_ptgt", "backup": backup.as_uri(), "force": True})
    physical_restore.stop_target(plan)
    extracted = physical_restore.extract(plan)
    physical_restore.prepare(plan)
    logged = owned_target.errlog.stat().st_size
    physical_restore.start_target(plan)
    with pytest.raises(IntegrityError, match="orders"):
        physical_restore.verify(plan, extracted)
    pid = owned_target.pid()
    fds = Path(f"/proc/{pid}/fd")
    opened = {os.readlink(fd) for fd in fds.iterdir() if fd.is_symlink()}
    assert str(victim) not in opened, "the restored server opened the source's tablespace"
    with open(owned_target.errlog) as fh:
        fh.seek(logged)
        assert str(victim) not in fh.read(), "the restored server looked at the source's tablespace"
    assert not list(owned_target.datadir.rglob("*.isl"))
    with small_source.server().session() as cur:  # the source's table is whole
        cur.execute("SELECT COUNT(*) FROM shop.orders")
        assert cur.fetchone()[0] == 3000
    restore(good)


def test_a_data_directory_table_restores_into_the_datadir(small_source, owned_target, world, tmp_path):
    """A table made with DATA DIRECTORY: the backup brings its tablespace and an .isl naming the source's folder; the
    restore puts it in the target's datadir and never opens the source's file."""
    from lastline.core.servers import Server

    remote = world / "remote"
    remote.mkdir(exist_ok=True)
    root = Server(conn_id="root", socket=str(small_source.sock), user="root")
    with root.session() as cur:
        cur.execute(f"CREATE TABLE shop.far (id INT PRIMARY KEY, v CHAR(20)) ENGINE=InnoDB DATA DIRECTORY='{remote}'")
        cur.execute("INSERT INTO shop.far SELECT seq, CONCAT('v', seq) FROM mysql.seq_1_to_700")
        cur.execute("COMMIT")
    try:
        plan = physical_backup.preflight({"source_conn_id": "t_psrc", "destination": f"file://{tmp_path}", "compression": "zstd"})
        physical_backup.finish(plan, physical_backup.stream(plan))
    finally:
        with root.session() as cur:
            cur.execute("DROP TABLE shop.far")
    restore(tmp_path / plan.backup_id)
    with Server(conn_id="root", socket=str(owned_target.sock), user="root").session() as cur:
        cur.execute("SELECT COUNT(*) FROM shop.far")
        assert cur.fetchone()[0] == 700
        cur.execute("SELECT FILENAME FROM information_schema.INNODB_SYS_TABLESPACES WHERE NAME = 'shop/far'")
        assert cur.fetchone()[0] == "./shop/far.ibd"
    assert not list(owned_target.datadir.rglob("*.isl"))


def master_info(port: int, user: str, password: str) -> bytes:
    """A master.info as MariaDB writes it after CHANGE MASTER (host, user, password, port, ...)."""
    lines = ["33", "", "4", "127.0.0.1", user, password, str(port), "1", "0", "", "", "", "", "", "0", "30.000", "", "0",
             "", "0", *([""] * 13), "using_gtid=0", "do_domain_ids=0", "ignore_domain_ids=0", "END_MARKER"]
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("state", ["master.info", "multi-master.info", "mariadb-bin.index", "ddl_recovery.log"])
def test_a_stream_that_brings_replication_or_binlog_state_is_refused(state, good, small_source, owned_target, world,
                                                                      tmp_path):
    """Files a server reads at startup and acts on, which mariabackup never puts in a backup: a master.info (the
    restored server would connect to a primary the storage writer runs and apply its events with full rights; here
    the small source plays that primary), a multi-master.info naming such a connection, a binlog index naming files
    outside the datadir (the server opens them and purges them), a DDL recovery log (actions the server replays on
    files at startup). Refused by name before prepare; the target stays down."""
    meta = small_source.meta()
    info = master_info(meta["port"], "lastline", meta["password"])
    victim = world / "victim.000001"
    victim.write_text("not a binlog")
    files = {"master.info": {"master.info": info},
             "multi-master.info": {"multi-master.info": b"evil\n", "master-evil.info": info},
             "mariadb-bin.index": {"mariadb-bin.index": f"{victim}\n".encode()},
             "ddl_recovery.log": {"ddl_recovery.log": b"\xfe\x01" + bytes(4094)}}[state]
    backup = forge(good, tmp_path, files)
    plan = physical_restore.preflight({"target_conn_id": "t_ptgt", "backup": backup.as_uri(), "force": True})
    physical_restore.stop_target(plan)
    extracted = physical_restore.extract(plan)
    try:
        with pytest.raises(LastlineError, match=state.replace(".", r"\.")):
            physical_restore.prepare(plan)
    except BaseException:
        if owned_target.pid() is None:  # today's code: see what the restored server does
            physical_restore.start_target(plan)
            physical_restore.verify(plan, extracted)
        with owned_target.server().session() as cur:
            cur.execute("SHOW ALL SLAVES STATUS")
            assert not cur.fetchall(), "the restored server replicates from a primary the backup named"
        raise
    assert owned_target.pid() is None
    assert victim.read_text() == "not a binlog"
    restore(good)
    with owned_target.server().session() as cur:
        cur.execute("SHOW ALL SLAVES STATUS")
        assert not cur.fetchall()


MARIABACKUP_CNF = """# This options file was generated by innobackupex.

# The server
[mysqld]
innodb_checksum_algorithm=crc32
innodb_data_file_path=ibdata1:12M:autoextend
innodb_log_file_size=67108864
innodb_page_size=16384
innodb_undo_directory=./
innodb_undo_tablespaces=0
innodb_compression_level=6

"""


@pytest.mark.parametrize("line", [
    "plugin_load=evil=evil.so", "plugin-dir=/tmp", "plugin_load_add=x", "!include /etc/x.cnf", "!includedir /etc",
    "[client]", "innodb_data_home_dir=/tmp", "innodb_log_group_home_dir=/tmp", "tmpdir=/tmp",
    "innodb_undo_directory=/tmp", "innodb_page_size=16384", "innodb_data_file_path=../ibdata1:12M",
    "innodb_data_file_path=/var/lib/ibdata1:12M", "innodb_log_file_size=64M", "innodb_checksum_algorithm=crc32 x",
    "innodb_compression_level", "file_key_management_filename=/etc/keys",
])
def test_the_allow_list_refuses_every_other_line_of_a_backup_cnf(line):
    """mariabackup's own file passes; one more line of any other kind (another option, group or include, a folder, a
    value of the wrong type, an option twice) is refused, naming it."""
    from lastline.core.errors import IntegrityError
    from lastline.mariabackup import prepare_options

    assert prepare_options.parse(MARIABACKUP_CNF, "b")["innodb_page_size"] == "16384"
    with pytest.raises(IntegrityError, match="never hands a backup's option file") as err:
        prepare_options.parse(MARIABACKUP_CNF + line + "\n", "b")
    assert line[:20] in str(err.value) or "valid" in str(err.value)


def test_recorded_options_come_from_the_sources_variables_by_file_name():
    """At backup: data files by name only (as mariabackup writes them), the checksum name in lower case, only the
    allow-listed options, and the file prepare reads holds them and the undo folder, nothing else."""
    from lastline.mariabackup import prepare_options

    got = prepare_options.from_variables({
        "innodb_checksum_algorithm": "FULL_CRC32", "innodb_data_file_path": "/data/ibdata1:12M;ibdata2:1G:autoextend",
        "innodb_log_file_size": "100663296", "innodb_page_size": "16384", "innodb_undo_tablespaces": "3",
        "innodb_compression_level": "6", "plugin_dir": "/usr/lib/mysql/plugin"})
    assert got == {"innodb_checksum_algorithm": "full_crc32", "innodb_data_file_path": "ibdata1:12M;ibdata2:1G:autoextend",
                   "innodb_log_file_size": "100663296", "innodb_page_size": "16384", "innodb_undo_tablespaces": "3",
                   "innodb_compression_level": "6"}
    text = prepare_options.render(got)
    assert [line.split("=")[0] for line in text.splitlines()[2:]] == [*got, "innodb_undo_directory"]
    assert "plugin" not in text and "!" not in text
