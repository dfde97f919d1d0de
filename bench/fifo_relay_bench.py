"""How a chunk reaches LOAD DATA's FIFO: decompressed bytes relayed through Python (the load before
2026-11-23) against the decompressor writing the FIFO itself (logical.format.chunk_files.write_chunk), two lanes
at once as the restore runs them, interleaved (A B, B A, ...).

    .venv/bin/python bench/fifo_relay_bench.py [--chunks 8] [--rows-per-chunk 250000] [--repeat 2]

Prints each mode's wall times, and the CPU seconds of this Python process (the relay's cost) and of its
children (zstd), against the raw TSV bytes loaded. One sandbox, tuned as a restore target, stopped at the end.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from load_shape_bench import TUNED, chunks  # noqa: E402

from lastline_dev.sandbox import Instance  # noqa: E402

MODES = ("relay through Python", "decompressor writes the FIFO")


def _feed(path: Path, proc: subprocess.Popen, digest) -> None:
    with open(path, "rb") as fh:
        while data := fh.read(1 << 16):
            digest.update(data)
            proc.stdin.write(data)
    proc.stdin.close()


def pump(path: Path, fifo: str, mode: str) -> None:
    """One chunk into the FIFO, as `mode` says (sha256 of the compressed bytes on the way, as the load does)."""
    digest = hashlib.sha256()
    with open(fifo, "wb") as out:
        if mode == MODES[0]:
            proc = subprocess.Popen(["zstd", "-q", "-dc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            feeder = threading.Thread(target=_feed, args=(path, proc, digest))
            feeder.start()
            while data := proc.stdout.read(1 << 16):
                out.write(data)
            feeder.join()
        else:
            proc = subprocess.Popen(["zstd", "-q", "-dc"], stdin=subprocess.PIPE, stdout=out)
            _feed(path, proc, digest)
        proc.wait()


def lane(server, files: list[Path], mode: str) -> None:
    conn = server.connect(local_infile=1)
    cur = conn.cursor()
    cur.execute("SET SESSION foreign_key_checks = 0, autocommit = 0, sql_log_bin = 0")  # as lastline's loaders
    for path in files:
        with tempfile.TemporaryDirectory() as d:
            fifo = os.path.join(d, "chunk")
            os.mkfifo(fifo)
            th = threading.Thread(target=pump, args=(path, fifo, mode))
            th.start()
            cur.execute("LOAD DATA LOCAL INFILE %s INTO TABLE relay.t CHARACTER SET binary", (fifo,))
            th.join()
            conn.commit()
    conn.close()


def run(server, files: list[Path], mode: str) -> tuple[float, float, float]:
    server.query("DROP DATABASE IF EXISTS relay")
    server.query("CREATE DATABASE relay")
    server.query("CREATE TABLE relay.t (id INT NOT NULL PRIMARY KEY, k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL, "
                 "pad CHAR(60) NOT NULL) ENGINE=InnoDB")
    t0, c0 = time.monotonic(), os.times()
    lanes = [threading.Thread(target=lane, args=(server, files[i::2], mode)) for i in range(2)]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()
    c1 = os.times()
    return (time.monotonic() - t0, c1.user - c0.user + c1.system - c0.system,
            c1.children_user - c0.children_user + c1.children_system - c0.children_system)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows-per-chunk", type=int, default=250_000)
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--work", default=str(ROOT / "bench" / "results" / "fifo-relay"))
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    raw = chunks(work, args.rows_per_chunk, args.chunks)
    packed = []
    for f in raw:
        z = f.with_suffix(".tsv.zst")
        if not z.exists():
            subprocess.run(["zstd", "-q", "-1", "-f", str(f), "-o", str(z)], check=True)
        packed.append(z)
    inst = Instance(work / "sandbox", "target")
    if not inst.exists():
        inst.create()
        (inst.conf_d / "tuned.cnf").write_text(TUNED)
        inst.stop()
    inst.start()
    try:
        times: dict[str, list[tuple[float, float, float]]] = {m: [] for m in MODES}
        for rep in range(args.repeat * 2):
            for mode in MODES if rep % 2 == 0 else MODES[::-1]:
                times[mode].append(run(inst.server(), packed, mode))
        mb = sum(f.stat().st_size for f in raw) / 1e6
        print(f"{args.chunks} chunks x {args.rows_per_chunk:,} rows, {mb:.0f} MB of TSV, 2 lanes:")
        for mode, rows in times.items():
            n = len(rows)
            print(f"  {mode:<30} wall " + ", ".join(f"{r[0]:.2f}" for r in rows)
                  + f" s (mean {sum(r[0] for r in rows) / n:.2f}); Python CPU {sum(r[1] for r in rows) / n:.2f} s, "
                  f"zstd CPU {sum(r[2] for r in rows) / n:.2f} s (means)")
    finally:
        inst.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
