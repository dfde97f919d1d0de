"""Rows of the fault matrix that need a fault of their own making (the others are recorded by the
end-to-end tests that prove them; see conftest.FAULT_ROWS and `make faults`)."""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import pytest

from lastline import logical_backup as lb
from lastline.manifest import read_manifest
from lastline.storage import open_storage

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

ERRORS = [
    (500, "InternalError", "We encountered an internal error. Please try again."),
    (503, "ServiceUnavailable", "Please reduce your request rate."),
    (503, "SlowDown", "Please reduce your request rate."),
]


class ThrottlingProxy(ThreadingHTTPServer):
    """An HTTP proxy in front of the S3 emulator that, for a while, answers every other write (PUT/POST)
    with 500 InternalError, 503 ServiceUnavailable or 503 SlowDown in turn (`failures` of them in all),
    and forwards everything else."""

    daemon_threads = True

    def __init__(self, upstream: str, failures: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        u = urlparse(upstream)
        self.upstream = (u.hostname, u.port)
        self.failures, self.failed, self.writes = failures, 0, 0
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # quiet
        pass

    def _relay(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        proxy: ThrottlingProxy = self.server  # type: ignore[assignment]
        with proxy.lock:
            write = self.command in ("PUT", "POST")
            proxy.writes += write
            fail = write and proxy.writes % 2 == 1 and proxy.failed < proxy.failures
            if fail:
                status, code, message = ERRORS[proxy.failed % len(ERRORS)]
                proxy.failed += 1
        if fail:
            payload = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "proxy-connection")}
        conn.request(self.command, self.path, body=body or None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay


def test_s3_answering_500_503_and_slowdown_for_a_while(logical_source, s3_server, fault):
    proxy = ThrottlingProxy(s3_server, failures=9)
    os.environ["AIRFLOW_CONN_T_S3SLOW"] = json.dumps({
        "conn_type": "aws", "login": "testing", "password": "testing-secret",
        "extra": {"endpoint_url": proxy.url, "region_name": "us-east-1"},
    })
    plan = lb.preflight({"source_conn_id": "t_lsource", "destination": "s3://backups/throttled", "aws_conn_id": "t_s3slow",
                         "databases": ["sakila"], "chunk_rows": 2000})
    result = lb.dump(plan)
    assert proxy.failed == 9, "the proxy never throttled the backup"
    # read back around the proxy: every file the manifest lists is there, whole
    storage = open_storage("s3://backups/throttled", "t_s3")
    m = read_manifest(storage, plan["backup_id"], "logical")
    for f in m.files:
        data = storage.read_bytes(f"{m.backup_id}/{f.name}")
        assert (len(data), hashlib.sha256(data).hexdigest()) == (f.bytes, f.sha256), f.name
    proxy.shutdown()
    fault("S3 answering 500/503/SlowDown",
          f"nothing to act on: {proxy.failed} writes answered 500/503/SlowDown were retried by the S3 client; "
          f"the backup completed ({result['rows']:,} rows)",
          f"all {len(m.files)} files of the manifest read back around the proxy with their sha256 and size")


def test_target_datadir_full_mid_load():
    pytest.skip("not built yet: needs a target whose datadir sits on a small filesystem (a loop device or tmpfs)")
