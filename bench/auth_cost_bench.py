"""What authenticating storage costs a physical backup and restore: the MAC work on its manifest, timed against the
same manifest written and read unsigned, and set against the recorded physical bench at 10 GB.

    .venv/bin/python bench/auth_cost_bench.py [--tables 8,20000] [--reads 4] [--repeat 20]

The MAC covers control files only (the manifest pins the data's sha256, computed while the stream is written, as
before), so its cost does not grow with the data: one signed write per backup, and one checked read per task of a
restore that opens the manifest (--reads: preflight, extract, prepare, verify). Each figure is the median of
--repeat runs in this process, on a file destination in a temporary folder.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "include"), str(ROOT / "tools")]

from lastline.manifest import PhysicalManifest, TableInfo, read_manifest, write_manifest  # noqa: E402
from lastline.storage import open_storage  # noqa: E402
from lastline_dev.keys import throwaway_storage_key  # noqa: E402

RECORD = ROOT / "bench" / "records" / "physical-10gb-20261127T095013Z.json"  # the 10 GB bench (4 rounds, cold)


def manifest(backup_id: str, tables: int) -> PhysicalManifest:
    """A physical manifest of `tables` tables, shaped like a real one (10 GB of data)."""
    return PhysicalManifest(
        backup_id=backup_id, source_conn_id="bench_source", server_version="10.11.14-MariaDB", tool_version="10.11.14",
        artifact="backup.xbstream.zst", compression="zstd", bytes=10 << 30, sha256="ab" * 32,
        started_at="2026-11-28T00:00:00Z", finished_at="2026-11-28T00:01:00Z", seconds=60.0, mb_per_s=170.0,
        parallel=2, datadir_bytes=11 << 30, binlog_file="mariadb-bin.000042", binlog_position=123456789,
        gtid="0-1-123456", tables=[TableInfo(f"tenant_{i // 25:05d}", f"table_{i % 25:02d}", "InnoDB", 1000 + i, (10 << 30) // tables)
                                   for i in range(tables)],
        prepare_options={"innodb_page_size": "16384", "innodb_log_file_size": "100663296",
                         "innodb_data_file_path": "ibdata1:12M:autoextend"})


def timed(repeat: int, fn) -> float:
    """The median seconds of `repeat` calls of fn(i)."""
    seconds = []
    for i in range(repeat):
        t0 = time.perf_counter()
        fn(i)
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds)


def measure(tables: int, reads: int, repeat: int, signed: bool) -> dict[str, float]:
    """Seconds to write one manifest and to read it `reads` times, signed with the key or not."""
    os.environ["LASTLINE_STORAGE_TRUSTED"] = "false" if signed else "true"
    key_conn = os.environ.pop("LASTLINE_STORAGE_KEY_CONN_ID", None) if not signed else None
    try:
        with tempfile.TemporaryDirectory(prefix="lastline-auth-bench-") as folder:
            storage = open_storage(f"file://{folder}")
            ids = [f"20261128T{i // 3600:02d}{i // 60 % 60:02d}{i % 60:02d}Z" for i in range(repeat)]
            made = [manifest(backup_id, tables) for backup_id in ids]
            write = timed(repeat, lambda i: write_manifest(storage, made[i]))
            read = timed(repeat, lambda i: [read_manifest(storage, ids[i], require=signed or False) for _ in range(reads)])
    finally:
        if key_conn:
            os.environ["LASTLINE_STORAGE_KEY_CONN_ID"] = key_conn
    return {"write": write, "reads": read}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tables", default="8,20000", help="manifest sizes (tables), comma list")
    p.add_argument("--reads", type=int, default=4, help="checked reads of the manifest per restore")
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args()
    throwaway_storage_key()
    logging.disable(logging.WARNING)  # a line per manifest read would bury the figures
    record = json.loads(RECORD.read_text())
    total = float(record["dag_span"]["backup"]) + float(record["dag_span"]["restore"])
    print(f"the physical DAGs at 10 GB ({RECORD.name}): backup + restore {total:.1f} s (median span of its rounds)")
    for tables in (int(t) for t in args.tables.split(",")):
        plain = measure(tables, args.reads, args.repeat, signed=False)
        mac = measure(tables, args.reads, args.repeat, signed=True)
        added = (mac["write"] - plain["write"]) + (mac["reads"] - plain["reads"])
        print(f"{tables:>6,} tables: write {plain['write'] * 1e3:7.1f} ms unsigned, {mac['write'] * 1e3:7.1f} ms signed; "
              f"{args.reads} reads {plain['reads'] * 1e3:7.1f} ms unchecked, {mac['reads'] * 1e3:7.1f} ms checked; "
              f"authentication adds {added * 1e3:6.1f} ms = {added / total * 100:.3f}% of the 10 GB backup + restore")
    return 0


if __name__ == "__main__":
    sys.exit(main())
