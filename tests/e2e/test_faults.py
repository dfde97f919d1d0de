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

from lastline.logical.backup import stages as logical_backup
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
    plan = logical_backup.preflight({"source_conn_id": "t_lsource", "destination": "s3://backups/throttled", "aws_conn_id": "t_s3slow",
                         "databases": ["store"], "chunk_rows": 2000})
    result = logical_backup.dump(plan)
    assert proxy.failed == 9, "the proxy never throttled the backup"
    # read back around the proxy: every file the manifest lists is there, whole
    storage = open_storage("s3://backups/throttled", "t_s3")
    m = read_manifest(storage, plan.backup_id, "logical")
    for f in m.files:
        data = storage.read_bytes(f"{m.backup_id}/{f.name}")
        assert (len(data), hashlib.sha256(data).hexdigest()) == (f.bytes, f.sha256), f.name
    proxy.shutdown()
    fault("S3 answering 500/503/SlowDown",
          f"nothing to act on: {proxy.failed} writes answered 500/503/SlowDown were retried by the S3 client; "
          f"the backup completed ({result.rows:,} rows)",
          f"all {len(m.files)} files of the manifest read back around the proxy with their sha256 and size")


def test_target_datadir_full_mid_load(sandbox_root, logical_source, tmp_path, fault):
    """The target's datadir sits on a 400 MB tmpfs: preflight finds room, then another process fills the
    filesystem after the first chunk is in. The load fails naming the table; once space is freed, a re-run
    resumes and the target equals the source."""
    import subprocess
    import time

    from conftest import set_conn
    from e2e.logical_restore.test_logical_restore import _wait_for_load
    from lastline.logical.restore import stages as logical_restore
    from lastline_dev.compare import table_checksums
    from lastline_dev.sandbox import Instance

    inst = Instance(sandbox_root, "smalldisk")
    inst.datadir.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400m", "tmpfs", str(inst.datadir)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root or CAP_SYS_ADMIN)")
    filler = inst.datadir / "filler"
    try:
        inst.conf_d.mkdir(parents=True, exist_ok=True)
        (inst.conf_d / "small.cnf").write_text(
            "[mysqld]\ninnodb-log-file-size=16M\ninnodb-buffer-pool-size=64M\ninnodb-flush-method=fsync\n")
        inst.create()
        set_conn("t_smalldisk", inst)
        logical_source.load_tables("filldb", {"t": 600_000})
        dest = tmp_path / "b"
        logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["filldb"],
                              "chunk_rows": 100_000}))
        conf = {"target_conn_id": "t_smalldisk", "backup": f"file://{dest}/latest", "databases": ["filldb"], "parallel": 1,
                "tune": False}
        plan = logical_restore.preflight(conf)
        logical_restore.create_schema(plan)
        units = logical_restore.plan_load(plan)

        def fill() -> None:
            _wait_for_load(inst.server(), "filldb", min_ledger=1)
            free = os.statvfs(inst.datadir).f_bavail * os.statvfs(inst.datadir).f_frsize
            with open(filler, "wb") as fh:  # another process takes the space that was free
                fh.truncate(0)
                block = b"\0" * (1 << 20)
                for _ in range(max(0, free - (2 << 20)) >> 20):
                    try:
                        fh.write(block)
                    except OSError:
                        break

        th = threading.Thread(target=fill, daemon=True)
        th.start()
        t0 = time.monotonic()
        with pytest.raises(Exception) as err:
            for unit in units:
                logical_restore.load(plan, unit)
        th.join()
        assert time.monotonic() - t0 < 120
        seen = str(err.value)
        assert "filldb.t" in seen and "datadir filesystem is full" in seen, seen
        filler.unlink()  # space is back
        assert inst.server().answers()
        plan = logical_restore.preflight(conf)
        assert plan.resume
        logical_restore.create_schema(plan)
        for u in logical_restore.plan_load(plan):
            logical_restore.load(plan, u)
        logical_restore.finalize(plan)
        logical_restore.verify(plan, None)
        src = {k: v for k, v in table_checksums(logical_source.server()).items() if k.startswith("filldb.")}
        assert src and {k: v for k, v in table_checksums(inst.server()).items() if k.startswith("filldb.")} == src
        fault("target datadir full mid-load", seen.split("\n")[0],
              "after space was freed the re-run resumed from the ledger: CHECKSUM TABLE equal to the source's")
    finally:
        if filler.exists():
            filler.unlink()
        inst.stop()
        subprocess.run(["umount", str(inst.datadir)], check=False)
        inst.destroy()
        logical_source.server().query("DROP DATABASE IF EXISTS filldb")
