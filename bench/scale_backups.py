"""The scale bench's many-backups shape (bench/scale_bench.py --backups 50,500): a destination of N logical backups,
in a local folder and in S3 (moto on loopback), and what an operator's day costs there:

- `latest`: the restore's resolve_backup of `<destination>/latest`;
- the form's list: the ten newest complete backups (manifest.newest_complete), as the trigger forms once offered
  them (now only the Backups page lists a destination; the name is kept so the records compare);
- the restore's preflight on `latest` (a real backup of a few tenants: manifest, schema and chunks checked);
- prune, keep 7: every older backup deleted (prune reads each manifest: linear is the goal).

The newest backup is a real one; the N - 1 older ones are its manifest alone under older ids (a complete backup
is one with a manifest: that is all these operations read of an old one). Seconds per operation at each N, and
per backup.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lastline.logical.backup import stages as logical_backup
from lastline.logical.restore import stages as logical_restore
from lastline.manifest import MANIFEST, newest_complete, resolve_backup
from lastline.storage import open_storage

OPERATIONS = ("latest", "form list", "restore preflight", "prune (keep 7)")


def _ids(n: int, newest: str) -> list[str]:
    """`n - 1` backup ids, a day apart, before `newest`'s time."""
    at = datetime.strptime(newest[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    return [f"{at - timedelta(days=d):%Y%m%dT%H%M%SZ}" for d in range(n - 1, 0, -1)]


def fill(url: str, aws: str | None, real: Path, n: int) -> None:
    """The destination `url` (emptied first) with `real` (a backup folder) as its newest backup and n - 1 copies of
    its manifest under older ids."""
    storage = open_storage(url, aws)
    for b in storage.list_backups():
        storage.delete_backup(b)
    text = (real / MANIFEST).read_text()
    for backup_id in _ids(n, real.name):
        storage.write_bytes(f"{backup_id}/{MANIFEST}", json.dumps({**json.loads(text), "backup_id": backup_id}).encode())
    for path in sorted(p for p in real.rglob("*") if p.is_file() and p.name != MANIFEST):
        storage.write_bytes(f"{real.name}/{path.relative_to(real)}", path.read_bytes())
    storage.write_bytes(f"{real.name}/{MANIFEST}", text.encode())  # last: the backup is complete from here


def measure(url: str, aws: str | None, target_conn_id: str, databases: list[str]) -> dict[str, float]:
    """Seconds of each operation on the filled destination `url` (prune last: it empties it)."""
    def timed(fn: Callable[[], Any]) -> float:
        t0 = time.monotonic()
        fn()
        return round(time.monotonic() - t0, 3)

    storage = open_storage(url, aws)
    return {
        "latest": timed(lambda: resolve_backup(f"{url}/latest", aws, "logical")),
        "form list": timed(lambda: newest_complete(storage, "logical", 10)),
        "restore preflight": timed(lambda: logical_restore.preflight({"target_conn_id": target_conn_id, "backup": f"{url}/latest",
                                                         "databases": databases, "force": True, "aws_conn_id": aws})),
        "prune (keep 7)": timed(lambda: logical_backup.prune({"destination": url, "keep": 7, "aws_conn_id": aws})),
    }


def s3_destination() -> tuple[str, str, Callable[[], None]]:
    """A moto S3 server on loopback with a bucket, as the connection `bench_s3`: (url, conn id, stop)."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ["AIRFLOW_CONN_BENCH_S3"] = json.dumps({"conn_type": "aws", "login": "bench", "password": "bench-secret",
                                                      "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}})
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                 aws_secret_access_key="bench-secret").create_bucket(Bucket="backups")
    return "s3://backups/scale", "bench_s3", server.stop


def run(counts: list[int], real: Path, work: Path, target_conn_id: str, databases: list[str]) -> dict[str, dict]:
    """Every operation at every count, in a folder and in S3; prints and returns the figures."""
    out: dict[str, dict] = {}
    s3_url, s3_conn, stop = s3_destination()
    try:
        for where, url, aws in (("file", f"file://{work / 'many'}", None), ("s3", s3_url, s3_conn)):
            for n in counts:
                if where == "file":
                    shutil.rmtree(work / "many", ignore_errors=True)
                t0 = time.monotonic()
                fill(url, aws, real, n)
                seconds = measure(url, aws, target_conn_id, databases)
                out[f"{where} {n}"] = {"backups": n, "fill_s": round(time.monotonic() - t0 - sum(seconds.values()), 1),
                                       "seconds": seconds, "ms_per_backup": {k: round(v * 1000 / n, 2) for k, v in seconds.items()}}
                print(f"  {where:<4} {n:>5} backups: " + ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items()), flush=True)
    finally:
        stop()
    for where in ("file", "s3"):
        for a, b in zip(counts, counts[1:], strict=False):
            x, y = out[f"{where} {a}"]["seconds"], out[f"{where} {b}"]["seconds"]
            growth = {k: round(y[k] / max(x[k], 1e-3), 2) for k in OPERATIONS}
            out[f"{where} {a}->{b}"] = {"size_ratio": round(b / a, 2), "growth": growth}
            print(f"  {where}: {b / a:.0f}x the backups: " + ", ".join(f"{k} {g:.1f}x" for k, g in growth.items()), flush=True)
    return out
