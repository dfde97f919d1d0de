"""storage.envelope: a backup's data key wrapped under the current KEK and to recipients, recorded as JSON with key
ids and no key; opened by any key the deployment holds (older ones too) and by a recipient's private key only;
refused naming the key ids it needs when a key is missing or wrong; a rotation re-wraps it so that the new key opens
it and the old one no longer does; an envelope from storage is checked as untrusted input."""
from __future__ import annotations

import base64
import io
import json
import pickle

import pytest

from lastline.core.errors import ConfigError, IntegrityError
from lastline.storage import envelope, sealing
from lastline.storage.encryption_keys import EncryptionKeys, keys_from_connection, new_identity
from lastline.storage.envelope import Envelope

K1, K2, K3 = "1" * 32, "2" * 40, "3" * 64
PRIVATE, PUBLIC = new_identity()
OTHER_PRIVATE, OTHER_PUBLIC = new_identity()


def keys(login: str = "k1", password: str = K1, **extra) -> EncryptionKeys:
    return keys_from_connection("the connection", "generic", login, password, extra)


def round_trip(env: Envelope) -> Envelope:
    return Envelope.from_json(json.loads(json.dumps(env.to_json())), "b1/manifest.json")


@pytest.mark.parametrize("cipher", list(sealing.CIPHERS))
def test_a_new_data_key_is_wrapped_and_recorded_without_any_key_and_opens_again(cipher):
    deployment = keys(recipients={"ops": PUBLIC}, cipher=cipher)
    data_key, env = envelope.new_data_key(deployment, "b1")
    recorded = json.dumps(env.to_json())
    assert [(w["type"], w["key_id"]) for w in env.to_json()["wrappings"]] == [("kek", "k1"), ("x25519", "ops")]
    assert env.to_json()["cipher"] == cipher and env.to_json()["chunk_size"] == sealing.CHUNK_SIZE
    for secret in (K1, base64.b64encode(data_key.raw()).decode(), data_key.raw().hex(), PRIVATE):
        assert secret not in recorded
    assert envelope.open_data_key(round_trip(env), deployment, "b1") == data_key


def test_two_backups_get_two_data_keys():
    assert envelope.new_data_key(keys(), "b1")[0] != envelope.new_data_key(keys(), "b1")[0]


def test_an_older_key_in_the_connection_still_opens_an_old_backup():
    data_key, env = envelope.new_data_key(keys(), "b1")
    later = keys("k2", K2, keys={"k1": K1})
    assert envelope.open_data_key(env, later, "b1") == data_key


@pytest.mark.parametrize(("deployment", "message"), [
    (None, r"backup 'b1' is encrypted \(its data key is wrapped under k1 \(kek\)\) and this deployment has no "
           r"encryption key connection \(LASTLINE_ENCRYPTION_KEY_CONN_ID\)"),
    (keys("k2", K2), r"backup 'b1' needs one of the keys k1 \(kek\) to be read; the encryption key connection "
                     r"\(LASTLINE_ENCRYPTION_KEY_CONN_ID\) holds k2: add one of them"),
    (keys("k1", K3), r"key 'k1' of the encryption key connection .* does not open its data key: the connection holds "
                     r"another secret under that id"),
    (keys("k2", K2, keys={"k1": K3}), r"key 'k1' of the encryption key connection"),
], ids=["no-connection", "missing-key", "wrong-secret-under-the-id", "wrong-older-key"])
def test_a_missing_or_wrong_key_is_refused_naming_the_key_id(deployment, message):
    _, env = envelope.new_data_key(keys(), "b1")
    with pytest.raises(ConfigError, match=message) as caught:
        envelope.open_data_key(env, deployment, "b1")
    assert "Nothing was touched" in str(caught.value)
    assert not any(secret in str(caught.value) for secret in (K1, K2, K3))


def test_a_wrapping_copied_into_another_backup_does_not_open():
    _, env = envelope.new_data_key(keys(recipients={"ops": PUBLIC}), "b1")
    with pytest.raises(ConfigError, match="keys 'k1', 'ops' of the encryption key connection .* do not open"):
        envelope.open_data_key(env, keys(identities={"ops": PRIVATE}), "b2")


def test_rotation_re_wraps_the_same_data_key_under_the_new_key_only():
    data_key, old = envelope.new_data_key(keys(), "b1")
    rotated_keys = keys("k2", K2, keys={"k1": K1})
    new = envelope.rewrap(old, rotated_keys, "b1")
    assert [w.key_id for w in new.wrappings] == ["k2"] and (new.cipher, new.chunk_size) == (old.cipher, old.chunk_size)
    assert envelope.open_data_key(new, keys("k2", K2), "b1") == data_key  # the new key opens it
    with pytest.raises(ConfigError, match=r"needs one of the keys k2 \(kek\) to be read; .* holds k1"):
        envelope.open_data_key(new, keys(), "b1")  # the old key no longer does
    sealed = io.BytesIO()
    envelope.seal_stream(io.BytesIO(b"row\t1\n"), sealed, data_key, "b1", "b1/t.tsv")
    out = io.BytesIO()
    envelope.open_stream(io.BytesIO(sealed.getvalue()), out, envelope.open_data_key(new, keys("k2", K2), "b1"), "b1", "b1/t.tsv")
    assert out.getvalue() == b"row\t1\n"  # the data, sealed before the rotation, reads after it


def test_rotation_needs_a_key_that_opens_the_old_envelope():
    _, old = envelope.new_data_key(keys(), "b1")
    with pytest.raises(ConfigError, match=r"needs one of the keys k1 \(kek\)"):
        envelope.rewrap(old, keys("k2", K2), "b1")


def test_recipient_mode_writes_with_the_public_key_only_and_reads_with_the_private_key():
    backup_host = keys("", "", recipients={"ops": PUBLIC})
    data_key, env = envelope.new_data_key(backup_host, "b1")
    assert [w.kind for w in env.wrappings] == ["x25519"]
    with pytest.raises(ConfigError, match=r"needs one of the keys ops \(x25519\) to be read; .* holds none"):
        envelope.open_data_key(env, backup_host, "b1")  # the host that took the backup cannot read it
    restore_host = keys("", "", identities={"ops": PRIVATE})
    assert envelope.open_data_key(round_trip(env), restore_host, "b1", authenticated=True) == data_key
    with pytest.raises(ConfigError, match="key 'ops' of the encryption key connection .* does not open"):
        envelope.open_data_key(env, keys("", "", identities={"ops": OTHER_PRIVATE}), "b1", authenticated=True)
    # anyone with the public key makes such a wrapping: from a manifest whose MAC was not checked it is refused
    with pytest.raises(IntegrityError, match="opens only through a recipient's wrapping, which anyone with that "
                                             "recipient's public key can make, and its manifest is not authenticated"):
        envelope.open_data_key(env, restore_host, "b1")


def _forged(env: Envelope, first: bool = True) -> tuple[sealing.DataKey, Envelope]:
    """`env` with a wrapping to recipient ops of a data key of a storage writer's own (who holds the public key only)."""
    theirs, made = envelope.new_data_key(keys("", "", recipients={"ops": PUBLIC}), "b1")
    wrappings = (*made.wrappings, *env.wrappings) if first else (*env.wrappings, *made.wrappings)
    return theirs, Envelope(env.cipher, env.chunk_size, wrappings)


@pytest.mark.parametrize("first", [True, False], ids=["listed-first", "listed-last"])
def test_a_recipient_wrapping_a_storage_writer_adds_never_replaces_the_data_key(first):
    data_key, env = envelope.new_data_key(keys(recipients={"ops": PUBLIC}), "b1")
    theirs, forged = _forged(env, first)
    kek_only = keys()
    assert envelope.open_data_key(forged, kek_only, "b1") == data_key  # the KEK's wrapping is taken, never theirs
    both = keys(identities={"ops": PRIVATE})
    with pytest.raises(IntegrityError, match="the wrappings of its data key open different keys"):
        envelope.open_data_key(forged, both, "b1", authenticated=True)
    with pytest.raises(IntegrityError, match="open different keys"):  # nor does a rotation make theirs the KEK's
        envelope.rewrap(forged, both, "b1", authenticated=True)
    assert theirs != data_key


def test_a_deployment_that_cannot_write_says_so():
    with pytest.raises(ConfigError, match="has no key to write with"):
        envelope.new_data_key(keys("", "", identities={"ops": PRIVATE}), "b1")


def test_a_low_order_recipient_key_is_refused():
    low_order = base64.b64encode(bytes(32)).decode()
    with pytest.raises(ConfigError, match="recipient 'bad' .* is not a usable X25519 public key"):
        envelope.new_data_key(keys("", "", recipients={"bad": low_order}), "b1")


def changed(**fields) -> dict:
    data = envelope.new_data_key(keys(recipients={"ops": PUBLIC}), "b1")[1].to_json()
    for name, value in fields.items():
        if name.startswith("w_"):
            data["wrappings"][0][name[2:]] = value
        else:
            data[name] = value
    return data


@pytest.mark.parametrize("data", [
    None, [], changed(format="lastline-seal/9"), changed(cipher="rot13"), changed(chunk_size=1), changed(chunk_size="4"),
    changed(wrappings=[]), changed(wrappings=["x"]), changed(w_type="rsa"), changed(w_key_id="a b"),
    changed(w_wrapped="AAAA"), changed(w_salt="!!"), changed(w_key_id=None),
], ids=["null", "a-list", "unknown-format", "unknown-cipher", "tiny-chunk", "chunk-as-text", "no-wrapping",
        "wrapping-not-an-object", "unknown-wrapping-type", "bad-key-id", "short-wrapped-key", "salt-not-base64",
        "no-key-id"])
def test_an_envelope_from_storage_is_untrusted_input(data):
    with pytest.raises(IntegrityError, match="b1/manifest.json: the encryption envelope is not one lastline writes"):
        Envelope.from_json(data, "b1/manifest.json")


def test_a_changed_wrapped_key_is_refused_as_a_wrong_key_naming_its_id():
    data = changed()
    wrapped = bytearray(base64.b64decode(data["wrappings"][0]["wrapped"]))
    wrapped[0] ^= 1
    data["wrappings"][0]["wrapped"] = base64.b64encode(bytes(wrapped)).decode()
    with pytest.raises(ConfigError, match=r"key 'k1' of the encryption key connection .*\(or the envelope was changed\)"):
        envelope.open_data_key(Envelope.from_json(data, "m"), keys(), "b1")


def test_a_backup_seal_seals_and_opens_its_objects_and_never_shows_its_key():
    seal, env = envelope.new_seal(keys(cipher="chacha20-poly1305"), "b1")
    assert (seal.backup_id, seal.cipher, seal.chunk_size) == ("b1", "chacha20-poly1305", sealing.CHUNK_SIZE)
    sink = io.BytesIO()
    with seal.writer(sink, "b1/data/t.tsv") as writer:
        writer.write(b"row\n" * 1000)
    opened = envelope.opened_seal(env.to_json(), keys(), "b1", "b1/manifest.json")
    assert opened == seal and opened.reader(io.BytesIO(sink.getvalue()), "b1/data/t.tsv").read() == b"row\n" * 1000
    assert seal.data_key.raw().hex() not in repr(seal) and "DataKey" not in repr(seal)
    with pytest.raises(TypeError, match="never serialised"):
        pickle.dumps(seal)
    with pytest.raises(IntegrityError, match="b1/manifest.json: the encryption envelope is not one lastline writes"):
        envelope.opened_seal({"format": "lastline-seal/1"}, keys(), "b1", "b1/manifest.json")


def test_a_small_object_is_sealed_and_opened_whole_bound_to_its_name():
    seal, _ = envelope.new_seal(keys(), "b1")
    text = b'{"tables": []}\n' * 5000
    stored = seal.sealed(text, "b1/schema.json")
    assert stored.startswith(b"LLSEAL") and b"tables" not in stored
    assert len(stored) == sealing.sealed_size(len(text)) and seal.opened(stored, "b1/schema.json") == text
    assert seal.opened(seal.sealed(b"", "b1/schema.sql"), "b1/schema.sql") == b""
    with pytest.raises(sealing.SealError, match="its header"):
        seal.opened(stored, "b1/schema.sql")  # moved to another name
    with pytest.raises(sealing.SealError, match="chunk 0"):
        seal.opened(stored[:-1], "b1/schema.json")


def test_a_stream_of_pieces_of_any_size_is_opened_chunk_by_chunk():
    seal, _ = envelope.new_seal(keys(), "b1")
    text = bytes(range(256)) * 40000  # over two 4 MiB chunks
    stored = seal.sealed(text, "b1/data/x")
    pieces = [stored[i:i + 777] for i in range(0, len(stored), 777)]
    assert b"".join(seal.opened_stream(iter(pieces), "b1/data/x")) == text
    with pytest.raises(sealing.SealError, match="chunk 2"):
        list(seal.opened_stream(iter(pieces[:-1]), "b1/data/x"))


@pytest.mark.parametrize("piece", [777, 4 << 20, 9 << 20])
def test_a_stream_of_pieces_is_authenticated_to_its_end_without_handing_out_plaintext(piece):
    seal, _ = envelope.new_seal(keys(), "b1")
    stored = seal.sealed(bytes(range(256)) * 40000, "b1/data/x")  # 3 chunks
    pieces = [stored[i:i + piece] for i in range(0, len(stored), piece)]
    assert seal.authenticate(iter(pieces), "b1/data/x") is None
    changed = bytearray(stored)
    changed[sealing.HEADER_SIZE + sealing.CHUNK_SIZE + sealing.TAG + 9] ^= 1
    with pytest.raises(sealing.SealError, match="chunk 1: it does not authenticate") as raised:
        seal.authenticate(iter([bytes(changed)]), "b1/data/x")
    assert (raised.value.chunk, raised.value.reason) == (1, "changed")
    with pytest.raises(sealing.SealError, match="chunk 2"):
        seal.authenticate(iter([stored[:-1]]), "b1/data/x")  # cut inside its final chunk
    with pytest.raises(sealing.SealError, match="chunk 2"):
        seal.authenticate(iter([stored, b"x"]), "b1/data/x")  # a byte appended to its final chunk
