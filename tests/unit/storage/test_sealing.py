"""storage.sealing: sealed objects round-trip at every size around a chunk (both ciphers, and past 16 MiB at the
real chunk size) with bounded memory; each way of damaging one (a flipped byte, a cut at a chunk boundary or inside a
chunk, chunks swapped, a chunk or a header from another object or backup, bytes appended, the header changed) is
refused, naming the object, the chunk and what happened; a data key never shows itself."""
from __future__ import annotations

import io
import os
import pickle

import pytest

from lastline.core.errors import IntegrityError
from lastline.storage import envelope, sealing
from lastline.storage.sealing import HEADER_SIZE, TAG, DataKey, SealError, SealReader, SealWriter

SMALL = 1024  # the smallest chunk: the cases at a chunk's edges stay fast
KEY = DataKey(bytes(range(32)))
NAME = "b1/data/`odd db`/t 1.tsv.zst"
CIPHERS = list(sealing.CIPHERS)


def sealed(plain: bytes, *, name: str = NAME, backup_id: str = "b1", key: DataKey = KEY, chunk: int = SMALL,
           cipher: str = "aes-256-gcm") -> bytes:
    sink = io.BytesIO()
    envelope.seal_stream(io.BytesIO(plain), sink, key, backup_id, name, cipher=cipher, chunk_size=chunk)
    return sink.getvalue()


def opened(data: bytes, *, name: str = NAME, backup_id: str = "b1", key: DataKey = KEY) -> bytes:
    out = io.BytesIO()
    envelope.open_stream(io.BytesIO(data), out, key, backup_id, name)
    return out.getvalue()


def frame(index: int, chunk: int = SMALL) -> slice:
    start = HEADER_SIZE + index * (chunk + TAG)
    return slice(start, start + chunk + TAG)


@pytest.mark.parametrize("cipher", CIPHERS)
@pytest.mark.parametrize("size", [0, 1, SMALL - 1, SMALL, SMALL + 1, 3 * SMALL + 5])
def test_round_trip_at_every_size_around_a_chunk(cipher, size):
    plain = os.urandom(size)
    data = sealed(plain, cipher=cipher)
    assert len(data) == sealing.sealed_size(size, SMALL)
    assert size < 16 or plain not in data
    assert opened(data) == plain
    reader = SealReader(io.BytesIO(data), KEY, "b1", NAME)
    assert reader.cipher == cipher and reader.chunk_size == SMALL
    assert b"".join(iter(lambda: reader.read(333), b"")) == plain  # read(n) as a file does


@pytest.mark.parametrize("cipher", CIPHERS)
def test_round_trip_past_16_mib_at_the_real_chunk_size_written_in_odd_pieces(cipher):
    plain = os.urandom((17 << 20) + 3)
    sink = io.BytesIO()
    with SealWriter(sink, KEY, "b1", NAME, cipher=cipher) as writer:
        for start in range(0, len(plain), 1_000_003):
            writer.write(memoryview(plain)[start:start + 1_000_003])
    assert (writer.bytes_in, writer.bytes_out) == (len(plain), len(sink.getvalue()))
    assert len(sink.getvalue()) == sealing.sealed_size(len(plain)) == HEADER_SIZE + len(plain) + 5 * TAG
    reader = SealReader(io.BytesIO(sink.getvalue()), KEY, "b1", NAME)
    chunks = list(reader.chunks())
    assert [len(c) for c in chunks] == [4 << 20] * 4 + [(1 << 20) + 3]
    assert b"".join(chunks) == plain


class Recording(io.BytesIO):
    """A sink and source that remembers the largest single write and read."""

    largest_write = largest_read = 0

    def write(self, data) -> int:  # type: ignore[override]
        self.largest_write = max(self.largest_write, len(data))
        return super().write(data)

    def read(self, size=-1) -> bytes:  # type: ignore[override]
        assert size is not None and size >= 0, "a reader must never ask for the whole rest"
        self.largest_read = max(self.largest_read, size)
        return super().read(size)


def test_memory_is_bounded_by_a_chunk_or_two_both_ways():
    sink = Recording()
    writer = SealWriter(sink, KEY, "b1", NAME, chunk_size=SMALL)
    writer.write(b"x" * (100 * SMALL + 7))  # one big write is still cut into chunks as it goes
    assert len(writer._buf) <= SMALL and sink.largest_write <= SMALL + TAG
    writer.close()
    source = Recording(sink.getvalue())
    assert list(SealReader(source, KEY, "b1", NAME).chunks())
    assert source.largest_read <= SMALL + TAG + 1


@pytest.mark.parametrize("cipher", CIPHERS)
def test_a_writer_seals_every_chunk_in_the_same_two_buffers(cipher):
    """The pending chunk and the sealed one are each one buffer for the whole object (a new one a chunk cost a page
    fault per 4 KiB twice over: more CPU than the cipher); the sink is handed views of the sealed one, used before its
    write returns, and what it kept of them opens to the plaintext."""
    given: list[tuple[object, bytes]] = []

    class Sink:
        def write(self, data) -> None:
            given.append((data.obj if isinstance(data, memoryview) else data, bytes(data)))

    plain = os.urandom(40 * SMALL + 9)
    writer = SealWriter(Sink(), KEY, "b1", NAME, cipher=cipher, chunk_size=SMALL)
    pending = []
    for start in range(0, len(plain), 700):  # pieces smaller than a chunk: each chunk gathered in the pending buffer
        writer.write(plain[start:start + 700])
        pending.append(writer._buf)
    writer.close()
    assert len({id(b) for b in pending}) == 1 and writer._buf is not pending[0]  # one buffer, let go at the end
    sealed_in = {id(obj) for obj, _ in given[1:]}  # (the header is written as it is)
    assert len(sealed_in) == 1 and len(given) == 1 + 41
    assert opened(b"".join(data for _, data in given)) == plain


def damaged(cipher: str = "aes-256-gcm", size: int = 5 * SMALL + 100) -> bytes:
    """An object of 6 chunks (0 to 5; chunk 5 the final one, of 100 bytes)."""
    return sealed(bytes(range(256)) * (size // 256) + b"z" * (size % 256), cipher=cipher)


def refused(data: bytes, **where) -> SealError:
    with pytest.raises(SealError) as caught:
        opened(data, **where)
    assert isinstance(caught.value, IntegrityError)
    return caught.value


def flipped(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1:]


def swapped(data: bytes, a: int, b: int) -> bytes:
    out = bytearray(data)
    out[frame(a)], out[frame(b)] = data[frame(b)], data[frame(a)]
    return bytes(out)


def spliced(data: bytes, index: int, other: bytes) -> bytes:
    out = bytearray(data)
    out[frame(index)] = other[frame(index)]
    return bytes(out)


@pytest.mark.parametrize("cipher", CIPHERS)
@pytest.mark.parametrize(("damage", "chunk", "reason", "words"), [
    (lambda d: flipped(d, frame(2).start + 500), 2, "changed", "its bytes were changed"),
    (lambda d: flipped(d, frame(2).stop - 1), 2, "changed", "its bytes were changed"),  # in the tag
    (lambda d: flipped(d, len(d) - 1), 5, "cut_or_changed", "or its bytes were changed"),  # the final chunk
    (lambda d: d[:frame(3).stop], 3, "truncated", "cut at a chunk boundary"),
    (lambda d: d[:HEADER_SIZE], 0, "truncated", "its final chunk gone"),
    (lambda d: d[:frame(2).start + 300], 2, "cut_or_changed", "cut inside this chunk (300 bytes are left)"),
    (lambda d: d[:frame(2).start + 5], 2, "truncated", "cut inside this chunk (5 bytes are left)"),
    (lambda d: swapped(d, 1, 3), 1, "reordered", "it holds chunk 3 of this object"),
    (lambda d: d[:frame(1).start] + d[frame(2)] + d[frame(1)] + d[frame(3).start:], 1, "reordered", "holds chunk 2"),
    (lambda d: d[:frame(1).start] + d[frame(2).start:], 1, "reordered", "holds chunk 2"),  # a chunk dropped
    (lambda d: spliced(d, 2, damaged()), 2, "changed", "comes from another object or backup"),  # same name, new salt
    (lambda d: spliced(d, 2, sealed(d, name="b1/other.tsv")), 2, "changed", "another object or backup"),
    (lambda d: spliced(d, 2, sealed(d, backup_id="b2")), 2, "changed", "another object or backup"),
    (lambda d: flipped(d, 20), None, "header", "does not authenticate"),  # the salt
    (lambda d: flipped(d, HEADER_SIZE - 1), None, "header", "does not authenticate"),  # the header's MAC
    (lambda d: d[:7] + bytes([3 - d[7]]) + d[8:], None, "header", "does not authenticate"),  # the other cipher
    (lambda d: d[:7] + b"\x07" + d[8:], None, "header", "is not one this lastline writes"),  # an unknown cipher
    (lambda d: d[:6] + b"\x09" + d[7:], None, "header", "is not one this lastline writes"),  # the version
    (lambda d: d[:40], None, "truncated", "ends inside its header (40 of 76 bytes)"),
    (lambda d: b"", None, "truncated", "ends inside its header (0 of 76 bytes)"),
    (lambda d: b"\x28\xb5\x2f\xfd" + d[4:], None, "not_sealed", "written unencrypted"),  # a zstd frame
], ids=["flipped-byte-in-chunk-2", "flipped-tag-byte-of-chunk-2", "flipped-byte-in-the-final-chunk",
        "cut-after-chunk-3", "cut-after-the-header", "cut-inside-chunk-2", "cut-inside-chunk-2-tag", "chunks-1-and-3-swapped",
        "chunks-1-and-2-swapped", "chunk-1-dropped", "chunk-from-the-same-name-sealed-again", "chunk-from-another-object",
        "chunk-from-another-backup", "header-salt-flipped", "header-mac-flipped", "header-names-the-other-cipher", "header-names-an-unknown-cipher",
        "header-version-changed", "cut-inside-the-header", "empty-object", "not-sealed"])
def test_each_damage_is_refused_naming_the_object_the_chunk_and_what(cipher, damage, chunk, reason, words):
    error = refused(damage(damaged(cipher)))
    assert (error.name, error.backup_id, error.chunk, error.reason) == (NAME, "b1", chunk, reason)
    assert repr(NAME) in str(error) and words in str(error)
    assert ("its header" if chunk is None else f"chunk {chunk}:") in str(error)


@pytest.mark.parametrize(("where", "words"), [
    ({"name": "b1/data/elsewhere.tsv.zst"}, "sealed for another object or backup"),
    ({"backup_id": "b2"}, "sealed for another object or backup"),
    ({"key": DataKey(bytes(32))}, "under another data key"),
], ids=["whole-object-moved-to-another-name", "whole-object-moved-to-another-backup", "another-data-key"])
def test_a_whole_object_in_the_wrong_place_or_under_another_key_fails_at_its_header(where, words):
    error = refused(damaged(), **where)
    assert (error.chunk, error.reason) == (None, "header") and words in str(error)


def test_bytes_appended_after_the_final_chunk_are_named():
    data = sealed(b"q" * (3 * SMALL))  # chunk 2 is full and final
    error = refused(data + b"more")
    assert (error.chunk, error.reason) == (2, "appended")


def test_a_writer_left_on_an_exception_leaves_an_object_that_reads_as_truncated():
    sink = io.BytesIO()
    with pytest.raises(RuntimeError), SealWriter(sink, KEY, "b1", NAME, chunk_size=SMALL) as writer:
        writer.write(b"r" * (2 * SMALL + 1))
        raise RuntimeError("the producer died")
    error = refused(sink.getvalue())
    assert (error.chunk, error.reason) == (1, "truncated")
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"late")


def test_a_consumer_sees_only_authenticated_chunks_before_the_failure():
    data = flipped(damaged(), frame(3).start + 1)
    reader = SealReader(io.BytesIO(data), KEY, "b1", NAME)
    got = []
    with pytest.raises(SealError, match="chunk 3:"):
        for plain in reader.chunks():
            got.append(plain)
    assert len(got) == 3 and b"".join(got) == opened(damaged())[:3 * SMALL]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"cipher": "aes-128-cbc"}, "is not one of aes-256-gcm, chacha20-poly1305"),
    ({"chunk_size": 100}, "a chunk size is 1024 to"),
    ({"chunk_size": (64 << 20) + 1}, "a chunk size is 1024 to"),
], ids=["unknown-cipher", "chunk-too-small", "chunk-too-large"])
def test_a_writer_refuses_what_the_format_does_not_have(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SealWriter(io.BytesIO(), KEY, "b1", NAME, **kwargs)


def test_a_data_key_never_shows_itself():
    key = DataKey.generate()
    assert repr(key) == str(key) == "DataKey(<hidden>)" and key.raw().hex() not in repr([key])
    with pytest.raises(TypeError, match="never serialised"):
        pickle.dumps(key)
    assert key == DataKey(key.raw()) and key != DataKey(bytes(32))
    with pytest.raises(ValueError, match="32 bytes"):
        DataKey(b"short")
    error = refused(damaged(), key=key)
    assert key.raw().hex() not in str(error) and KEY.raw().hex() not in str(error)
