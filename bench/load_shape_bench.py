"""The shape of a load's transactions on MariaDB: per-chunk commits (what lastline's ledger does) against
one transaction per table (MariaDB 10.6+ takes its bulk-insert path into an empty table when unique and
foreign-key checks are off: no undo log, indexes built by sort), with unique checks on or off, with the
secondary index held back and added after, or created with the table.

    .venv/bin/python bench/load_shape_bench.py [--rows-per-chunk 250000] [--chunks 4] [--repeat 2] [--modes "a;b"]

One sandbox (its own folder and port; stopped at the end) tuned as a restore target (buffer pool 2G,
redo 1G, flush_log_at_trx_commit=0, doublewrite off, no binlog); a sysbench-shaped table loaded from
TSV chunk files with LOAD DATA LOCAL INFILE, foreign-key checks off, each chunk with its ledger row as
lastline writes it. Modes run interleaved (A B C D, then D C B A); prints each mode's times, its best,
MB/s over the raw TSV bytes, and the server's CPU seconds.
"""
from __future__ import annotations

import argparse
import os
import random
import string
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from lastline_dev.sandbox import Instance  # noqa: E402

MODES = ["per-chunk, index after", "one trx, index after", "per-chunk, index during", "one trx, index during",
         "per-chunk, unique checks on, index after", "one trx, unique checks on, index after"]
TUNED = ("[mysqld]\ninnodb-buffer-pool-size=2G\ninnodb-log-file-size=1G\ninnodb-flush-log-at-trx-commit=0\n"
         "innodb-doublewrite=0\nskip-log-bin\ninnodb-autoinc-lock-mode=2\ninnodb-adaptive-hash-index=0\n")


def chunks(folder: Path, rows: int, n: int) -> list[Path]:
    """n TSV files of `rows` sysbench-shaped rows each (kept for the next run)."""
    files = []
    for f in range(n):
        path = folder / f"chunk-{rows}-{f}.tsv"
        files.append(path)
        if path.exists():
            continue
        rnd = random.Random(f)
        with open(path, "w") as fh:
            for i in range(f * rows + 1, (f + 1) * rows + 1):
                c = "-".join("".join(rnd.choices(string.digits, k=11)) for _ in range(10))
                pad = "-".join("".join(rnd.choices(string.digits, k=11)) for _ in range(5))
                fh.write(f"{i}\t{rnd.randint(1, 1_000_000)}\t{c}\t{pad}\n")
    return files


def run(server, files: list[Path], mode: str, pid: int) -> tuple[float, float]:
    """Load every file into a fresh table as `mode` says; seconds from the first LOAD to the index built, and
    the server's CPU seconds in that time."""
    conn = server.connect(local_infile=1)
    try:
        cur = conn.cursor()
        cur.execute("DROP DATABASE IF EXISTS shape")
        cur.execute("CREATE DATABASE shape")
        cur.execute("CREATE TABLE shape.t (id INT NOT NULL PRIMARY KEY, k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL, "
                    "pad CHAR(60) NOT NULL" + (", KEY k (k)" if "during" in mode else "") + ") ENGINE=InnoDB")
        cur.execute("CREATE TABLE shape.ledger (file VARCHAR(200) PRIMARY KEY) ENGINE=InnoDB")
        cur.execute("SET SESSION foreign_key_checks = 0, autocommit = 0, sql_log_bin = 0, unique_checks = "
                    + ("1" if "unique checks on" in mode else "0"))
        t0, cpu0 = time.monotonic(), server_cpu(pid)
        for path in files:
            cur.execute("INSERT INTO shape.ledger VALUES (%s)", (path.name,))
            cur.execute(f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE shape.t CHARACTER SET binary")
            if mode.startswith("per-chunk"):
                conn.commit()
        conn.commit()
        if "after" in mode:
            cur.execute("ALTER TABLE shape.t ADD KEY k (k)")
        return time.monotonic() - t0, server_cpu(pid) - cpu0
    finally:
        conn.close()


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the server process has used so far."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows-per-chunk", type=int, default=250_000)
    p.add_argument("--chunks", type=int, default=4)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--modes", default=";".join(MODES[:2] + MODES[4:]), help="a ;-separated list of: " + "; ".join(MODES))
    p.add_argument("--work", default=str(ROOT / "bench" / "results" / "load-shape"))
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    inst = Instance(work / "sandbox", "target")
    if not inst.exists():
        inst.create()
        (inst.conf_d / "tuned.cnf").write_text(TUNED)
        inst.stop()
    inst.start()
    try:
        files = chunks(work, args.rows_per_chunk, args.chunks)
        raw_mb = sum(f.stat().st_size for f in files) / 1e6
        modes = [m.strip() for m in args.modes.split(";")]
        if set(modes) - set(MODES):
            raise SystemExit(f"unknown mode(s) {sorted(set(modes) - set(MODES))}; known: {MODES}")
        times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
        for rep in range(args.repeat):
            for mode in modes if rep % 2 == 0 else modes[::-1]:
                times[mode].append(run(inst.server(), files, mode, inst.pid()))
        print(f"{args.chunks} chunks x {args.rows_per_chunk:,} rows, {raw_mb:.0f} MB of TSV:")
        for mode, runs in times.items():
            best = min(s for s, _ in runs)
            print(f"  {mode:<42} " + ", ".join(f"{s:6.2f} s (server CPU {c:5.1f} s)" for s, c in runs)
                  + f"   best {best:6.2f} s, {raw_mb / best:5.1f} MB/s")
    finally:
        inst.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
