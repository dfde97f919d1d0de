"""The binlog archive sealed (issue 46): each segment `binlogs/<branch>/<file>/<offset>` is a sealed object
(storage.sealing, its name = its storage key, its backup id `binlogs/<branch>`), so whoever reads the storage reads no
row change.

The data key is per branch: its envelope (storage.envelope: wrapped under the deployment's KEK and recipients) is kept
in the branch's `envelope.json` (pitr.catalog), written when the branch's first sealed segment is, and a rotation
re-wraps it like a backup's, in that file alone (the archiver, which re-writes the chain every round, never writes it
again).
The archiver never opens it: it may hold recipients only (a host that seals but cannot read). So the branch's data key
also derives an X25519 key pair (HKDF-SHA256), whose public half the chain records (`seal_public`); each segment is
sealed under a key of its own, HKDF-SHA256 of an exchange between a fresh ephemeral X25519 key (its public half in the
segment's chain entry, `ephemeral`) and that public key, salted with both and bound to the segment's name. Whoever opens
the branch's envelope derives the private half and opens every segment; the archiver needs the public half only.

A sealed segment's chain entry says `"sealed": true`; its `size` stays the binlog bytes it holds (offsets are binlog
offsets), `stored` is the sealed object's size, and its `sha256` is over the stored bytes (backup_verify checks them
without a key). Segments written before a key was set stay in the clear, read as before: the chain that says which is
which is authenticated (pitr.catalog).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from lastline.core.errors import ConfigError, IntegrityError
from lastline.pitr import catalog
from lastline.pitr.catalog import PREFIX
from lastline.pitr.chain import Branch
from lastline.storage import Storage, auth
from lastline.storage.encryption_keys import EncryptionKeys, deployment_encryption_keys
from lastline.storage.envelope import Envelope, new_data_key, open_data_key
from lastline.storage.sealing import DataKey, SealReader, SealWriter, Sink

_UNSET: Any = object()


def backup_id(bid: str) -> str:
    """The backup id a branch's envelope and its segments are bound to."""
    return f"{PREFIX}/{bid}"


def _raw_public(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def branch_private(data_key: DataKey, bid: str) -> X25519PrivateKey:
    """The X25519 private key a branch's data key derives: it opens the segments sealed to the branch."""
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
               info=b"lastline-archive-branch/1\x00" + backup_id(bid).encode()).derive(data_key.raw())
    return X25519PrivateKey.from_private_bytes(raw)


def _segment_key(shared: bytes, ephemeral: bytes, public: bytes, name: str) -> DataKey:
    info = b"lastline-archive-segment/1\x00" + name.encode()
    return DataKey(HKDF(algorithm=hashes.SHA256(), length=32, salt=ephemeral + public, info=info).derive(shared))


class _Counted:
    """A sink that counts and hashes what it passes on (the stored bytes of a sealed segment)."""

    def __init__(self, sink: Sink) -> None:
        self.sink, self.sha, self.n = sink, hashlib.sha256(), 0

    def write(self, data: bytes | memoryview) -> None:
        self.sha.update(data)
        self.n += len(data)
        self.sink.write(data)


class SegmentSealer:
    """What the archiver seals a branch's new segments with: the branch's public key, cipher and chunk size (it holds no
    key that opens anything)."""

    def __init__(self, bid: str, public: bytes, cipher: str, chunk_size: int) -> None:
        self.bid, self.public, self.cipher, self.chunk_size = bid, X25519PublicKey.from_public_bytes(public), cipher, chunk_size
        self.public_raw = public

    def writer(self, sink: Sink, name: str) -> tuple[SealWriter, _Counted, dict[str, Any]]:
        """A SealWriter of segment `name` into `sink`, the counter of what it stores, and the chain entry's fields."""
        ephemeral = X25519PrivateKey.generate()
        epub = _raw_public(ephemeral)
        key = _segment_key(ephemeral.exchange(self.public), epub, self.public_raw, name)
        counted = _Counted(sink)
        writer = SealWriter(counted, key, backup_id(self.bid), name, cipher=self.cipher, chunk_size=self.chunk_size)
        return writer, counted, {"sealed": True, "ephemeral": base64.b64encode(epub).decode()}


def _unb64(text: object, where: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise IntegrityError(f"{where} is not an X25519 public key lastline writes; the chain was changed or is damaged.")
    return raw


def sealer(storage: Storage, branch: Branch, keys: EncryptionKeys | None) -> SegmentSealer | None:
    """What the archiver seals `branch`'s next segments with (None: the deployment has no key, they go in the clear).
    A branch that is not sealed yet gets its envelope now, written (catalog.write_envelope) before any segment sealed
    under it (a key set later seals from the next segment on). An envelope the deployment opens with a KEK must derive
    the public key the chain records; one it cannot open (recipients only) is trusted as far as the chain is
    authenticated, so that is required."""
    if keys is None:
        return None
    where = f"the binlog archive's branch {branch.id}"
    if branch.seal_public is None:
        data_key, env = new_data_key(keys, backup_id(branch.id))
        public = _raw_public(branch_private(data_key, branch.id))
        catalog.write_envelope(storage, branch.id, env.to_json())
        branch.envelope, branch.seal_public = env.to_json(), base64.b64encode(public).decode()
        return SegmentSealer(branch.id, public, env.cipher, env.chunk_size)
    if branch.envelope is None:  # read_branch reads it with the chain; never replaced (segments are sealed to it)
        raise IntegrityError(f"{where}: its chain says its segments are sealed, but no envelope was read with it. "
                             "Nothing was shipped.")
    env = Envelope.from_json(branch.envelope, where)
    public = _unb64(branch.seal_public, f"{where}: seal_public")
    if any(w.kind == "kek" and w.key_id in keys.keks for w in env.wrappings):
        data_key = open_data_key(env, keys, backup_id(branch.id))
        if _raw_public(branch_private(data_key, branch.id)) != public:
            raise IntegrityError(f"{where}: the public key its chain records is not the one its data key derives: the "
                                 "chain was changed by someone who cannot sign it. Nothing was shipped.")
    elif auth.deployment_keys() is None and not auth.storage_trusted():
        raise ConfigError(f"{where} is sealed under keys this deployment cannot open ({env.needs()}), so the public key "
                          "its chain records cannot be checked, and the chain is not authenticated: set the storage key "
                          f"({auth.KEY_CONN_ENV}) where the archive runs, or hold one of those keys.")
    return SegmentSealer(branch.id, public, env.cipher, env.chunk_size)


class Seals:
    """The archive's branch keys as one task opens them, each at most once, from the envelopes its chains record
    (`envelopes`: {branch id: envelope}) and the deployment's keys (read when a sealed segment first needs them)."""

    def __init__(self, envelopes: Mapping[str, dict | None] | None = None, keys: EncryptionKeys | None = _UNSET) -> None:
        self.envelopes = {b: e for b, e in (envelopes or {}).items() if e is not None}
        self._keys = keys
        self._opened: dict[str, X25519PrivateKey] = {}

    def with_branch(self, bid: str, envelope: dict | None) -> Seals:
        """These seals and branch `bid`'s (a line of history: a branch after its parents)."""
        return Seals({**self.envelopes, bid: envelope}, self._keys)

    def only(self, bids: set[str]) -> dict[str, dict]:
        """The envelopes of branches `bids` (what a span carries to the replay)."""
        return {b: e for b, e in self.envelopes.items() if b in bids}

    def private(self, bid: str) -> X25519PrivateKey:
        """Branch `bid`'s private key; ConfigError naming the key ids it needs when the deployment holds none that opens
        its envelope (nothing is touched yet where a restore asks this)."""
        if bid in self._opened:
            return self._opened[bid]
        envelope = self.envelopes.get(bid)
        if envelope is None:
            raise IntegrityError(f"the binlog archive's branch {bid} holds sealed segments and its chain records no "
                                 "envelope: the chain was changed or is damaged; a roll-forward cannot use it.")
        if self._keys is _UNSET:
            self._keys = deployment_encryption_keys()
        # a chain is read authenticated wherever the deployment has a storage key (pitr.catalog)
        authenticated = auth.deployment_keys() is not None or auth.storage_trusted()
        env = Envelope.from_json(envelope, f"the binlog archive's branch {bid}")
        try:
            data_key = open_data_key(env, self._keys, backup_id(bid), authenticated)
        except ConfigError as exc:
            raise ConfigError(f"the binlog archive is sealed: {exc}") from None
        self._opened[bid] = branch_private(data_key, bid)
        return self._opened[bid]

    def opens(self, bid: str) -> bool:
        """Whether this deployment opens branch `bid`'s segments (a check that can do without them asks this)."""
        try:
            self.private(bid)
        except ConfigError:
            return False
        return True

    def require(self, bids: set[str]) -> None:
        """Every branch of `bids` with an envelope opened: refused before anything is touched, naming the key ids."""
        for bid in sorted(bids & set(self.envelopes)):
            self.private(bid)

    def key(self, bid: str, name: str, segment: dict) -> DataKey:
        """The key segment `name` (its storage key) of branch `bid` was sealed under."""
        private = self.private(bid)
        ephemeral = _unb64(segment.get("ephemeral"), f"{name}'s ephemeral key")
        try:
            shared = private.exchange(X25519PublicKey.from_public_bytes(ephemeral))
        except ValueError:
            raise IntegrityError(f"{name}: its ephemeral key is not a usable X25519 key; the chain was changed.") from None
        return _segment_key(shared, ephemeral, _raw_public(private), name)

    def opened(self, bid: str, name: str, segment: dict, pieces: Iterator[bytes]) -> Iterator[bytes]:
        """The plaintext of sealed segment `name` as it streams (`pieces`: the storage's reader), each chunk authenticated
        before it is given (SealError naming the chunk); at its end its stored size and sha256 and its binlog bytes are
        checked against the chain."""
        counted = _Counted(_Null())
        source = _Reading(pieces, counted)
        plain = 0
        for chunk in SealReader(source, self.key(bid, name, segment), backup_id(bid), name).chunks():
            plain += len(chunk)
            yield chunk
        source.drain()
        if counted.n != int(segment.get("stored", -1)) or counted.sha.hexdigest() != segment["sha256"] \
                or plain != int(segment["size"]):
            raise IntegrityError(f"{name}: the sealed segment is {counted.n} bytes ({plain} opened) with another sha256 "
                                 "than its chain records: the archive is damaged there; a roll-forward cannot cross it.")


class _Null:
    def write(self, data: bytes | memoryview) -> None:
        pass


class _Reading:
    """read(n) over a storage's reader, passing every stored byte through a counter."""

    def __init__(self, pieces: Iterator[bytes], counted: _Counted) -> None:
        self.pieces, self.counted, self.rest = pieces, counted, b""

    def read(self, size: int) -> bytes:
        parts, have = [self.rest], len(self.rest)
        while have < size and (piece := next(self.pieces, None)) is not None:
            self.counted.write(piece)
            parts.append(piece)
            have += len(piece)
        joined = b"".join(parts)
        self.rest = joined[size:]
        return joined[:size]

    def drain(self) -> None:
        for piece in self.pieces:
            self.counted.write(piece)
