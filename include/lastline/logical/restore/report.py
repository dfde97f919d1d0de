"""What a logical restore did and where its time went: per-table rows, bytes, seconds and MB/s,
totals, and an SVG chart, saved with the JSON where the UI reads them (lastline.reports)."""
from __future__ import annotations

import json
import logging
from typing import Any

from lastline import reports
from lastline.core import svg
from lastline.core.plans import plain
from lastline.core.progress import plural
from lastline.logical.restore.plans import RestorePlan

log = logging.getLogger(__name__)


def table_rows(loads: list[dict]) -> list[dict]:
    """Per table totals over every unit (a table split over units adds up), of the tables the units name (each its
    slowest: logical.restore.plans.UNIT_TABLES)."""
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


def build(plan: RestorePlan, steps: dict[str, Any], lanes: list[list[Any]]) -> dict:
    """The report: stages' seconds, the load's wall time and MB/s, per-table figures (`steps`: each stage's result,
    `lanes`: each lane's UnitLoaded results; typed or in their XCom form: the report records the plain form)."""
    steps, lanes = plain(steps), plain(lanes)
    loads = [u for lane in lanes for u in lane]
    tables = table_rows(loads)
    load_wall = (max(u["finished_at"] for u in loads) - min(u["started_at"] for u in loads)) if loads else 0.0
    loaded = sum(u.get("bytes", 0) for u in loads)
    seconds = {name: round(float(s.get("seconds", 0.0)), 3) for name, s in steps.items()}
    seconds["load"] = round(load_wall, 3)
    order = ("tune", "create_schema", "load", "finalize", "revert", "verify")  # as they run
    stages = {k: seconds[k] for k in order if k in seconds} | {k: v for k, v in seconds.items() if k not in order}
    return {
        "backup": plan.backup.url,
        "target_conn_id": plan.target_conn_id,
        "databases": plan.databases,
        "parallel": plan.parallel,
        "units": len(loads),
        "rows": sum(u.get("rows", 0) for u in loads),
        "table_count": sum(u.get("table_count", 0) for u in loads),
        "bytes": loaded,
        "load_seconds": round(load_wall, 3),
        "load_mb_per_s": round(loaded / 1e6 / load_wall, 2) if load_wall else 0.0,
        "stages": stages,
        "finalize_steps": steps.get("finalize", {}).get("steps", {}),
        "tables": tables,  # the slowest (see table_rows)
        "timeline": timeline(stages, lanes),
    }


def timeline(stages: dict[str, float], lanes: list[list[dict]]) -> list[dict]:
    """Where the time went, in order: the stages one after another (the scheduler's gaps left out), and
    within the load each lane's units at the times they ran."""
    out, at = [], 0.0
    loads = [u for lane in lanes for u in lane]
    first = min((u["started_at"] for u in loads), default=0.0)
    for name, seconds in stages.items():
        if name == "load":
            for n, lane in enumerate(lanes, 1):
                for u in lane:
                    out.append({"label": f"lane {n}: {u['unit']}", "start": round(at + u["started_at"] - first, 3),
                                "seconds": round(u["finished_at"] - u["started_at"], 3), "kind": "unit"})
        else:
            out.append({"label": name, "start": round(at, 3), "seconds": seconds, "kind": "stage"})
        at += seconds
    return out


def chart(report: dict) -> str:
    """An SVG: seconds per stage (finalize split into its steps), and the slowest tables' load seconds."""
    stages = [(k, float(v)) for k, v in report["stages"].items() if k != "finalize"]
    stages += [(f"finalize: {k}", float(v)) for k, v in report["finalize_steps"].items()]
    tables = [(t["table"], float(t["seconds"])) for t in report["tables"][:15]]
    rates = [(t["table"], float(t["mb_per_s"])) for t in report["tables"][:15]]
    head = (f"logical restore: {report['rows']:,} rows, {report['bytes'] / 1e6:,.0f} MB, load "
            f"{report['load_seconds']:.1f} s ({report['load_mb_per_s']:.1f} MB/s), {report['parallel']} lanes")
    steps = [(t["label"], t["start"], t["seconds"], "#4477aa" if t["kind"] == "stage" else "#ee7733")
             for t in report["timeline"][:40]]
    return svg.document(head, [(steps, "timeline: the stages in order, each lane's units as they loaded"),
                               (stages, "seconds per stage", "s", "#4477aa"),
                               (tables, "slowest tables (load seconds, summed over chunks)", "s", "#cc6677"),
                               (rates, "their load rate", "MB/s", "#228833")])


def verification(verified: dict) -> str:
    """What verify proved, in words (the report's first line)."""
    objects = ", ".join(f"{n:,} {k if n != 1 else k[:-1]}" for k, n in (verified.get("objects") or {}).items() if n)
    proof = ("their row hashes, summed per table, equal the ones computed on the source" if verified.get("row_hashes", True)
             else "their checksums equal the backup's (an old backup: over the dump's own text)")
    return (f"Verified: all {verified.get('tables', 0):,} restored tables hold exactly the backup's "
            f"{verified.get('rows', 0):,} rows ({proof}); " + (f"{objects} present; " if objects else "")
            + "the server's configuration is as it was before the restore.")


def summary(report: dict) -> str:
    """The Report tab's first page: the verification in words, then the figures."""
    stages = ", ".join(f"{k} {v:,.1f} s" for k, v in report["stages"].items())
    return "\n".join([
        f"# Logical restore of {report['backup']} into {report['target_conn_id']}: verified, {report['rows']:,} rows, "
        f"{report['bytes'] / 1e6:,.1f} MB in {sum(report['stages'].values()):,.1f} s", "",
        f"**{report['verification']}**", "",
        f"- **Backup:** {report.get('authenticity') or 'not checked for authenticity'}",
        f"- **Databases:** {', '.join(report['databases'])}",
        f"- **Loaded:** {report['rows']:,} rows, {report['bytes']:,} bytes in {report['load_seconds']:,.1f} s "
        f"({report['load_mb_per_s']:,.1f} MB/s), {plural(report['units'], 'work unit')} on {plural(report['parallel'], 'lane')}",
        f"- **Stages:** {stages}", ""]) + "\n"


def write(plan: RestorePlan, steps: dict[str, Any], lanes: list[list[Any]], dag_id: str, run_id: str) -> dict:
    """Build, log and save the report (its summary opening with the verification in words, JSON, SVG chart) where the
    UI reads it (lastline.reports); returns the report with the files' URLs."""
    report = {"verification": verification(plain(steps.get("verify")) or {}), **build(plan, steps, lanes),
              "authenticity": plan.authenticity or "not checked for authenticity"}
    where = reports.save(dag_id, run_id, {"summary.md": summary(report), "logical_restore.svg": chart(report),
                                          "logical_restore.json": json.dumps(report, indent=1)})
    report["chart"], report["report"] = f"{where}/logical_restore.svg", f"{where}/logical_restore.json"
    log.info("report: %s", report["verification"])
    log.info("report: %s tables, %s rows, %.1f MB loaded in %.1f s (%.1f MB/s) by %s on %s", f"{report['table_count']:,}",
             f"{report['rows']:,}", report["bytes"] / 1e6, report["load_seconds"], report["load_mb_per_s"],
             plural(report["units"], "work unit"), plural(report["parallel"], "lane"))
    log.info("report: stages %s", ", ".join(f"{k} {v:.1f} s" for k, v in report["stages"].items()))
    for t in report["tables"][:20]:
        log.info("report: %-40s %12s rows %9.1f MB %7.1f s %7.1f MB/s", t["table"], f"{t['rows']:,}", t["bytes"] / 1e6,
                 t["seconds"], t["mb_per_s"])
    log.info("report: chart %s, JSON %s", report["chart"], report["report"])
    return report
