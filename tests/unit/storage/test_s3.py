"""storage.s3: the growing part plan (16 MiB parts, doubling every 1000, capped at 5 GiB: a tebibyte fits in S3's
10,000 parts), the server-side encryption a connection asks for, and a bucket of the moto server read and written
through the Airflow AWS connection: one PUT for a small object, a multipart upload for a stream, an aborted one
leaving nothing, stat, list and delete with the storage's own messages."""
from __future__ import annotations

import os

import pytest

from lastline.core.errors import IntegrityError, StorageError
from lastline.storage.s3 import BASE_PART, MAX_PART, MAX_PARTS, MiB, S3Storage, part_size, plan_capacity, sse_args

TiB = 1 << 40


@pytest.mark.parametrize(("number", "size"), [
    (1, 16 * MiB), (1000, 16 * MiB), (1001, 32 * MiB), (2001, 64 * MiB), (MAX_PARTS, 16 * MiB << 9),
], ids=["first", "last-of-the-first-thousand", "first-doubled", "second-doubling", "the-last-part"])
def test_part_size_grows_every_thousand_parts(number, size):
    assert part_size(number) == min(size, MAX_PART)


@pytest.mark.parametrize(("base", "number", "size"), [
    (5 * MiB, 1, 5 * MiB), (1 << 30, 4001, MAX_PART), (BASE_PART, 9001, MAX_PART)
], ids=["a-small-base", "capped-at-5-GiB", "the-default-plan-reaches-the-cap"])
def test_part_size_with_a_base_and_its_cap(base, number, size):
    assert part_size(number, base) == size


def test_plan_capacity_counts_each_part():
    assert plan_capacity(1) == BASE_PART and plan_capacity(1001) == 1000 * BASE_PART + 2 * BASE_PART
    assert plan_capacity(0) == 0


@pytest.mark.parametrize(("extra", "args"), [
    ({}, {}),
    ({"server_side_encryption": "AES256"}, {"ServerSideEncryption": "AES256"}),
    ({"server_side_encryption": "aws:kms", "sse_kms_key_id": "k1"}, {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "k1"}),
    ({"server_side_encryption": "", "region_name": "eu"}, {}),
], ids=["none", "aes256", "kms-with-key", "empty-and-unrelated-extras"])
def test_sse_args(extra, args):
    assert sse_args(extra) == args


def test_s3_part_plan_fits_a_tebibyte_in_ten_thousand_parts():
    assert part_size(1) == 16 << 20 and part_size(1001) == 32 << 20
    assert plan_capacity(MAX_PARTS) > TiB
    assert max(part_size(n) for n in range(1, MAX_PARTS + 1)) <= 5 << 30


def test_s3_multipart_round_trip(s3_server):
    st = S3Storage("backups", "unit", "t_s3")  # the moto server, through its Airflow AWS connection
    data = os.urandom(13 << 20)
    w = st.writer("20260101T000000Z/blob")
    w.base = 5 << 20  # S3's minimum part size, so 13 MiB takes three parts
    with w:
        for i in range(0, len(data), 1 << 20):
            w.write(data[i:i + (1 << 20)])
    assert len(w.parts) == 3
    assert st.read_bytes("20260101T000000Z/blob") == data
    assert st.list_backups() == ["20260101T000000Z"]
    st.delete_backup("20260101T000000Z")
    assert st.list_backups() == []


def test_s3_aborted_upload_leaves_nothing(s3_server):
    st = S3Storage("backups", "abort", "t_s3")
    with pytest.raises(RuntimeError):
        with st.writer("20260101T000000Z/blob") as w:
            w.base = 5 << 20
            w.write(os.urandom(11 << 20))
            raise RuntimeError("stream interrupted")
    assert not st.exists("20260101T000000Z/blob")
    assert st.client.list_multipart_uploads(Bucket="backups", Prefix="abort/").get("Uploads", []) == []


def test_s3_stat_list_and_delete_go_through_the_hook_with_the_storage_messages(s3_server):
    """Stat and list are S3Hook's calls: a missing object is None, not an error; a backup of more than 1000 objects
    is deleted whole, page by page, and nothing of a backup whose id starts with the same characters; a bucket that
    is not there is named as before."""
    st = S3Storage("backups", "hooked", "t_s3")
    assert not st.exists("20260101T000000Z/missing") and st.size_if_exists("20260101T000000Z/missing") is None
    with pytest.raises(StorageError, match="does not exist"):
        st.size("20260101T000000Z/missing")
    for n in range(1001):
        st.client.put_object(Bucket="backups", Key=f"hooked/20260101T000000Z/chunk{n:04d}", Body=b"x")
    st.write_bytes("20260102T000000Z/manifest.json", b"{}")
    st.write_bytes(".lastline/state", b"{}")  # a control folder, never a backup
    assert st.exists("20260101T000000Z/chunk1000") and st.size("20260101T000000Z/chunk1000") == 1
    assert st.list_backups() == ["20260101T000000Z", "20260102T000000Z"]
    st.write_bytes("20260101T000000Z-next/manifest.json", b"{}")  # an id that starts with the deleted one's
    st.delete_backup("20260101T000000Z")
    assert st.list_backups() == ["20260101T000000Z-next", "20260102T000000Z"] and not st.exists("20260101T000000Z/chunk0000")
    assert st.exists("20260101T000000Z-next/manifest.json")
    with pytest.raises(StorageError, match="cannot list s3://no-such-bucket/x"):
        S3Storage("no-such-bucket", "x", "t_s3").list_backups()



def test_a_small_object_is_one_put_and_reads_back(s3_server):
    st = S3Storage("backups", "unit_s3_small", "t_s3")
    try:
        w = st.writer("20260101T000000Z/manifest.json")
        with w:
            w.write(b'{"a": 1}')
        assert w.upload_id is None and w.parts == []  # no multipart upload for what fits in one part
        assert st.read_bytes("20260101T000000Z/manifest.json") == b'{"a": 1}'
        assert st.size("20260101T000000Z/manifest.json") == 8
    finally:
        st.delete_backup("20260101T000000Z")


def test_a_prefix_keeps_its_objects_apart(s3_server):
    one, two = S3Storage("backups", "unit_s3_one/", "t_s3"), S3Storage("backups", "/unit_s3_two", "t_s3")
    try:
        one.write_bytes("20260101T000000Z/x", b"1")
        assert one.url == "s3://backups/unit_s3_one" and one.location("20260101T000000Z/x").startswith(one.url)
        assert one.list_backups() == ["20260101T000000Z"] and two.list_backups() == []
        assert not two.exists("20260101T000000Z/x")
    finally:
        one.delete_backup("20260101T000000Z")


def test_a_missing_object_is_a_storage_error_naming_it(s3_server):
    st = S3Storage("backups", "unit_s3_missing", "t_s3")
    with pytest.raises(StorageError, match="cannot read s3://backups/unit_s3_missing/20260101T000000Z/none"):
        st.read_bytes("20260101T000000Z/none")


@pytest.mark.parametrize("key", ["../other/x", "/abs", "a//b"], ids=["dot-dot", "absolute", "empty-segment"])
def test_keys_that_leave_the_prefix_are_refused(s3_server, key):
    st = S3Storage("backups", "unit_s3_keys", "t_s3")
    with pytest.raises(IntegrityError, match="refusing storage key"):
        st.exists(key)


def test_check_writable_leaves_no_probe_and_names_a_missing_bucket(s3_server):
    st = S3Storage("backups", "unit_s3_probe", "t_s3")
    st.check_writable()
    assert not st.exists(".lastline-write-probe")
    with pytest.raises(StorageError, match="destination s3://unit-s3-no-bucket/x is not writable"):
        S3Storage("unit-s3-no-bucket", "x", "t_s3").check_writable()


def test_the_connections_encryption_reaches_every_object(s3_server, monkeypatch):
    import json

    conn = json.loads(os.environ["AIRFLOW_CONN_T_S3"])
    conn["extra"]["server_side_encryption"] = "AES256"
    monkeypatch.setenv("AIRFLOW_CONN_UNIT_S3_SSE", json.dumps(conn))
    st = S3Storage("backups", "unit_s3_sse", "unit_s3_sse")
    try:
        st.write_bytes("20260101T000000Z/small", b"x")
        w = st.writer("20260101T000000Z/big")
        w.base = 5 * MiB
        with w:
            w.write(os.urandom(6 * MiB))
        for key in ("small", "big"):
            head = st.client.head_object(Bucket="backups", Key=f"unit_s3_sse/20260101T000000Z/{key}")
            assert head["ServerSideEncryption"] == "AES256"
    finally:
        st.delete_backup("20260101T000000Z")
