"""lastline's reports in the Airflow UI: a "Report" link on every run of lastline's DAGs, served by the
api-server from where the tasks saved them (lastline.reports: LASTLINE_REPORTS), not from a worker's disk.

    /lastline/reports/<dag_id>/<run_id>           the run's report: its charts, its figures, its files
    /lastline/reports/<dag_id>/<run_id>/<name>    one file (SVG, JSON, Markdown)

A failed run's page opens with what failed: each task instance Airflow's metadata database holds as failed now
(one cleared and passed since is not), its reason, what to do and a link to its log (what the task saved for
that try, lastline.airflow.failures; "see its log" where it saved nothing: a process killed).

Access is Airflow's own: a user who may read the DAG may read its reports (the UI's session cookie or a
bearer token).
"""
from __future__ import annotations

import json
import re
from html import escape
from typing import Any
from urllib.parse import quote, urlparse

from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.configuration import conf
from airflow.models.taskinstance import TaskInstance
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import select

from lastline import reports
from lastline.airflow import failures
from lastline.airflow.ui_links import OPEN_IN_AIRFLOW

app = FastAPI(title="lastline reports", docs_url=None, redoc_url=None, openapi_url=None)
READ = [Depends(requires_access_dag("GET"))]
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title><style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }} h1 {{ font-size: 1.3em; }} h2 {{ font-size: 1.05em; margin-top: 1.6em; }}
table {{ border-collapse: collapse; margin: .5em 0; }} td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; }}
img {{ max-width: 100%; border: 1px solid #eee; }} pre {{ background: #f6f6f6; padding: .8em; overflow-x: auto; }}
.failed {{ border-left: 4px solid #c0392b; background: #fdf0ef; padding: .2em 1em; margin: 1em 0; }}
</style></head><body>{body}</body></html>"""


def _summary(data: dict) -> str:
    """The scalar figures of a JSON report as a table (lists and objects are in the file itself)."""
    rows = [(k, v) for k, v in data.items() if isinstance(v, (str, int, float, bool)) or v is None]
    return "<table>" + "".join(f"<tr><th>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>" for k, v in rows) + "</table>"


def _inline(text: str) -> str:
    """One line of Markdown as HTML: `code` and **bold**; everything else escaped."""
    out, parts = [], re.split(r"(`[^`]*`)", text)
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(f"<code>{escape(part[1:-1])}</code>")
        else:
            out.append(re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escape(part)))
    return "".join(out)


def markdown(text: str) -> str:
    """The Markdown lastline's reports are written in, as HTML: headings, bullet lists, tables, paragraphs, `code`
    and **bold** (every character escaped; no raw HTML, no links)."""
    html, items, rows = [], [], []

    def flush() -> None:
        if items:
            html.append("<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>")
            items.clear()
        kept = [r for r in rows if not re.fullmatch(r"\|[\s:|-]+\|", r)]
        rows.clear()
        if kept:
            head, *body = kept
            cells = [[c.strip() for c in r.strip("|").split("|")] for r in (head, *body)]
            html.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in cells[0]) + "</tr>"
                        + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in cells[1:])
                        + "</table>")

    for line in text.splitlines():
        if line.startswith("|"):
            rows.append(line)
            continue
        if line.startswith("- "):
            items.append(_inline(line[2:]))
            continue
        flush()
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")), 3)
            html.append(f"<h{level + 1}>{_inline(line.lstrip('#').strip())}</h{level + 1}>")
        elif line.strip():
            html.append(f"<p>{_inline(line)}</p>")
    flush()
    return "\n".join(html)


def _tables(data: dict) -> str:
    """A report's per-table figures (the logical restore's), the slowest first."""
    tables = data.get("tables")
    if not isinstance(tables, list) or not tables or not isinstance(tables[0], dict):
        return ""
    cols = [c for c in ("table", "rows", "bytes", "seconds", "mb_per_s", "updated") if c in tables[0]]
    head = "".join(f"<th>{c}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(t.get(c)))}</td>" for c in cols) + "</tr>" for t in tables[:50])
    return f"<table><tr>{head}</tr>{body}</table>"


def _ui(path: str) -> str:
    """A path of Airflow's UI under its base URL (`[api] base_url`)."""
    return urlparse(conf.get("api", "base_url", fallback="") or "").path.rstrip("/") + path


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _failed(session: Any, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """The run's task instances failed now, as Airflow's database says (a task cleared and passed since is not one),
    each with the reason its own failure file recorded for that try, or "see its log" where there is none."""
    rows = session.execute(select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.try_number).where(
        TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.state == "failed")
        .order_by(TaskInstance.end_date, TaskInstance.task_id, TaskInstance.map_index)).all()
    out = []
    for task_id, map_index, try_number in rows:
        said = failures.recorded(dag_id, run_id, task_id, map_index) or {}
        tries = _int(said.get("tries"), try_number)
        if not said.get("reason") or (try_number and tries != try_number):  # none, or an older try's
            said = {"reason": failures.reason(None), "what_to_do": "Open its log; once the cause is fixed, clear the "
                    "task or trigger a new run: each step is safe to re-run."}
        out.append({"task_id": task_id, "map_index": map_index, "reason": str(said["reason"]),
                    "what_to_do": str(said.get("what_to_do") or "")})
    return out


def _failures(dag_id: str, run_id: str, failed: list[dict[str, Any]]) -> str:
    """What failed, first on the page: each task, its reason, what to do, a link to its log."""
    parts = []
    for f in failed:
        index = _int(f.get("map_index"), -1)
        task = str(f.get("task_id", "?")) + (f"[{index}]" if index >= 0 else "")
        href = _ui(failures.log_path(dag_id, run_id, str(f.get("task_id", "")), index))  # never a path from storage
        parts.append(f'<div class="failed"><h2>Failed: task <code>{escape(task)}</code></h2>'
                     f'<p><b>Reason:</b> {escape(str(f.get("reason", "")))}</p>'
                     f'<p><b>What to do:</b> {escape(str(f.get("what_to_do", "")))}</p>'
                     f'<p><a class="airflow" href="{escape(href)}">Open the task\'s log</a></p></div>')
    return "\n".join(parts) + (OPEN_IN_AIRFLOW if parts else "")


@app.get("/reports/{dag_id}/{run_id}", dependencies=READ, response_class=HTMLResponse)
def run_report(dag_id: str, run_id: str, session: SessionDep) -> HTMLResponse:
    shown = reports.names(dag_id, run_id)
    failed = _failed(session, dag_id, run_id)
    title = f"{dag_id} · {run_id}"
    parts = [f"<h1>{escape(title)}</h1>", _failures(dag_id, run_id, failed)]
    if not shown:
        if not failed:
            body = (f"<h1>{escape(title)}</h1><p>This run has saved no report (yet): a report is written when the run's "
                    "last step passes. Reports are read from <code>" + escape(reports.url()) + "</code>.</p>")
            return HTMLResponse(PAGE.format(title=escape(title), body=body), status_code=404)
        parts.append("<p>This run saved no report: a report is written when the run's last step passes.</p>")
    for name in shown:
        href = escape(f"./{quote(run_id, safe='')}/{quote(name, safe='')}")  # relative to this page
        parts.append(f'<h2>{escape(name)} <small>(<a href="{href}">file</a>)</small></h2>')
        if name.endswith(".svg"):
            parts.append(f'<img alt="{escape(name)}" src="{href}">')
        elif name.endswith(".json"):
            data = json.loads(reports.read(dag_id, run_id, name))
            parts.append(_summary(data) + _tables(data) if isinstance(data, dict) else "")
        elif name.endswith(".md"):
            parts.append(markdown(reports.read(dag_id, run_id, name).decode(errors="replace")))
    return HTMLResponse(PAGE.format(title=escape(title), body="\n".join(parts)))


@app.get("/reports/{dag_id}/{run_id}/{name}", dependencies=READ)
def report_file(dag_id: str, run_id: str, name: str) -> Response:
    try:
        data = reports.read(dag_id, run_id, name)
    except FileNotFoundError as exc:
        raise HTTPException(404, str(exc)) from exc
    kind = next((t for ext, t in reports.TYPES.items() if name.endswith(ext)), "application/octet-stream")
    return Response(data, media_type=kind, headers={"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"})


class LastlineReports(AirflowPlugin):
    name = "lastline_reports"
    fastapi_apps = [{"app": app, "url_prefix": "/lastline", "name": "lastline reports"}]
    external_views = [{"name": "Report", "href": "/lastline/reports/{DAG_ID}/{RUN_ID}", "destination": "dag_run",
                       "url_route": "lastline_report"}]
