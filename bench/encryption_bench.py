"""What encryption costs whole backups and restores, and what backup_verify's read costs, against the issue's goals.

    make bench-encryption                     (or: .venv/bin/python bench/encryption_bench.py)
    make bench-encryption ARGS="--tables 2 --rows 100000 --rounds 1"    (a quick check: under a minute)

One sandbox source holds `--tables` sysbench-shaped tables (id, k, c CHAR(120), pad; KEY k) of `--rows` rows, generated
in-server (the default, 4 x 1M rows, about 1.1 GB of tables, 3 rounds: about 12 minutes here, estimated from a small
run, 1 of them generating; `--reuse` keeps the source).
For each of: unencrypted, AES-256-GCM, ChaCha20-Poly1305 (the encryption key connection set or not, its `cipher` extra
naming the cipher), into one folder destination, 2 threads everywhere:

- a physical backup (preflight, stream, write_manifest) and its physical restore (preflight, stop_target, extract,
  prepare, start_target, verify, report; `force`, into a target sandbox);
- a logical backup (preflight, dump) and its logical restore (preflight, snapshot_config, prepare, the lanes as forked
  processes, finalize, revert, verify, the report; into a second target sandbox);

through the package functions the DAGs' tasks call, in this process, without Airflow (a DAG adds the same task
start-ups to each cipher). Interleaved: each step runs for the three in turn before the next step, and each round
starts the turn with another of them, so that what the machine does meanwhile falls on each alike. Every restore is
checked against the source (CHECKSUM TABLE, untimed). Printed per step: each one's seconds, its time over the
unencrypted run's in the same round, the median of the rounds, and the goal (at most 1.05x) met or NOT met; then the
same for the CPU seconds the whole machine spent busy during the step (/proc/stat): the work encryption adds, which
moves far less from round to round than a few seconds of wall time on 2 shared cores (not the goal's measure; it
tells a real cost from the machine's noise).

Then backup_verify's read of every backup written (its preflight, then verify_backup per backup on 2 processes, as its
mapped tasks run, with the key connection set) against reading and sha256-ing the same files by hand: `sha256sum` in 2
processes, and a Python loop of 4 MiB reads + hashlib on 2 threads; the faster is the hand-run limit; the goal: within
10% of it. verify_backup opens every sealed chunk where the key connection is set (as here), so its leg is an
authenticating read; for reference, the same work through the restore's path (sha256 and every sealed chunk opened
with the key, its plaintext handed out, 2 processes). `--verify-rounds` repeats the four legs in turns
(median). Both ways a destination can be read, each with its verdict: from the disk (the page cache dropped before
each leg; root only), which is the destination's read speed, a weekly verify's case (its backups long out of memory);
and from the page cache (the backups just written), where no disk limits the read and the digest's and the opening's
CPU on 2 cores is what is timed. `--verify-cache cold|warm|both` (default both as root, else warm; `--cold` = cold).

Writes a JSON record to bench/records/encryption-<time>.json.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import queue
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from logical_bench import dataset, du  # noqa: E402
from logical_restore_bench import cpu_seconds, logs_to, without_airflow  # noqa: E402
from physical_bench import cold, median  # noqa: E402

from lastline.backups import backup_seal  # noqa: E402
from lastline.logical.backup import stages as logical_backup  # noqa: E402
from lastline.manifest import read_manifest  # noqa: E402
from lastline.physical import backup as physical_backup  # noqa: E402
from lastline.physical import restore as physical_restore  # noqa: E402
from lastline.storage import open_storage  # noqa: E402
from lastline.storage.encryption_keys import KEY_CONN_ENV  # noqa: E402
from lastline.verify import backups as verify  # noqa: E402
from lastline.verify.plans import OK  # noqa: E402
from lastline.verify.reading import CHUNK  # noqa: E402
from lastline_dev.compare import compare  # noqa: E402
from lastline_dev.keys import encryption_connection, throwaway_storage_key  # noqa: E402
from lastline_dev.sandbox import Instance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODES = ("none", "aes-256-gcm", "chacha20-poly1305")
STEPS = ("physical backup", "physical restore", "logical backup", "logical restore")
KEY_CONN, SECRET = "lastline_bench_encryption", secrets.token_hex(32)  # in this process's environment only
GOAL, VERIFY_GOAL = 1.05, 1.10
SOURCE_CNF = "[mysqld]\ninnodb-buffer-pool-size=2G\ninnodb-log-file-size=512M\n"


def use(mode: str) -> None:
    """The deployment's encryption for the next step: none (no key connection), or the key with `mode` as cipher."""
    if mode == "none":
        os.environ.pop(KEY_CONN_ENV, None)
    else:
        encryption_connection(os.environ.__setitem__, KEY_CONN, "bench-k1", SECRET, cipher=mode)


def timed(run: Callable[[], object]) -> tuple[float, object]:
    t0 = time.monotonic()
    out = run()
    return time.monotonic() - t0, out


def busy() -> float:
    """CPU seconds the whole machine has spent busy (all but idle and iowait), from /proc/stat."""
    return cpu_seconds(None)[0]


class Legs:
    """The four steps, each for one mode, through the package's functions; `backups[(kind, mode)]` the ids they wrote."""

    def __init__(self, dest: str, parallel: int, src: Instance, ptgt: Instance, ltgt: Instance, work: Path) -> None:
        self.dest, self.n, self.src, self.ptgt, self.ltgt, self.work = dest, parallel, src, ptgt, ltgt, work
        self.backups: dict[tuple[str, str], str] = {}  # (kind, mode): the newest backup id
        self.detail: dict[str, dict] = {}  # "<step>, <mode>, round <n>": its stages' seconds

    def physical_backup(self, mode: str) -> dict:
        plan = physical_backup.preflight({"source_conn_id": "bench_esrc", "destination": self.dest, "parallel": self.n})
        stats = physical_backup.stream(plan)
        physical_backup.finish(plan, stats)
        self.backups[("physical", mode)] = plan.backup_id
        return {"bytes": stats.bytes}

    def physical_restore(self, mode: str) -> dict:
        plan = physical_restore.preflight({"target_conn_id": "bench_ptgt", "parallel": self.n, "force": True,
                                           "backup": f"{self.dest}/{self.backups[('physical', mode)]}",
                                           "use_memory": 1 << 30})
        stop = physical_restore.stop_target(plan)
        ext = physical_restore.extract(plan)
        prep = physical_restore.prepare(plan)
        start = physical_restore.start_target(plan)
        ver = physical_restore.verify(plan, ext)
        physical_restore.report(plan, stop, ext, prep, start, ver)
        return {"stop": stop.seconds, "extract": ext.seconds, "prepare": prep.seconds, "start": start.seconds,
                "verify": ver.seconds}

    def logical_backup(self, mode: str) -> dict:
        plan = logical_backup.preflight({"source_conn_id": "bench_esrc", "destination": self.dest, "databases": ["sbtest"],
                                         "parallel": self.n})
        dumped = logical_backup.dump(plan)
        self.backups[("logical", mode)] = plan.backup_id
        return {"dump": dumped.seconds, "bytes": dumped.bytes}

    def logical_restore(self, mode: str) -> dict:
        bid = self.backups[("logical", mode)]
        _, report, checks = without_airflow({"target_conn_id": "bench_ltgt", "backup": f"{self.dest}/{bid}",
                                             "parallel": self.n, "force": True, "databases": []}, f"bench-{bid}")
        return {"load": report.get("load_seconds"), "lanes_checking": round(checks, 2)}

    def run(self, step: str, mode: str) -> tuple[float, float, dict]:
        """One step for one mode: its seconds and the machine's busy CPU seconds meanwhile; the restored server then
        checked against the source (untimed)."""
        use(mode)
        if step == "logical restore":  # untimed: each restore starts from an empty database
            self.ltgt.server().query("DROP DATABASE IF EXISTS sbtest")
        with logs_to(self.work / "lastline.log"):
            cpu0 = busy()
            seconds, detail = timed(lambda: getattr(self, step.replace(" ", "_"))(mode))
            cpu = busy() - cpu0
            if step.endswith("backup"):  # what the step wrote is sealed with the mode's cipher, or not at all
                kind = step.split()[0]
                found = read_manifest(open_storage(self.dest), self.backups[(kind, mode)], kind).encryption
                if (found or {}).get("cipher", "none") != mode:
                    raise SystemExit(f"{step} ({mode}): its manifest records the encryption {found}")
        target = {"physical restore": self.ptgt, "logical restore": self.ltgt}.get(step)
        if target is not None and (differ := compare(self.src.server(), target.server())):
            raise SystemExit(f"{step} ({mode}): the restored tables differ from the source: {', '.join(differ)}")
        return seconds, cpu, detail if isinstance(detail, dict) else {}


def verify_one(plan: verify.VerifyPlan, backup_id: str) -> tuple[str, int]:
    verdict = verify.verify_backup(plan, backup_id)
    return verdict.status, verdict.bytes


def _hashed(pieces: Iterator[bytes], digest: Any) -> Iterator[bytes]:
    for piece in pieces:
        digest.update(piece)
        yield piece


def opened_one(dest: str, backup_id: str) -> int:
    """A backup's files read as an authenticating verify would: each file's stored bytes hashed (sha256) as they pass
    on to the opening of every sealed chunk with the key (authenticated, the plaintext dropped); the bytes read."""
    storage = open_storage(dest)
    manifest, _ = verify.read_back_manifest(storage, backup_id)
    seal, n = backup_seal(storage, manifest), 0
    for info in verify.expected_files(manifest):
        key, digest = f"{backup_id}/{info.name}", hashlib.sha256()
        stored = _hashed(iter(storage.reader(key, CHUNK)), digest)
        for _ in stored if seal is None else seal.opened_stream(stored, key):
            pass
        n += storage.size(key)
        if digest.hexdigest() != info.sha256:
            raise SystemExit(f"{key}: sha256 differs from its manifest's")
    return n


def files_read(plan: verify.VerifyPlan, folder: Path) -> list[Path]:
    """Every file verify_backup reads (each backup's manifest and the files it names), largest first."""
    storage, out = open_storage(plan.destination), []
    for b in plan.backups:
        manifest, _ = verify.read_back_manifest(storage, b)
        out += [folder / b / "manifest.json", *(folder / b / f.name for f in verify.expected_files(manifest))]
    return sorted(out, key=lambda p: -p.stat().st_size)


def python_hashes(files: list[Path], threads: int = 2) -> None:
    """Read and sha256 each file (4 MiB reads) on `threads` threads taking the files in turn (hashlib frees the GIL)."""
    todo: queue.Queue[Path] = queue.Queue()
    for f in files:
        todo.put(f)

    def work() -> None:
        while True:
            try:
                path = todo.get_nowait()
            except queue.Empty:
                return
            sha = hashlib.sha256()
            with path.open("rb") as fh:
                while block := fh.read(CHUNK):
                    sha.update(block)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def verify_legs(dest: str, folder: Path, rounds: int, drop: bool) -> dict:
    """backup_verify's read against the hand-run reads, `rounds` times in turns (see the module)."""
    use(MODES[1])  # the key connection set, as where backups are verified
    with logs_to(folder.parent / "lastline.log"):
        plan = verify.preflight({"destination": dest})
    files = files_read(plan, folder)
    total = sum(f.stat().st_size for f in files)
    fork = multiprocessing.get_context("fork")

    def lastline() -> None:
        with ProcessPoolExecutor(2, mp_context=fork) as pool:
            found = list(pool.map(verify_one, [plan] * len(plan.backups), plan.backups))
        if any(status != OK for status, _ in found):
            raise SystemExit(f"backup_verify found: {found}")

    def opened() -> None:
        with ProcessPoolExecutor(2, mp_context=fork) as pool:
            list(pool.map(opened_one, [dest] * len(plan.backups), plan.backups))

    listing = folder / "verify-files.txt"
    listing.write_text("".join(f"{f}\0" for f in files))
    legs: dict[str, Callable[[], object]] = {
        "backup_verify: verify_backup per backup, 2 processes": lastline,
        "by hand: sha256sum, 2 processes (xargs -P 2)":
            lambda: subprocess.run(["bash", "-c", f"xargs -0 -P 2 -n 1 sha256sum < {listing} > /dev/null"], check=True),
        "by hand: Python reads + hashlib, 2 threads": lambda: python_hashes(files),
        "for reference: sha256 + every sealed chunk opened, 2 processes": opened,
    }
    took: dict[str, list[float]] = {}
    with logs_to(folder.parent / "lastline.log"):
        for rnd in range(rounds):
            names = list(legs)[rnd % len(legs):] + list(legs)[:rnd % len(legs)]
            for name in names:
                cold(drop)
                took.setdefault(name, []).append(round(timed(legs[name])[0], 3))
    listing.unlink()
    mid = {name: median(xs) for name, xs in took.items()}
    hand = min(v for k, v in mid.items() if k.startswith("by hand"))
    ratio = mid["backup_verify: verify_backup per backup, 2 processes"] / hand
    print(f"\nbackup_verify's read of {len(plan.backups)} backups, {len(files)} files, {total / 1e6:,.0f} MB "
          f"(median of {rounds}, in turns{', page cache dropped before each' if drop else ', page cache warm'}):")
    for name, xs in took.items():
        print(f"  {name:<66} {mid[name]:7.2f} s  {total / 1e6 / mid[name]:7.0f} MB/s   ({', '.join(map(str, xs))})")
    print(f"  backup_verify over the faster hand-run read: {ratio:.2f}x (goal: at most {VERIFY_GOAL:.2f}x): "
          f"{'met' if ratio <= VERIFY_GOAL else 'NOT met'}")
    return {"backups": len(plan.backups), "files": len(files), "mb": round(total / 1e6, 1), "cold": drop, "seconds": took,
            "median": mid, "ratio": round(ratio, 3), "goal": VERIFY_GOAL, "met": ratio <= VERIFY_GOAL}


BOTH = {"physical backup + restore": STEPS[:2], "logical backup + restore": STEPS[2:], "all four steps": STEPS}


def rows_of(took: dict[str, dict[str, list[float]]], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Each step's figures per mode and round, and those of the sums in BOTH."""
    rows = {s: {m: took[s][m] for m in MODES} for s in STEPS}
    rows.update({name: {m: [round(sum(took[s][m][r] for s in parts), 2) for r in range(rounds)] for m in MODES}
                 for name, parts in BOTH.items()})
    return rows


def ratio_table(took: dict[str, dict[str, list[float]]], rounds: int, title: str) -> tuple[dict, list[str]]:
    """Print, per step and sum, the mean per mode and each cipher's figure over the unencrypted one in the same round
    (their median against GOAL); return those ratios and the names above GOAL."""
    ratios: dict[str, dict] = {}
    print(f"\n{title} (goal: at most {GOAL:.2f}x):")
    print(f"  {'':<26}" + "".join(f"{m:>20}" for m in MODES))
    for name, by_mode in rows_of(took, rounds).items():
        mean = {m: sum(xs) / len(xs) for m, xs in by_mode.items()}
        ratios[name] = {}
        cells = []
        for m in MODES[1:]:
            each = [x / base for x, base in zip(by_mode[m], by_mode["none"])]
            mid = median(each)
            ratios[name][m] = {"by_round": [round(x, 3) for x in each], "median": round(mid, 3), "met": mid <= GOAL}
            cells.append(f"{mean[m]:8.1f} s {mid:5.3f}x {'met' if mid <= GOAL else 'NOT'}")
        print(f"  {name:<26}{mean['none']:18.1f} s" + "".join(f"{c:>20}" for c in cells))
    for name, by_mode in ratios.items():
        for m, r in by_mode.items():
            print(f"  {name}, {m}: round by round {', '.join(f'{x:.3f}x' for x in r['by_round'])}")
    return ratios, [f"{name} ({m})" for name, by in ratios.items() for m, r in by.items() if not r["met"]]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tables", type=int, default=4)
    p.add_argument("--rows", type=int, default=1_000_000, help="rows per table (default 1M: about 250 MB of table)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of the 4 steps x 3 modes, each starting with another mode (3: each mode once in each place)")
    p.add_argument("--verify-rounds", type=int, default=3)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--cold", action="store_true", help="verify's read from the disk only (= --verify-cache cold)")
    p.add_argument("--verify-cache", choices=("cold", "warm", "both"), default="",
                   help="verify's read from the disk (the page cache dropped before each leg; root), from the page "
                        "cache, or both (the default as root; else warm)")
    p.add_argument("--reuse", action="store_true", help="keep the generated source from an earlier run")
    p.add_argument("--work", default=str(ROOT / "bench" / "results" / "encryption"))
    p.add_argument("--records", default=str(ROOT / "bench" / "records"))
    args = p.parse_args()
    started = time.monotonic()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    # run by hand (not by make): the deployment settings the other benches get from the Makefile's BENCH_ENV
    os.environ.setdefault("LASTLINE_BACKUP_ROOTS", f"file://{work}")
    os.environ.setdefault("LASTLINE_APPROVAL", "false")
    os.environ.setdefault("LASTLINE_REPORT_DIR", str(work / "reports"))
    throwaway_storage_key()  # backups signed and checked as a deployment's are
    load0 = os.getloadavg()
    src = dataset(work, "esrc", {f"sbtest{i}": args.rows for i in range(1, args.tables + 1)}, args.reuse, SOURCE_CNF)
    targets = []
    for name in ("ptgt", "ltgt"):
        inst = Instance(work / "sandbox", name)
        if not inst.exists():
            inst.create()
        inst.start()
        targets.append(inst)
    ptgt, ltgt = targets
    for inst, conn in ((src, "bench_esrc"), (ptgt, "bench_ptgt"), (ltgt, "bench_ltgt")):
        os.environ[f"AIRFLOW_CONN_{conn.upper()}"] = json.dumps(inst.connection(conn))
    folder = work / "dest"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    dest = f"file://{folder}"
    datadir_mb = du(src.datadir)
    tables_mb = du(Path(src.datadir) / "sbtest")  # the tables' files (information_schema's sizes lag a fresh load)
    print(f"bench: {args.tables} x {args.rows:,} rows, {tables_mb:,.0f} MB of tables, source datadir {datadir_mb:,.0f} MB "
          f"(its redo log included); {args.rounds} rounds of "
          f"{len(STEPS)} steps x {len(MODES)} modes, {args.parallel} threads; load average {load0[0]:.1f}", flush=True)
    legs = Legs(dest, args.parallel, src, ptgt, ltgt, work)
    took: dict[str, dict[str, list[float]]] = {s: {m: [] for m in MODES} for s in STEPS}
    cpu: dict[str, dict[str, list[float]]] = {s: {m: [] for m in MODES} for s in STEPS}
    for rnd in range(args.rounds):
        order = MODES[rnd % 3:] + MODES[:rnd % 3]
        print(f"round {rnd + 1}: {', '.join(order)}", flush=True)
        for step in STEPS:
            for mode in order:
                seconds, busy_s, detail = legs.run(step, mode)
                took[step][mode].append(round(seconds, 2))
                cpu[step][mode].append(round(busy_s, 2))
                legs.detail[f"{step}, {mode}, round {rnd + 1}"] = detail
                print(f"  {step:<17} {mode:<18} {seconds:7.1f} s  CPU {busy_s:6.1f} s  {json.dumps(detail)}", flush=True)

    ratios, missed = ratio_table(took, args.rounds, f"seconds per step (mean of {args.rounds} rounds) and the time over "
                                 "the unencrypted run's, round by round and their median")
    print(f"the encryption goal (at most {GOAL:.2f}x): {'met everywhere' if not missed else 'NOT met: ' + ', '.join(missed)}")
    cpu_ratios, cpu_over = ratio_table(cpu, args.rounds, f"the machine's busy CPU seconds per step (mean of {args.rounds} "
                                       "rounds) and the CPU over the unencrypted run's (the work encryption adds; not "
                                       "the goal's measure)")
    print(f"CPU over the unencrypted run's above {GOAL:.2f}x: {', '.join(cpu_over) or 'none'}")

    caches = {"both": ("warm", "cold"), "cold": ("cold",), "warm": ("warm",)}[
        "cold" if args.cold else args.verify_cache or ("both" if os.geteuid() == 0 else "warm")]
    verified = {cache: verify_legs(dest, folder, args.verify_rounds, cache == "cold") for cache in caches}
    load1 = os.getloadavg()
    records = Path(args.records)
    records.mkdir(parents=True, exist_ok=True)
    out = records / f"encryption-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps({
        "tables": args.tables, "rows": args.rows, "datadir_mb": round(datadir_mb), "tables_mb": round(tables_mb), "rounds": args.rounds,
        "parallel": args.parallel, "cpus": os.cpu_count(), "load_average": {"start": load0[0], "end": load1[0]},
        "goal": GOAL, "seconds": rows_of(took, args.rounds), "ratios": ratios, "goal_met": not missed,
        "cpu_seconds": rows_of(cpu, args.rounds), "cpu_ratios": cpu_ratios, "steps_detail": legs.detail,
        "verify": verified, "bench_seconds": round(time.monotonic() - started)}, indent=1))
    print(f"\nrecorded in {out} ({(time.monotonic() - started) / 60:.1f} min in all; load average {load0[0]:.1f} at the "
          f"start, {load1[0]:.1f} at the end)")
    for inst in (src, ptgt, ltgt):
        inst.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
