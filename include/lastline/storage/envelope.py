"""A backup's envelope: its random data key wrapped under the deployment's KEK and to its recipients, recorded in
the manifest as JSON (key ids and wrapped keys, never a key in the clear); a rotation re-wraps it, no data moves.

    {"format": "lastline-seal/1", "cipher": "aes-256-gcm", "chunk_size": 4194304,
     "wrappings": [{"type": "kek", "key_id": "k2", "salt": "<16 bytes>", "wrapped": "<48 bytes>"},
                   {"type": "x25519", "key_id": "ops", "ephemeral": "<32 bytes>", "wrapped": "<48 bytes>"}]}

(bytes in base64). A `kek` wrapping seals the data key with ChaCha20-Poly1305 under a one-use key, HKDF-SHA256 of
the KEK's secret with a fresh salt; an `x25519` wrapping (age's construction) under HKDF-SHA256 of an ephemeral
X25519 exchange with the recipient's public key, salted with both public keys. Both bind, as associated data, the
wrapping's type and key id, the backup id and the cipher: a wrapping copied into another backup's envelope does not
open. Anyone with a recipient's public key can make an x25519 wrapping, so a recipient-mode backup's authenticity
rests on its manifest's MAC (storage.auth), not on the envelope.
"""
from __future__ import annotations

import base64
import binascii
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from lastline.core.errors import ConfigError, IntegrityError
from lastline.storage.auth import key_entry
from lastline.storage.encryption_keys import KEY_CONN_ENV, EncryptionKeys, Identity, Recipient
from lastline.storage.sealing import (
    CHUNK_SIZE,
    CIPHERS,
    DEFAULT_CIPHER,
    FORMAT,
    MAX_CHUNK,
    MIN_CHUNK,
    DataKey,
    SealReader,
    SealWriter,
    Sink,
    Source,
)

_ZERO_NONCE = bytes(12)  # every wrapping key is used once
_SIZES = {"kek": ("salt", 16), "x25519": ("ephemeral", 32)}


@dataclass(frozen=True)
class Wrapping:
    """One wrapping of a data key: `kind` (kek or x25519), `key_id`, `public` (the salt or the ephemeral public key)
    and `wrapped` (the sealed data key)."""

    kind: str
    key_id: str
    public: bytes
    wrapped: bytes

    def to_json(self) -> dict[str, str]:
        return {"type": self.kind, "key_id": self.key_id, _SIZES[self.kind][0]: _b64(self.public),
                "wrapped": _b64(self.wrapped)}


@dataclass(frozen=True)
class Envelope:
    """What a manifest records of a backup's encryption: the cipher and chunk size, and its data key's wrappings."""

    cipher: str
    chunk_size: int
    wrappings: tuple[Wrapping, ...]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "cipher": self.cipher, "chunk_size": self.chunk_size,
                "wrappings": [w.to_json() for w in self.wrappings]}

    def needs(self) -> str:
        """The key ids that open it, for messages: "k1 (kek), ops (x25519)"."""
        return ", ".join(f"{w.key_id} ({w.kind})" for w in self.wrappings)

    @classmethod
    def from_json(cls, data: object, where: str) -> Envelope:
        """An envelope read from a manifest (untrusted): its shape checked, an IntegrityError naming what is wrong."""
        try:
            return _parse(data)
        except (KeyError, TypeError, ValueError, binascii.Error, ConfigError) as exc:
            raise IntegrityError(f"{where}: the encryption envelope is not one lastline writes ({exc}); the manifest "
                                 "was changed or is damaged.") from None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _unb64(text: object, size: int) -> bytes:
    raw = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
    if len(raw) != size:
        raise ValueError(f"a field of {size} bytes holds {len(raw)}")
    return raw


def _parse(data: object) -> Envelope:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"format is not {FORMAT}")
    cipher, chunk, items = data["cipher"], data["chunk_size"], data["wrappings"]
    if cipher not in CIPHERS or type(chunk) is not int or not MIN_CHUNK <= chunk <= MAX_CHUNK:
        raise ValueError(f"cipher {cipher!r} or chunk size {chunk!r} is unknown")
    if not isinstance(items, list) or not items or not all(isinstance(w, dict) for w in items):
        raise ValueError("it has no wrapping")
    wrappings = []
    for item in items:
        field_name, size = _SIZES[item["type"]]
        key_id = key_entry("the envelope", item["key_id"], "x" * 32)[0]
        wrappings.append(Wrapping(item["type"], key_id, _unb64(item[field_name], size), _unb64(item["wrapped"], 48)))
    return Envelope(cipher, chunk, tuple(wrappings))


def _bound(kind: str, key_id: str, backup_id: str, cipher: str) -> bytes:
    """The associated data of a wrapping: what it belongs to."""
    return b"\x00".join([b"lastline-wrap/1", kind.encode(), key_id.encode(), backup_id.encode(), cipher.encode()])


def _x25519_key(shared: bytes, ephemeral: bytes, recipient: bytes) -> bytes:
    info = b"lastline-x25519/1"
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=ephemeral + recipient, info=info).derive(shared)


def _to_recipient(data_key: DataKey, recipient: Recipient, aad: bytes) -> Wrapping:
    ephemeral = X25519PrivateKey.generate()
    public = ephemeral.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    try:
        shared = ephemeral.exchange(X25519PublicKey.from_public_bytes(recipient.public))
    except ValueError:
        raise ConfigError(f"recipient {recipient.key_id!r} of the encryption key connection ({KEY_CONN_ENV}) is not "
                          "a usable X25519 public key (a low-order point): make a key pair with new_identity().") from None
    key = _x25519_key(shared, public, recipient.public)
    return Wrapping("x25519", recipient.key_id, public, ChaCha20Poly1305(key).encrypt(_ZERO_NONCE, data_key.raw(), aad))


def _wrap_all(data_key: DataKey, keys: EncryptionKeys, backup_id: str, cipher: str, chunk_size: int) -> Envelope:
    wrappings = []
    if keys.current is not None:
        kek, salt = keys.current, os.urandom(16)
        sealed = ChaCha20Poly1305(kek.wrapping_key(salt)).encrypt(_ZERO_NONCE, data_key.raw(),
                                                                   _bound("kek", kek.key_id, backup_id, cipher))
        wrappings.append(Wrapping("kek", kek.key_id, salt, sealed))
    for recipient in keys.recipients:
        wrappings.append(_to_recipient(data_key, recipient, _bound("x25519", recipient.key_id, backup_id, cipher)))
    if not wrappings:
        raise ConfigError(f"the encryption key connection ({KEY_CONN_ENV}) has no key to write with: a login and "
                          "password (a key) or extras `recipients`.")
    return Envelope(cipher, chunk_size, tuple(wrappings))


def new_data_key(keys: EncryptionKeys, backup_id: str, chunk_size: int = CHUNK_SIZE) -> tuple[DataKey, Envelope]:
    """A fresh data key for backup `backup_id`, and its envelope for the manifest."""
    data_key = DataKey.generate()
    return data_key, _wrap_all(data_key, keys, backup_id, keys.cipher, chunk_size)


def _unwrap(wrapping: Wrapping, keys: EncryptionKeys, backup_id: str, cipher: str) -> DataKey | None:
    """The data key if this deployment holds the wrapping's key and it opens it; None if it does not open."""
    aad = _bound(wrapping.kind, wrapping.key_id, backup_id, cipher)
    if wrapping.kind == "kek":
        key = keys.keks[wrapping.key_id].wrapping_key(wrapping.public)
    else:
        identity: Identity = keys.identities[wrapping.key_id]
        private = X25519PrivateKey.from_private_bytes(identity.private)
        try:
            shared = private.exchange(X25519PublicKey.from_public_bytes(wrapping.public))
        except ValueError:
            return None
        key = _x25519_key(shared, wrapping.public, identity.public())
    try:
        return DataKey(ChaCha20Poly1305(key).decrypt(_ZERO_NONCE, wrapping.wrapped, aad))
    except InvalidTag:
        return None


def open_data_key(envelope: Envelope, keys: EncryptionKeys | None, backup_id: str, authenticated: bool = False) -> DataKey:
    """Backup `backup_id`'s data key, from the wrappings the deployment's keys open; a ConfigError naming the key ids it
    needs when none does (before anything is touched). A KEK wrapping is taken over a recipient one, and every held
    wrapping that opens must open the same key (IntegrityError otherwise). Anyone with a recipient's public key can make
    a recipient wrapping: a key only such a wrapping opens is taken only from a manifest that is `authenticated` (its
    MAC checked, or storage the deployment declares trusted)."""
    if keys is None:
        raise ConfigError(f"backup {backup_id!r} is encrypted (its data key is wrapped under {envelope.needs()}) and "
                          f"this deployment has no encryption key connection ({KEY_CONN_ENV}): set it to one holding "
                          "one of those keys. Nothing was touched.")
    held = [w for w in envelope.wrappings if w.key_id in (keys.keks if w.kind == "kek" else keys.identities)]
    opened = [(w.kind, k) for w in held if (k := _unwrap(w, keys, backup_id, envelope.cipher)) is not None]
    if opened:
        data_key = next((k for kind, k in opened if kind == "kek"), opened[0][1])
        if any(k != data_key for _, k in opened):
            raise IntegrityError(f"backup {backup_id!r}: the wrappings of its data key open different keys: its manifest "
                                 "was changed by someone who cannot sign it. Nothing was touched; restore another backup.")
        if not authenticated and all(kind != "kek" for kind, _ in opened):
            raise IntegrityError(f"backup {backup_id!r} opens only through a recipient's wrapping, which anyone with that "
                                 "recipient's public key can make, and its manifest is not authenticated: its rows could "
                                 "be anyone's. Set the storage key (storage.auth) where the backup is written and read, or "
                                 "hold its KEK. Nothing was touched.")
        return data_key
    if held:
        ids, one = ", ".join(repr(w.key_id) for w in held), len(held) == 1
        raise ConfigError(f"backup {backup_id!r}: {'key' if one else 'keys'} {ids} of the encryption key connection "
                          f"({KEY_CONN_ENV}) {'does' if one else 'do'} not open its data key: the connection holds "
                          "another secret under that id than the one the backup was written with (or the envelope was "
                          "changed). Nothing was touched.")
    raise ConfigError(f"backup {backup_id!r} needs one of the keys {envelope.needs()} to be read; the encryption key "
                      f"connection ({KEY_CONN_ENV}) holds {', '.join(keys.held()) or 'none'}: add one of them (an older "
                      "key goes in its extras `keys`, a private key in `identities`). Nothing was touched.")


def rewrap(envelope: Envelope, keys: EncryptionKeys, backup_id: str, authenticated: bool = False) -> Envelope:
    """Backup `backup_id`'s envelope re-wrapped under the deployment's current KEK and recipients only (a rotation):
    the same data key, so no data is re-encrypted; the old wrappings are dropped, so old keys no longer open this
    envelope (a copy of the old one still does). `authenticated`: as open_data_key."""
    data_key = open_data_key(envelope, keys, backup_id, authenticated)
    return _wrap_all(data_key, keys, backup_id, envelope.cipher, envelope.chunk_size)


def seal_stream(source: Source, sink: Sink, key: DataKey, backup_id: str, name: str, *,
                cipher: str = DEFAULT_CIPHER, chunk_size: int = CHUNK_SIZE) -> tuple[int, int]:
    """Seal all of `source` into `sink` (a pipeline's stage: `... | zstd | seal -> storage`); (bytes in, bytes out)."""
    with SealWriter(sink, key, backup_id, name, cipher=cipher, chunk_size=chunk_size) as writer:
        while block := source.read(chunk_size):
            writer.write(block)
    return writer.bytes_in, writer.bytes_out


def open_stream(source: Source, sink: Sink, key: DataKey, backup_id: str, name: str) -> int:
    """Write the plaintext of sealed object `name` from `source` into `sink`; the bytes written. Raises SealError,
    possibly after earlier chunks were written: the sink's consumer must not commit before this returns."""
    written = 0
    for plain in SealReader(source, key, backup_id, name).chunks():
        sink.write(plain)
        written += len(plain)
    return written


class _Pieces:
    """read(n) or readinto(buffer) over an iterator of byte strings (a storage reader), for a SealReader: each byte
    copied once, into what read returns or the reader's buffer (what is left of a piece is a view of it)."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self.pieces, self.rest = pieces, memoryview(b"")

    def readinto(self, buffer: memoryview) -> int:
        if not self.rest:
            self.rest = memoryview(next(self.pieces, b""))
        n = min(len(buffer), len(self.rest))
        buffer[:n], self.rest = self.rest[:n], self.rest[n:]
        return n

    def read(self, size: int) -> bytes:
        parts, have = [self.rest], len(self.rest)
        while have < size and (piece := next(self.pieces, None)) is not None:
            parts.append(memoryview(piece))
            have += len(piece)
        keep = max(0, have - size)  # the tail of the last piece, for the next read
        last = parts[-1]
        parts[-1], self.rest = last[:len(last) - keep], last[len(last) - keep:]
        return b"".join(parts)


@dataclass(frozen=True)
class BackupSeal:
    """What seals and opens the objects of one backup: its data key (never printed), id, cipher and chunk size."""

    data_key: DataKey = field(repr=False)
    backup_id: str
    cipher: str
    chunk_size: int

    def writer(self, sink: Sink, name: str) -> SealWriter:
        """A SealWriter of object `name` (its key in the destination) into `sink`."""
        return SealWriter(sink, self.data_key, self.backup_id, name, cipher=self.cipher, chunk_size=self.chunk_size)

    def reader(self, source: Source, name: str) -> SealReader:
        """A SealReader of object `name` from `source`."""
        return SealReader(source, self.data_key, self.backup_id, name)

    def opened_stream(self, pieces: Iterator[bytes], name: str) -> Iterator[bytes]:
        """The plaintext of sealed object `name` read as byte strings (a storage's reader), each chunk authenticated
        before it is given; SealError once one is not (its consumer must not commit before the end)."""
        return self.reader(_Pieces(pieces), name).chunks()

    def authenticate(self, pieces: Iterator[bytes], name: str) -> None:
        """Sealed object `name` read as byte strings to its end, every chunk authenticated and its plaintext dropped
        (SealReader.authenticate: nothing handed out, nothing written); SealError once one is not."""
        self.reader(_Pieces(pieces), name).authenticate()

    def sealed(self, data: bytes, name: str) -> bytes:
        """`data` sealed whole as object `name` (a small file held in memory: a schema file)."""
        out = io.BytesIO()
        with self.writer(out, name) as writer:
            writer.write(data)
        return out.getvalue()

    def opened(self, data: bytes, name: str) -> bytes:
        """The plaintext of sealed object `name` held whole in `data`, every chunk authenticated (SealError if not)."""
        return self.reader(io.BytesIO(data), name).read()


def new_seal(keys: EncryptionKeys, backup_id: str) -> tuple[BackupSeal, Envelope]:
    """A new backup's seal and the envelope its manifest records."""
    data_key, env = new_data_key(keys, backup_id)
    return BackupSeal(data_key, backup_id, env.cipher, env.chunk_size), env


def opened_seal(recorded: object, keys: EncryptionKeys | None, backup_id: str, where: str,
                authenticated: bool = False) -> BackupSeal:
    """The seal of a backup whose manifest (at `where`; `authenticated`: its MAC checked) records envelope `recorded`:
    refused (IntegrityError) if the envelope is not one lastline writes or its wrappings do not hold (open_data_key),
    (ConfigError) naming the key ids needed if the deployment holds none."""
    env = Envelope.from_json(recorded, where)
    return BackupSeal(open_data_key(env, keys, backup_id, authenticated), backup_id, env.cipher, env.chunk_size)
