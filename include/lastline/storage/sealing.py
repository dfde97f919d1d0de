"""Sealed objects: a backup's bytes encrypted and authenticated as a stream of chunks, with a data key per backup.
Over 300 lines: the format, its writer, its reader and the reader's diagnosis of damage are one construction, reviewed
as one.

The format (`lastline-seal/1`) is the STREAM construction over an AEAD from `cryptography` (AES-256-GCM or
ChaCha20-Poly1305). An object is a 76-byte header, then chunks:

    header  = "LLSEAL" | version 1 | cipher (1 = aes-256-gcm, 2 = chacha20-poly1305) | chunk size (u32) | salt (32)
              | HMAC-SHA256 of those 44 bytes (32)
    chunk i = AEAD(plaintext[i*size : (i+1)*size]), nonce = i (11 bytes, big-endian) | final flag (1 byte),
              associated data = the header's first 44 bytes; every chunk holds `size` bytes but the last (0 to size)

The AEAD key and the header's MAC key come from HKDF-SHA256 over the data key with the header's random salt, and
the cipher, the chunk size, the backup id and the object's name (its key in the destination) as the info: a header
or a chunk moved to another object or backup, chunks reordered, a stream cut at a chunk boundary (no final flag)
or inside a chunk, and a flipped byte each fail, and the SealError says which object, which chunk and what. The
fresh salt per object means a re-written object never reuses a nonce under a key. A reader releases each chunk's
plaintext once that chunk is authenticated: a consumer commits nothing before the reader has reached the end.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Iterator
from typing import NoReturn, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from lastline.core.errors import IntegrityError

FORMAT = "lastline-seal/1"
CIPHERS: dict[str, int] = {"aes-256-gcm": 1, "chacha20-poly1305": 2}
DEFAULT_CIPHER = "aes-256-gcm"
CHUNK_SIZE = 4 << 20
MIN_CHUNK, MAX_CHUNK = 1 << 10, 64 << 20
MAGIC, VERSION = b"LLSEAL", 1
_FIELDS = struct.Struct("!6sBBI32s")
HEADER_SIZE = _FIELDS.size + 32
TAG = 16
_REORDER_WINDOW = 32  # a failed chunk is tried as these many other indices, to name a reordering


class Sink(Protocol):
    """Where sealed (or opened) bytes go: anything with write(), which uses `data` before it returns (SealWriter hands
    it a view of a buffer it reuses)."""

    def write(self, data: bytes | memoryview, /) -> object: ...


class Source(Protocol):
    """Where sealed (or plain) bytes come from: anything with read(n)."""

    def read(self, size: int, /) -> bytes: ...


class DataKey:
    """A backup's 256-bit data key: never printed, pickled or compared by value by accident."""

    __slots__ = ("_raw",)

    def __init__(self, raw: bytes) -> None:
        if len(raw) != 32:
            raise ValueError("a data key is 32 bytes")
        self._raw = bytes(raw)

    @classmethod
    def generate(cls) -> DataKey:
        return cls(os.urandom(32))

    def raw(self) -> bytes:
        """The key's bytes, for wrapping and derivation only."""
        return self._raw

    def __repr__(self) -> str:
        return "DataKey(<hidden>)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DataKey) and hmac.compare_digest(self._raw, other._raw)

    __hash__ = None  # type: ignore[assignment]  # equal by value: never a dict key or a set member

    def __reduce__(self) -> tuple:
        raise TypeError("a data key is never serialised (it would leave the process in the clear)")


class SealError(IntegrityError):
    """A sealed object failed its check: `name` (its key), `chunk` (index from 0, None for the header), `reason`
    (not_sealed, header, truncated, appended, reordered, cut_or_changed, changed), `detail` (what was found)."""

    def __init__(self, name: str, backup_id: str, chunk: int | None, reason: str, detail: str) -> None:
        where = "its header" if chunk is None else f"chunk {chunk}"
        super().__init__(f"sealed object {name!r} of backup {backup_id!r}, {where}: {detail}. Nothing read from it "
                         "may be used; restore another backup, or run backup_verify to see what else is damaged.")
        self.name, self.backup_id, self.chunk, self.reason, self.detail = name, backup_id, chunk, reason, detail


def _cipher_name(code: int) -> str | None:
    return next((name for name, c in CIPHERS.items() if c == code), None)


def _aead(cipher: str, key: bytes) -> AESGCM | ChaCha20Poly1305:
    return AESGCM(key) if cipher == "aes-256-gcm" else ChaCha20Poly1305(key)


def _keys(key: DataKey, cipher: str, chunk_size: int, salt: bytes, backup_id: str, name: str) -> tuple[bytes, bytes]:
    """(AEAD key, header MAC key) of one object: bound to its cipher, chunk size, backup and name."""
    info = b"".join([FORMAT.encode(), b"\x00", cipher.encode(), struct.pack("!I", chunk_size),
                     *(struct.pack("!I", len(part)) + part for part in (backup_id.encode(), name.encode()))])
    derived = HKDF(algorithm=hashes.SHA256(), length=64, salt=salt, info=info).derive(key.raw())
    return derived[:32], derived[32:]


def _nonce(index: int, final: bool) -> bytes:
    return index.to_bytes(11, "big") + (b"\x01" if final else b"\x00")


def _check_chunk_size(chunk_size: int) -> None:
    if not MIN_CHUNK <= chunk_size <= MAX_CHUNK:
        raise ValueError(f"a chunk size is {MIN_CHUNK} to {MAX_CHUNK} bytes, not {chunk_size}")


def sealed_header(key: DataKey, backup_id: str, name: str, cipher: str = DEFAULT_CIPHER,
                  chunk_size: int = CHUNK_SIZE) -> tuple[bytes, bytes]:
    """(header, AEAD key) of a new object `name`, under a fresh salt: SealWriter's, and the dump worker's (in C)."""
    if cipher not in CIPHERS:
        raise ValueError(f"cipher {cipher!r} is not one of {', '.join(CIPHERS)}")
    _check_chunk_size(chunk_size)
    fields = _FIELDS.pack(MAGIC, VERSION, CIPHERS[cipher], chunk_size, os.urandom(32))
    aead_key, mac_key = _keys(key, cipher, chunk_size, fields[-32:], backup_id, name)
    return fields + hmac.new(mac_key, fields, hashlib.sha256).digest(), aead_key


class SealWriter:
    """Seals what is written into `sink` (a binary file-like object) as object `name` of backup `backup_id`.

    `close()` writes the final chunk (it does not close the sink); leaving a `with` block on an exception abandons
    the object without it, so a reader finds it truncated. Memory: two buffers, each grown to at most a chunk once
    and reused for every chunk, the chunk pending and the chunk as sealed (a new one a chunk cost the process a page
    fault per 4 KiB twice over, more than the cipher did). So `sink.write` is handed a view of the sealing buffer: it
    must not keep it past its return (every sink here writes, copies or hashes it at once)."""

    def __init__(self, sink: Sink, key: DataKey, backup_id: str, name: str, *, cipher: str = DEFAULT_CIPHER,
                 chunk_size: int = CHUNK_SIZE) -> None:
        header, aead_key = sealed_header(key, backup_id, name, cipher, chunk_size)
        self._fields, self._aead, self._sink, self._size = header[:_FIELDS.size], _aead(cipher, aead_key), sink, chunk_size
        self._buf, self._pending, self._out = bytearray(), 0, bytearray()  # grown as needed (a small object stays small)
        self._index, self._closed = 0, False
        self.bytes_in, self.bytes_out = 0, HEADER_SIZE
        sink.write(header)

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self._closed:
            raise ValueError("write to a closed SealWriter")
        view, pos, size = memoryview(data).cast("B"), 0, self._size
        n = len(view)
        while pos < n:
            if self._pending == size:  # a byte follows the pending chunk: it is not the last
                self._emit(memoryview(self._buf), final=False)
                self._pending = 0
            elif not self._pending and n - pos > size:  # a whole chunk and a byte after it: sealed in place
                self._emit(view[pos:pos + size], final=False)
                pos += size
            else:
                take = min(n - pos, size - self._pending)
                self._buf[self._pending:self._pending + take] = view[pos:pos + take]  # (grows it up to a chunk)
                self._pending += take
                pos += take
        self.bytes_in += n
        return n

    def _emit(self, piece: memoryview, final: bool) -> None:
        if len(self._out) < len(piece) + TAG:
            self._out = bytearray(len(piece) + TAG)
        sealed = memoryview(self._out)[:len(piece) + TAG]
        self._aead.encrypt_into(_nonce(self._index, final), piece, self._fields, sealed)
        self._sink.write(sealed)
        self._index, self.bytes_out = self._index + 1, self.bytes_out + len(sealed)

    def close(self) -> None:
        """Seal what is left as the final chunk (an empty one for an empty object)."""
        if not self._closed:
            self._emit(memoryview(self._buf)[:self._pending], final=True)
            self._drop()

    def abort(self) -> None:
        """Stop without a final chunk: what was written reads as truncated."""
        self._drop()

    def _drop(self) -> None:
        self._buf, self._out, self._pending, self._closed = bytearray(), bytearray(), 0, True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> SealWriter:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        self.abort() if kind is not None else self.close()


def _fill(source: Source, view: memoryview) -> int:
    """Fill `view` from `source` (by its readinto where it has one: no copy made on the way); fewer bytes at its end."""
    into, got, n = getattr(source, "readinto", None), 0, 1
    while got < len(view) and n:
        if into is None:
            part = source.read(len(view) - got)
            n = len(part)
            view[got:got + n] = part
        else:
            n = into(view[got:]) or 0
        got += n
    return got


class SealReader:
    """Opens sealed object `name` of backup `backup_id` from `source`: `chunks()` yields each chunk's plaintext once
    it is authenticated, `read(n)` reads as a file does, `authenticate()` only checks. Memory: about two chunks (each
    read into one buffer). Raises SealError."""

    def __init__(self, source: Source, key: DataKey, backup_id: str, name: str) -> None:
        self._source, self.name, self.backup_id = source, name, backup_id
        header = bytearray(HEADER_SIZE)
        header = header[:_fill(source, memoryview(header))]
        magic, version, code, size, salt = _FIELDS.unpack(header[:_FIELDS.size].ljust(_FIELDS.size, b"\x00"))
        if len(header) < HEADER_SIZE and MAGIC.startswith(header[:len(MAGIC)]):
            self._fail(None, "truncated", f"the object ends inside its header ({len(header)} of {HEADER_SIZE} bytes)")
        if magic != MAGIC:
            self._fail(None, "not_sealed", "it does not start with a lastline seal header (written unencrypted, or "
                                           "not by lastline)")
        self.cipher = _cipher_name(code) or ""
        if version != VERSION or not self.cipher or not MIN_CHUNK <= size <= MAX_CHUNK:
            self._fail(None, "header", f"version {version}, cipher {code} or chunk size {size} is not one this "
                                       "lastline writes (the header was changed, or a newer lastline wrote it)")
        aead_key, mac_key = _keys(key, self.cipher, size, salt, backup_id, name)
        if not hmac.compare_digest(hmac.new(mac_key, header[:_FIELDS.size], hashlib.sha256).digest(), header[_FIELDS.size:]):
            self._fail(None, "header", "it does not authenticate: it was changed, or it was sealed for another "
                                       "object or backup, or under another data key")
        self._fields, self._aead, self.chunk_size = bytes(header[:_FIELDS.size]), _aead(self.cipher, aead_key), size
        self._ahead, self._index, self._done, self._plain = b"", 0, False, memoryview(b"")
        self._buf = bytearray(size + TAG + 1)  # a chunk as stored and the byte after it (is it the final one?)

    def _fail(self, chunk: int | None, reason: str, detail: str) -> NoReturn:
        raise SealError(self.name, self.backup_id, chunk, reason, detail)

    def chunks(self) -> Iterator[bytes]:
        """Each chunk's plaintext in order, each authenticated before it is yielded; the end is checked too."""
        if self._plain:
            yield bytes(self._plain)
            self._plain = memoryview(b"")
        while not self._done:
            yield self._next()

    def _next(self, into: memoryview | None = None) -> bytes:
        """The next chunk's plaintext, authenticated (with `into`: decrypted there, b"" returned)."""
        size, view, ahead = self.chunk_size + TAG, memoryview(self._buf), len(self._ahead)
        view[:ahead] = self._ahead
        got = ahead + _fill(self._source, view[ahead:])
        frame, final, self._ahead = view[:min(got, size)], got <= size, bytes(view[size:got])
        try:
            nonce, plain = _nonce(self._index, final), b""
            if into is None or len(frame) < TAG:
                plain = self._aead.decrypt(nonce, frame, self._fields)
            else:
                self._aead.decrypt_into(nonce, frame, self._fields, into[:len(frame) - TAG])
        except InvalidTag:
            self._diagnose(frame, final)
        self._index, self._done = self._index + 1, final
        return plain

    def authenticate(self) -> None:
        """Read to the end, every chunk authenticated, the plaintext dropped (one buffer, reused, never handed out)."""
        scratch = memoryview(bytearray(self.chunk_size))
        while not self._done:
            self._next(scratch)

    def _opens(self, frame: memoryview, index: int, final: bool) -> bool:
        try:
            self._aead.decrypt(_nonce(index, final), frame, self._fields)
        except InvalidTag:
            return False
        return True

    def _diagnose(self, frame: memoryview, final: bool) -> NoReturn:
        """Name why chunk `self._index` failed: the object cut or extended, chunks reordered, or bytes changed."""
        index, full = self._index, len(frame) == self.chunk_size + TAG
        if final and not frame:
            self._fail(index, "truncated", "the object ends before it (cut at a chunk boundary, its final chunk gone)")
        if final and full and self._opens(frame, index, False):
            self._fail(index, "truncated", "the object ends after it, but it is not the final chunk (cut at a chunk "
                                           "boundary)")
        if not final and self._opens(frame, index, True):
            self._fail(index, "appended", "it is the final chunk, but bytes follow it (something was appended)")
        for other in range(max(0, index - _REORDER_WINDOW), index + _REORDER_WINDOW):
            if other != index and any(self._opens(frame, other, flag) for flag in (False, True)):
                self._fail(index, "reordered", f"it holds chunk {other} of this object (chunks were reordered)")
        if final and len(frame) < TAG:
            self._fail(index, "truncated", f"the object was cut inside this chunk ({len(frame)} bytes are left)")
        if final and not full:
            self._fail(index, "cut_or_changed", f"it does not authenticate: the object was cut inside this chunk "
                                                f"({len(frame)} bytes are left), or its bytes were changed")
        self._fail(index, "changed", "it does not authenticate: its bytes were changed, or it comes from another "
                                     "object or backup")

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes of plaintext (all that is left for -1); b"" at the authenticated end."""
        if size is None or size < 0:
            return b"".join(self.chunks())
        while not self._plain and not self._done:
            self._plain = memoryview(self._next())
        out, self._plain = bytes(self._plain[:size]), self._plain[size:]
        return out

    def readinto(self, buffer: bytearray | memoryview) -> int:
        data = self.read(len(buffer))
        memoryview(buffer)[:len(data)] = data
        return len(data)


def sealed_size(plain_bytes: int, chunk_size: int = CHUNK_SIZE) -> int:
    """The size of a sealed object of `plain_bytes` bytes: what a manifest's size check expects."""
    chunks = max(1, -(-plain_bytes // chunk_size))
    return HEADER_SIZE + plain_bytes + chunks * TAG
