"""Backups in an S3 bucket (or any S3 API: the endpoint comes from the Airflow AWS connection).

Streams of unknown length are uploaded with the multipart API straight from the pipe. Part sizes
grow with the stream (16 MiB for the first 1000 parts, then doubling every 1000 parts, at most
5 GiB), so a small backup buffers little and a 1 TiB stream still fits within S3's 10,000 parts
(the plan reaches ~1 TiB by part 6000 and ~16 TiB by part 10,000). One part is filled while at
most `inflight` others upload: memory stays bounded at (inflight + 1) parts.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any

from lastline import connections
from lastline.core.errors import StorageError
from lastline.storage.base import Storage, Writer, checked_key

log = logging.getLogger(__name__)

MiB = 1 << 20
BASE_PART = 16 * MiB
MAX_PART = 5 * 1024 * MiB
MAX_PARTS = 10_000


def part_size(part_number: int, base: int = BASE_PART) -> int:
    """The size of part `part_number` (1-based) in the growing plan."""
    return min(base << ((part_number - 1) // 1000), MAX_PART)


def plan_capacity(parts: int = MAX_PARTS, base: int = BASE_PART) -> int:
    """How many bytes `parts` parts of the plan hold."""
    return sum(part_size(n, base) for n in range(1, parts + 1))


def sse_args(extra: dict) -> dict:
    """Server-side encryption for every object written, from the AWS connection's extras
    `server_side_encryption` (`AES256` or `aws:kms`) and `sse_kms_key_id` (objects are private: S3's default)."""
    args = {}
    if extra.get("server_side_encryption"):
        args["ServerSideEncryption"] = str(extra["server_side_encryption"])
    if extra.get("sse_kms_key_id"):
        args["SSEKMSKeyId"] = str(extra["sse_kms_key_id"])
    return args


def s3_hook(aws_conn_id: str | None, extras: dict | None = None) -> Any:
    """The Amazon provider's S3Hook for the Airflow AWS connection (endpoint_url, region and keys from it). Throttling
    and 5xx answers are retried up to 10 attempts with backoff (`standard` mode; botocore's default here
    gave up after 2 retries, so a short burst of SlowDown failed a backup) unless the connection's
    `config_kwargs` set `retries` themselves."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    from botocore.config import Config

    kwargs = dict((connections.extras(aws_conn_id) if extras is None else extras).get("config_kwargs") or {})
    kwargs.setdefault("retries", {"max_attempts": 10, "mode": "standard"})
    return S3Hook(aws_conn_id=aws_conn_id, config=Config(**kwargs))


class S3Writer(Writer):
    """A multipart upload fed by write(); parts upload in a background thread."""

    def __init__(self, client: Any, bucket: str, key: str, base_part: int = BASE_PART, inflight: int = 2,
                 extra: dict | None = None) -> None:
        self.client, self.bucket, self.key, self.base = client, bucket, key, base_part
        self.extra = extra or {}  # server-side encryption, when the connection asks for it
        self.buf = bytearray()
        self.part_no = 1
        self.parts: list[dict] = []
        self.error: BaseException | None = None
        self.upload_id: str | None = None
        # `inflight` parts are queued or uploading at once, one more is being filled by write()
        self.queue: queue.Queue = queue.Queue(maxsize=max(1, inflight - 1))
        self.thread: threading.Thread | None = None

    def _start(self) -> None:
        try:
            self.upload_id = self.client.create_multipart_upload(Bucket=self.bucket, Key=self.key, **self.extra)["UploadId"]
        except Exception as exc:
            raise StorageError(f"cannot start an upload to s3://{self.bucket}/{self.key}: {exc}") from exc
        self.thread = threading.Thread(target=self._upload_loop, name="s3-upload", daemon=True)
        self.thread.start()

    def _upload_loop(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            number, body = item
            if self.error is not None:
                continue
            try:
                resp = self.client.upload_part(
                    Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number, Body=bytes(body)
                )
                self.parts.append({"PartNumber": number, "ETag": resp["ETag"]})
            except Exception as exc:  # noqa: BLE001 - surfaced by write()/commit()
                self.error = exc

    def _check(self) -> None:
        if self.error is not None:
            raise StorageError(f"upload to s3://{self.bucket}/{self.key} failed: {self.error}") from self.error

    def _flush_part(self) -> None:
        if self.part_no > MAX_PARTS:
            raise StorageError(f"s3://{self.bucket}/{self.key}: more than {MAX_PARTS} parts; raise the base part size.")
        if self.upload_id is None:
            self._start()
        self.queue.put((self.part_no, self.buf))
        self.buf = bytearray()
        self.part_no += 1

    def write(self, data: bytes | memoryview) -> None:
        self._check()
        self.buf += data
        while len(self.buf) >= part_size(self.part_no, self.base):
            size = part_size(self.part_no, self.base)
            rest = self.buf[size:]
            self.buf = self.buf[:size]
            self._flush_part()
            self.buf = rest

    def _finish_thread(self) -> None:
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()
            self.thread = None

    def commit(self) -> None:
        if self.upload_id is None:  # small object: one PUT
            try:
                self.client.put_object(Bucket=self.bucket, Key=self.key, Body=bytes(self.buf), **self.extra)
            except Exception as exc:
                raise StorageError(f"cannot write s3://{self.bucket}/{self.key}: {exc}") from exc
            return
        if self.buf or not self.parts:
            self._flush_part()
        self._finish_thread()
        try:
            self._check()
            parts = sorted(self.parts, key=lambda p: p["PartNumber"])
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, MultipartUpload={"Parts": parts}
            )
        except Exception:
            self.abort()
            raise

    def abort(self) -> None:
        self.error = self.error or StorageError("aborted")
        self._finish_thread()
        if self.upload_id is not None:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id)
            except Exception:  # noqa: BLE001 - best effort; a lifecycle rule cleans what remains
                log.warning("could not abort multipart upload of s3://%s/%s", self.bucket, self.key)
            self.upload_id = None


class S3Storage(Storage):
    """Backups under `s3://bucket/prefix/`: stat, list and delete through S3Hook's own calls; reads and the streaming
    multipart upload through its boto3 client."""

    def __init__(self, bucket: str, prefix: str, aws_conn_id: str | None = None) -> None:
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")
        extras = connections.extras(aws_conn_id)  # one lookup of the connection for both
        self.hook = s3_hook(aws_conn_id, extras)
        self.client = self.hook.get_conn()  # the hook's own client (it keeps one)
        self.extra = sse_args(extras)

    def _key(self, key: str) -> str:
        checked_key(key, self.url)
        return f"{self.prefix}/{key}" if self.prefix else key

    def writer(self, key: str, durable: bool = True) -> Writer:  # durable either way
        return S3Writer(self.client, self.bucket, self._key(key), extra=self.extra)

    def reader(self, key: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
        except Exception as exc:
            raise StorageError(f"cannot read {self.location(key)}: {exc}") from exc
        try:
            while data := body.read(chunk):
                yield data
        finally:
            body.close()

    def _head(self, key: str) -> dict | None:
        from botocore.exceptions import ClientError

        try:
            return self.hook.head_object(self._key(key), bucket_name=self.bucket)  # None when S3 answers 404
        except ClientError as exc:
            raise StorageError(f"cannot stat {self.location(key)}: {exc}") from exc

    def exists(self, key: str) -> bool:
        return self._head(key) is not None

    def size(self, key: str) -> int:
        head = self._head(key)
        if head is None:
            raise StorageError(f"{self.location(key)} does not exist.")
        return int(head["ContentLength"])

    def size_if_exists(self, key: str) -> int | None:
        head = self._head(key)
        return None if head is None else int(head["ContentLength"])

    def list_backups(self) -> list[str]:
        prefix = f"{self.prefix}/" if self.prefix else ""
        try:
            found = self.hook.list_prefixes(bucket_name=self.bucket, prefix=prefix, delimiter="/")
        except Exception as exc:
            raise StorageError(f"cannot list {self.url}: {exc}") from exc
        ids = {p[len(prefix):].strip("/") for p in found}
        return sorted(i for i in ids if i and not i.startswith("."))

    def delete_backup(self, backup_id: str) -> None:
        """Delete the backup's objects, its manifest first (a backup half deleted is never taken for a complete one),
        then a listing page (up to 1000 keys) at a time; a key S3 refuses to delete is raised with S3's code, never
        skipped. Not S3Hook's list_keys + delete_objects: those hold every key of the backup in memory first and drop
        S3's error codes."""
        from botocore.exceptions import BotoCoreError, ClientError

        prefix = self._key(backup_id) + "/"
        refused: list[str] = []
        try:
            # absent (an incomplete backup, an archived binlog file): S3 deletes nothing and says nothing
            answer = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": [{"Key": f"{prefix}manifest.json"}],
                                                                            "Quiet": True})
            refused += [f"{e.get('Key')} ({e.get('Code')}: {e.get('Message')})" for e in answer.get("Errors", [])]
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if objs and not refused:
                    answer = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objs, "Quiet": True})
                    refused += [f"{e.get('Key')} ({e.get('Code')}: {e.get('Message')})" for e in answer.get("Errors", [])]
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"cannot delete {self.location(backup_id)}: {exc}; what was deleted stays deleted, and "
                               "the next prune tries again.") from exc
        if refused:
            raise StorageError(f"cannot delete {self.location(backup_id)}: S3 refused {len(refused)} object(s), first "
                               f"{refused[0]}; if the code says access is denied, let this connection's account delete "
                               "in the bucket; the next prune tries again (what was deleted stays deleted).")

    def delete_objects(self, keys: list[str]) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        refused: list[str] = []
        try:
            for i in range(0, len(keys), 1000):  # S3 deletes up to 1000 keys a request; a missing one silently
                objs = [{"Key": self._key(k)} for k in keys[i:i + 1000]]
                answer = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objs, "Quiet": True})
                refused += [f"{e.get('Key')} ({e.get('Code')}: {e.get('Message')})" for e in answer.get("Errors", [])]
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"cannot delete objects of {self.url}: {exc}; the next attempt tries again.") from exc
        if refused:
            raise StorageError(f"cannot delete objects of {self.url}: S3 refused {len(refused)}, first {refused[0]}; the "
                               "next attempt tries again.")

    def check_writable(self) -> None:
        key = self._key(".lastline-write-probe")
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=b"ok")
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            raise StorageError(f"destination {self.url} is not writable: {exc}") from exc
