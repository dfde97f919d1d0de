"""storage.auth: a control file signed with the deployment's key and checked (rewritten, moved, signed with an
unknown or an older key, unsigned), key ids and lengths checked, and the refusal of what is not authenticated."""
from __future__ import annotations

import json

import pytest

from lastline.core.errors import ConfigError, IntegrityError
from lastline.storage import auth

KEYS = auth.Keys("k2", {"k1": b"o" * 32, "k2": b"n" * 32})
BODY = json.dumps({"kind": "physical", "n": 1}, indent=1).encode()


def checked(key: str, raw: bytes, keys: auth.Keys | None = KEYS) -> auth.Authenticity:
    return auth.check(key, raw, json.loads(raw), keys)


def test_a_signed_file_is_json_with_the_mac_last_and_checks():
    raw = auth.sign("b1/manifest.json", BODY, KEYS)
    data = json.loads(raw)
    assert list(data)[-1] == auth.FIELD and data[auth.FIELD].startswith("hmac-sha256:k2:")
    assert checked("b1/manifest.json", raw) == auth.Authenticity("k2")


def test_an_empty_object_is_signed_without_a_leading_comma():
    assert json.loads(auth.sign("x.json", b"{}", KEYS))[auth.FIELD]


@pytest.mark.parametrize(("change", "state"), [
    (lambda raw: ("b1/manifest.json", raw.replace(b'"n": 1', b'"n": 2')), "mismatch"),
    (lambda raw: ("b2/manifest.json", raw), "mismatch"),
    (lambda raw: ("b1/manifest.json", BODY), "unsigned"),
    (lambda raw: ("b1/manifest.json", raw.replace(b"hmac-sha256:k2:", b"hmac-sha256:k9:")), "unknown_key"),
    (lambda raw: ("b1/manifest.json", raw.replace(b'\n "lastline_mac"', b' "lastline_mac"')), "mismatch"),
], ids=["rewritten", "moved-to-another-folder", "unsigned", "unknown-key", "mac-not-where-lastline-writes-it"])
def test_check_names_what_is_wrong(change, state):
    key, raw = change(auth.sign("b1/manifest.json", BODY, KEYS))
    found = checked(key, raw)
    assert (found.ok, found.state) == (False, state)
    assert found.describe().startswith("not authenticated: ")


def test_an_older_key_is_still_accepted_and_a_deployment_without_keys_says_so(monkeypatch):
    raw = auth.sign("c.json", BODY, auth.Keys("k1", {"k1": b"o" * 32}))
    assert checked("c.json", raw).key_id == "k1"
    monkeypatch.setattr(auth, "deployment_keys", lambda: None)
    assert checked("c.json", raw, None).state == "nokey"
    assert auth.sign("c.json", BODY) == BODY  # and writes files unsigned


def test_only_a_json_object_is_signed():
    with pytest.raises(ValueError, match="only a JSON object is signed"):
        auth.sign("x.json", b"[1]", KEYS)


@pytest.mark.parametrize(("key_id", "secret", "message"), [
    ("bad id", "s" * 32, "is not 1 to 64 letters"), ("k" * 65, "s" * 32, "is not 1 to 64 letters"),
    ("k1", "short", "32 characters or more"), ("k1", 12345, "32 characters or more")],
    ids=["space-in-id", "id-too-long", "short-secret", "secret-not-text"])
def test_key_checks(key_id, secret, message):
    with pytest.raises(ConfigError, match=message):
        auth.key_entry("the connection", key_id, secret)


@pytest.mark.parametrize(("found", "trusted", "refused"), [
    (auth.Authenticity("k1"), "", False),
    (auth.Authenticity(None, "unsigned", "no MAC"), "", True),
    (auth.Authenticity(None, "unsigned", "no MAC"), "true", False),
    (auth.Authenticity(None, "nokey", "no key"), "yes", False),
    (auth.Authenticity(None, "mismatch", "changed"), "true", True),
], ids=["authenticated", "unsigned", "unsigned-on-trusted-storage", "nokey-on-trusted-storage", "mismatch-never-passes"])
def test_require(monkeypatch, found, trusted, refused):
    monkeypatch.setenv(auth.TRUSTED_ENV, trusted)
    if refused:
        with pytest.raises(IntegrityError, match="A physical restore uses only control files lastline signed"):
            auth.require(found, "b1/manifest.json", "a physical restore")
    else:
        auth.require(found, "b1/manifest.json", "a physical restore")
    assert auth.accepted(found) is not refused  # what a plain backup where the deployment encrypts needs (backups)


@pytest.mark.parametrize(("key_id", "secret"), [
    ("0f" * 32, "k0"),  # an id and its secret swapped: the secret in the id's place, 64 hex characters
    ("s3cr3t+key/with=base64chars" * 2, "s" * 32),  # one that breaks the id's rules
], ids=["swapped", "not-an-id"])
def test_a_key_entry_refused_never_shows_what_may_be_a_secret(key_id, secret):
    with pytest.raises(ConfigError) as caught:
        auth.key_entry("the connection", key_id, secret)
    assert key_id not in str(caught.value) and "swapped" in str(caught.value)
