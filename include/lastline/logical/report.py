"""What a logical restore did and where its time went: per-table rows, bytes, seconds and MB/s,
totals, and a PNG chart saved beside the run's JSON report."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from lastline.logical.plans import RestorePlan

log = logging.getLogger(__name__)


def report_dir(run_id: str) -> Path:
    """Where a run's report goes: $LASTLINE_REPORT_DIR, else <AIRFLOW_HOME>/lastline-reports, per run."""
    base = os.environ.get("LASTLINE_REPORT_DIR") or os.path.join(os.environ.get("AIRFLOW_HOME", "."), "lastline-reports")
    safe = "".join(ch if ch.isalnum() or ch in "-_.+" else "_" for ch in run_id) or "run"
    return Path(base) / safe


def table_rows(loads: list[dict]) -> list[dict]:
    """Per table totals over every unit (a table split over units adds up)."""
    out: dict[str, dict] = {}
    for unit in loads:
        for name, s in unit["tables"].items():
            t = out.setdefault(name, {"table": name, "rows": 0, "bytes": 0, "seconds": 0.0, "chunks": 0, "skipped": 0})
            for k in ("rows", "bytes", "seconds", "chunks", "skipped"):
                t[k] += s[k]
    for t in out.values():
        t["mb_per_s"] = round(t["bytes"] / 1e6 / t["seconds"], 2) if t["seconds"] else 0.0
        t["seconds"] = round(t["seconds"], 3)
    return sorted(out.values(), key=lambda t: t["seconds"], reverse=True)


def build(plan: RestorePlan | dict, steps: dict[str, dict], loads: list[dict] | list[list[dict]]) -> dict:
    """The report: stages' seconds, the load's wall time and MB/s, per-table figures."""
    plan = RestorePlan.of(plan)
    loads = [u for lane in loads for u in (lane if isinstance(lane, list) else [lane])]  # per lane, or per unit
    tables = table_rows(loads)
    load_wall = (max(u["finished_at"] for u in loads) - min(u["started_at"] for u in loads)) if loads else 0.0
    loaded = sum(t["bytes"] for t in tables)
    seconds = {name: round(float(s.get("seconds", 0.0)), 3) for name, s in steps.items()}
    seconds["load"] = round(load_wall, 3)
    order = ("tune", "create_schema", "load", "finalize", "revert", "verify")  # as they run
    stages = {k: seconds[k] for k in order if k in seconds} | {k: v for k, v in seconds.items() if k not in order}
    return {
        "backup": f"{plan.destination}/{plan.backup_id}",
        "target_conn_id": plan.target_conn_id,
        "databases": plan.databases,
        "parallel": plan.parallel,
        "units": len(loads),
        "rows": sum(t["rows"] for t in tables),
        "bytes": loaded,
        "load_seconds": round(load_wall, 3),
        "load_mb_per_s": round(loaded / 1e6 / load_wall, 2) if load_wall else 0.0,
        "stages": stages,
        "finalize_steps": steps.get("finalize", {}).get("steps", {}),
        "tables": tables,
    }


def chart(report: dict, path: Path) -> None:
    """A PNG: seconds per stage (finalize split into its steps), and the slowest tables' load seconds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = [(k, v) for k, v in report["stages"].items() if k != "finalize"]
    stages += [(f"finalize: {k}", v) for k, v in report["finalize_steps"].items()]
    tables = report["tables"][:15]
    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 3 + 0.3 * (len(stages) + len(tables))))
    a.barh([k for k, _ in stages][::-1], [v for _, v in stages][::-1], color="#4477aa")
    a.set_xlabel("seconds")
    a.set_title(f"logical restore: {report['rows']:,} rows, {report['bytes'] / 1e6:,.0f} MB, "
                f"load {report['load_seconds']:.1f} s ({report['load_mb_per_s']:.1f} MB/s), {report['parallel']} lanes")
    b.barh([t["table"] for t in tables][::-1], [t["seconds"] for t in tables][::-1], color="#cc6677")
    b.set_xlabel("load seconds (summed over chunks)")
    b.set_title("slowest tables")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write(plan: RestorePlan | dict, steps: dict[str, dict], loads: list[dict], run_id: str) -> dict:
    """Build, log and save the report (JSON + PNG); returns the report with the paths."""
    plan = RestorePlan.of(plan)
    report = build(plan, steps, loads)
    folder = report_dir(run_id)
    folder.mkdir(parents=True, exist_ok=True)
    png = folder / "logical_restore.png"
    chart(report, png)
    report["chart"] = str(png)
    (folder / "logical_restore.json").write_text(json.dumps(report, indent=1))
    report["report"] = str(folder / "logical_restore.json")
    log.info("report: %d tables, %s rows, %.1f MB loaded in %.1f s (%.1f MB/s) by %d units on %d lanes",
             len(report["tables"]), f"{report['rows']:,}", report["bytes"] / 1e6, report["load_seconds"],
             report["load_mb_per_s"], report["units"], report["parallel"])
    log.info("report: stages %s", ", ".join(f"{k} {v:.1f} s" for k, v in report["stages"].items()))
    for t in report["tables"][:20]:
        log.info("report: %-40s %12s rows %9.1f MB %7.1f s %7.1f MB/s", t["table"], f"{t['rows']:,}", t["bytes"] / 1e6,
                 t["seconds"], t["mb_per_s"])
    log.info("report: chart %s, JSON %s", report["chart"], report["report"])
    return report
