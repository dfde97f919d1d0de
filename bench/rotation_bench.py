"""What a key rotation costs: --backups (500) encrypted backups' manifests re-wrapped by key_rotation's own steps
(lastline.rotation.stages: preflight, then each batch as a mapped task runs it), timed, the bytes written counted,
against the goal "500 backups in under 60 s, no data object rewritten".

    .venv/bin/python bench/rotation_bench.py [--backups 500] [--tables 20] [--chunks 4]

The backups are written directly (no server): half physical, half logical manifests of --tables tables in --chunks
chunk files each (a few KB to a few tens of KB, as real ones), each with a small data object sealed under key k1 and
its manifest signed with a throwaway storage key, in a file destination in a temporary folder. Then the connection
gets k2 (k1 kept to read) and the rotation runs; a second run (every backup current) is timed too. Afterwards every
data object's bytes and mtime are compared with before, and a sample of backups is opened with k2 alone and refused
with k1 alone. Writes a JSON record to bench/records/rotation-<time>.json.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "include"), str(ROOT / "tools")]

from lastline.core.errors import ConfigError  # noqa: E402
from lastline.manifest import (  # noqa: E402
    ChunkInfo,
    FileInfo,
    LogicalManifest,
    LogicalTable,
    PhysicalManifest,
    TableInfo,
    new_backup_id,
    read_manifest,
    write_manifest,
)
from lastline.rotation import stages  # noqa: E402
from lastline.rotation.plans import outcomes, summary  # noqa: E402
from lastline.storage import Storage, open_storage  # noqa: E402
from lastline.storage.encryption_keys import deployment_encryption_keys, keys_from_connection  # noqa: E402
from lastline.storage.envelope import new_seal, opened_seal  # noqa: E402
from lastline_dev.keys import encryption_connection, throwaway_storage_key  # noqa: E402

GOAL_SECONDS, CONN = 60.0, "lastline_bench_encryption"
K1, K2 = os.urandom(32).hex(), os.urandom(32).hex()
DATA = b"id\tname\n" + b"".join(b"%d\tname %d\n" % (i, i) for i in range(2000))


def _logical(backup_id: str, tables: int, chunks: int, data: FileInfo) -> LogicalManifest:
    tabs = [LogicalTable("shop", f"table_{t:03d}", "InnoDB", "utf8mb4", "utf8mb4_general_ci", True, "key", ["id"],
                         [{"name": "id", "type": "int(11)"}, {"name": "name", "type": "varchar(200)"}], 1000 * chunks,
                         "ab" * 16, 64 << 10, 128 << 10, 0.5, 1000 * chunks + 1,
                         [ChunkInfo(f"data/shop/table_{t:03d}/{c:05d}-000.tsv.zst", 1000, 16 << 10, 32 << 10, "cd" * 32,
                                    [str(c * 1000)], [str(c * 1000 + 999)], "ef" * 16) for c in range(chunks)])
            for t in range(tables)]
    return LogicalManifest(backup_id, "bench_source", "10.11.14-MariaDB", "STRICT_TRANS_TABLES", "+00:00", "tsv/1", "zstd",
                           1000, 2, [{"name": "shop"}], "schema.json", "01" * 32, "2026-11-28T00:00:00Z",
                           "2026-11-28T00:00:09Z", 9.0, 0.01, 1000 * chunks * tables, 1 << 20, 2 << 20, 0.2,
                           "mariadb-bin.000042", 1234, "0-1-99", tables=tabs, files=[data], checksum="crc32-sum/1")


def _physical(backup_id: str, tables: int, data: FileInfo) -> PhysicalManifest:
    return PhysicalManifest(backup_id, "bench_source", "10.11.14-MariaDB", "10.11.14", data.name, "zstd", data.bytes,
                            data.sha256, "2026-11-28T00:00:00Z", "2026-11-28T00:00:09Z", 9.0, 1.0, 2, 1 << 30,
                            "mariadb-bin.000042", 1234, "0-1-99",
                            tables=[TableInfo("shop", f"table_{t:03d}", "InnoDB", 1000, 1 << 20) for t in range(tables)])


def make(storage: Storage, n: int, tables: int, chunks: int) -> list[str]:
    """`n` encrypted backups under the connection's current key (k1), half physical, half logical."""
    keys, ids = deployment_encryption_keys(), []
    assert keys is not None
    for i in range(n):
        backup_id = new_backup_id(taken=ids)
        seal, env = new_seal(keys, backup_id)
        name = "backup.xbstream.zst" if i % 2 else "data/shop/table_000/00000-000.tsv.zst"
        sealed = seal.sealed(DATA, f"{backup_id}/{name}")
        storage.write_bytes(f"{backup_id}/{name}", sealed)
        info = FileInfo(name, len(sealed), hashlib.sha256(sealed).hexdigest())
        manifest = _physical(backup_id, tables, info) if i % 2 else _logical(backup_id, tables, chunks, info)
        manifest.encryption = env.to_json()
        write_manifest(storage, manifest)
        ids.append(backup_id)
    return ids


def data_objects(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Every file but the manifests: size, mtime and sha256 (what a rotation must leave as it was)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "manifest.json"}


def rotate(url: str) -> tuple[float, dict]:
    """One key_rotation run's steps, as its tasks run them (without the report's save), timed."""
    started = time.perf_counter()
    plan = stages.preflight({"destination": url})
    done = [stages.rotate_backups(plan, batch) for batch in stages.batches(plan)]
    found = summary(plan, outcomes([[o.to_dict() for o in d] for d in done]), stages.rotate_branches(plan))
    return time.perf_counter() - started, found


def opens(storage: Storage, backup_id: str, login: str, password: str) -> bool:
    """Whether the backup's data object opens with this key alone (False: refused, naming the key ids)."""
    manifest = read_manifest(storage, backup_id, "physical", require=False) if storage.exists(f"{backup_id}/backup.xbstream.zst") \
        else read_manifest(storage, backup_id, "logical", require=False)
    name = getattr(manifest, "artifact", None) or manifest.files[0].name
    try:
        seal = opened_seal(manifest.encryption, keys_from_connection("bench", "generic", login, password, {}), backup_id,
                           "bench", manifest.authenticity.ok)
    except ConfigError:
        return False
    return seal.opened(storage.read_bytes(f"{backup_id}/{name}"), f"{backup_id}/{name}") == DATA


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backups", type=int, default=500)
    p.add_argument("--tables", type=int, default=20)
    p.add_argument("--chunks", type=int, default=4)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("lastline").setLevel(logging.WARNING)
    throwaway_storage_key()
    with tempfile.TemporaryDirectory(prefix="rotation-bench-", dir="/tmp") as tmp:
        url, folder = f"file://{tmp}/dest", Path(tmp, "dest")
        storage = open_storage(url)
        encryption_connection(os.environ.__setitem__, CONN, "k1", K1)
        made = time.perf_counter()
        ids = make(storage, args.backups, args.tables, args.chunks)
        made = time.perf_counter() - made
        sizes = [(folder / b / "manifest.json").stat().st_size for b in ids]
        before = data_objects(folder)
        encryption_connection(os.environ.__setitem__, CONN, "k2", K2, keys={"k1": K1})
        seconds, found = rotate(url)
        again, second = rotate(url)
        untouched = data_objects(folder) == before
        sample = ids[:: max(1, len(ids) // 10)]
        new_opens = all(opens(storage, b, "k2", K2) for b in sample)
        old_refused = not any(opens(storage, b, "k1", K1) for b in sample)
    ok = (found["counts"].get("rewrapped") == len(ids) and not found["problems"] and untouched and new_opens
          and old_refused and seconds < GOAL_SECONDS)
    record = {"backups": len(ids), "tables": args.tables, "chunks": args.chunks, "cpus": os.cpu_count(),
              "manifest_bytes": {"min": min(sizes), "max": max(sizes), "total": sum(sizes)},
              "write_seconds": round(made, 2), "rotation_seconds": round(seconds, 2),
              "per_backup_ms": round(1000 * seconds / len(ids), 2), "bytes_written": found["bytes_written"],
              "counts": found["counts"], "rerun_seconds": round(again, 2), "rerun_counts": second["counts"],
              "rerun_bytes_written": second["bytes_written"], "data_objects": len(before),
              "data_objects_untouched": untouched, "sample_opens_with_new_key_only": new_opens,
              "sample_refused_with_old_key_only": old_refused, "goal_seconds": GOAL_SECONDS, "goal_met": ok}
    print(f"wrote {len(ids)} encrypted backups ({sum(sizes):,} bytes of manifests, {min(sizes):,} to {max(sizes):,} "
          f"each) in {made:.1f} s")
    print(f"rotation: {len(ids)} backups in {seconds:.2f} s ({1000 * seconds / len(ids):.1f} ms each): {found['counts']}; "
          f"{found['bytes_written']:,} bytes written (manifests only)")
    print(f"re-run: {again:.2f} s, {second['counts']}, {second['bytes_written']:,} bytes written")
    print(f"data objects: {len(before)}, {'none rewritten' if untouched else 'CHANGED'}; a sample of {len(sample)} opens "
          f"with k2 alone: {new_opens}; refused with k1 alone: {old_refused}")
    print(f"goal (500 backups in under {GOAL_SECONDS:.0f} s, no data object rewritten): {'met' if ok else 'NOT met'}")
    out = ROOT / "bench" / "records" / f"rotation-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(record, indent=1))
    print(f"record: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
