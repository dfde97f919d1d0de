"""A backup run's report: what was backed up (tables, rows, bytes, compression ratio, the binlog coordinates it is
consistent with, how long it took and how fast), compared with the backups of the same kind before it in the
destination, and how far the binlog archive rolls it forward. Markdown first (the Report tab opens with it), the
figures as JSON and the recent backups as an SVG chart."""
from __future__ import annotations

import json
from typing import Any

from lastline.core import svg
from lastline.manifest import LogicalManifest, PhysicalManifest, newest_complete, read_manifest
from lastline.storage import Storage

Manifest = PhysicalManifest | LogicalManifest
RECENT = 6  # the backups before this one the report compares it with


def _figures(m: Manifest) -> dict[str, Any]:
    """One backup's figures (the same for both kinds where they exist)."""
    raw = int(m.raw_bytes) if isinstance(m, LogicalManifest) else int(m.datadir_bytes)
    return {"backup_id": m.backup_id, "started_at": m.started_at, "seconds": round(float(m.seconds), 1),
            "bytes": int(m.bytes), "raw_bytes": raw, "mb_per_s": round(float(m.mb_per_s), 1),
            "ratio": round(raw / m.bytes, 2) if m.bytes else None, "tables": len(m.tables),
            "rows": int(m.rows) if isinstance(m, LogicalManifest) else sum(int(t.rows) for t in m.tables),
            "rows_exact": isinstance(m, LogicalManifest)}  # a physical backup's rows are InnoDB's estimates


def _change(now: float, before: float) -> str:
    """`+12%`, `-3%`, `same` (against the median of the recent backups); empty without one."""
    if not before:
        return ""
    pct = (now - before) / before * 100
    return "same" if abs(pct) < 0.5 else f"{pct:+.0f}%"


def _against(change: str, noun: str) -> str:
    """A change in words, `+12% size` or `same size` (empty when there was nothing to compare with)."""
    return f"{change} {noun}" if change else ""


def verdict(report: dict[str, Any]) -> str:
    """What the backup is, in words (the report's first line): complete or not, what proves its bytes, authenticated."""
    proof = ("its manifest, written last, records every file's sha256 and each table's row hashes computed on the "
             "source (a restore checks both)" if report["kind"] == "logical" else
             "its manifest, written last, records the artifact's sha256 (a restore checks it before a byte is used)")
    return (f"Backed up {report.get('source_conn_id') or 'the source'} ({report['server_version']}), complete: {proof}; "
            f"the manifest is {report.get('authenticity') or 'not checked for authenticity'}. A restore drill "
            "(restore_drill) proves it restores.")


def build(storage: Storage, manifest: Manifest, kind: str, url: str, window: str) -> dict[str, Any]:
    """The report of `manifest` (a backup of `kind` at `url`), with the recent backups of its kind before it."""
    ids = list(reversed(newest_complete(storage, kind, RECENT, before=manifest.backup_id)))
    recent = []
    for backup_id in ids:
        try:
            recent.append(_figures(read_manifest(storage, backup_id, kind)))
        except Exception:  # noqa: BLE001 - an unreadable old manifest only drops out of the comparison
            continue
    now = _figures(manifest)

    def median(key: str) -> float:
        values = sorted(float(r[key]) for r in recent if r.get(key) is not None)
        return values[len(values) // 2] if values else 0.0

    primary = manifest.primary or {}
    report: dict[str, Any] = {
        "summary": (f"{kind.capitalize()} backup {manifest.backup_id}: {now['tables']:,} tables, "
                    f"{'' if now['rows_exact'] else '~'}{now['rows']:,} rows, "
                    f"{now['bytes']:,} bytes ({now['raw_bytes'] / max(now['bytes'], 1):.1f}x compressed) in "
                    f"{now['seconds']:,.1f} s ({now['mb_per_s']:,.1f} MB/s)"),
        "kind": kind, "url": url, "source_conn_id": manifest.source_conn_id, **now, "compression": manifest.compression,
        "server_version": manifest.server_version,
        "binlog_file": manifest.binlog_file, "binlog_position": manifest.binlog_position, "gtid": manifest.gtid,
        "primary_gtid": primary.get("gtid"), "manifest_sha256": getattr(manifest, "read_sha256", None), "point_in_time": window,
        "authenticity": auth.describe() if (auth := getattr(manifest, "authenticity", None)) else "not checked for authenticity",
        # a logical backup's longest write wait behind its snapshot, the wait for the lock included (manifest lock_seconds)
        "writes_blocked_seconds": float(manifest.lock_seconds) if isinstance(manifest, LogicalManifest) else None,
        "compared": {key: _change(float(now[key] or 0), median(key)) for key in ("bytes", "seconds", "mb_per_s", "rows")},
        "recent": recent,
    }
    return {"verdict": verdict(report), **report}


def markdown(report: dict[str, Any]) -> str:
    """The report as the Report tab's first page: the verdict, then the figures."""
    c = report["compared"]
    n = len(report["recent"])
    vs = f" against {'the backup' if n == 1 else f'the median of the {n} backups'} before it" if n else ""
    took = ", ".join(p for p in (_against(c["seconds"], "time"), _against(c["mb_per_s"], "speed")) if p)
    size = "; ".join(p for p in (f"{report['ratio']}x" if report["ratio"] else "", _against(c["bytes"], "size")) if p)
    sha = report.get("manifest_sha256")
    primary = f"; its primary's GTID `{report['primary_gtid']}`" if report.get("primary_gtid") else ""
    lines = [
        f"# {report['summary']}", "",
        f"**{verdict(report)}**", "",
        f"- **{report['point_in_time']}**",
        f"- **Where:** `{report['url']}`" + (f" (manifest sha256 `{sha[:16]}...`)" if sha else ""),
        f"- **Size:** {report['bytes']:,} bytes, {report['compression']}, from {report['raw_bytes']:,} bytes"
        + (f" ({size}{vs if c['bytes'] else ''})" if size else ""),
        f"- **Took:** {report['seconds']:,.1f} s at {report['mb_per_s']:,.1f} MB/s" + (f" ({took}{vs})" if took else ""),
        f"- **Tables:** {report['tables']:,}, **rows:** {report['rows']:,}"
        + ("" if report["rows_exact"] else " (InnoDB's estimates)") + (f" ({_against(c['rows'], 'rows')})" if c["rows"] else ""),
        "- **Consistent with:** " + (f"binlog `{report['binlog_file']}:{report['binlog_position']}`, GTID `{report['gtid']}`"
                                     if report.get("binlog_file") or report.get("gtid") else
                                     "no binlog position (the source writes no binlog)") + primary,
    ]
    if report.get("writes_blocked_seconds") is not None:
        lines.append(f"- **Writes blocked:** up to {report['writes_blocked_seconds']:.3f} s by the snapshot's lock, its wait "
                     "for the lock included")
    lines.append("")
    if report["recent"]:
        lines += ["## The backups before it", "", "| backup | bytes | seconds | MB/s | ratio | rows |", "|---|---:|---:|---:|---:|---:|"]
        for r in reversed(report["recent"]):
            lines.append(f"| {r['backup_id']} | {r['bytes']:,} | {r['seconds']:,.1f} | {r['mb_per_s']:,.1f} | "
                         f"{r['ratio'] if r['ratio'] is not None else '-'} | {r['rows']:,} |")
    return "\n".join(lines) + "\n"


def chart(report: dict[str, Any]) -> str:
    """An SVG: size and seconds of this backup and the ones before it."""
    rows = [*report["recent"], report]
    return svg.document(report["summary"], [
        ([(r["backup_id"], r["bytes"] / 1e6) for r in rows], "size of each backup", "MB", "#4477aa"),
        ([(r["backup_id"], float(r["seconds"])) for r in rows], "time each backup took", "s", "#ee7733")])


def files(report: dict[str, Any]) -> dict[str, str]:
    """The files a backup run saves into its report (the Markdown first)."""
    return {"backup.md": markdown(report), "backup.svg": chart(report), "backup.json": json.dumps(report, indent=1)}
