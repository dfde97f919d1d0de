"""The cost of the staging refresh's PII guard (staging.pii.scan) by table size: it must grow linearly with
the bytes it reads and stop growing at its bound (SAMPLE_BYTES per table), whatever the table's size.

    .venv/bin/python bench/pii_scan_bench.py [--rows 37500,75000,150000,300000,600000] [--chunk-rows 250000,10000]

One sandbox (its own folder and port; destroyed at the end), one table per size generated in-server (an
email VARCHAR, a free-text TEXT with an email in every 1000th row only, 48 random bytes in a BLOB, a phone
number in a VARBINARY, a DECIMAL, a DATETIME, a TEXT with an email in the last 2% of rows only), backed up
once per chunk size with lastline's logical
backup; then each table scanned three times. Prints per table: rows, chunks, uncompressed MB, what the
sample read (chunks, MB, rows searched, rows decoded), the best of three scan times, and whether the
sparse and the late emails were found.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from lastline_dev.sandbox import Instance  # noqa: E402


def load(inst: Instance, sizes: list[int]) -> None:
    conn = inst.server().connect()
    cur = conn.cursor()
    cur.execute("CREATE DATABASE pii")
    cur.execute("USE pii")
    for n in sizes:
        cur.execute(f"CREATE TABLE pii.t{n} (id BIGINT PRIMARY KEY, email VARCHAR(120), note TEXT, data BLOB, "
                    "reach VARBINARY(40), amount DECIMAL(10,2), created DATETIME, late TEXT) DEFAULT CHARSET=utf8mb4")
        for lo in range(1, n + 1, 200_000):
            hi = min(n, lo + 199_999)
            cur.execute(f"INSERT INTO pii.t{n} SELECT seq, CONCAT('user', seq, '@example.com'), IF(seq % 1000 = 0, "
                        "CONCAT('forward to late.', seq, '@mail.example.net'), CONCAT('note ', seq, ': called back, all fine')), "
                        "UNHEX(CONCAT(MD5(seq), SHA2(seq, 256))), CONCAT('+44 20 7946 ', LPAD(seq % 10000, 4, '0')), "
                        f"seq / 100, '2024-01-01 00:00:00', IF(seq > {n} * 0.98, CONCAT('new.', seq, '@mail.example.net'), "
                        f"'none') FROM seq_{lo}_to_{hi}")
            conn.commit()
    conn.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", default="37500,75000,150000,300000,600000")
    p.add_argument("--chunk-rows", default="250000,10000")
    args = p.parse_args()
    sizes = [int(n) for n in args.rows.split(",")]
    work = Path(tempfile.mkdtemp(prefix="pii-bench-"))
    os.environ["LASTLINE_BACKUP_ROOTS"] = f"file://{work}"
    inst = Instance(work / "sandbox", "piisrc")
    inst.create()
    try:
        os.environ["AIRFLOW_CONN_BENCH_PII"] = json.dumps(inst.connection("bench_pii"))
        load(inst, sizes)
        from lastline.logical.backup import stages as logical_backup
        from lastline.manifest import read_manifest, resolve_backup
        from lastline.staging import pii
        from lastline.staging import sampling as sampling

        print(f"SAMPLE_CHUNKS={sampling.SAMPLE_CHUNKS} SAMPLE_BYTES={sampling.SAMPLE_BYTES >> 20} MiB STREAM_BYTES={sampling.STREAM_BYTES >> 20} "
              f"MiB SAMPLE_ROWS={sampling.SAMPLE_ROWS} WINDOWS={sampling.WINDOWS}")
        print(f"{'rows':>8} {'chunk_rows':>10} {'chunks':>6} {'raw MB':>7} | {'read':>4} {'MB read':>7} {'searched':>8} "
              f"{'decoded':>7} | {'best s':>6}  found: every 1000th row | last 2% of rows")
        for chunk_rows in (int(c) for c in args.chunk_rows.split(",")):
            dest = work / f"backups-{chunk_rows}"
            plan = logical_backup.preflight({"source_conn_id": "bench_pii", "destination": f"file://{dest}", "databases": ["pii"],
                                 "parallel": 2, "chunk_rows": chunk_rows})
            logical_backup.dump(plan)
            storage, backup_id = resolve_backup(f"file://{dest}/{plan.backup_id}", None, "logical")
            manifest = read_manifest(storage, backup_id, "logical")
            for t in sorted(manifest.tables, key=lambda t: t.rows):
                times = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    s = sampling.sample(storage, manifest, t)
                    findings = pii.column_findings(t, s)
                    times.append(time.perf_counter() - t0)
                found = {f.column: f.why[0].split(" (e.g.")[0] for f in findings}
                print(f"{t.rows:>8} {chunk_rows:>10} {len(t.chunks):>6} {t.raw_bytes / 1e6:>7.1f} | {s.chunks:>4} "
                      f"{s.bytes / 1e6:>7.1f} {s.rows_read:>8} {s.rows_decoded:>7} | {min(times):>6.2f}  "
                      f"{found.get('note', 'NO')} | {found.get('late', 'NO')}")
        sys.stdout.flush()
    finally:
        inst.destroy()
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
