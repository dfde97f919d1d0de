"""The deployment's encryption keys: key-encryption keys (KEKs) that wrap each backup's data key, X25519 recipients
a backup is also wrapped to, and (where restores run) their private keys.

They live in an Airflow connection of type generic named by the deployment setting LASTLINE_ENCRYPTION_KEY_CONN_ID
(unset = backups are not encrypted), never in a run's conf, never beside the backups; key ids follow storage.auth's
rules (1 to 64 letters, digits, '.', '_', '-'):
- login, password: the id and the secret of the current KEK (32 characters or more, e.g. `openssl rand -hex 32`);
  new backups' data keys are wrapped under it. HKDF-SHA256 derives each wrapping key from it: never used raw;
- extras `keys`: {"<id>": "<secret>"}, older KEKs still accepted for reading (to rotate: move the current one here,
  put a new login and password, run the rotation);
- extras `recipients`: {"<id>": "<X25519 public key, base64>"}: each new backup's data key is wrapped to each too;
  a connection with recipients and no login or password writes backups its hosts cannot read;
- extras `identities`: {"<id>": "<X25519 private key, base64>"}: only where restores run;
- extras `cipher`: "aes-256-gcm" (the default) or "chacha20-poly1305".
"""
from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from lastline.core.errors import ConfigError
from lastline.storage.auth import key_entry
from lastline.storage.sealing import CIPHERS, DEFAULT_CIPHER

KEY_CONN_ENV = "LASTLINE_ENCRYPTION_KEY_CONN_ID"


@dataclass(frozen=True)
class Kek:
    """A key-encryption key: its id, and its secret (never printed or pickled)."""

    key_id: str
    secret: bytes = field(repr=False)

    def wrapping_key(self, salt: bytes) -> bytes:
        """The one-use key a wrapping with this `salt` is sealed with: HKDF-SHA256 over the secret."""
        info = b"lastline-kek/1\x00" + self.key_id.encode()
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(self.secret)

    def __reduce__(self) -> tuple:
        raise TypeError(f"key {self.key_id!r} is never serialised")


@dataclass(frozen=True)
class Recipient:
    """An X25519 public key a backup's data key is wrapped to (public: 32 raw bytes)."""

    key_id: str
    public: bytes


@dataclass(frozen=True)
class Identity:
    """An X25519 private key that opens the wrappings made to its recipient (never printed or pickled)."""

    key_id: str
    private: bytes = field(repr=False)

    def public(self) -> bytes:
        return X25519PrivateKey.from_private_bytes(self.private).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def __reduce__(self) -> tuple:
        raise TypeError(f"identity {self.key_id!r} is never serialised")


@dataclass(frozen=True)
class EncryptionKeys:
    """What a deployment encrypts with (`current` KEK, `recipients`, `cipher`) and opens with (`keks` by id, the
    current one included, and `identities` by id)."""

    current: Kek | None
    keks: dict[str, Kek] = field(default_factory=dict)
    recipients: tuple[Recipient, ...] = ()
    identities: dict[str, Identity] = field(default_factory=dict)
    cipher: str = DEFAULT_CIPHER

    def held(self) -> list[str]:
        """The key ids this deployment can open a wrapping with."""
        return sorted({*self.keks, *self.identities})


def new_identity() -> tuple[str, str]:
    """(private key, public key) of a fresh X25519 key pair, base64, as the connection's extras hold them."""
    private = X25519PrivateKey.generate()
    raw = private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return base64.b64encode(raw).decode(), base64.b64encode(Identity("new", raw).public()).decode()


def _x25519(where: str, role: str, key_id: object, text: object) -> tuple[str, bytes]:
    """(id, 32 raw bytes) of one recipient or identity; the message never quotes the key."""
    if not isinstance(key_id, str) or not key_id:
        raise ConfigError(f"{where}: {role} ids must be non-empty strings.")
    key_id, _ = key_entry(where, key_id, "x" * 32)  # the id's rules only
    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise ConfigError(f"{where}: {role} {key_id!r} is not an X25519 key in base64 (32 bytes); make one with "
                          "lastline.storage.encryption_keys.new_identity().")
    return key_id, raw


def _ring(where: str, extra: dict, name: str) -> dict:
    ring = extra.get(name) or {}
    if not isinstance(ring, dict):
        raise ConfigError(f"{where}: extras `{name}` must be an object {{\"<id>\": \"<key>\", ...}}.")
    return ring


def keys_from_connection(where: str, conn_type: str, login: str, password: str, extra: dict) -> EncryptionKeys:
    """The encryption keys a connection's fields hold, checked; a ConfigError names what is wrong (never a key)."""
    if conn_type != "generic":
        raise ConfigError(f"{where} is of type {conn_type!r}: keep the encryption keys in a generic connection of their own.")
    if bool(login) != bool(password):
        raise ConfigError(f"{where} needs both a login (the current key's id) and a password (the key), or neither "
                          "(recipients only).")
    keks = dict(key_entry(where, k, v) for k, v in _ring(where, extra, "keys").items())
    current = None
    if login:
        current_id, secret = key_entry(where, login, password)
        keks[current_id] = secret
        current = Kek(current_id, secret)
    recipients = tuple(Recipient(*_x25519(where, "recipient", k, v)) for k, v in _ring(where, extra, "recipients").items())
    identities = {k: Identity(k, raw) for k, raw in
                  (_x25519(where, "identity", k, v) for k, v in _ring(where, extra, "identities").items())}
    if current is None and not recipients and not keks and not identities:
        raise ConfigError(f"{where} holds no key: give it a login and password (a key), or extras `recipients` (X25519 "
                          "public keys) where backups are taken and `identities` (their private keys) where restores run.")
    cipher = extra.get("cipher") or DEFAULT_CIPHER
    if cipher not in CIPHERS:
        raise ConfigError(f"{where}: extras `cipher` {cipher!r} is not one of {', '.join(CIPHERS)}.")
    return EncryptionKeys(current, {k: Kek(k, s) for k, s in keks.items()}, recipients, identities, cipher)


def deployment_encryption_keys() -> EncryptionKeys | None:
    """The keys of the connection LASTLINE_ENCRYPTION_KEY_CONN_ID names (None when the deployment sets none: backups
    are not encrypted), or a ConfigError saying what is wrong with it."""
    conn_id = os.environ.get(KEY_CONN_ENV, "").strip()
    if not conn_id:
        return None
    from lastline.connections import key_ring

    conn_type, login, password, extra = key_ring(conn_id)  # its secrets masked in every log
    return keys_from_connection(f"encryption key connection {conn_id!r} ({KEY_CONN_ENV})", conn_type, login, password,
                                extra)
