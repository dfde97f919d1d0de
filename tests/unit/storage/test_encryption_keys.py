"""storage.encryption_keys: the deployment's encryption key connection read and checked (ids, lengths, X25519 keys,
the cipher), an unset connection meaning "not encrypted", and no key ever in a repr, a message or a pickle."""
from __future__ import annotations

import json
import pickle

import pytest

from lastline.core.errors import ConfigError
from lastline.storage import encryption_keys
from lastline.storage.encryption_keys import EncryptionKeys, Identity, Kek, keys_from_connection

SECRET, OLD = "n" * 40, "o" * 32
PRIVATE, PUBLIC = encryption_keys.new_identity()


def read(login: str = "k2", password: str = SECRET, conn_type: str = "generic", **extra) -> EncryptionKeys:
    return keys_from_connection("the connection", conn_type, login, password, extra)


def test_the_current_key_older_keys_recipients_identities_and_cipher_are_read():
    keys = read(keys={"k1": OLD}, recipients={"ops": PUBLIC}, identities={"ops": PRIVATE}, cipher="chacha20-poly1305")
    assert keys.current == Kek("k2", SECRET.encode())
    assert sorted(keys.keks) == ["k1", "k2"] and keys.keks["k1"].secret == OLD.encode()
    assert [r.key_id for r in keys.recipients] == ["ops"] and keys.identities["ops"].public() == keys.recipients[0].public
    assert keys.cipher == "chacha20-poly1305" and keys.held() == ["k1", "k2", "ops"]
    assert read().cipher == "aes-256-gcm"


def test_recipients_only_writes_and_identities_only_reads():
    writer = read("", "", recipients={"ops": PUBLIC})
    assert writer.current is None and writer.held() == []  # the backup host cannot open what it writes
    reader = read("", "", identities={"ops": PRIVATE})
    assert reader.held() == ["ops"] and reader.recipients == ()


@pytest.mark.parametrize(("fields", "extra", "message"), [
    ({"conn_type": "mysql"}, {}, "is of type 'mysql'"),
    ({"password": ""}, {}, "needs both a login"),
    ({"login": ""}, {}, "needs both a login"),
    ({"login": "", "password": ""}, {}, "holds no key"),
    ({"login": "bad id"}, {}, "is not 1 to 64 letters"),
    ({"password": "short"}, {}, "32 characters or more"),
    ({}, {"keys": {"k1": "short"}}, "the secret of key 'k1' must be a string of 32 characters or more"),
    ({}, {"keys": ["k1"]}, "extras `keys` must be an object"),
    ({}, {"recipients": {"ops": "not base64!"}}, "recipient 'ops' is not an X25519 key in base64"),
    ({}, {"recipients": {"ops": "AAAA"}}, "recipient 'ops' is not an X25519 key in base64"),
    ({}, {"identities": {"ops": PRIVATE[:-4]}}, "identity 'ops' is not an X25519 key in base64"),
    ({}, {"identities": {"a b": PRIVATE}}, "is not 1 to 64 letters"),
    ({}, {"cipher": "aes-128-cbc"}, "extras `cipher` 'aes-128-cbc' is not one of"),
], ids=["not-generic", "login-without-password", "password-without-login", "no-key-at-all", "bad-id", "short-secret",
        "short-older-key", "keys-not-an-object", "recipient-not-base64", "recipient-too-short", "identity-cut",
        "identity-bad-id", "unknown-cipher"])
def test_a_bad_connection_is_refused_naming_the_field_and_never_the_key(fields, extra, message):
    with pytest.raises(ConfigError, match=message) as caught:
        read(**{"login": "k2", "password": SECRET, **fields}, **extra)
    assert "the connection" in str(caught.value)
    assert not any(secret in str(caught.value) for secret in (SECRET, OLD, PRIVATE, PRIVATE[:-4]))


def test_no_key_shows_itself_in_a_repr_or_a_pickle():
    keys = read(keys={"k1": OLD}, recipients={"ops": PUBLIC}, identities={"ops": PRIVATE})
    shown = repr(keys) + str(keys) + repr(keys.current) + repr(keys.identities["ops"])
    assert "k1" in shown and "ops" in shown
    for secret in (SECRET, OLD, SECRET.encode().hex(), repr(SECRET.encode()), repr(keys.identities["ops"].private), PRIVATE):
        assert secret not in shown
    for item in (keys, keys.current, keys.identities["ops"]):
        with pytest.raises(TypeError, match="never serialised"):
            pickle.dumps(item)


def test_a_kek_derives_a_wrapping_key_per_salt_and_never_is_one():
    kek = Kek("k1", SECRET.encode())
    first, second = kek.wrapping_key(b"a" * 16), kek.wrapping_key(b"b" * 16)
    assert len(first) == 32 and first != second and SECRET.encode()[:32] not in (first, second)
    assert Kek("k9", SECRET.encode()).wrapping_key(b"a" * 16) != first  # the id is bound too


def test_new_identity_makes_a_pair_the_connection_accepts():
    private, public = encryption_keys.new_identity()
    keys = read(recipients={"r": public}, identities={"r": private})
    assert keys.recipients[0].public == Identity("r", keys.identities["r"].private).public()


def test_an_unset_connection_means_not_encrypted_and_a_set_one_is_read_with_its_secrets_masked(monkeypatch):
    monkeypatch.delenv(encryption_keys.KEY_CONN_ENV, raising=False)
    assert encryption_keys.deployment_encryption_keys() is None
    monkeypatch.setenv(encryption_keys.KEY_CONN_ENV, "lastline_encryption")
    monkeypatch.setenv("AIRFLOW_CONN_LASTLINE_ENCRYPTION", json.dumps(
        {"conn_type": "generic", "login": "k2", "password": SECRET, "extra": {"keys": {"k1": OLD}}}))
    keys = encryption_keys.deployment_encryption_keys()
    assert keys is not None and keys.current == Kek("k2", SECRET.encode()) and sorted(keys.keks) == ["k1", "k2"]
