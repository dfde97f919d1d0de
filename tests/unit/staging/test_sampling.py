"""staging.sampling: what a column can hold, which chunks are read (evenly, first and last always), the whole rows of
each window of a stream, and a table's sample read from real chunk files on a folder destination: personal data
counted in the column it is in, binary values that are not text counted, a row not matching the manifest refused."""
from __future__ import annotations

import hashlib

import pytest

from lastline.core.errors import IntegrityError
from lastline.logical.format.dialect import Column
from lastline.manifest import ChunkInfo, LogicalManifest, LogicalTable
from lastline.staging import sampling
from lastline.staging.sampling import category, spread, windows
from lastline.storage import open_storage


@pytest.mark.parametrize(("column", "kind"), [
    (Column("a", "varchar(10)", True, "text", "utf8mb4"), "text"),
    (Column("a", "blob", True, "text", None), "binary"),
    (Column("a", "json", True, "text", None), "binary"),
    (Column("a", "bigint(20) unsigned", False, "plain", None), "number"),
    (Column("a", "decimal(19,0)", False, "plain", None), "number"),
    (Column("a", "datetime", False, "plain", None), "other"),
    (Column("a", "float", False, "double", None), "other"),
    (Column("a", "bit(8)", False, "bit", None), "other"),
    (Column("a", "point", True, "hex", None), "other"),
], ids=["text", "blob", "json-without-charset", "integer", "decimal", "datetime", "float", "bit", "spatial"])
def test_category(column, kind):
    assert category(column) == kind


def chunks(rows: list[int]) -> list[ChunkInfo]:
    return [ChunkInfo(f"data/db/t/{i}.tsv", n, 1, 1, "") for i, n in enumerate(rows)]


@pytest.mark.parametrize(("rows", "limit", "picked"), [
    ([], 3, []),
    ([5], 3, [0]),
    ([5, 0, 5], 3, [0, 2]),
    ([1] * 3, 3, [0, 1, 2]),
    ([1] * 10, 3, [0, 4, 9]),
    ([1000, 1, 1, 1, 1, 1000], 3, [0, 2, 5]),
    ([1] * 100, 32, None),
], ids=["none", "one", "empty-chunks-left-out", "no-more-than-the-limit", "evenly-first-and-last",
        "the-middle-row-s-chunk", "many"])
def test_spread(rows, limit, picked):
    got = spread(chunks(rows), limit)
    files = [c.file for c in got]
    if picked is not None:
        assert files == [f"data/db/t/{i}.tsv" for i in picked]
    else:
        assert len(got) == limit and files[0].endswith("/0.tsv") and files[-1].endswith("/99.tsv")
    assert files == sorted(files, key=lambda f: int(f.rsplit("/", 1)[1].split(".")[0]))  # key order: 2 before 10


ROWS = b"".join(b"row%03d\n" % i for i in range(100))  # 7 bytes a row


@pytest.mark.parametrize(("pieces", "starts", "size", "expected"), [
    ([], [0], 10, []),
    ([ROWS], [0], len(ROWS), [ROWS]),
    ([ROWS], [0], 3, [b"row000\n"]),
    ([ROWS], [3], 7, [b"row001\n"]),
    ([ROWS], [0, 70, 140], 7, [b"row000\n", b"row010\n", b"row020\n"]),
    ([ROWS[i:i + 5] for i in range(0, len(ROWS), 5)], [0, 70, 140], 7, [b"row000\n", b"row010\n", b"row020\n"]),
    ([ROWS], [693], 100, [b"row099\n"]),
    ([ROWS], [695], 100, []),
    ([ROWS], [700], 100, []),
    ([b"a\tb"], [0], 10, [b"a\tb"]),
], ids=["empty-stream", "one-window-of-everything", "a-window-reads-on-to-the-end-of-its-row",
        "the-first-row-that-begins-in-it", "many-windows", "many-windows-over-small-pieces", "the-last-row",
        "no-row-begins-in-the-last-window", "past-the-end", "a-last-row-without-its-newline"])
def test_windows(pieces, starts, size, expected):
    assert list(windows(pieces, starts, size)) == expected


# --- a table's sample from real chunk files ---------------------------------------------------------------------------
COLUMNS = [Column("id", "int(11)", False, "plain", None), Column("contact", "varchar(100)", True, "text", "utf8mb4"),
           Column("photo", "blob", True, "text", None), Column("account", "bigint(20)", True, "plain", None)]


def line(i: int) -> bytes:
    contact = b"ann%d@example.com" % i if i % 2 else b"+1 (555) 010-%04d" % i
    photo = b"\\0\x89PNG\x01\x02\xff\xfe" if i % 3 else b"\\N"
    return b"%d\t%s\t%s\t4111111111111111\n" % (i, contact, photo)


def backup(tmp_path, pieces: list[bytes], columns=COLUMNS) -> tuple:
    """A folder destination holding one table's chunks (uncompressed), and its manifest."""
    (tmp_path / "b" / "data").mkdir(parents=True)
    infos = []
    for i, data in enumerate(pieces):
        (tmp_path / "b" / "data" / f"{i}.tsv").write_bytes(data)
        infos.append(ChunkInfo(f"data/{i}.tsv", data.count(b"\n"), len(data), len(data), hashlib.sha256(data).hexdigest()))
    table = LogicalTable("db", "people", "InnoDB", "utf8mb4", None, True, "primary key ranges", ["id"],
                         [c.to_dict() for c in columns], sum(c.rows for c in infos), "", 0, 0, 0.0, chunks=infos)
    manifest = LogicalManifest("b", "src", "11.4", "", "+00:00", "tsv", "none", 1000, 1, [{"name": "db"}], "schema.json",
                               "", "", "", 0.0, 0.0, table.rows, 0, 0, 0.0, tables=[table])
    return open_storage(f"file://{tmp_path}"), manifest, table


@pytest.mark.parametrize("pieces", [[b"".join(line(i) for i in range(1, 201))],
                                    [b"".join(line(i) for i in range(n, n + 20)) for n in range(1, 201, 20)]],
                         ids=["one-chunk", "many-chunks"])
def test_sample_counts_each_kind_in_its_own_column(tmp_path, pieces):
    storage, manifest, table = backup(tmp_path, pieces)
    s = sampling.sample(storage, manifest, table)
    assert (s.chunks, s.rows_read, s.rows_decoded) == (len(pieces), 200, 200)
    ident, contact, photo, account = s.columns
    assert len(contact.rows["email"]) == 100 and contact.phones == 100 and contact.example["email"] != "ann1@example.com"
    assert ident.rows == {} and photo.rows == {} and account.rows == {}
    assert photo.values == 134 and photo.not_text == 134  # NULL is no value; the others are not text
    assert account.cards == account.values == 200


def test_an_empty_table_samples_nothing(tmp_path):
    storage, manifest, table = backup(tmp_path, [])
    s = sampling.sample(storage, manifest, table)
    assert (s.chunks, s.bytes, s.rows_read, len(s.columns)) == (0, 0, 0, 4)


def test_a_row_that_does_not_match_the_manifest_is_refused(tmp_path):
    storage, manifest, table = backup(tmp_path, [b"1\ttoo few\n"])
    with pytest.raises(IntegrityError, match="a row has 2 fields, the table has 4 columns"):
        sampling.sample(storage, manifest, table)
