"""manifest: backup ids and their times, the JSON a manifest is written as, both formats parsed and checked (file
names kept inside the backup's layout), reading a backup folder (incomplete, damaged, moved, another kind), `latest`
and what prune deletes. On a local folder, without a storage key."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lastline import manifest
from lastline.core.errors import ConfigError, IntegrityError
from lastline.storage import auth
from lastline.storage.file import FileStorage

NOW = datetime(2026, 11, 28, 16, 14, 32, tzinfo=UTC)


def physical(backup_id: str = "20261128T161432Z-7c93b6", **kw) -> manifest.PhysicalManifest:
    fields = dict(backup_id=backup_id, source_conn_id="src", server_version="11.4.2", tool_version="11.4.2",
                  artifact="backup.mbstream.zst", compression="zstd", bytes=10, sha256="0" * 64, started_at="a",
                  finished_at="b", seconds=1.0, mb_per_s=1.0, parallel=2, datadir_bytes=100,
                  tables=[manifest.TableInfo("shop", "orders", "InnoDB", 5, 16384)])
    return manifest.PhysicalManifest(**{**fields, **kw})


def logical_data(chunk_file: str = "data/shop/orders/00000-000.tsv.zst", schema_file: str = "schema.json") -> dict:
    table = dict(schema="shop", name="orders", engine="InnoDB", charset="utf8mb4", collation=None, consistent=True,
                 chunking="pk", key=["id"], columns=[], rows=1, checksum="c", bytes=1, raw_bytes=1, seconds=0.1,
                 chunks=[dict(file=chunk_file, rows=1, bytes=1, raw_bytes=1, sha256="s")])
    return dict(format=manifest.LOGICAL_FORMAT, backup_id="20261128T161432Z-7c93b6", source_conn_id="src", server_version="11.4",
                sql_mode="", time_zone="+00:00", dialect="d", compression="zstd", chunk_rows=1000, parallel=2, databases=[],
                schema_file=schema_file, schema_sha256="s", started_at="a", finished_at="b", seconds=1.0, lock_seconds=0.0,
                rows=1, bytes=1, raw_bytes=1, mb_per_s=1.0, tables=[table], files=[dict(name="schema.json", bytes=1, sha256="s")])


@pytest.fixture
def store(tmp_path, monkeypatch) -> FileStorage:
    """A local destination, written and read without a storage key (files unsigned)."""
    monkeypatch.setattr(auth, "deployment_keys", lambda: None)
    return FileStorage(str(tmp_path))


@pytest.mark.parametrize(("backup_id", "when"), [
    ("20261128T161432Z-7c93b6", NOW), ("20261128T161432Z", NOW), ("20261128T161432Z-7C93B6", None),
    ("20261128T161432Z-7c93b", None), ("latest", None), ("x20261128T161432Z", None)],
    ids=["with-suffix", "older-without-suffix", "upper-case-hex", "short-suffix", "a-word", "prefixed"])
def test_backup_time(backup_id, when):
    assert manifest.backup_time(backup_id) == when


def test_new_backup_ids_carry_the_time_and_avoid_the_taken_ones(monkeypatch):
    tokens = iter(["aaaaaa", "bbbbbb", "cccccc"])
    monkeypatch.setattr(manifest.secrets, "token_hex", lambda n: next(tokens))
    assert manifest.new_backup_id(NOW, taken=["20261128T161432Z-aaaaaa"]) == "20261128T161432Z-bbbbbb"
    assert manifest.backup_time(manifest.new_backup_id(NOW)) == NOW


@pytest.mark.parametrize(("backup_id", "age"), [("20261128T161432Z-7c93b6", 1.5), ("not-an-id", None)], ids=["id", "other-folder"])
def test_backup_age(backup_id, age):
    found = manifest.backup_age(backup_id, NOW + timedelta(minutes=90))
    assert (found["backup_id"], found["age_hours"]) == (backup_id, age)


def test_json_lines_puts_a_key_and_a_list_item_per_line_sorted():
    assert manifest.json_lines({"b": [1, {"y": 2, "x": 1}], "a": "s", "c": []}) == (
        '{\n "a": "s",\n "b": [\n  1,\n  {"x": 1, "y": 2}\n ],\n "c": []\n}\n')


def test_physical_manifest_round_trips():
    m = physical(gtid="0-1-5")
    assert manifest.PhysicalManifest.from_json(m.to_json()) == m


@pytest.mark.parametrize(("text", "message"), [
    ('{"format": "lastline-physical/9"}', "unknown manifest format 'lastline-physical/9'"),
    ("[1]", "a manifest is a JSON object, not list"),
    ("{", "unreadable"),
], ids=["unknown-format", "not-an-object", "not-json"])
def test_physical_manifest_refuses(text, message):
    with pytest.raises(IntegrityError, match=message):
        manifest.PhysicalManifest.from_json(text)


@pytest.mark.parametrize(("chunk", "schema", "ok"), [
    ("data/shop/orders/00000-000.tsv.zst", "schema.json", True),
    ("data/shop/orders/00012-003.tsv", "schema.json", True),
    ("data/sh%2Fop/orders/00000-000.tsv.gz", "schema.json", True),
    ("data/../orders/00000-000.tsv", "schema.json", False),
    ("../../etc/passwd", "schema.json", False),
    ("data/shop/orders/0-0.tsv", "schema.json", False),
    ("data/shop/orders/00000-000.tsv.zst", "../schema.json", False),
], ids=["zstd-chunk", "plain-chunk", "percent-encoded-name", "dot-dot-database", "outside-the-folder", "wrong-chunk-name",
        "schema-elsewhere"])
def test_a_logical_manifest_names_only_its_own_files(chunk, schema, ok):
    if ok:
        m = manifest.LogicalManifest.from_json(logical_data(chunk, schema))
        assert m.tables[0].chunks[0].file == chunk and m.file("schema.json") and m.file("nope") is None
    else:
        with pytest.raises(IntegrityError, match="outside the backup's own layout"):
            manifest.LogicalManifest.from_json(logical_data(chunk, schema))


@pytest.mark.parametrize(("url", "parts"), [
    ("file:///b/20261128T161432Z-7c93b6", ("file:///b", "20261128T161432Z-7c93b6")),
    ("s3://bucket/p/latest/", ("s3://bucket/p", "latest")),
    ("/b/latest", ("/b", "latest")),
], ids=["file", "s3-trailing-slash", "plain-path"])
def test_split_backup_url(url, parts):
    assert manifest.split_backup_url(url) == parts


@pytest.mark.parametrize("url", ["s3://bucket", "latest"], ids=["bucket-only", "no-destination"])
def test_split_backup_url_needs_a_destination(url):
    with pytest.raises(ConfigError, match="expected <destination>/<backup_id>"):
        manifest.split_backup_url(url)


def stamps(*hours_ago: int) -> list[str]:
    return [(NOW - timedelta(hours=h)).strftime(manifest.ID_FORMAT) + "-000000" for h in hours_ago]


@pytest.mark.parametrize(("all_ids", "complete", "keep", "doomed"), [
    (stamps(3, 2, 1), stamps(3, 2, 1), 2, stamps(3)),
    (stamps(3, 2, 1), stamps(3, 2, 1), 0, stamps(3, 2)),
    (stamps(30, 1), stamps(1), 5, stamps(30)),
    (stamps(30, 1) + ["notes"], [], 1, stamps(30)),
    (stamps(2), [], 1, []),
], ids=["beyond-keep", "keep-zero-keeps-the-newest", "old-incomplete", "other-folders-untouched", "young-incomplete-kept"])
def test_plan_prune(all_ids, complete, keep, doomed):
    assert manifest.plan_prune(all_ids, complete, keep, timedelta(hours=24), now=NOW) == sorted(doomed)


def test_a_written_manifest_reads_back_with_its_sha256(store):
    manifest.write_manifest(store, physical())
    m = manifest.read_manifest(store, "20261128T161432Z-7c93b6", require=False)
    assert m.tables[0].name == "orders" and len(m.read_sha256) == 64 and not m.authenticity.ok
    assert manifest.manifest_kind(store, m.backup_id) == "physical"
    with pytest.raises(IntegrityError, match="changed after this run's preflight"):
        manifest.read_manifest(store, m.backup_id, require=False, sha256="f" * 64)


@pytest.mark.parametrize(("setup", "kind", "message"), [
    (lambda s: s.write_bytes("20261128T161432Z-7c93b6/part", b"x"), "physical", "the backup is incomplete"),
    (lambda s: s.write_bytes("20261128T161432Z-7c93b6/manifest.json", b"{oops"), "physical", "the manifest is damaged"),
    (lambda s: manifest.write_manifest(s, physical()), "logical", "is a physical backup; a logical restore cannot use it"),
    (lambda s: s.write_bytes("20261128T161432Z-7c93b6/manifest.json", physical("20261128T000000Z-000000").to_json().encode()),
     "physical", "but it is in folder"),
    (lambda s: None, "physical", "it holds no backup at all"),
    (lambda s: manifest.write_manifest(s, physical("20261128T151432Z-7c93b6")), "physical", r"20261128T151432Z-7c93b6 \(60 min earlier\)"),
], ids=["incomplete", "damaged", "another-kind", "moved-from-another-folder", "empty-destination", "names-the-nearest"])
def test_read_manifest_refuses(store, setup, kind, message):
    setup(store)
    with pytest.raises(IntegrityError, match=message):
        manifest.read_manifest(store, "20261128T161432Z-7c93b6", kind, require=False)


def test_an_unsigned_physical_manifest_is_refused_by_default(store, monkeypatch):
    monkeypatch.delenv(auth.TRUSTED_ENV, raising=False)
    manifest.write_manifest(store, physical())
    with pytest.raises(IntegrityError, match="A physical restore uses only control files lastline signed"):
        manifest.read_manifest(store, "20261128T161432Z-7c93b6")


def test_newest_complete_skips_incomplete_unreadable_and_other_kinds(store):
    old, mid, new, newest = stamps(4, 3, 2, 1)
    manifest.write_manifest(store, physical(old))
    manifest.write_manifest(store, physical(mid))
    store.write_bytes(f"{new}/manifest.json", b"[not json")
    store.write_bytes(f"{newest}/part", b"x")
    assert manifest.newest_complete(store, "physical") == [mid]
    assert manifest.newest_complete(store, "logical") == []
    assert manifest.complete_backups(store) == [old, mid]
    assert manifest.manifest_kind(store, new) is None


def test_resolve_backup_turns_latest_into_the_newest_and_refuses_other_names(store, monkeypatch, tmp_path):
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", f"file://{tmp_path}")
    monkeypatch.setattr(manifest, "_recorded_newest", [])
    old, new = stamps(2, 1)
    manifest.write_manifest(store, physical(old))
    manifest.write_manifest(store, physical(new))
    assert manifest.resolve_backup(f"file://{tmp_path}/latest")[1] == new
    assert manifest.resolve_backup(f"file://{tmp_path}/{old}")[1] == old
    with pytest.raises(ConfigError, match="is not a backup id"):
        manifest.resolve_backup(f"file://{tmp_path}/notes")
    with pytest.raises(IntegrityError, match="holds no complete logical backup"):
        manifest.resolve_backup(f"file://{tmp_path}/latest", kind="logical")


def test_latest_is_refused_when_older_than_what_airflow_recorded(store, monkeypatch, tmp_path):
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", f"file://{tmp_path}")
    monkeypatch.delenv(auth.TRUSTED_ENV, raising=False)
    old, new = stamps(2, 1)
    manifest.write_manifest(store, physical(old))
    monkeypatch.setattr(manifest, "_recorded_newest", [lambda place, kind: {"backup_id": new}])
    with pytest.raises(IntegrityError, match=f"the newest physical backup lastline recorded in Airflow, {new}, is missing"):
        manifest.resolve_backup(f"file://{tmp_path}/latest")


def test_prune_backups_deletes_beyond_keep_and_spares_the_protected_and_other_kinds(store):
    a, b, c = stamps(3, 2, 1)
    for backup_id in (a, b, c):
        manifest.write_manifest(store, physical(backup_id))
    assert manifest.prune_backups(store, "physical", keep=1, grace=timedelta(hours=24), protect={a: "a window's base"}) == [b]
    assert manifest.prune_backups(store, "logical", keep=1, grace=timedelta(hours=24)) == []
    assert sorted(store.list_backups()) == [a, c]
