"""Big data (issue 31): the logical restore and the physical backup + restore at two sizes, each against its
anchors in the same run, and how each grows with the data.

    make bench-scale ARGS="--tables '' --backups '' --data 2,10 --myloader1 DIR"
    (or: .venv/bin/python bench/scale_data.py --data 2,10 --myloader1 DIR, with the Makefile's BENCH_ENV)

Per size G (GB of rows as TSV for the logical shape, of datadir for the physical one), each bench in its own
folder under --work, run as a child process with its own output (its figures, how it checks the restore):

- logical: bench/logical_restore_bench.py with 8 sysbench-shaped tables and one 4x bigger (~194 bytes a row as
  TSV), `--memory quarter` (a buffer pool of a quarter of the data, redo 128 MB: the regime of production
  restores, where the data is several times the buffer pool), methods: the hand-run limit, myloader 1.0
  (`--myloader1`, or Debian's 0.10 without it) and lastline's whole `logical_restore` DAG on a running
  scheduler (a cold run, then a warm one: the warm run is the figure);
- physical: bench/physical_bench.py `--gb G --no-codecs`: the raw pipeline by hand (stream | zstd > file; the
  restore's stop, extract, prepare, start) against the physical_backup and physical_restore DAGs (`dags test`;
  their tasks' span and the run's duration).

Prints, per size, seconds and seconds per GB, each anchor's time over lastline's, issue 45's goal (set at 10 GB:
the DAG's run >= 1.20x myloader 1.0's, the mean of its two runs) met or not with, when not, the run's CPU per process
group and time per step against myloader 1.0's (logical_restore_bench.causes), and each figure's growth from one size
to the next against the growth of the data; writes a JSON record to bench/records (the restore bench's own record
beside it). The sandboxes of a size are removed before the next size starts (--keep keeps them; a size where a shape
failed keeps its folder and its logs).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lastline_dev.sandbox import Instance

sys.path.insert(0, str(Path(__file__).resolve().parent))
from logical_restore_bench import TRIED, causes, myloader1_folder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ROW_BYTES = 194  # a sysbench-shaped row as TSV (bench-restore: 12M rows, 2,329 MB)
TABLES, BIG = 8, 4


def rows_for(gb: float) -> int:
    """Rows per table so that TABLES tables and one BIG times bigger hold about `gb` GB of TSV."""
    return int(gb * 1e9 / ROW_BYTES / (TABLES + BIG))


def run(cmd: list[str], log: Path) -> None:
    """A child bench, its output to the terminal and to `log`; a failure ends this bench with the log named."""
    print("$ " + " ".join(cmd), flush=True)
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write("  | " + line)
            fh.write(line)
        if proc.wait() != 0:
            raise SystemExit(f"{cmd[1]} failed (exit {proc.returncode}): see {log}")


def logical(gb: float, work: Path, myloader1: str, parallel: int) -> dict[str, Any]:
    """The logical restore bench at `gb`: its record's figures (seconds of each method, the mean of a run before
    lastline's and one after; lastline's measured run, its timeline and CPU per process group)."""
    work.mkdir(parents=True, exist_ok=True)
    methods = "hand,myloader1,lastline" if myloader1 else "hand,myloader,lastline"
    cmd = [sys.executable, str(ROOT / "bench" / "logical_restore_bench.py"), "--tables", str(TABLES), "--rows",
           str(rows_for(gb)), "--big", str(BIG), "--memory", "quarter", "--methods", methods, "--index-builds",
           "per_table", "--parallel", str(parallel), "--rounds", "2", "--work", str(work)]
    run(cmd + (["--myloader1", myloader1] if myloader1 else []), work / "bench.log")
    # its own record, kept in bench/records beside this one's: the path its last lines name
    path = Path(re.findall(r"^recorded in (\S+\.json) ", (work / "bench.log").read_text(), re.M)[-1])
    record = json.loads(path.read_text())
    pool = next(iter(record["pools"].values()))  # --memory quarter: one target
    res = pool["results"]

    def mean(prefix: str) -> tuple[float, dict] | tuple[None, None]:
        """A method's mean of its two runs and the second run's figures (its CPU), or None when it did not run."""
        hit = [k for k in res if k.startswith(prefix) and k.endswith("mean of 2 runs")]
        return (res[hit[0]]["seconds"], res[hit[0].removesuffix(": mean of 2 runs") + ", run 2"]) if hit else (None, None)

    warm = next(k for k in res if k.startswith("lastline DAG") and "warm-up" not in k and "mean of" not in k)
    # what the child raced: myloader 1.0 wherever it found one (bench/.mydumper1 without --myloader1), else Debian's
    one = any(k.startswith("myloader 1.0") for k in res)
    loader, loader_run = mean("myloader 1.0" if one else "Debian's myloader")
    return {"record": path.name, "raw_mb": record["raw_mb"], "memory": pool["memory"], "lastline_dag": res[warm]["seconds"],
            "peak_rss": res[warm].get("peak_rss"), "lastline_run": pool["lastline_runs"][warm],
            "lastline_load_step": res[warm]["load_step"]["seconds"], "hand": mean("by hand")[0], "myloader": loader,
            "myloader_run": loader_run, "myloader_name": "myloader 1.0" if one else "myloader 0.10",
            "cold_dag": next(v["seconds"] for k, v in res.items() if k.startswith("lastline DAG") and "warm-up" in k)}


def physical(gb: float, work: Path) -> dict[str, Any]:
    """The physical bench at `gb`: the hand-run pipeline's seconds and the DAGs'."""
    work.mkdir(parents=True, exist_ok=True)
    record = work / "physical.json"
    try:
        run([sys.executable, str(ROOT / "bench" / "physical_bench.py"), "--gb", str(gb), "--no-codecs", "--work",
             str(work), "--record", str(record)], work / "bench.log")
    finally:  # a failed DAG leaves the bench's servers running: stopped by PID, their folders kept for the logs
        for name in ("source", "target"):
            Instance(work / "sandbox", name).stop()
    return json.loads(record.read_text())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="2,10", help="sizes in GB, comma list")
    p.add_argument("--shapes", default="logical,physical", help="which to run (comma list)")
    p.add_argument("--myloader1", default=os.environ.get("LASTLINE_MYDUMPER1_DIR", ""),
                   help="a folder with mydumper and myloader 1.0 built from their source (tag v1.0.1-3; not in Debian); default "
                        "bench/.mydumper1, which bench/build_mydumper1.sh builds from LASTLINE_MYDUMPER1_SRC")
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--keep", action="store_true", help="keep each size's sandboxes and backups")
    p.add_argument("--work", default=str(ROOT / "bench" / "results" / "scale-data"))
    args = p.parse_args()
    one = myloader1_folder(args.myloader1)  # --myloader1, else bench/.mydumper1 (built when LASTLINE_MYDUMPER1_SRC is set)
    bench([float(x) for x in args.data.split(",") if x], set(args.shapes.split(",")), str(one or ""), args.parallel,
          Path(args.work), args.keep)
    return 0


def bench(sizes: list[float], shapes: set[str], myloader1: str, parallel: int, root: Path, keep: bool = False) -> Path:
    """Every shape at every size (GB), the growth between sizes; returns the record written."""
    sizes = sorted(sizes)
    results: dict[float, dict[str, Any]] = {}
    record = ROOT / "bench" / "records" / f"scale-data-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    for gb in sizes:
        work = root / f"{gb:g}gb"
        print(f"\n== big data: {gb:g} GB ==", flush=True)
        res: dict[str, Any] = {}
        t0 = time.monotonic()
        for shape in ("logical", "physical"):
            if shape not in shapes:
                continue
            try:  # a shape that fails is recorded as such; the other still runs
                res[shape] = (logical(gb, work / "restore", myloader1, parallel) if shape == "logical"
                              else physical(gb, work / "physical"))
            except (SystemExit, subprocess.CalledProcessError, ValueError, KeyError, IndexError, StopIteration) as exc:
                res[f"{shape} failed"] = str(exc)
                print(f"{shape} at {gb:g} GB: failed: {exc}", flush=True)
            else:  # its servers stopped, its figures read: its ~4x the data on disk goes before the next shape needs
                if not keep:  # room (at 10 GB the physical restore's preflight found 10.4 GB free and refused)
                    shutil.rmtree(work / ("restore" if shape == "logical" else "physical"), ignore_errors=True)
        res["bench_s"] = round(time.monotonic() - t0)
        results[gb] = res
        show(gb, res)
        if not keep and not any(k.endswith(" failed") for k in res):  # a failed size keeps its logs
            shutil.rmtree(work, ignore_errors=True)  # the children stopped their servers
        save(record, sizes, shapes, myloader1, parallel, results, {})  # each size as soon as it is measured
    save(record, sizes, shapes, myloader1, parallel, results, grow(sizes, results))
    print(f"recorded: {record.relative_to(ROOT)}")
    return record


def save(record: Path, sizes: list[float], shapes: set[str], myloader1: str, parallel: int,
         results: dict[float, dict[str, Any]], growth: dict[str, Any]) -> None:
    record.write_text(json.dumps({"args": {"data": sizes, "shapes": sorted(shapes), "myloader1": myloader1,
                                           "parallel": parallel}, "sizes": {f"{k:g}": v for k, v in results.items()},
                                  "growth": growth}, indent=1))


def show(gb: float, res: dict[str, Any]) -> None:
    """One size's figures: seconds, per GB, each anchor over lastline."""
    if lo := res.get("logical"):
        mb, dag = lo["raw_mb"], lo["lastline_dag"]
        print(f"\nlogical restore, {mb:,.0f} MB of rows, {lo['memory']}:")
        print(f"  lastline DAG (warm, whole run)  {dag:7.1f} s  {dag / mb * 1000:6.1f} s/GB  (load step {lo['lastline_load_step']:.1f} s;"
              f" cold run {lo['cold_dag']:.1f} s)")
        if peaks := lo.get("peak_rss"):
            print(f"  peak RSS of a task process       {peaks['largest_task']['mb']:7.0f} MB ({peaks['largest_task']['task']}; "
                  f"the largest it started: {peaks['largest_child']['command']} {peaks['largest_child']['mb']:.0f} MB)")
        for name, key in ((lo["myloader_name"], "myloader"), ("hand-run limit", "hand")):
            if lo[key]:
                print(f"  {name:<31} {lo[key]:7.1f} s  {lo[key] / mb * 1000:6.1f} s/GB  {lo[key] / dag:.2f}x lastline's "
                      "time (above 1.00: lastline faster)")
        res["goal"] = goal(lo, gb)
    if ph := res.get("physical"):
        mb, hand = ph["datadir_mb"], ph["hand"]["backup"] + ph["hand"]["restore"]
        span = ph["dag_span"]["backup"] + ph["dag_span"]["restore"]
        run_s = ph["dag_run"]["backup"] + ph["dag_run"]["restore"]
        print(f"\nphysical backup + restore, {mb:,.0f} MB datadir:")
        print(f"  by hand (raw pipeline)          {hand:7.1f} s  {hand / mb * 1000:6.1f} s/GB")
        print(f"  DAGs, tasks' span               {span:7.1f} s  {span / mb * 1000:6.1f} s/GB  {span / hand:.2f}x the raw pipeline")
        print(f"  DAGs, run duration              {run_s:7.1f} s  {run_s / mb * 1000:6.1f} s/GB  {run_s / hand:.2f}x the raw pipeline")
        for dag_id, peaks in ph.get("peak_rss", {}).items():
            print(f"  peak RSS, {dag_id:<21} {peaks['process_mb']:7.0f} MB (its tasks run in the `dags test` process; the "
                  f"largest process they started: {peaks['largest_child']['command']} {peaks['largest_child']['mb']:.0f} MB)")


GOAL_GB, GOAL = 10, 1.2  # issue 45: at 10 GB, the logical_restore DAG's run >= 1.20x myloader 1.0's


def goal(lo: dict[str, Any], gb: float) -> dict[str, Any]:
    """The goal (set at 10 GB) printed met or not at this size `gb`; when not met, lastline's run's CPU per process
    group against myloader 1.0's and its time per step (logical_restore_bench.causes), and where what was tried is
    listed. NOT MEASURED when the bench did not race myloader 1.0."""
    at = f"at {GOAL_GB} GB" if gb == GOAL_GB else f"(set at {GOAL_GB} GB) at {gb:g} GB"
    if lo["myloader_name"] != "myloader 1.0" or not lo["myloader"]:  # said, not left out
        print(f"\n  goal {at}: the logical_restore DAG run >= {GOAL:.2f}x myloader 1.0: NOT MEASURED (the bench raced "
              f"{lo['myloader_name'] if lo['myloader'] else 'no myloader'}: give --myloader1 DIR)", flush=True)
        return {"goal": GOAL, "met": None, "not measured": f"raced {lo['myloader_name']}"}
    ratio = round(lo["myloader"] / lo["lastline_dag"], 2)
    met = ratio >= GOAL
    out: dict[str, Any] = {"ratio": ratio, "goal": GOAL, "met": met}
    print(f"\n  goal {at}: the logical_restore DAG run >= {GOAL:.2f}x myloader 1.0: {ratio:.2f}x  "
          f"{'met' if met else 'NOT MET'} (myloader 1.0 {lo['myloader']:.1f} s, the mean of 2; the DAG run "
          f"{lo['lastline_dag']:.1f} s)", flush=True)
    if not met:
        out |= causes(lo["lastline_run"], "myloader 1.0 (its run after lastline's)", lo["myloader_run"])
        print(f"  what was tried against the goals not met, each measured, and why it was kept or not: {TRIED}", flush=True)
    return out


def grow(sizes: list[float], results: dict[float, dict[str, Any]]) -> dict[str, Any]:
    """Each figure's growth from one size to the next, against the data's (flagged above 1.1x the data's)."""
    out: dict[str, Any] = {}
    for a, b in zip(sizes, sizes[1:], strict=False):
        ra, rb = results[a], results[b]
        per: dict[str, float] = {}
        data = None
        if "logical" in ra and "logical" in rb:
            data = rb["logical"]["raw_mb"] / ra["logical"]["raw_mb"]
            for key in ("lastline_dag", "lastline_load_step", "myloader", "hand"):
                if ra["logical"][key] and rb["logical"][key]:
                    per[f"logical {key}"] = round(rb["logical"][key] / ra["logical"][key], 2)
        if "physical" in ra and "physical" in rb:
            data = data or rb["physical"]["datadir_mb"] / ra["physical"]["datadir_mb"]
            for kind in ("hand", "dag_span", "dag_run"):
                per[f"physical {kind}"] = round(sum(rb["physical"][kind].values()) / sum(ra["physical"][kind].values()), 2)
        data = data or b / a
        slow = [k for k, g in per.items() if g > 1.1 * data]
        out[f"{a:g}->{b:g}"] = {"data_ratio": round(data, 2), "growth": per, "superlinear": slow}
        print(f"\n{a:g} -> {b:g} GB, {data:.1f}x the data: " + ", ".join(f"{k} {g:.1f}x" for k, g in per.items()))
        print("  superlinear (over 1.1x the data's growth): " + (", ".join(slow) or "none"))
    return out


if __name__ == "__main__":
    sys.exit(main())
