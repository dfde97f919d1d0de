"""verify.reading on a real local folder: an object read back against its size and sha256 (missing, another size
and never read, another digest, a link refused), the digest streamed and bounded, and a control file's MAC verdict
as a finding where the deployment signs."""
from __future__ import annotations

import hashlib

import pytest

from lastline.storage import auth
from lastline.storage.file import FileStorage
from lastline.verify import reading

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
    assert reading.digest(store, "20261128T161432Z-7c93b6/f", len(DATA)) == (hashlib.sha256(DATA).hexdigest(), len(DATA))


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
