"""Encrypted logical backups on real servers (issue 46): with an encryption key connection every chunk file is sealed
(storage.sealing) and holds no row in the clear, the manifest records key ids and wrapped keys only, and the backup
restores exactly with either cipher and every compression (a keyed InnoDB table in several chunks, a MyISAM table, a
17 MiB incompressible value over several sealed chunks); schema.json and schema.sql are sealed too (a table comment,
a column default and, with include_grants, an account's password hash are nowhere in the clear) and the restored table
is created as on the source; a restore with no key or the wrong one is refused in its
preflight naming the key id, with nothing made on the target; a byte flipped in a chunk is refused naming the chunk,
and not one row of it is kept; a chunk file cut at a sealed chunk's boundary under a rewritten size and sha256 is named
by backup_verify and refused by the restore, not one row of it kept; a backup written with a recipient's public key
alone is restored with its private key only; on S3 and over SSH the stored objects hold no row in the clear either and
restore exactly."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from tests.unit.verify.test_sealed_backups import _flipped_in_manifest, _rewritten

from lastline.core.errors import ConfigError, IntegrityError
from lastline.logical.backup import stages as logical_backup
from lastline.logical.format.dialect import qualified, quote_ident
from lastline.logical.restore import load
from lastline.logical.restore import stages as logical_restore
from lastline.logical.restore.target_state import aside_name, clear_state
from lastline.manifest import read_manifest
from lastline.storage import auth, encryption_keys, open_storage
from lastline.storage.sealing import CHUNK_SIZE, HEADER_SIZE, TAG
from lastline.verify import backups as verify_backups
from lastline_dev.keys import encryption_connection

pytestmark = pytest.mark.e2e

DB = "enc `db`.x y"
KEYED, MYISAM, ONE, BLOBS = "t.1 `k`", "my isam", "one chunk", "blob s"
MARKER = "qx-secret-row-7f3a"  # in every row of every table but the blob's
COMMENT, DEFAULT = "qx-secret-comment-c41d", "qx-secret-default-9e20"  # in the keyed table's schema only
ACCOUNT, PASSWORD = "'enc `user`'@'localhost'", "qx-secret-password-55ab"  # its hash is in the schema files' grants
KEYED_ROWS = 2500
BIG = os.urandom(17 << 20)  # past the 16 MiB packet, incompressible: several 4 MiB sealed chunks
KEY1, KEY2 = "1f" * 32, "2e" * 32
CONN = "lastline_encryption"


def _conn(monkeypatch, login: str = "enc-k1", password: str = KEY1, **extra) -> None:
    encryption_connection(monkeypatch.setenv, CONN, login, password, **extra)


def _escape(value: bytes) -> bytes:
    return value.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n")


@pytest.fixture(scope="module")
def source_db(logical_source):
    server = logical_source.server()
    conn = server.connect(local_infile=1)
    cur = conn.cursor()
    cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(DB)}")
    cur.execute(f"CREATE DATABASE {quote_ident(DB)}")
    cur.execute(f"CREATE TABLE {qualified(DB, KEYED)} (id INT PRIMARY KEY, v VARCHAR(200), "
                f"d VARCHAR(40) NOT NULL DEFAULT '{DEFAULT}') ENGINE=InnoDB COMMENT '{COMMENT}'")
    cur.execute(f"INSERT INTO {qualified(DB, KEYED)} (id, v) SELECT seq, CONCAT('{MARKER} ', seq, REPEAT('z', 100)) "
                f"FROM mysql.seq_1_to_{KEYED_ROWS}")
    cur.execute(f"CREATE TABLE {qualified(DB, MYISAM)} (id INT PRIMARY KEY, v VARCHAR(50)) ENGINE=MyISAM")
    cur.execute(f"INSERT INTO {qualified(DB, MYISAM)} SELECT seq, CONCAT('{MARKER} m', seq) FROM mysql.seq_1_to_300")
    cur.execute(f"CREATE TABLE {qualified(DB, ONE)} (id INT PRIMARY KEY, v VARCHAR(50)) ENGINE=InnoDB")
    cur.execute(f"INSERT INTO {qualified(DB, ONE)} SELECT seq, CONCAT('{MARKER} o', seq) FROM mysql.seq_1_to_50")
    cur.execute(f"CREATE TABLE {qualified(DB, BLOBS)} (id INT PRIMARY KEY, b LONGBLOB NOT NULL) ENGINE=InnoDB")
    with tempfile.NamedTemporaryFile(suffix=".tsv") as fh:  # an INSERT of it would not fit the 16 MiB packet
        fh.write(b"1\t" + _escape(BIG) + b"\n2\t" + MARKER.encode() + b"\n")
        fh.flush()
        cur.execute(f"LOAD DATA LOCAL INFILE '{fh.name}' INTO TABLE {qualified(DB, BLOBS)} CHARACTER SET binary "
                    "FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n'")
    assert conn.warning_count() == 0
    cur.execute(f"DROP USER IF EXISTS {ACCOUNT}")
    cur.execute(f"CREATE USER {ACCOUNT} IDENTIFIED BY '{PASSWORD}'")
    cur.execute(f"GRANT SELECT ON {quote_ident(DB)}.* TO {ACCOUNT}")
    conn.commit()
    conn.close()
    yield server
    server.query(f"DROP USER IF EXISTS {ACCOUNT}")
    server.query(f"DROP DATABASE IF EXISTS {quote_ident(DB)}")


def _backup(dest: Path | str, compression: str = "zstd", aws: str | None = None) -> Path | str:
    url = dest if isinstance(dest, str) else f"file://{dest}"
    logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": url, "aws_conn_id": aws,
                                                  "databases": [DB], "chunk_rows": 1000, "compression": compression,
                                                  "include_grants": True}))
    return dest


@pytest.fixture(scope="module")
def sealed_backups(source_db, tmp_path_factory) -> dict[str, Path]:
    """A backup per (cipher, compression), written under key enc-k1."""
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        for cipher, compression in (("aes-256-gcm", "zstd"), ("chacha20-poly1305", "none"), ("aes-256-gcm", "pigz")):
            _conn(mp, cipher=cipher)
            out[f"{cipher}-{compression}"] = _backup(tmp_path_factory.mktemp(f"enc-{compression}"), compression)
    return out


def _manifest(dest: Path | str, aws: str | None = None):
    storage = open_storage(dest if isinstance(dest, str) else f"file://{dest}", aws)
    return read_manifest(storage, storage.list_backups()[-1], "logical")


def _forget(server) -> None:
    """DB, what force set aside, and the restore state and ledger rows a refused restore left."""
    with server.session() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '_lastline' "
                    "AND TABLE_NAME IN ('restore_state', 'work_units', 'ledger')")
        if cur.fetchone()[0] == 3:
            for dest, aws in _TAKEN:
                clear_state(cur, _manifest(dest, aws), [DB])
        cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(DB)}")
        cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(aside_name(DB))}")
        cur.connection.commit()


_TAKEN: list[tuple[Path | str, str | None]] = []


@pytest.fixture(autouse=True)
def fresh_target(logical_target):
    _forget(logical_target.server())
    yield
    _forget(logical_target.server())


def _restore(dest: Path | str, aws: str | None = None) -> None:
    _TAKEN.append((dest, aws))
    url = dest if isinstance(dest, str) else f"file://{dest}"
    plan = logical_restore.preflight({"target_conn_id": "t_ltarget", "backup": f"{url}/latest", "aws_conn_id": aws,
                                      "databases": [DB], "force": True})
    logical_restore.create_schema(plan)
    for unit in logical_restore.plan_load(plan):
        logical_restore.load(plan, unit)
    logical_restore.finalize(plan)


def _same(source, target) -> None:
    for table in (KEYED, MYISAM, ONE, BLOBS):
        sql = f"CHECKSUM TABLE {qualified(DB, table)}"
        assert target.query(sql)[0][1] == source.query(sql)[0][1] is not None, table
    create = f"SHOW CREATE TABLE {qualified(DB, KEYED)}"  # its comment and default came from the sealed schema.json
    assert target.query(create)[0][1] == source.query(create)[0][1]
    assert COMMENT in target.query(create)[0][1] and DEFAULT in target.query(create)[0][1]


def _secrets(source) -> list[bytes]:
    """What no stored file but the manifest may hold in the clear: a row, the big value, the schema's secrets."""
    password_hash = source.query("SELECT PASSWORD(%s)", (PASSWORD,))[0][0]
    assert password_hash.startswith("*")
    return [MARKER.encode(), BIG[1000:1064], COMMENT.encode(), DEFAULT.encode(), password_hash.encode()]


def _sealed_and_opaque(name: str, data: bytes, source) -> None:
    assert data.startswith(b"LLSEAL"), name
    assert not [s for s in _secrets(source) if s in data], name


def _exists(server) -> bool:
    return bool(server.query("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (DB,))[0][0])


@pytest.mark.parametrize("which", ["aes-256-gcm-zstd", "chacha20-poly1305-none", "aes-256-gcm-pigz"])
def test_an_encrypted_backup_holds_no_row_in_the_clear_and_restores_exactly(
        sealed_backups, source_db, logical_target, monkeypatch, which):
    dest = sealed_backups[which]
    manifest = _manifest(dest)
    assert manifest.encryption is not None and manifest.encryption["cipher"] == which.rsplit("-", 1)[0]
    assert [(w["type"], w["key_id"]) for w in manifest.encryption["wrappings"]] == [("kek", "enc-k1")]
    stored = [f for f in dest.rglob("*") if f.is_file() and f.name != "manifest.json"]
    assert len([f for f in stored if "/data/" in str(f)]) >= 6  # the keyed table in three chunks, the big value, the others
    assert {f.name for f in stored} >= {"schema.json", "schema.sql"}
    for f in stored:
        _sealed_and_opaque(str(f), f.read_bytes(), source_db)
    schema = next(f for f in manifest.files if f.name == "schema.json")  # sha256 and size: of the bytes as stored
    held = (dest / manifest.backup_id / "schema.json").read_bytes()
    assert (schema.bytes, schema.sha256) == (len(held), manifest.schema_sha256) == (len(held), hashlib.sha256(held).hexdigest())
    raw = (dest / manifest.backup_id / "manifest.json").read_text()
    assert KEY1 not in raw and not [s for s in _secrets(source_db)[2:] if s.decode() in raw]
    _conn(monkeypatch, "enc-k2", KEY2, keys={"enc-k1": KEY1})  # a later key: the older one still reads it
    _restore(dest)
    _same(source_db, logical_target.server())


@pytest.mark.parametrize(("conn", "refusal"), [
    (None, r"is encrypted \(its data key is wrapped under enc-k1 \(kek\)\) and this deployment has no encryption key"),
    ({"login": "enc-k2", "password": KEY2}, r"needs one of the keys enc-k1 \(kek\) to be read; .* holds enc-k2"),
    ({"login": "enc-k1", "password": KEY2}, r"key 'enc-k1' of the encryption key connection .* does not open"),
], ids=["no-key-connection", "another-key", "another-secret-under-the-id"])
def test_a_restore_without_the_key_is_refused_in_preflight_with_nothing_made(
        sealed_backups, logical_target, monkeypatch, conn, refusal):
    if conn is None:
        monkeypatch.delenv(encryption_keys.KEY_CONN_ENV, raising=False)
    else:
        _conn(monkeypatch, **conn)
    with pytest.raises(ConfigError, match=refusal) as caught:
        _restore(sealed_backups["aes-256-gcm-zstd"])
    assert "Nothing was touched" in str(caught.value) and KEY1 not in str(caught.value)
    assert not _exists(logical_target.server())


@pytest.mark.parametrize(("name", "at", "sealed_chunk", "whole"), [
    (ONE, 0.5, "chunk 0:", True),
    (BLOBS, 0.99, "chunk 4:", True),  # the last of the 17 MiB value's sealed chunks: found before a row of the file is loaded
    (BLOBS, 0.99, "chunk 4:", False),  # over OPENED_MOST: opened on its way through the FIFO, the rows before it rolled back
    (MYISAM, 0.5, "chunk 0:", True),  # every sealed chunk opened into a private copy before it is proven: never a row of it
], ids=["one-sealed-chunk", "a-later-sealed-chunk", "a-later-sealed-chunk-through-the-fifo", "myisam"])
def test_a_flipped_byte_in_a_chunk_is_refused_naming_it_and_nothing_of_it_is_kept(
        sealed_backups, logical_target, monkeypatch, tmp_path, name, at, sealed_chunk, whole):
    if not whole:
        monkeypatch.setattr(load, "OPENED_MOST", 0)
    dest = tmp_path / "copy"
    shutil.copytree(sealed_backups["aes-256-gcm-zstd"], dest)
    manifest = _manifest(dest)
    table = next(t for t in manifest.tables if t.name == name)
    path = dest / manifest.backup_id / table.chunks[0].file
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x20
    path.write_bytes(bytes(data))
    _conn(monkeypatch)
    with pytest.raises(IntegrityError) as caught:
        _restore(dest)
    message = str(caught.value)
    assert f"sealed object '{manifest.backup_id}/{table.chunks[0].file}'" in message and sealed_chunk in message, message
    assert "its bytes were changed" in message or "cut inside" in message
    server = logical_target.server()
    assert server.query(f"SELECT COUNT(*) FROM {qualified(DB, name)}")[0][0] == 0


def test_a_flipped_byte_in_its_manifest_is_refused_by_the_restore(sealed_backups, logical_target, monkeypatch, tmp_path):
    """Issue 46: a byte changed in an encrypted backup's manifest. Inside its wrapped data key: the envelope no longer
    opens, and preflight refuses the backup naming the key, with nothing made. Inside a chunk file's recorded sha256:
    that chunk is refused when it is reached, naming it, and none of its rows is kept (a logical restore does not need
    the manifest's MAC: what it brings runs under the run account; backup_verify names the MAC,
    tests/unit/verify/test_sealed_backups.py)."""
    dest = tmp_path / "copy"
    shutil.copytree(sealed_backups["aes-256-gcm-zstd"], dest)
    manifest = _manifest(dest)
    path = dest / manifest.backup_id / "manifest.json"
    original = path.read_text()
    _conn(monkeypatch)
    _flipped_in_manifest(dest, manifest.backup_id, "wrapped")
    with pytest.raises(ConfigError, match=r"key 'enc-k1' of the encryption key connection .* does not open its data key"
                                          r".*or the envelope was changed\). Nothing was touched"):
        _restore(dest)
    assert not _exists(logical_target.server())
    chunk = next(t for t in manifest.tables if t.name == ONE).chunks[0]
    flipped = chunk.sha256[:5] + ("a" if chunk.sha256[5] != "a" else "b") + chunk.sha256[6:]
    path.write_text(original.replace(chunk.sha256, flipped))
    with pytest.raises(IntegrityError, match=f"{chunk.file}.*sha256") as caught:
        _restore(dest)
    assert flipped in str(caught.value) or chunk.sha256 in str(caught.value), caught.value
    assert logical_target.server().query(f"SELECT COUNT(*) FROM {qualified(DB, ONE)}")[0][0] == 0


def test_a_backup_for_a_recipient_is_written_without_the_private_key_and_restored_with_it(
        source_db, logical_target, monkeypatch, tmp_path_factory):
    private, public = encryption_keys.new_identity()
    _conn(monkeypatch, "", "", recipients={"ops": public})  # the backup host: the public key alone
    dest = _backup(tmp_path_factory.mktemp("enc-recipient"))
    assert [w["type"] for w in _manifest(dest).encryption["wrappings"]] == ["x25519"]
    with pytest.raises(ConfigError, match=r"needs one of the keys ops \(x25519\) to be read; .* holds none"):
        _restore(dest)  # the host that wrote it cannot read it
    assert not _exists(logical_target.server())
    _conn(monkeypatch, "", "", identities={"ops": private})  # the restore host
    _restore(dest)
    _same(source_db, logical_target.server())


def test_with_the_decompressor_process_feeding_the_fifo_it_restores_exactly_too(
        sealed_backups, source_db, logical_target, monkeypatch):
    monkeypatch.setenv("LASTLINE_INFILE_LIB", "off")
    _conn(monkeypatch)
    _restore(sealed_backups["aes-256-gcm-pigz"])
    _same(source_db, logical_target.server())


def test_a_local_sealed_chunk_larger_than_what_is_opened_whole_goes_through_the_fifo_and_restores_exactly(
        sealed_backups, source_db, logical_target, monkeypatch):
    """Over OPENED_MOST (256 MiB as stored; here every chunk is over it) a local chunk is not opened into an
    anonymous file first: each sealed chunk is opened on its way through the FIFO, as from S3 or SSH (a flipped byte
    on that way: the flipped-byte test's `through-the-fifo` case)."""
    monkeypatch.setattr(load, "OPENED_MOST", 0)
    _conn(monkeypatch)
    _restore(sealed_backups["aes-256-gcm-zstd"])
    _same(source_db, logical_target.server())


def test_an_encrypted_backup_in_s3_holds_no_row_in_the_clear_and_restores_exactly(
        source_db, logical_target, monkeypatch, s3_server):
    import boto3

    _conn(monkeypatch, cipher="chacha20-poly1305")
    url = _backup("s3://backups/encrypted", "zstd", "t_s3")
    s3 = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1", aws_access_key_id="testing",
                      aws_secret_access_key="testing-secret")
    backup_id = _manifest(url, "t_s3").backup_id
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="backups", Prefix=f"encrypted/{backup_id}/")["Contents"]]
    keys = [k for k in keys if not k.endswith("/manifest.json")]
    assert len(keys) >= 8 and {k.rsplit("/", 1)[1] for k in keys} >= {"schema.json", "schema.sql"}
    for key in keys:
        _sealed_and_opaque(key, s3.get_object(Bucket="backups", Key=key)["Body"].read(), source_db)
    _restore(url, "t_s3")
    _same(source_db, logical_target.server())


def test_an_encrypted_backup_over_ssh_holds_no_row_in_the_clear_and_restores_exactly(
        source_db, logical_target, monkeypatch, sshd, tmp_path):
    folder = tmp_path / "backups"  # the sshd is on this machine's loopback: its side of the destination is here
    url = f"ssh://t_ssh{folder}"
    _conn(monkeypatch)
    _backup(url)
    manifest = _manifest(url)
    assert [w["key_id"] for w in manifest.encryption["wrappings"]] == ["enc-k1"]
    stored = [f for f in (folder / manifest.backup_id).rglob("*") if f.is_file() and f.name != "manifest.json"]
    assert len(stored) >= 8 and {f.name for f in stored} >= {"schema.json", "schema.sql"}
    for f in stored:
        _sealed_and_opaque(str(f), f.read_bytes(), source_db)
    _restore(url)
    _same(source_db, logical_target.server())


def test_a_chunk_file_cut_at_a_sealed_chunk_boundary_is_named_by_verify_and_refused_by_the_restore(
        sealed_backups, logical_target, monkeypatch, tmp_path):
    """The 17 MiB value's chunk file cut after its second sealed chunk, the manifest's size and sha256 rewritten to
    match (unsigned, as a storage writer without the storage key can): only the seal (no final chunk) tells."""
    dest = tmp_path / "copy"
    shutil.copytree(sealed_backups["aes-256-gcm-zstd"], dest)
    manifest = _manifest(dest)
    chunk = next(t for t in manifest.tables if t.name == BLOBS).chunks[0]
    path = dest / manifest.backup_id / chunk.file
    assert (path.stat().st_size - HEADER_SIZE) // (CHUNK_SIZE + TAG) >= 3
    os.truncate(path, HEADER_SIZE + 2 * (CHUNK_SIZE + TAG))
    _rewritten(dest, manifest.backup_id, "logical", chunk.file)
    monkeypatch.delenv(auth.KEY_CONN_ENV)  # the manifest is unsigned now: without a storage key, the seal alone tells
    _conn(monkeypatch)
    cut = "chunk 1: truncated (the object ends after it, but it is not the final chunk (cut at a chunk boundary)"
    verdict = verify_backups.verify_backup(verify_backups.preflight({"destination": f"file://{dest}"}), manifest.backup_id)
    assert verdict.status == "damaged" and [(f.file, f.problem) for f in verdict.findings] == [(chunk.file, "sealed")]
    assert verdict.findings[0].found.startswith(cut), verdict.findings
    with pytest.raises(IntegrityError) as caught:
        _restore(dest)
    message = str(caught.value)
    assert f"sealed object '{manifest.backup_id}/{chunk.file}'" in message and "chunk 1:" in message, message
    assert "it is not the final chunk (cut at a chunk boundary)" in message, message
    assert logical_target.server().query(f"SELECT COUNT(*) FROM {qualified(DB, BLOBS)}")[0][0] == 0


def _preflight(dest: Path) -> object:
    return logical_restore.preflight({"target_conn_id": "t_ltarget", "backup": f"file://{dest}/latest",
                                      "databases": [DB], "force": True})


@pytest.fixture(scope="module")
def plain_backup(source_db, tmp_path_factory) -> Path:
    """A backup written before the deployment encrypted (no encryption key connection), signed with the tests'
    storage key, uncompressed so that a storage writer can change a row in it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(encryption_keys.KEY_CONN_ENV, raising=False)
        dest = _backup(tmp_path_factory.mktemp("plain"), "none")
    assert _manifest(dest).encryption is None and _manifest(dest).authenticity.ok
    return dest


def test_where_the_deployment_encrypts_plain_files_with_a_rewritten_manifest_are_refused_in_preflight(
        plain_backup, logical_target, monkeypatch, tmp_path):
    """The attack (issue 46): whoever can write storage puts plain chunk files and a manifest of their own (its hashes
    rewritten) where a backup was. A deployment with an encryption key takes a plain backup only with an authenticated
    manifest (or on storage it declares trusted); without a key, a logical restore goes on as its trust model says."""
    dest = tmp_path / "forged"
    shutil.copytree(plain_backup, dest)
    manifest = _manifest(dest)
    chunk = next(t for t in manifest.tables if t.name == ONE).chunks[0]
    path = dest / manifest.backup_id / chunk.file
    forged = path.read_bytes().replace(MARKER.encode(), b"qx-forged-row-0000")
    assert len(forged) == chunk.bytes and forged != path.read_bytes()
    path.write_bytes(forged)
    raw = (dest / manifest.backup_id / "manifest.json").read_text()
    (dest / manifest.backup_id / "manifest.json").write_text(raw.replace(chunk.sha256, hashlib.sha256(forged).hexdigest()))
    _conn(monkeypatch)
    with pytest.raises(IntegrityError) as caught:
        _preflight(dest)
    message = str(caught.value)
    assert f"backup {manifest.backup_id} is not encrypted, and this deployment encrypts" in message, message
    assert "its MAC does not match" in message and "Nothing was touched" in message
    assert not _exists(logical_target.server())
    monkeypatch.setenv("LASTLINE_STORAGE_TRUSTED", "true")  # trusted storage never takes a manifest changed after signing
    with pytest.raises(IntegrityError, match="is not encrypted"):
        _preflight(dest)
    monkeypatch.delenv(encryption_keys.KEY_CONN_ENV)  # a deployment that does not encrypt: as before
    assert _preflight(dest).backup.backup_id == manifest.backup_id


def test_where_the_deployment_encrypts_a_plain_backup_restores_signed_or_on_trusted_storage_only(
        plain_backup, source_db, logical_target, monkeypatch):
    _conn(monkeypatch)
    _restore(plain_backup)  # signed with the storage key: an older backup, from before encryption, restores
    _same(source_db, logical_target.server())
    _forget(logical_target.server())
    monkeypatch.delenv("LASTLINE_STORAGE_KEY_CONN_ID")  # nothing left to authenticate it with
    with pytest.raises(IntegrityError, match=r"is not encrypted.*this deployment has no storage key.*Nothing was touched"):
        _preflight(plain_backup)
    assert not _exists(logical_target.server())
    monkeypatch.setenv("LASTLINE_STORAGE_TRUSTED", "true")  # the deployment says only lastline writes this storage
    assert _preflight(plain_backup).backup.backup_id == _manifest(plain_backup).backup_id


def test_a_myisam_chunk_opened_for_its_proof_is_on_disk_under_no_name_while_it_loads(
        sealed_backups, source_db, logical_target, monkeypatch, tmp_path):
    """A MyISAM table's chunk is proven in a private copy before it loads; for an encrypted backup that copy is its
    plaintext. It is an anonymous file handed to the LOAD DATA handler by descriptor: while it loads, no file in the
    temporary folder holds a row, so a worker killed (-9) then leaves none."""
    import contextlib

    from lastline.logical.restore import load

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    real, seen = load.prove_chunk, []

    def named_plaintext() -> list[str]:
        return [str(f) for f in folder.rglob("*") if f.is_file() and MARKER.encode() in f.read_bytes()]  # FIFOs aside

    @contextlib.contextmanager
    def watched(*args, **kw):
        with real(*args, **kw) as (fd, sha256):
            plain = os.pread(fd, 1 << 24, 0)
            before = named_plaintext()
            yield fd, sha256  # the LOAD DATA runs here
            seen.append((os.fstat(fd).st_nlink, MARKER.encode() in plain, before + named_plaintext()))

    monkeypatch.setattr(load, "prove_chunk", watched)
    _conn(monkeypatch)
    _restore(sealed_backups["chacha20-poly1305-none"])  # uncompressed: the opened chunk holds the rows as they are
    _same(source_db, logical_target.server())
    assert seen and all(s == (0, True, []) for s in seen), seen  # the MyISAM table's chunk: plaintext, linked nowhere
    assert list(folder.iterdir()) == []
