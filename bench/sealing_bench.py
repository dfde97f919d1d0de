"""What sealing costs: storage.sealing's seal and open, each cipher, against a plain copy and against zstd of the
same bytes, on sysbench-like rows (the `sbtest` table's TSV: id, k, 120-character c, 60-character pad).

    .venv/bin/python bench/sealing_bench.py [--mb 512] [--chunk-mib 4]

One run, one process, one core each (seal and open are single-threaded Python over OpenSSL; zstd runs -T1). Every
stage reads a file in the page cache and writes to /dev/null, so it is the CPU's cost that is timed, not a disk's.
Besides the raw rows it seals zstd's output, as a backup does (`mariabackup | zstd | seal`), and prints sealing's
share of the compressed pipeline. Writes a JSON record to bench/records/sealing-<time>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "include")]

from lastline.storage import envelope, sealing  # noqa: E402

BLOCK = 4 << 20


def sysbench_rows(path: Path, mb: int) -> None:
    """About `mb` MB of sbtest rows as TSV: c is ten 11-digit groups, pad five, cut from 4 MB of random digits."""
    rnd = random.Random(42)
    groups = (1 << 22) // 12
    digits = "".join("".join(rnd.choices("0123456789", k=11)) + "-" for _ in range(groups))
    with path.open("wb") as out:
        row_id = 0
        while out.tell() < mb << 20:
            lines = []
            for _ in range(100_000):
                row_id += 1
                c, pad = 12 * rnd.randrange(groups - 10), 12 * rnd.randrange(groups - 5)
                lines.append(f"{row_id}\t{rnd.randrange(1, 10_000_000)}\t{digits[c:c + 119]}\t{digits[pad:pad + 59]}\n")
            out.write("".join(lines).encode())


def timed(run) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its children) of `run()`."""
    before, cpu = time.perf_counter(), os.times()
    run()
    after = os.times()
    spent = (after.user - cpu.user) + (after.system - cpu.system)
    spent += (after.children_user - cpu.children_user) + (after.children_system - cpu.children_system)
    return time.perf_counter() - before, spent


def copy(src: Path) -> None:
    with src.open("rb") as source, open(os.devnull, "wb") as sink:
        while block := source.read(BLOCK):
            sink.write(block)


def zstd(args: list[str], src: Path, dst: str = os.devnull) -> None:
    with src.open("rb") as source, open(dst, "wb") as sink:
        subprocess.run(["zstd", "-q", "-T1", *args, "-c"], stdin=source, stdout=sink, check=True)


def seal(src: Path, dst: str, key: sealing.DataKey, cipher: str, chunk: int) -> None:
    with src.open("rb") as source, open(dst, "wb") as sink:
        envelope.seal_stream(source, sink, key, "bench", "bench/rows.tsv", cipher=cipher, chunk_size=chunk)


def unseal(src: Path) -> None:
    with src.open("rb") as source, open(os.devnull, "wb") as sink:
        envelope.open_stream(source, sink, KEY, "bench", "bench/rows.tsv")


KEY = sealing.DataKey.generate()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=512)
    p.add_argument("--chunk-mib", type=int, default=4)
    args = p.parse_args()
    chunk = args.chunk_mib << 20
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="sealing-bench-") as tmp:
        plain, packed, sealed = Path(tmp, "rows.tsv"), Path(tmp, "rows.tsv.zst"), Path(tmp, "sealed")
        sysbench_rows(plain, args.mb)
        copy(plain)  # into the page cache
        size, zsize = plain.stat().st_size, 0

        def record(what: str, nbytes: int, run) -> float:
            wall, cpu = timed(run)
            rows.append({"what": what, "mb": round(nbytes / 1e6, 1), "seconds": round(wall, 3), "cpu": round(cpu, 3),
                         "mb_per_s": round(nbytes / 1e6 / wall, 1)})
            print(f"{what:<46} {nbytes / 1e6:9.1f} MB {wall:8.3f} s {nbytes / 1e6 / wall:9.1f} MB/s", flush=True)
            return wall

        record("plain copy (4 MiB reads)", size, lambda: copy(plain))
        zstd_wall = record("zstd -1 -T1 (chunk files' level)", size, lambda: zstd(["-1"], plain, str(packed)))
        zsize = packed.stat().st_size
        record("zstd -d -T1", zsize, lambda: zstd(["-d"], packed))
        for cipher in sealing.CIPHERS:
            record(f"seal {cipher} (rows)", size, lambda c=cipher: seal(plain, os.devnull, KEY, c, chunk))
            seal(plain, str(sealed), KEY, cipher, chunk)
            record(f"open {cipher} (rows)", size, lambda: unseal(sealed))
            seal_z = record(f"seal {cipher} (zstd output)", zsize, lambda c=cipher: seal(packed, os.devnull, KEY, c, chunk))
            seal(packed, str(sealed), KEY, cipher, chunk)
            open_z = record(f"open {cipher} (zstd output)", zsize, lambda: unseal(sealed))
            rows.append({"what": f"{cipher}: seal / zstd -1 time", "ratio": round(seal_z / zstd_wall, 3),
                         "open_ratio_vs_zstd_d": round(open_z / rows[2]["seconds"], 3)})
            print(f"{cipher}: sealing zstd's output costs {100 * seal_z / zstd_wall:.1f}% of zstd -1's time; "
                  f"opening it {100 * open_z / rows[2]['seconds']:.1f}% of zstd -d's")
    out = ROOT / "bench" / "records" / f"sealing-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps({"mb": args.mb, "chunk_mib": args.chunk_mib, "cpus": os.cpu_count(), "rows": rows}, indent=1))
    print(f"record: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
