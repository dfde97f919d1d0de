"""Logical dump speed: lastline's dump against mydumper, mariadb-dump and a raw shell pipeline, one run.

    make bench-logical ARGS="--tables 8 --rows 1000000"
    (or: .venv/bin/python bench/logical_bench.py --tables 8 --rows 1000000)

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

Then a big-value dataset in the same server (`docs.d`: `--docs` documents of ~200 KB of random
hex lines with ~46k escapes each, and four rows with values of 16 MB and more: text of short lines
and random blobs, loaded with LOAD DATA under the server's default 16 MiB packet), dumped by lastline, `mariadb-dump` and
mydumper. And one value at two sizes, to show how escaping grows: the old in-server REPLACE at 30k
and 60k newlines, lastline's dump worker at 1.5M and 3M.

Prints seconds, output MB and each method's time over lastline's (zstd), the two ratios the logical
dump is held to (mydumper uncompressed over lastline compressed on the sysbench tables: at least 1;
lastline over mariadb-dump on the big values: at most 2), and writes a JSON record.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from lastline.core.option_files import option_file, option_file_text
from lastline.logical.backup import stages as logical_backup
from lastline.logical.backup.parts import PartWriter
from lastline.logical.backup.worker import DumpWorker
from lastline.storage import open_storage
from lastline_dev.sandbox import Instance

ROOT = Path(__file__).resolve().parents[1]


def settle() -> None:
    """Write back what earlier methods left dirty, untimed: no method pays for another's output."""
    os.sync()


def sh(cmd: str) -> float:
    """Run a bash pipeline with pipefail; return seconds."""
    settle()
    t0 = time.monotonic()
    subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


# the nightly schedules off, for every bench that runs the backup DAGs: a bench triggers them, which unpauses them, and
# a scheduled run of the last interval would then start beside the measured one (catchup is off, but the last
# interval still runs); `dags test` also serialises the DAGs, schedules included, into the metadata DB a later
# scheduler starts on
SCHEDULES_OFF = {"LASTLINE_LOGICAL_BACKUP_SCHEDULE": "none", "LASTLINE_PHYSICAL_BACKUP_SCHEDULE": "none"}


def du(path: Path) -> float:
    """MB of the files under path (a live datadir's too: a file that vanishes meanwhile is left out)."""
    total = 0
    for f in path.rglob("*"):
        with contextlib.suppress(FileNotFoundError):
            total += f.stat().st_size if f.is_file() else 0
    return total / 1e6


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


def lastline_dump(out: Path, parallel: int, chunk_rows: int, compression: str, server_pid: int, rows: int,
                  databases: tuple[str, ...] = ("sbtest",)) -> float:
    """The dump task's own time (preflight is read-only and not counted); prints where the CPU went,
    per row: the server (reading rows, the row hash), this Python process (moving compressed bytes), the
    child processes (dump workers escaping and compressing zstd; pigz when asked for). lastline fsyncs
    every chunk file; mydumper and mariadb-dump do not."""
    shutil.rmtree(out, ignore_errors=True)
    plan = logical_backup.preflight({
        "source_conn_id": "bench_lsrc", "destination": f"file://{out}", "databases": list(databases),
        "parallel": parallel, "chunk_rows": chunk_rows, "compression": compression,
    })
    settle()
    server0, me0 = cpu_seconds(server_pid), os.times()
    t0 = time.monotonic()
    logical_backup.dump(plan)
    seconds = time.monotonic() - t0
    me1 = os.times()
    us = 1e6 / max(rows, 1)
    print(f"    CPU per row: server {(cpu_seconds(server_pid) - server0) * us:.2f} us, python "
          f"{(me1.user + me1.system - me0.user - me0.system) * us:.2f} us, workers + compressors "
          f"{(me1.children_user + me1.children_system - me0.children_user - me0.children_system) * us:.2f} us",
          flush=True)
    return seconds


HASH_FORMS = {
    "plain SELECT (no hash)": "",
    "the row hash lastline uses (CRC32 of per-column tokens)": "row_hash",
    "CRC32 of raw values joined by x'00' (ambiguous)": "CRC32(CONCAT_WS(x'00', id, k, c, pad))",
    "CRC32 of raw values with their lengths": "CRC32(CONCAT_WS(',', id, k, LENGTH(c), c, LENGTH(pad), pad))",
}


def hash_costs(inst: Instance) -> dict[str, float]:
    """Server CPU seconds per 1M rows of sbtest1 for each row-hash form (why the dump's hash is what it is)."""
    from lastline.logical.format import chunking, dialect

    server, pid = inst.server(), inst.pid()
    conn = server.connect()
    try:
        plan = next(p for p in chunking.table_plans(conn.cursor(), ["sbtest"]) if p.name == "sbtest1")
        out = {}
        for name, expr in HASH_FORMS.items():
            expr = dialect.row_hash_sql(plan.columns) if expr == "row_hash" else expr
            cpu0 = cpu_seconds(pid)
            conn.query(f"SELECT id, k, c, pad{', ' + expr if expr else ''} FROM sbtest.sbtest1")
            result, rows = conn.use_result(), 0
            while batch := result.fetch_row(maxrows=10_000):
                rows += len(batch)
            out[name] = (cpu_seconds(pid) - cpu0) * 1e6 / rows
        return out
    finally:
        conn.close()


def escaped(value: bytes) -> bytes:
    """The dialect's escaping (for the LOAD DATA file that builds the dataset)."""
    return value.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n")


def docs_dataset(inst: Instance, work: Path, docs: int) -> int:
    """`docs.d`: `docs` documents of ~200 KB with ~25k newlines (and tabs, backslashes) each, plus four
    values of 16 MB and more; written with LOAD DATA (an INSERT would not fit the 16 MiB packet).
    Returns the rows; kept between runs (the table is rebuilt only when `docs` changes)."""
    marker = inst.dir / f"docs-random-{docs}"
    if marker.exists():
        return docs + 4
    path = work / "docs.tsv"
    rnd = random.Random(20261122)  # random content: zstd gets no easy ride, and every run dumps the same data

    def text(size: int) -> bytes:
        """Lines of 8 random hex digits, a TAB, a backslash: 3 escapes per 13 bytes."""
        return b"".join(rnd.randbytes(4).hex().encode() + b"\t\\x\n" for _ in range(size // 13 + 1))[:size]

    with open(path, "wb") as fh:
        for i in range(1, docs + 1):
            fh.write(b"%d\t%s\t\\N\n" % (i, escaped(text(200_000))))  # ~46k escapes each
        big_text = text(16_000_000)  # 16.0 MB (under the packet), ~3.7M escapes: escaped 19.7 MB
        blob = rnd.randbytes(18 * 1024 * 1024)  # 18 MiB of random bytes (every byte value)
        for i, (t, b) in enumerate([(big_text, blob), (big_text[::-1], blob[::-1]), (None, blob), (big_text, None)]):
            fields = [b"\\N" if v is None else escaped(v) for v in (t, b)]
            fh.write(b"%d\t%s\t%s\n" % (docs + 1 + i, fields[0], fields[1]))
    conn = inst.server().connect(local_infile=1)
    cur = conn.cursor()
    cur.execute("DROP DATABASE IF EXISTS docs")
    cur.execute("CREATE DATABASE docs")
    cur.execute("CREATE TABLE docs.d (id INT PRIMARY KEY, body LONGTEXT NULL, data LONGBLOB NULL) ENGINE=InnoDB")
    cur.execute(f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE docs.d CHARACTER SET binary "
                "FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n'")
    conn.commit()
    conn.close()
    path.unlink()
    for old in inst.dir.glob("docs-*"):
        old.unlink()
    marker.touch()
    return docs + 4


def escape_scaling(inst: Instance, work: Path) -> dict:
    """One value at two sizes: the old in-server REPLACE (30k, 60k newlines); the dump worker (same, and 1.5M, 3M)."""
    server = inst.server()
    conn = server.connect()
    cur = conn.cursor()
    cur.execute("CREATE TABLE IF NOT EXISTS docs.scale (id INT PRIMARY KEY, body LONGTEXT NOT NULL)")
    cur.execute("REPLACE INTO docs.scale VALUES (1, REPEAT('abc\\n', 30000)), (2, REPEAT('abc\\n', 60000)), "
                "(3, REPEAT('abc\\n', 1500000)), (4, REPEAT('abc\\n', 3000000))")
    conn.commit()
    conn.close()
    old = r"REPLACE(REPLACE(REPLACE(CAST(body AS BINARY), '\\', '\\\\'), '\t', '\\t'), '\n', '\\n')"
    out: dict[str, float] = {}
    conn = server.connect()
    try:
        cur = conn.cursor()
        for i, n in ((1, 30_000), (2, 60_000)):
            t0 = time.monotonic()
            cur.execute(f"SELECT LENGTH({old}) FROM docs.scale WHERE id = {i}")
            assert cur.fetchone()[0] == n * 5  # every newline escaped
            out[f"server REPLACE, {n:,} newlines"] = time.monotonic() - t0
    finally:
        conn.close()
    storage = open_storage(f"file://{work / 'scale'}")
    worker = DumpWorker(server)
    try:
        for i, n in ((1, 30_000), (2, 60_000), (3, 1_500_000), (4, 3_000_000)):
            t0 = time.monotonic()
            worker.dump(f"SELECT body, 0 FROM docs.scale WHERE id = {i}", 10,
                        lambda p: ("v.tsv", PartWriter(storage, "v.tsv", "none")))
            out[f"lastline worker, {n:,} newlines"] = time.monotonic() - t0
    finally:
        worker.close()
        shutil.rmtree(work / "scale", ignore_errors=True)
        server.query("DROP TABLE docs.scale")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--parallel", type=int, default=2, help="threads for every method (default 2: our cores)")
    p.add_argument("--chunk-rows", type=int, default=logical_backup.DEFAULT_CHUNK_ROWS)
    p.add_argument("--sweep", action="store_true", help="also time lastline at 100k, 250k and 1M rows per chunk")
    p.add_argument("--mydumper1", default=os.environ.get("LASTLINE_MYDUMPER1_DIR"),
                   help="a folder with mydumper 1.0 built from its source (github.com/mydumper/mydumper, tag v1.0.1-3; not "
                        "in Debian): times it in its fastest format (--format=LOAD_DATA, uncompressed) too")
    p.add_argument("--reuse", action="store_true", help="keep the generated dataset from an earlier run")
    p.add_argument("--docs", type=int, default=200, help="~200 KB documents in the big-value dataset")
    p.add_argument("--design", action="store_true",
                   help="also measure the design's choices: row-hash forms, zstd in the worker vs a zstd process per part")
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

    t0 = time.monotonic()
    for t in tables:  # every method then reads from memory (after --reuse the server starts cold)
        server.query(f"SELECT SUM(LENGTH(c) + LENGTH(pad) + k) FROM sbtest.{t}")
    print(f"buffer pool warmed in {time.monotonic() - t0:.1f} s", flush=True)
    print(f"dumping sbtest ({args.tables} x {args.rows:,} rows), {n} threads, {r:,} rows per chunk", flush=True)
    with option_file(server, ("client", "mydumper", "mariadb-dump")) as opt:
        out = work / "mydumper"
        shutil.rmtree(out, ignore_errors=True)
        record(f"mydumper -t {n} --rows {r}", sh(f"mydumper --defaults-file={opt} -B sbtest -t {n} --rows {r} -o {out}"), out)
        shutil.rmtree(out, ignore_errors=True)
        record(f"mydumper -t {n} --rows {r} -c (gzip)", sh(f"mydumper --defaults-file={opt} -B sbtest -t {n} --rows {r} -c -o {out}"), out)
        one = Path(args.mydumper1) if args.mydumper1 else None
        if one and (one / "mydumper").exists():
            s1 = work / "mydumper1-source.cnf"  # 1.0 refuses the `protocol` line of the shared option files
            s1.write_text("".join(line + "\n" for line in option_file_text(server, ("mydumper",)).splitlines()
                                  if not line.startswith("protocol=")))
            s1.chmod(0o600)
            out = work / "mydumper1"
            shutil.rmtree(out, ignore_errors=True)
            record(f"mydumper 1.0 -t {n} --rows {r} --format=LOAD_DATA",
                   sh(f"{one / 'mydumper'} --defaults-file={s1} -B sbtest -t {n} --rows {r} --format=LOAD_DATA -o {out}"), out)
            shutil.rmtree(out, ignore_errors=True)
            s1.unlink()
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
    if args.design:
        from lastline.logical.backup import parts
        from lastline.logical.backup import worker as tsvdump

        in_worker = tsvdump.IN_WORKER
        tsvdump.IN_WORKER = parts.IN_WORKER = frozenset()  # the former way: a zstd process per part, through a pipe
        try:
            record("lastline dump, zstd in a process per part", lastline_dump(out, n, r, "zstd", inst.pid(), args.tables * args.rows), out)
        finally:
            tsvdump.IN_WORKER = parts.IN_WORKER = in_worker
    if args.sweep:
        for rows in (100_000, 250_000, 1_000_000):
            record(f"lastline dump, zstd, {rows:,} rows per chunk", lastline_dump(out, n, rows, "zstd", inst.pid(), args.tables * args.rows), out)
    shutil.rmtree(out, ignore_errors=True)

    base = results["lastline dump, zstd"]["seconds"]
    print("\ntime over lastline's (zstd); above 1.00 means lastline is faster:")
    for name, res in results.items():
        res["ratio_to_lastline"] = round(res["seconds"] / base, 2)
        print(f"  {name:<42} {res['ratio_to_lastline']:5.2f}x")

    rows = docs_dataset(inst, work, args.docs)
    server.query("SELECT SUM(LENGTH(body)) + SUM(LENGTH(data)) FROM docs.d")  # warm, as above
    big: dict[str, dict] = {}

    def record_big(name: str, seconds: float, out: Path) -> None:
        big[name] = {"seconds": round(seconds, 2), "mb": round(du(out), 1)}
        print(f"  {name:<42} {seconds:7.1f} s  {big[name]['mb']:9.1f} MB", flush=True)

    print(f"\ndumping docs.d ({args.docs} documents of ~200 KB, ~46k escapes each; 4 rows with values of 16-18 MiB), {n} threads", flush=True)
    with option_file(server, ("client", "mydumper", "mariadb-dump")) as opt:
        out = work / "mariadb-dump-docs"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        record_big("mariadb-dump --single-transaction", sh(
            f"mariadb-dump --defaults-extra-file={opt} --max-allowed-packet=1G --single-transaction --databases docs "
            f"> {out}/dump.sql"), out)
        out = work / "mydumper-docs"
        shutil.rmtree(out, ignore_errors=True)
        record_big(f"mydumper -t {n} (uncompressed)", sh(f"mydumper --defaults-file={opt} -B docs -t {n} -o {out}"), out)
        out = work / "lastline-docs"
        record_big("lastline dump, zstd", lastline_dump(out, n, r, "zstd", inst.pid(), rows, ("docs",)), out)
        shutil.rmtree(out, ignore_errors=True)
        scaling = escape_scaling(inst, work)
    print("\none value at two sizes (2x the escapes should cost 2x the time):")
    for name, seconds in scaling.items():
        print(f"  {name:<42} {seconds:7.2f} s")

    ratio_rows = results[f"mydumper -t {n} --rows {r}"]["seconds"] / base
    ratio_docs = big["lastline dump, zstd"]["seconds"] / big["mariadb-dump --single-transaction"]["seconds"]
    if args.design:
        costs = hash_costs(inst)
        print("\nserver CPU per 1M rows of sbtest1 (us per row), by row-hash form:")
        for name, us in costs.items():
            print(f"  {name:<58} {us:5.2f}")
        results["hash_costs_us_per_row"] = {k: round(v, 3) for k, v in costs.items()}  # type: ignore[assignment]
    print("\nthe logical dump's goals:")
    print(f"  mydumper -t {n} uncompressed / lastline zstd, sysbench rows:  {ratio_rows:5.2f}x  (goal: at least 1.00)")
    print(f"  lastline zstd / mariadb-dump, big values:                 {ratio_docs:5.2f}x  (goal: at most 2.00)")
    one_name = f"mydumper 1.0 -t {n} --rows {r} --format=LOAD_DATA"
    if one_name in results:
        ratio_one = results[one_name]["seconds"] / base
        print(f"  mydumper 1.0 LOAD_DATA uncompressed / lastline zstd:      {ratio_one:5.2f}x  (goal: at least 1.00)")
        results["goals_mydumper1"] = {"mydumper1_over_lastline_rows": round(ratio_one, 2)}  # type: ignore[assignment]
    results["docs"] = big  # type: ignore[assignment]
    results["scaling"] = {k: round(v, 3) for k, v in scaling.items()}  # type: ignore[assignment]
    results["goals"] = {"mydumper_over_lastline_rows": round(ratio_rows, 2), "lastline_over_mariadb_dump_docs": round(ratio_docs, 2)}  # type: ignore[assignment]
    record_path = work / f"logical-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    record_path.write_text(json.dumps({"tables": args.tables, "rows": args.rows, "parallel": n, "chunk_rows": r, "results": results}, indent=1))
    print(f"\nrecorded in {record_path}")
    inst.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
