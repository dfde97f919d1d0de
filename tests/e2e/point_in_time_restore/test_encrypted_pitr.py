"""The binlog archive sealed, on real servers (issue 46): a source archived first without a key (its segments stay in
the clear), then with the encryption key connection set, so the rows written after it are only in sealed segments (a
grep of every stored segment for a row value finds nothing); a point-in-time restore to latest equals the source from a
physical base through both replay methods and from a logical base; a restore with no key or a wrong one is refused in
its preflight naming the key it needs, the target untouched; a flipped byte in a sealed segment is named with its chunk
by backup_verify's archive check (by its digest without the key) and refused by the restore before the target is
touched. Shipped with the key to an ssh:// or an S3 destination, every segment there is sealed, no stored file holds a
row in the clear, and each opens with the key to the source's binlog bytes exactly; backup_verify reads it back
there with every sealed chunk authenticated, and a point-in-time restore from there alone (the sealed logical base
copied beside it) equals the source. After key_rotation (as Airflow
runs it) only the branch's envelope.json and the sealed base's manifest change, the new key alone opens the segments and
rolls forward exactly, the old key alone is refused; shipped for a recipient (its public key alone), the archiver
cannot open what it sealed and the private key opens each segment to the source's bytes.
Over 300 lines: one module so that every test shares the one sealed history (two servers) its fixture builds."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import set_conn
from lastline import connections
from lastline.core.errors import ConfigError
from lastline.logical.backup import stages as logical_backup
from lastline.manifest import complete_backups
from lastline.physical import backup as physical_backup
from lastline.pitr import archive, catalog
from lastline.pitr.compaction import masked
from lastline.pitr.sealed import Seals
from lastline.storage import encryption_keys, open_storage
from lastline.verify import archive as verify_archive
from lastline.verify import backups as verify_backups
from lastline_dev.keys import encryption_connection
from lastline_dev.sandbox import Instance

pytestmark = pytest.mark.e2e
MARKER = "qx-sealed-binlog-row-58d2"
KEY1, KEY2 = "6c" * 32, "7d" * 32
CONN = "lastline_encryption_pitr"


def _conn(setenv, login: str = "pitr-k1", password: str = KEY1, **extra) -> None:
    encryption_connection(setenv, CONN, login, password, **extra)


def _state(inst: Instance) -> list[tuple]:
    with inst.server().session() as cur:
        cur.execute("SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT(id, v))), 0) FROM shop.t")
        rows = cur.fetchone()
        cur.execute("CHECKSUM TABLE shop.t")
        return [tuple(rows), cur.fetchone()[1]]


def _untouched(inst: Instance) -> tuple:
    """What a refused restore must leave as it was: the server process, its databases and shop.t's rows."""
    names = [r[0] for r in inst.server().query("SHOW DATABASES")]
    return inst.pid(), names, _state(inst) if "shop" in names else None


def _segments(dest: Path) -> list[Path]:
    return sorted(p for p in (dest / "binlogs").rglob("*") if p.is_file() and p.name.isdigit())


@pytest.fixture(scope="module")
def sealed_history(sandbox_root, tmp_path_factory):
    """Rows archived in the clear, a physical base (no key yet), the key set, a logical base of shop (sealed), then
    MARKER in rows and in a statement across a rotation, archived sealed."""
    src, tgt = Instance(sandbox_root, "ep_src"), Instance(sandbox_root, "ep_tgt")
    src.create()
    tgt.create()
    try:
        set_conn("t_ep_src", src)
        set_conn("t_ep_tgt", tgt)
        dest = tmp_path_factory.mktemp("pitr_sealed")
        storage = open_storage(f"file://{dest}")
        server = connections.server("t_ep_src")
        with server.session() as cur:
            cur.execute("CREATE DATABASE shop")
            cur.execute("CREATE TABLE shop.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(100))")
            cur.execute("INSERT INTO shop.t (v) SELECT CONCAT('plain ', seq) FROM shop.seq_1_to_50")
            cur.execute("CREATE DATABASE side")
            cur.execute("CREATE TABLE side.n (v VARCHAR(100))")
            cur.connection.commit()
        archive.ship(server, storage)
        plan = physical_backup.preflight({"source_conn_id": "t_ep_src", "destination": f"file://{dest}"})
        physical_backup.finish(plan, physical_backup.stream(plan))
        with pytest.MonkeyPatch.context() as mp:
            _conn(mp.setenv)
            logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_ep_src", "destination": f"file://{dest}",
                                                          "databases": ["shop"]}))
            with server.session() as cur:
                cur.execute("INSERT INTO shop.t (v) SELECT CONCAT(%s, ' row ', seq) FROM shop.seq_1_to_200", (MARKER,))
                cur.connection.commit()
            archive.ship(server, storage)  # the file the base is in goes on, sealed from here
            server.query("FLUSH BINARY LOGS")
            with server.session() as cur:  # a statement (on a database the logical base leaves out), then rows
                cur.execute("SET SESSION binlog_format='STATEMENT'")
                cur.execute(f"INSERT INTO side.n VALUES ('{MARKER} statement')")
                cur.connection.commit()
                cur.execute("SET SESSION binlog_format='ROW'")
                cur.execute(f"UPDATE shop.t SET v = CONCAT(v, ' {MARKER} updated') WHERE id % 7 = 0")
                cur.execute("DELETE FROM shop.t WHERE id % 11 = 0")
                cur.connection.commit()
            archive.ship(server, storage)
        yield {"dest": dest, "storage": storage, "src": src, "tgt": tgt, "physical": plan.backup_id}
    finally:
        src.destroy()
        tgt.destroy()


def _run(run_dag, h, method: str = "auto", kind: str = "physical", dest: Path | None = None):
    return run_dag("point_in_time_restore", {
        "target_conn_id": "t_ep_tgt", "destination": f"file://{dest or h['dest']}", "until": "latest", "base": "auto",
        "base_kind": kind, "databases": [], "branch": "", "replay_method": method, "parallel": 2, "force": True,
        "restore_into_source": "", "aws_conn_id": None})


def test_the_archive_is_sealed_from_the_key_on_and_holds_no_row_in_the_clear(sealed_history):
    storage, dest = sealed_history["storage"], sealed_history["dest"]
    bid = catalog.branches(storage)[-1]["id"]
    branch = catalog.read_branch(storage, bid)
    assert [w["key_id"] for w in branch.envelope["wrappings"]] == ["pitr-k1"] and branch.seal_public
    flags = [bool(s.get("sealed")) for e in branch.entries for s in e.segments]
    assert flags[0] is False and flags[-1] is True and flags == sorted(flags)  # plain before the key, sealed after
    found = [p for p in _segments(dest) if MARKER.encode() in p.read_bytes()]
    assert found == [] and len(_segments(dest)) == len(flags)
    assert b"plain 7" in _segments(dest)[0].read_bytes()  # a plain segment shows its rows: the grep would find them
    assert KEY1 not in (dest / "binlogs" / bid / "chain.json").read_text()


@pytest.mark.parametrize("method", ["parallel", "pipe"])
def test_a_physical_base_rolls_forward_over_the_sealed_archive_exactly(run_dag, sealed_history, monkeypatch, method):
    _conn(monkeypatch.setenv, "pitr-k2", KEY2, keys={"pitr-k1": KEY1})  # a later key holding the older one
    state, tis, logs = _run(run_dag, sealed_history, method)
    assert state == "success", (tis, logs[-3000:])
    assert _state(sealed_history["tgt"]) == _state(sealed_history["src"])
    assert KEY1 not in logs and KEY2 not in logs


def test_a_logical_base_rolls_forward_over_the_sealed_archive_exactly(run_dag, sealed_history, monkeypatch):
    _conn(monkeypatch.setenv)
    state, tis, logs = _run(run_dag, sealed_history, kind="logical")
    assert state == "success", (tis, logs[-3000:])
    assert tis["physical_base.preflight"] == "skipped"
    assert _state(sealed_history["tgt"]) == _state(sealed_history["src"])


def test_no_key_or_a_wrong_key_is_refused_in_preflight_naming_the_key_with_the_target_untouched(
        run_dag, sealed_history, monkeypatch):
    tgt = sealed_history["tgt"]
    before = _untouched(tgt)
    monkeypatch.delenv(encryption_keys.KEY_CONN_ENV, raising=False)
    bid = catalog.branches(sealed_history["storage"])[-1]["id"]
    state, tis, logs = _run(run_dag, sealed_history)
    assert state == "failed" and tis["plan"] == "failed", tis
    assert f"the binlog archive is sealed: backup 'binlogs/{bid}' is encrypted (its data key is wrapped under " \
           "pitr-k1 (kek))" in logs
    _conn(monkeypatch.setenv, "pitr-k1", KEY2)  # the right id, another secret
    state, tis, logs = _run(run_dag, sealed_history)
    assert state == "failed" and tis["plan"] == "failed", tis
    assert "key 'pitr-k1' of the encryption key connection" in logs and "does not open its data key" in logs
    _conn(monkeypatch.setenv, "pitr-k9", KEY2)
    state, tis, logs = _run(run_dag, sealed_history)
    assert state == "failed" and "needs one of the keys pitr-k1 (kek)" in logs and "holds pitr-k9" in logs
    assert _untouched(tgt) == before, "the target was touched although preflight refused"


def test_a_flipped_byte_in_a_sealed_segment_is_named_by_verify_and_refused_by_the_restore(
        run_dag, sealed_history, monkeypatch, tmp_path):
    dest = tmp_path / "dest"
    shutil.copytree(sealed_history["dest"], dest)
    storage = open_storage(f"file://{dest}")
    bid = catalog.branches(storage)[-1]["id"]
    entry = next(e for e in reversed(catalog.read_branch(storage, bid).entries) if e.segments)
    seg = entry.segments[-1]
    name = f"binlogs/{bid}/{entry.name}/{int(seg['offset']):012d}"
    with open(dest / name, "r+b") as fh:  # same size: only the seal and the digest can tell
        fh.seek(200)
        byte = fh.read(1)
        fh.seek(200)
        fh.write(bytes([byte[0] ^ 0x04]))
    plan = verify_backups.preflight({"destination": f"file://{dest}"})
    _conn(monkeypatch.setenv)
    found = verify_archive.verify_archive(plan)
    assert found.status == "damaged" and [(f.file, f.problem, f.found) for f in found.findings] == [
        (name, "sealed", "chunk 0: changed")]
    monkeypatch.delenv(encryption_keys.KEY_CONN_ENV)
    found = verify_archive.verify_archive(plan)  # without a key: the stored bytes' sha256
    assert [(f.file, f.problem) for f in found.findings] == [(name, "digest")]
    _conn(monkeypatch.setenv)
    tgt = sealed_history["tgt"]
    before = _untouched(tgt)
    state, tis, logs = _run(run_dag, sealed_history, dest=dest)
    assert state == "failed" and tis["plan"] == "failed", tis
    assert f"sealed object '{name}'" in logs and "chunk 0: it does not authenticate" in logs
    assert _untouched(tgt) == before


@pytest.mark.parametrize("where", ["ssh", "s3"])
def test_shipped_to_ssh_or_s3_every_segment_is_sealed_opens_to_the_source_binlogs_and_rolls_a_base_forward(
        run_dag, sealed_history, monkeypatch, request, tmp_path, where):
    """The whole history shipped again, with the key, to a remote destination of its own: every segment is sealed
    there (the rows archived in the clear on the folder destination too), no stored object holds a row in the clear,
    and each opens to the bytes of the source's binlog it was cut from. Read back through the destination's own reader
    (as backup_verify and the restore read it), every sealed chunk authenticates; with the sealed logical base copied
    there, a point-in-time restore from that destination alone equals the source."""
    logical = complete_backups(sealed_history["storage"], "logical")[0]
    base = {str(p.relative_to(sealed_history["dest"])): p.read_bytes()
            for p in (sealed_history["dest"] / logical).rglob("*") if p.is_file()}
    if where == "ssh":
        request.getfixturevalue("sshd")
        folder = tmp_path / "archive"  # the sshd is on this machine's loopback: its side of the destination is here
        url, aws = f"ssh://t_ssh{folder}", None

        def stored() -> dict[str, bytes]:
            return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()
                    and p.relative_to(folder).parts[0] == "binlogs"}

        def put(name: str, data: bytes) -> None:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
    else:
        import boto3

        s3 = boto3.client("s3", endpoint_url=request.getfixturevalue("s3_server"), region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing-secret")
        url, aws = "s3://backups/archive-sealed", "t_s3"

        def stored() -> dict[str, bytes]:
            listed = s3.list_objects_v2(Bucket="backups", Prefix="archive-sealed/binlogs/")["Contents"]
            return {o["Key"].split("/", 1)[1]: s3.get_object(Bucket="backups", Key=o["Key"])["Body"].read()
                    for o in listed}

        def put(name: str, data: bytes) -> None:
            s3.put_object(Bucket="backups", Key=f"archive-sealed/{name}", Body=data)
    storage = open_storage(url, aws)
    _conn(monkeypatch.setenv)
    archive.ship(connections.server("t_ep_src"), storage)
    _every_segment_sealed_and_opening_to_the_source(sealed_history, storage, stored())
    plan = verify_backups.preflight({"destination": url, "aws_conn_id": aws})
    found = verify_archive.verify_archive(plan)
    assert (found.status, found.findings) == ("ok", []), found
    for name, data in base.items():
        put(name, data)
    sealed_history["tgt"].server().query("DROP DATABASE IF EXISTS shop")  # what an earlier test restored there
    state, tis, logs = run_dag("point_in_time_restore", {
        "target_conn_id": "t_ep_tgt", "destination": url, "until": "latest", "base": "auto", "base_kind": "logical",
        "databases": [], "branch": "", "replay_method": "auto", "parallel": 2, "force": True,
        "restore_into_source": "", "aws_conn_id": aws})
    assert state == "success", (tis, logs[-3000:])
    assert tis["physical_base.preflight"] == "skipped"  # a logical base: the copied one is the only backup there
    assert _state(sealed_history["tgt"]) == _state(sealed_history["src"])


def _segments_of(storage) -> tuple[str, list[tuple[str, str, dict]]]:
    """The newest branch's id and its segments: (storage key, binlog file name, chain entry) each."""
    bid = catalog.branches(storage)[-1]["id"]
    branch = catalog.read_branch(storage, bid)
    return bid, [(catalog.segment_key(bid, e.name, s), e.name, s) for e in branch.entries for s in e.segments]


def _opened(sealed_history, storage, files: dict[str, bytes], keys=None) -> bytes:
    """Every sealed segment of the newest branch in `storage` (its stored bytes in `files`, by key) opened through the
    archive's reader with `keys` (None: the deployment's), each asserted to be the bytes of the source's binlog it was
    cut from; all of them, joined."""
    bid, segments = _segments_of(storage)
    envelope = catalog.read_branch(storage, bid).envelope
    seals, opened_all = Seals({bid: envelope}) if keys is None else Seals({bid: envelope}, keys), b""
    for key, name, seg in segments:
        if not seg.get("sealed"):
            continue
        assert files[key].startswith(b"LLSEAL"), key
        opened = b"".join(seals.opened(bid, key, seg, iter([files[key]])))
        offset = int(seg["offset"])
        binlog = (sealed_history["src"].datadir / name).read_bytes()[offset:offset + int(seg["size"])]
        assert masked(opened, offset) == masked(binlog, offset), key  # the in-use flag aside: the file was open then
        opened_all += opened
    return opened_all


def _every_segment_sealed_and_opening_to_the_source(sealed_history, storage, files: dict[str, bytes]) -> None:
    """Shipped whole with a key: every segment sealed, none holding a row in the clear, each opening (with the
    deployment's keys) to the source's binlog bytes."""
    _, segments = _segments_of(storage)
    assert len(segments) >= 2 and all(s.get("sealed") for _, _, s in segments)
    assert [k for k, data in files.items() if MARKER.encode() in data or b"plain 7" in data] == []
    opened_all = _opened(sealed_history, storage, files)
    assert MARKER.encode() in opened_all and b"plain 7" in opened_all  # the grep above would have found them


def _stored(dest: Path) -> dict[str, bytes]:
    return {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*") if p.is_file()}


def test_after_a_rotation_the_archive_opens_with_the_new_key_alone_and_not_the_old_one(
        run_dag, sealed_history, monkeypatch, tmp_path):
    """key_rotation as Airflow runs it over a copy of the destination re-writes the branch's envelope.json (and the
    sealed logical base's manifest), no segment; then the segments open with the new key alone, through the archive's
    reader and a roll-forward, and the old key alone opens none: the restore is refused in its plan, target untouched."""
    dest = tmp_path / "dest"
    shutil.copytree(sealed_history["dest"], dest)
    storage = open_storage(f"file://{dest}")
    bid, _ = _segments_of(storage)
    before = _stored(dest)
    _conn(monkeypatch.setenv, "pitr-k2", KEY2, keys={"pitr-k1": KEY1})  # the rotation's first step
    state, tis, logs = run_dag("key_rotation", {"destination": f"file://{dest}", "aws_conn_id": None, "dry_run": False})
    assert state == "success" and tis["rotate_archive"] == tis["rotate_backups[0]"] == "success", tis
    after = _stored(dest)
    changed = [k for k in after if after[k] != before[k]]
    assert set(after) == set(before) and f"binlogs/{bid}/envelope.json" in changed, changed
    assert len(changed) == 2 and [k for k in changed if not k.endswith("/envelope.json")][0].endswith("/manifest.json")
    envelope = catalog.read_branch(storage, bid).envelope
    assert [(w["type"], w["key_id"]) for w in envelope["wrappings"]] == [("kek", "pitr-k2")]
    assert KEY1 not in logs and KEY2 not in logs

    _conn(monkeypatch.setenv, "pitr-k2", KEY2)  # the old key dropped
    assert MARKER.encode() in _opened(sealed_history, storage, after)
    state, tis, logs = _run(run_dag, sealed_history, kind="logical", dest=dest)
    assert state == "success", (tis, logs[-3000:])
    assert _state(sealed_history["tgt"]) == _state(sealed_history["src"])

    _conn(monkeypatch.setenv)  # the old key alone
    with pytest.raises(ConfigError, match=r"needs one of the keys pitr-k2 \(kek\) to be read; .* holds pitr-k1"):
        _opened(sealed_history, storage, after)
    before = _untouched(sealed_history["tgt"])
    state, tis, logs = _run(run_dag, sealed_history, dest=dest)
    assert state == "failed" and tis["plan"] == "failed", tis
    assert "needs one of the keys pitr-k2 (kek)" in logs and "holds pitr-k1" in logs
    assert _untouched(sealed_history["tgt"]) == before, "the target was touched although the plan refused"


def test_an_archive_shipped_for_a_recipient_is_sealed_without_the_private_key_and_opens_with_it(
        sealed_history, monkeypatch, tmp_path):
    """The archiver holds the recipient's public key alone: every segment it ships is sealed and it cannot open one;
    the private key opens each to the source's binlog bytes."""
    private, public = encryption_keys.new_identity()
    _conn(monkeypatch.setenv, "", "", recipients={"ops": public})  # the archiving host
    storage = open_storage(f"file://{tmp_path}")
    archive.ship(connections.server("t_ep_src"), storage)
    bid, _ = _segments_of(storage)
    envelope = catalog.read_branch(storage, bid).envelope
    assert [(w["type"], w["key_id"]) for w in envelope["wrappings"]] == [("x25519", "ops")]
    files = _stored(tmp_path)
    with pytest.raises(ConfigError, match=r"needs one of the keys ops \(x25519\) to be read; .* holds none"):
        _opened(sealed_history, storage, files)
    _conn(monkeypatch.setenv, "", "", identities={"ops": private})  # where restores run
    _every_segment_sealed_and_opening_to_the_source(sealed_history, storage, files)
