"""verify.reading on a real local folder: an object read back against its size and sha256 (missing, another size
and never read, another digest, a link refused), the digest streamed and bounded, and a control file's MAC verdict
as a finding where the deployment signs. A sealed object read with its seal: every chunk authenticated from the one
read that hashes it, memory flat (from a folder and from S3, where a child process reading 48 MB writes nothing); a
chunk changed with its sha256 rewritten to match is a `sealed` finding naming the
chunk and why, a changed digest stays a `digest` finding; and how sealed objects are read: opened with the key a
restore uses, not opened with a note where there is no key connection, a `key` finding where none held opens them."""
from __future__ import annotations

import hashlib
import tracemalloc

import pytest

from lastline.core.errors import ConfigError
from lastline.storage import auth, encryption_keys
from lastline.storage.envelope import new_seal
from lastline.storage.file import FileStorage
from lastline.storage.sealing import CHUNK_SIZE, HEADER_SIZE, TAG
from lastline.verify import reading
from lastline_dev.keys import encryption_connection

DATA = b"\x00`. x\n" * 200_000  # 1.2 MB: more than one read


@pytest.fixture
def store(tmp_path) -> FileStorage:
    storage = FileStorage(str(tmp_path / "dest"))
    storage.write_bytes("20261128T161432Z-7c93b6/f", DATA)
    return storage


def test_an_object_as_recorded_is_no_finding_and_every_byte_is_read(store):
    assert reading.check_object(store, "20261128T161432Z-7c93b6/f", len(DATA), hashlib.sha256(DATA).hexdigest(), "f") == (None, len(DATA))


@pytest.mark.parametrize(("key", "size", "sha", "problem", "read"), [
    ("20261128T161432Z-7c93b6/gone", 5, "", "missing", 0),
    ("20261128T161432Z-7c93b6/f", len(DATA) + 1, "", "size", 0),
    ("20261128T161432Z-7c93b6/f", len(DATA), "0" * 64, "digest", len(DATA)),
    ("20261128T161432Z-7c93b6/../f", len(DATA), "0" * 64, "unreadable", 0),
], ids=["missing", "another-size-not-read", "another-digest", "a-key-leaving-the-folder"])
def test_what_differs_is_named(store, key, size, sha, problem, read):
    found, n = reading.check_object(store, key, size, sha, "f")
    assert found is not None and (found.file, found.problem, n) == ("f", problem, read)


def test_an_object_past_16_mib_streams_through_and_its_last_byte_counts(store):
    big = bytearray(b"\t\\`" * (17 * (1 << 20) // 3 + 1))
    sha = hashlib.sha256(big).hexdigest()
    big[-1] ^= 0x01
    store.write_bytes("20261128T161432Z-7c93b6/big", bytes(big))
    found, n = reading.check_object(store, "20261128T161432Z-7c93b6/big", len(big), sha, "big")
    assert found is not None and found.problem == "digest" and n == len(big) > 16 * (1 << 20)


def test_a_link_is_refused_not_followed(store, tmp_path):
    (tmp_path / "elsewhere").write_bytes(DATA)
    (tmp_path / "dest" / "20261128T161432Z-7c93b6" / "l").symlink_to(tmp_path / "elsewhere")
    found, n = reading.check_object(store, "20261128T161432Z-7c93b6/l", len(DATA), hashlib.sha256(DATA).hexdigest(), "l")
    assert found is not None and found.problem == "unreadable" and n == 0


def test_the_digest_stops_once_past_its_limit(store):
    store.write_bytes("20261128T161432Z-7c93b6/big", b"b" * (2 * reading.CHUNK + 1))  # grew after its size was read
    assert reading.digest(store, "20261128T161432Z-7c93b6/big", 10)[1] == reading.CHUNK  # one read, then no further
    assert reading.digest(store, "20261128T161432Z-7c93b6/f", len(DATA)) == (hashlib.sha256(DATA).hexdigest(), len(DATA),
                                                                             None)


@pytest.mark.parametrize(("state", "trusted", "keyed", "finding"), [
    ("mismatch", False, True, True), ("unknown_key", False, True, True), ("unsigned", False, True, True),
    ("unsigned", True, True, False), ("unsigned", False, False, False), ("nokey", False, False, False),
], ids=["mac-fails", "unknown-key", "unsigned-where-the-deployment-signs", "unsigned-on-trusted-storage",
        "unsigned-without-a-key", "signed-without-a-key-to-check"])
def test_a_control_files_mac_as_a_finding(monkeypatch, state, trusted, keyed, finding):
    monkeypatch.setenv(auth.TRUSTED_ENV, "true" if trusted else "")
    if not keyed:
        monkeypatch.delenv(auth.KEY_CONN_ENV, raising=False)
    found = reading.mac_finding(auth.Authenticity(None, state, "why"), "manifest.json")
    assert (found is not None) == finding
    assert reading.mac_finding(auth.Authenticity("k1"), "manifest.json") is None


def test_a_storage_that_does_not_answer_is_raised_to_retry_never_a_finding_nor_a_refusal(monkeypatch):
    import json

    from lastline.core.errors import Refusal
    from lastline.storage.s3 import S3Storage

    monkeypatch.setenv("AIRFLOW_CONN_T_S3_GONE", json.dumps({  # an endpoint nothing listens on
        "conn_type": "aws", "login": "testing", "password": "testing-secret",
        "extra": {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1",
                  "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2}}}))
    with pytest.raises(Exception) as raised:
        reading.check_object(S3Storage("backups", "p", "t_s3_gone"), "20261128T161432Z-7c93b6/f", 5, "0" * 64, "f")
    assert "127.0.0.1:9" in str(raised.value) and not isinstance(raised.value, Refusal)  # Airflow retries it


BACKUP = "20261128T161432Z-7c93b6"
SECRET, OTHER = "5e" * 32, "6f" * 32


def _seal(key_id: str = "v-k1", secret: str = SECRET):
    return new_seal(encryption_keys.keys_from_connection("c", "generic", key_id, secret, {}), BACKUP)


@pytest.fixture
def sealed(store):
    """An object of 3 seal chunks and a bit, sealed as `<backup>/data/c` with a fresh data key: (seal, envelope, key,
    stored bytes)."""
    seal, env = _seal()
    key = f"{BACKUP}/data/c"
    stored = seal.sealed(DATA * 11, key)  # 13.2 MB: 4 chunks of 4 MiB
    store.write_bytes(key, stored)
    return seal, env, key, stored


def test_a_sealed_object_with_its_seal_is_no_finding_and_read_once(store, sealed):
    seal, _, key, stored = sealed
    assert reading.check_object(store, key, len(stored), hashlib.sha256(stored).hexdigest(), "data/c", seal) == (None, len(stored))


def _flip(store, key: str, stored: bytes, at: int) -> bytes:
    changed = bytearray(stored)
    changed[at] ^= 0x20
    store.write_bytes(key, bytes(changed))
    return bytes(changed)


@pytest.mark.parametrize(("at", "chunk", "reason"), [
    (HEADER_SIZE + 2 * (CHUNK_SIZE + TAG) + 77, "chunk 2", "changed"),
    (10, "its header", "header"),
    (-3, "chunk 3", "changed"),  # its size is the manifest's: not cut
], ids=["inside-chunk-2", "in-the-header", "in-the-last-tag"])
def test_a_changed_chunk_whose_sha256_was_rewritten_to_match_is_a_sealed_finding(store, sealed, at, chunk, reason):
    seal, _, key, stored = sealed
    changed = _flip(store, key, stored, at)
    found, n = reading.check_object(store, key, len(changed), hashlib.sha256(changed).hexdigest(), "data/c", seal)
    assert found is not None and (found.file, found.problem) == ("data/c", "sealed") and n == len(changed)  # read whole
    assert found.found.startswith(f"{chunk}: {reason} (")


def test_a_changed_chunk_with_the_manifests_sha256_is_a_digest_finding(store, sealed):
    seal, _, key, stored = sealed
    changed = _flip(store, key, stored, HEADER_SIZE + 5)
    found, n = reading.check_object(store, key, len(stored), hashlib.sha256(stored).hexdigest(), "data/c", seal)
    assert found is not None and found.problem == "digest" and found.found == f"sha256 {hashlib.sha256(changed).hexdigest()}"


def test_an_object_sealed_under_another_data_key_or_name_does_not_open(store, sealed):
    _, _, key, stored = sealed
    other, _ = _seal()
    found, _ = reading.check_object(store, key, len(stored), hashlib.sha256(stored).hexdigest(), "data/c", other)
    assert found is not None and found.problem == "sealed" and found.found.startswith("its header: header (")
    plain = DATA  # an object written unencrypted where the manifest records a seal
    store.write_bytes(key, plain)
    found, _ = reading.check_object(store, key, len(plain), hashlib.sha256(plain).hexdigest(), "data/c", other)
    assert found is not None and found.found.startswith("its header: not_sealed (")


def test_a_sealed_object_is_opened_with_memory_flat(store):
    seal, _ = _seal()
    key = f"{BACKUP}/data/big"
    with store.writer(key) as sink, seal.writer(sink, key) as writer:
        for _ in range(40):  # 48 MB: 12 seal chunks, never held whole
            writer.write(DATA)
    size = store.size(key)
    sha = hashlib.sha256(b"".join(store.reader(key))).hexdigest()
    peaks = []
    for opener in (None, seal):
        tracemalloc.start()
        try:
            assert reading.check_object(store, key, size, sha, "data/big", opener) == (None, size)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    # the digest alone holds the storage's pieces (the one read and the one before it); opening adds two buffers, each
    # reused for every chunk: the sealed chunk as read, its plaintext
    assert peaks[0] < 2.5 * CHUNK_SIZE and peaks[1] - peaks[0] < 2.5 * CHUNK_SIZE < size / 4, peaks


def test_how_sealed_objects_are_read_back(store, sealed, monkeypatch):
    seal, env, _, _ = sealed
    opened = lambda: seal  # noqa: E731 (what backups.backup_seal gives when the deployment's keys open it)
    assert reading.opening(None, opened, "m", "manifest.json") == reading.Opening()  # not encrypted: nothing to open
    monkeypatch.delenv(encryption_keys.KEY_CONN_ENV, raising=False)
    note = reading.opening(env.to_json(), opened, "m", "manifest.json")
    assert note.seal is None and note.finding is None and "no encryption key connection" in note.note and "v-k1 (kek)" in note.note
    encryption_connection(monkeypatch.setenv, "unit_verify_enc", "v-k2", OTHER)
    assert reading.opening(env.to_json(), opened, "m", "manifest.json").seal is seal

    def refused():
        raise ConfigError("backup needs one of the keys v-k1 (kek) to be read; the connection holds v-k2")

    found = reading.opening(env.to_json(), refused, "m", "manifest.json")
    assert found.seal is None and found.finding is not None and (found.finding.file, found.finding.problem) == ("manifest.json", "key")
    assert found.finding.expected == "one of the keys v-k1 (kek)" and "holds v-k2" in found.finding.found
    broken = reading.opening({"format": "lastline-seal/1"}, opened, "m", "manifest.json")
    assert broken.finding is not None and broken.finding.problem == "unreadable" and broken.seal is None


def _read_in_a_child(prefix: str, key: str, size: int, sha: str, seal, out) -> None:
    """In a forked process (no moto server thread in it: only the reader's own allocations are traced), with a storage
    and a client of its own: check_object under tracemalloc; sends (its result, the peak traced, the bytes this process
    wrote: /proc/self/io wchar)."""
    from lastline.storage.s3 import S3Storage

    def wrote() -> int:
        return int(next(line.split()[1] for line in open("/proc/self/io") if line.startswith("wchar:")))

    store = S3Storage("backups", prefix, "t_s3")
    before = wrote()
    tracemalloc.start()
    found = reading.check_object(store, key, size, sha, "data/big", seal)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    out.send((found, peak, wrote() - before))


def test_a_sealed_object_on_s3_streams_through_memory_flat_and_nothing_written(s3_server):
    """Issue 46: backup_verify on S3 streams each object through the digest and the seal, never downloading it whole:
    48 MB sealed in a bucket, read back by a process whose traced memory stays under 2.5 reads' worth for the digest
    and 2.5 more for opening, and which writes less than 1 MiB in all (a download to a file would write the object)."""
    import multiprocessing

    from lastline.storage.s3 import S3Storage

    seal, _ = _seal()
    store, key = S3Storage("backups", "verify-stream", "t_s3"), f"{BACKUP}/data/big"
    with store.writer(key) as sink, seal.writer(sink, key) as writer:
        for _ in range(40):  # 48 MB: 12 seal chunks
            writer.write(DATA)
    size = store.size(key)
    sha = hashlib.sha256(b"".join(store.reader(key))).hexdigest()
    fork = multiprocessing.get_context("fork")
    results = []
    for opener in (None, seal):
        ours, theirs = fork.Pipe(duplex=False)
        child = fork.Process(target=_read_in_a_child, args=("verify-stream", key, size, sha, opener, theirs))
        child.start()
        assert ours.poll(120), "the child did not answer"
        results.append(ours.recv())
        child.join(30)
        assert child.exitcode == 0
    store.delete_backup(BACKUP)  # the session's S3 server keeps no 48 MB for the tests after this one
    assert [found for found, _, _ in results] == [(None, size)] * 2 and size > 10 * reading.CHUNK
    (_, digest, wrote), (_, opened, wrote_opened) = results
    # as from a folder (above): the digest holds the piece read and the one before it; opening adds two buffers
    assert digest < 2.5 * reading.CHUNK and opened - digest < 2.5 * reading.CHUNK < size / 4, results
    assert wrote < 1 << 20 and wrote_opened < 1 << 20, results
