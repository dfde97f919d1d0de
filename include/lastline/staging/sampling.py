"""The PII guard's sample of a table, spread over the whole table and bounded in cost (see pii).

Chunks: up to SAMPLE_CHUNKS of the table's chunk files, picked evenly by the manifest's row counts (the first
and the last always; all of them when there are no more). Within each chunk: windows of whole rows spread
evenly over it (up to WINDOWS per table, shared between the chunks), SAMPLE_BYTES of uncompressed rows per
table in all; a chunk is decompressed through to its last window, STREAM_BYTES per table at most (a chunk
bigger than its share is sampled over its first share). Every byte in a window is searched for email
addresses, card numbers and IBANs (ASCII patterns over the raw bytes, so every row in a window counts,
whatever its column's type); SAMPLE_ROWS rows per table, at a stride through the windows, are decoded
whole for what needs a whole value (phone numbers, whether bytes are text at all, UTF-16/32 text, card
numbers stored as numbers). Chunk files are untrusted input: only decoded and matched, never executed.
"""
from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate

from lastline.core.errors import IntegrityError
from lastline.logical.format import dialect
from lastline.logical.format.chunk_files import read_chunk
from lastline.manifest import ChunkInfo, LogicalManifest, LogicalTable
from lastline.staging import patterns
from lastline.storage import Storage
from lastline.storage.envelope import BackupSeal

SAMPLE_CHUNKS = 32  # chunks read per table at most
SAMPLE_BYTES = 16 << 20  # uncompressed bytes searched per table at most
STREAM_BYTES = 256 << 20  # uncompressed bytes decompressed per table at most, to reach windows deep in a chunk
SAMPLE_ROWS = 4000  # rows decoded whole per table at most
WINDOWS = 128  # windows per table at most (shared between its chunks)
LINE_BYTES = 16 << 20  # a window is read on to the end of its last row, this far at most
ENOUGH = 1000  # rows found to hold a kind, in one column, past which its other candidates are not checked


def category(col: dialect.Column) -> str:
    """What a column's values can hold: text (a charset), binary (bytes: BLOB, BINARY, JSON without a
    charset), number (an integer or decimal: a card number stored as one), other (dates, times, floats,
    bits, spatial values: none of the patterns)."""
    if col.charset is not None:
        return "text"
    if col.encoding == "text":
        return "binary"
    if col.encoding == "plain" and re.match(r"(tiny|small|medium|big)?int|decimal", col.column_type.lower()):
        return "number"
    return "other"


@dataclass
class ColumnSample:
    """What the sample found in one column."""

    values: int = 0  # values decoded whole (not NULL, not empty)
    not_text: int = 0  # of them, binary values that are not text
    phones: int = 0  # of them, whole phone numbers
    cards: int = 0  # of them, numbers that are card numbers (13-19 digits, Luhn)
    rows: dict[str, set[int]] = field(default_factory=dict)  # kind -> the rows searched (numbered) that hold it
    example: dict[str, str] = field(default_factory=dict)  # kind -> one found value, redacted

    def hit(self, kind: str, row: int, value: str) -> None:
        """A row holds `kind`: the first value found is kept as an example, redacted."""
        self.rows.setdefault(kind, set()).add(row)
        self.example.setdefault(kind, patterns.redact(kind, value))


@dataclass
class TableSample:
    """A table's sample: what was read and what each column holds."""

    columns: list[ColumnSample]
    chunks: int = 0
    bytes: int = 0  # uncompressed bytes searched
    rows_read: int = 0  # rows searched (a row cut at a window's end counts)
    rows_decoded: int = 0


def spread(chunks: list[ChunkInfo], limit: int = SAMPLE_CHUNKS) -> list[ChunkInfo]:
    """Up to `limit` of a table's chunks with rows, in key order, picked evenly by their row counts (the
    first and the last always; all of them when there are no more than `limit`)."""
    def order(c: ChunkInfo) -> tuple:
        name = c.file.rsplit("/", 1)[-1]
        return tuple(int(n) for n in re.findall(r"\d+", name)), name

    full = sorted((c for c in chunks if c.rows > 0), key=order)
    if len(full) <= limit:
        return full
    ends = list(accumulate(c.rows for c in full))
    total = ends[-1]
    picked = sorted({bisect_right(ends, j * (total - 1) // (limit - 1)) for j in range(limit)})
    return [full[i] for i in picked]


def windows(pieces: Iterable[bytes], starts: list[int], size: int) -> Iterator[bytes]:
    """The whole rows of a stream's windows [start, start + size), starts ascending: each from the first row
    that begins in it to the end of the row its last byte is in (LINE_BYTES further at most: then cut)."""
    buf, base, it = bytearray(), 0, iter(pieces)  # buf: the stream's bytes [base, base + len(buf))
    done = yielded = False
    for s in starts:
        s = max(s, base + 1) if yielded else s
        end = s + size  # the window's first byte past it
        while not done and not (base + len(buf) >= end
                                and (buf.find(b"\n", end - 1 - base) >= 0 or base + len(buf) >= end + LINE_BYTES)):
            piece = next(it, None)
            if piece is None:
                done = True
                break
            buf += piece
            drop = max(0, min(len(buf), s - 1 - base))  # keep the byte before `s`: is `s` a row's start?
            del buf[:drop]
            base += drop
        if s >= base + len(buf):
            return
        if s == 0:
            lo = 0
        else:
            nl = buf.find(b"\n", s - 1 - base, end - 1 - base)
            if nl < 0:
                continue  # no row begins in this window
            lo = nl + 1
            if lo >= len(buf):
                continue  # the stream ends with the row before: no row begins in this window
        nl = buf.find(b"\n", max(lo, end - 1 - base), end + LINE_BYTES - base)
        hi = nl + 1 if nl >= 0 else min(len(buf), end + LINE_BYTES - base)
        yield bytes(buf[lo:hi])
        del buf[:hi - 1]  # keep the window's last byte: the next window's "byte before"
        base, yielded = base + hi - 1, True


def _search_bytes(data: bytes, first_row: int, cols: list[dialect.Column], sample: TableSample) -> None:
    """Every email, card and IBAN in the bytes, counted in the column it is in (its row's TABs before it)."""
    searched = [category(c) in ("text", "binary") for c in cols]
    row, col, pos = first_row, 0, 0
    for at, end, kind in patterns.find_bytes(data):  # each kind in order of position
        if at < pos:  # the next kind: from the top again
            row, col, pos = first_row, 0, 0
        lines = data.count(b"\n", pos, at)
        if lines:
            row, col, pos = row + lines, 0, data.rfind(b"\n", pos, at) + 1
        col += data.count(b"\t", pos, at)
        pos = at
        if col < len(cols) and searched[col]:
            c = sample.columns[col]
            rows = c.rows.setdefault(kind, set())
            if len(rows) < ENOUGH and row not in rows and patterns.valid(data, at, end, kind):
                rows.add(row)
                c.example.setdefault(kind, patterns.redact(kind, patterns.value_at(data, at, end, kind)))


def _decode_rows(data: bytes, first_row: int, n: int, cols: list[dialect.Column], sample: TableSample, where: str) -> None:
    """Up to `n` whole rows at a stride through `data` (its complete lines), each value checked whole."""
    end_of_last, row = 0, first_row
    step = len(data) / max(n, 1)
    for j in range(n):
        at = int((j + 0.5) * step)
        if at < end_of_last or at >= len(data):
            continue
        nl = data.rfind(b"\n", end_of_last, at)
        start = nl + 1 if nl >= 0 else end_of_last
        row += data.count(b"\n", end_of_last, start)
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        fields = next(dialect.decode_rows(data[start:end]), [])
        if len(fields) != len(cols):
            raise IntegrityError(f"{where}: a row has {len(fields)} fields, the table has {len(cols)} columns: the "
                                 "chunk file does not match the manifest. Nothing was touched; use another backup.")
        for value, col, s in zip(fields, cols, sample.columns):
            _check_value(value, col, s, row)
        sample.rows_decoded += 1
        end_of_last, row = end + 1, row + 1


def _check_value(value: bytes | None, col: dialect.Column, s: ColumnSample, row: int) -> None:
    kind = category(col)
    if not value or kind == "other":
        return
    s.values += 1
    if kind == "number":
        digits = re.sub(rb"\.0*$", b"", value.lstrip(b"-")).decode("ascii", "replace")
        if 13 <= len(digits) <= 19 and digits.isdigit() and patterns.luhn(digits):
            s.cards += 1
            s.example.setdefault("bank/card", patterns.redact("bank/card", digits))
        return
    if kind == "binary" and not patterns.is_text(value):
        s.not_text += 1
        return
    text = patterns.decoded(value, col.charset)
    if text is not None:  # UTF-16/32: the raw bytes hid it from find_bytes
        for _, found, v in patterns.find(text):
            s.hit(found, row, v)
    whole = text if text is not None else value.decode("latin-1")
    if patterns.is_phone(whole):
        s.phones += 1
        s.example.setdefault("phone", patterns.redact("phone", whole.strip()))


def sample(storage: Storage, manifest: LogicalManifest, t: LogicalTable, seal: BackupSeal | None = None) -> TableSample:
    """The table's sample (see the module doc); `seal` opens an encrypted backup's chunks (backups.backup_seal)."""
    cols = [dialect.Column(**c) for c in t.columns]
    out = TableSample([ColumnSample() for _ in cols])
    chosen = spread(t.chunks)
    k = max(len(chosen), 1)
    budget, per_chunk, per_window = SAMPLE_BYTES, math.ceil(SAMPLE_ROWS / k), max(1, WINDOWS // k)
    for i, c in enumerate(chosen):
        share = max(budget // (k - i), 1)
        span = min(max(c.raw_bytes, 1), STREAM_BYTES // k)
        n = 1 if span <= share else per_window
        size = span if n == 1 else max(share // n, 1)
        starts = [j * span // n for j in range(n)]
        key, where = f"{manifest.backup_id}/{c.file}", f"{t.schema}.{t.name}"
        reader = read_chunk(storage, key, manifest.compression, c.sha256, where, seal)
        try:
            for data in windows(reader, starts, size if n > 1 else max(size, share)):
                budget -= len(data)
                _search_bytes(data, out.rows_read, cols, out)
                whole = data[:data.rfind(b"\n") + 1]
                _decode_rows(whole, out.rows_read, math.ceil(per_chunk / n), cols, out, storage.location(key))
                out.bytes += len(data)
                out.rows_read += data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        finally:
            reader.close()
        out.chunks += 1
    return out
