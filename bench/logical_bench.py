"""Logical dump speed: lastline's dump against mydumper, mariadb-dump and a raw shell pipeline, one run.

    make bench-logical ARGS="--tables 8 --rows 1000000"
    (or: PYTHONPATH=include .venv/bin/python bench/logical_bench.py --tables 8 --rows 1000000)

One sandbox source holds `--tables` sysbench-shaped tables (id, k, c CHAR(120), pad; KEY k) of
`--rows` rows, generated in-server (same shape as `sysbench oltp prepare`, without a password on a
command line), with a buffer pool that holds them all. Every method then dumps the same data, same
machine, one after the other:

- lastline: the logical_backup DAG's dump task (preflight + dump, in-process), zstd and uncompressed;
- `mydumper -t N --rows R` (Debian's 0.10; SQL INSERT files), uncompressed and `-c` (gzip);
- `mariadb-dump --single-transaction` into one file;
- raw: `mariadb --quick -e 'SELECT *' | zstd` per table, N at a time: no snapshot across tables,
  no escaping guarantees: the practical speed limit of a client-side dump;
- `--sweep`: lastline at 100k / 250k / 1M rows per chunk (how DEFAULT_CHUNK_ROWS was chosen).

Prints seconds, output MB and each method's time over lastline's (zstd); writes a JSON record.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from lastline import logical_backup as lb
from lastline.sandbox import Instance
from lastline.servers import option_file

ROOT = Path(__file__).resolve().parents[1]


def sh(cmd: str) -> float:
    """Run a bash pipeline with pipefail; return seconds."""
    t0 = time.monotonic()
    subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def du(path: Path) -> float:
    """MB under path."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def dataset(work: Path, name: str, sizes: dict[str, int], reuse: bool, cnf: str) -> Instance:
    """A sandbox `name` holding sysbench-shaped tables `sbtest.<table>` of the given row counts, generated
    in-server with `cnf` as its extra my.cnf; kept between runs with `reuse`."""
    inst = Instance(work / "sandbox", name)
    marker = inst.dir / ("dataset-" + "-".join(f"{t}={n}" for t, n in sizes.items()))
    if reuse and marker.exists():
        inst.start()
        return inst
    if inst.exists():
        inst.destroy()
    inst.create()
    (inst.conf_d / "bench.cnf").write_text(cnf)
    inst.stop()
    inst.start()
    t0 = time.monotonic()
    inst.load_tables("sbtest", sizes)
    print(f"generated {sum(sizes.values()):,} rows in {len(sizes)} tables in {time.monotonic() - t0:.0f} s", flush=True)
    marker.touch()
    return inst


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def lastline_dump(out: Path, parallel: int, chunk_rows: int, compression: str, server_pid: int, rows: int) -> float:
    """The dump task's own time (preflight is read-only and not counted); prints where the CPU went,
    per row: the server building lines, this Python process, the compressors it ran."""
    shutil.rmtree(out, ignore_errors=True)
    plan = lb.preflight({
        "source_conn_id": "bench_lsrc", "destination": f"file://{out}", "databases": ["sbtest"],
        "parallel": parallel, "chunk_rows": chunk_rows, "compression": compression,
    })
    server0, me0, kids0 = cpu_seconds(server_pid), os.times(), os.times()
    t0 = time.monotonic()
    lb.dump(plan)
    seconds = time.monotonic() - t0
    me1 = os.times()
    us = 1e6 / max(rows, 1)
    print(f"    CPU per row: server {(cpu_seconds(server_pid) - server0) * us:.2f} us, python "
          f"{(me1.user + me1.system - me0.user - me0.system) * us:.2f} us, compressor "
          f"{(me1.children_user + me1.children_system - kids0.children_user - kids0.children_system) * us:.2f} us",
          flush=True)
    return seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--parallel", type=int, default=2, help="threads for every method (default 2: our cores)")
    p.add_argument("--chunk-rows", type=int, default=lb.DEFAULT_CHUNK_ROWS)
    p.add_argument("--sweep", action="store_true", help="also time lastline at 100k, 250k and 1M rows per chunk")
    p.add_argument("--reuse", action="store_true", help="keep the generated dataset from an earlier run")
    p.add_argument("--work", default=str(ROOT / "bench" / "results" / "logical"))
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    inst = dataset(work, "lsrc", {f"sbtest{i}": args.rows for i in range(1, args.tables + 1)}, args.reuse,
                   "[mysqld]\ninnodb-buffer-pool-size=3G\ninnodb-log-file-size=512M\n")
    os.environ["AIRFLOW_CONN_BENCH_LSRC"] = json.dumps(inst.connection("bench_lsrc"))
    server = inst.server()
    n, r = args.parallel, args.chunk_rows
    tables = [f"sbtest{i}" for i in range(1, args.tables + 1)]
    results: dict[str, dict] = {}

    def record(name: str, seconds: float, out: Path) -> None:
        results[name] = {"seconds": round(seconds, 2), "mb": round(du(out), 1)}
        print(f"  {name:<42} {seconds:7.1f} s  {results[name]['mb']:9.1f} MB", flush=True)

    print(f"dumping sbtest ({args.tables} x {args.rows:,} rows), {n} threads, {r:,} rows per chunk", flush=True)
    with option_file(server, ("client", "mydumper", "mariadb-dump")) as opt:
        out = work / "mydumper"
        shutil.rmtree(out, ignore_errors=True)
        record(f"mydumper -t {n} --rows {r}", sh(f"mydumper --defaults-file={opt} -B sbtest -t {n} --rows {r} -o {out}"), out)
        shutil.rmtree(out, ignore_errors=True)
        record(f"mydumper -t {n} --rows {r} -c (gzip)", sh(f"mydumper --defaults-file={opt} -B sbtest -t {n} --rows {r} -c -o {out}"), out)
        out = work / "mariadb-dump"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        record("mariadb-dump --single-transaction", sh(f"mariadb-dump --defaults-extra-file={opt} --single-transaction --databases sbtest > {out}/dump.sql"), out)
        out = work / "raw"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        cmd = f"mariadb --defaults-extra-file={opt} --quick -N -B -e \"SELECT * FROM sbtest.$0\" | zstd -q -T1 > {out}/$0.tsv.zst"
        record(f"raw: mariadb -e SELECT | zstd, {n} at a time",
               sh(f"printf '%s\\n' {' '.join(tables)} | xargs -P {n} -I{{}} bash -o pipefail -c '{cmd}' {{}}"), out)
    out = work / "lastline"
    record("lastline dump, zstd", lastline_dump(out, n, r, "zstd", inst.pid(), args.tables * args.rows), out)
    record("lastline dump, uncompressed", lastline_dump(out, n, r, "none", inst.pid(), args.tables * args.rows), out)
    if args.sweep:
        for rows in (100_000, 250_000, 1_000_000):
            record(f"lastline dump, zstd, {rows:,} rows per chunk", lastline_dump(out, n, rows, "zstd", inst.pid(), args.tables * args.rows), out)
    shutil.rmtree(out, ignore_errors=True)

    base = results["lastline dump, zstd"]["seconds"]
    print("\ntime over lastline's (zstd); above 1.00 means lastline is faster:")
    for name, res in results.items():
        res["ratio_to_lastline"] = round(res["seconds"] / base, 2)
        print(f"  {name:<42} {res['ratio_to_lastline']:5.2f}x")
    record_path = work / f"logical-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.json"
    record_path.write_text(json.dumps({"tables": args.tables, "rows": args.rows, "parallel": n, "chunk_rows": r, "results": results}, indent=1))
    print(f"\nrecorded in {record_path}")
    inst.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
