"""The Backups page in the Airflow UI (a top-level "Backups" entry of the navigation): per destination, every backup
with its kind, age, size, duration, whether it is authenticated, verified, drilled and read back (backup_verify), the
point-in-time window it opens, and a link to the restore it can start, prefilled (lastline.inventory lists them, each
view afresh).

    /lastline-backups/                     the page
    /lastline-backups/backups.json         the same, as JSON
    /lastline-backups/restore/<dag_id>?conf=<json>   a restore's run configuration, prefilled, and a Trigger button

Airflow 3.3's trigger form cannot be opened prefilled from a URL (its `?conf=` of Airflow 2 is gone; no route opens
the form, and 3.3.2's UI prefills it only from a run's "Trigger again with this config"). So a backup's link opens a
page of this plugin that shows the restore's configuration for that backup (every other field takes its form
default), editable, with a Trigger button: it posts the run through Airflow's own REST API with the user's session,
so Airflow checks the user's rights and the Params as its form does, and then opens the new run in the UI. The
restore's own form (its DAG's Trigger) offers `<destination>/latest` and points here: a DAG file's parse lists no
storage (lastline.airflow.params), so this page, which lists afresh at each view, is where the backups are found.

Access is Airflow's own (the UI's session cookie or a bearer token): the page and its JSON need read access to both
backup DAGs (physical_backup and logical_backup), whatever the URL's query says; it shows the restores that verified a
backup, and the drills, only of the DAGs the user may read. A successful restore run verified the backup its restore's
preflight resolved and opened (its plan's `backup`: `<destination>/latest` counts for the backup it was), never what its
conf asked for. A restore's page needs read access to that restore.
"""
from __future__ import annotations

import json
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote

from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse

from lastline import inventory
from lastline.airflow.ui_links import OPEN_IN_AIRFLOW

PREFIX = "/lastline-backups"
BACKUP_DAGS = ("physical_backup", "logical_backup")
RESTORING = ("physical_restore", "logical_restore", "point_in_time_restore", "staging_refresh", "restore_drill",
             "backup_verify")
app = FastAPI(title="lastline backups", docs_url=None, redoc_url=None, openapi_url=None)
# the page: whoever may read both backup DAGs (fixed ids: a `?dag_id=` in the URL is never what is checked)
READ_BACKUPS = [requires_access_dag("GET", param_dag_id=dag_id) for dag_id in BACKUP_DAGS]
READ_DAG = requires_access_dag("GET")  # a restore's page: whoever may read that DAG (its id in the path, which wins)
# the fields the page's own links carry; the user may add others in the page's text box, never through the URL
LINK_FIELDS = frozenset({"backup", "destination", "base", "base_kind", "until", "aws_conn_id"})
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title><style>
body {{ font-family: sans-serif; margin: 1.2em; color: #222; font-size: 14px; }} h1 {{ font-size: 1.3em; }}
h2 {{ font-size: 1.05em; margin-top: 1.6em; }} table {{ border-collapse: collapse; margin: .5em 0; }}
td, th {{ border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }} .bad {{ color: #b00; }}
.ok {{ color: #070; }} .muted {{ color: #777; }} textarea {{ width: 100%; max-width: 60em; font-family: monospace; }}
button {{ font-size: 1em; padding: .3em 1.2em; }}
</style></head><body>{body}</body></html>"""


def _readable(user: Any) -> set[str]:
    """The restore DAGs `user` may read (Airflow's auth manager decides)."""
    from airflow.api_fastapi.app import get_auth_manager

    return set(get_auth_manager().filter_authorized_dag_ids(dag_ids=set(RESTORING), user=user, method="GET"))


def _verifications(dag_ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    """The newest 500 successful runs of the restores `dag_ids`, by the backup each restored (the one its restore's
    preflight resolved: `latest` too; lastline.inventory.verifications), oldest first: each verified it. Two queries
    whatever the number of runs: the runs, then their preflights' plans (each one's `return_value` XCom, whose
    `backup` names it)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import and_, or_, select

    if not dag_ids:
        return {}
    # each DAG's own restore preflights only (staging_refresh and restore_drill have a `preflight` of their own)
    preflights = or_(*(and_(XComModel.dag_id == d, XComModel.task_id.in_(inventory.RESTORE_PREFLIGHTS.get(d, ())))
                       for d in sorted(dag_ids)))
    with create_session() as session:
        runs = session.execute(select(DagRun.id, DagRun.dag_id, DagRun.run_id, DagRun.end_date)
                               .where(DagRun.dag_id.in_(sorted(dag_ids)), DagRun.state == "success")
                               .order_by(DagRun.end_date.desc()).limit(500)).all()
        rows = session.execute(select(XComModel.dag_id, XComModel.run_id, XComModel.task_id, XComModel.value)
                               .where(XComModel.dag_run_id.in_([r.id for r in runs]), XComModel.key == "return_value",
                                      preflights, XComModel.map_index == -1)).all() if runs else []
    plans = [(r.dag_id, r.run_id, r.task_id, plan.get("backup") if isinstance(plan := XComModel.deserialize_value(r), dict)
              else None) for r in rows]
    finished = [(r.dag_id, r.run_id, r.end_date.strftime("%Y-%m-%dT%H:%M:%SZ") if r.end_date else "") for r in reversed(runs)]
    return inventory.verifications(finished, plans)


def _listing(user: Any) -> list[inventory.Destination]:
    """Every destination's backups, with what the restores and drills `user` may read say of them."""
    readable = _readable(user)
    return inventory.listing(_verifications(readable), drills="restore_drill" in readable,
                             read_backs="backup_verify" in readable)


def _cell(ok: bool | None, text: str | None) -> str:
    cls = "" if ok is None else "ok" if ok else "bad"
    return f'<td class="{cls}">{escape(text)}</td>' if text else '<td class="muted">no</td>'


def _when(stamp: str | None) -> str:
    """`2026-11-28 16:41:22` for an ISO time (UTC), to the second."""
    return (stamp or "")[:19].replace("T", " ")


def _row(b: inventory.Backup) -> str:
    age = "" if b.age_hours is None else f"{b.age_hours:,.1f} h"
    if b.problem:
        return (f"<tr><td><code>{escape(b.backup_id)}</code></td><td>{escape(b.kind or '?')}</td>"
                f"<td>{escape(_when(b.taken_at))}</td><td>{age}</td><td colspan=\"8\" class=\"bad\">{escape(b.problem)}</td></tr>")
    window = b.window
    if not window:
        pitr = '<span class="muted">none (no binlog archive holds its position)</span>'
    elif not window["reaches"]:
        pitr = (f'<span class="muted">opens at the next binlog_archive run (the archive is confirmed up to '
                f'{escape(str(window["to"]))}, before this backup ended)</span>')
    else:
        pitr = (f"{escape(window['from'])} to {escape(window['to'])} <span class=\"muted\">(branch {escape(window['branch'])}"
                + (f"; a hole after it: {escape(', '.join(window['holes_after']))}" if window["holes_after"] else "")
                + (f"; crossed, proven empty: {escape(', '.join(window['proven_empty_after']))}"
                   if window.get("proven_empty_after") else "") + ")</span>")
    links = " ".join(f'<a href="restore/{quote(r["dag_id"])}?conf={quote(json.dumps(r["conf"], separators=(",", ":")))}">'
                     f"{escape(r['label'])}</a>" for r in b.restores)
    return (f"<tr><td><code>{escape(b.backup_id)}</code></td><td>{escape(b.kind or '')}</td><td>{escape(_when(b.taken_at))}</td>"
            f"<td>{age}</td><td>{(b.bytes or 0) / 1e6:,.1f} MB</td>"
            f"<td>{b.seconds or 0:,.1f} s</td>{_cell(b.authenticated, b.authenticity)}{_cell(bool(b.verified), b.verified)}"
            f"{_cell(b.drill_ok, b.drilled)}{_cell(b.read_back_ok, b.read_back)}<td>{pitr}</td><td>{links}</td></tr>")


HEAD = ("<tr><th>Backup</th><th>Kind</th><th>Taken (UTC)</th><th>Age</th><th>Size</th><th>Duration</th>"
        "<th>Authenticated</th><th>Verified</th><th>Drilled</th><th>Read back</th><th>Point-in-time window</th><th>Restore</th></tr>")


def _destination(d: inventory.Destination) -> str:
    via = f" <span class=\"muted\">(through {escape(d.aws_conn_id)})</span>" if d.aws_conn_id else ""
    parts = [f"<h2><code>{escape(d.url)}</code>{via}</h2>"]
    if d.problem and not d.backups:
        return "".join(parts) + f'<p class="bad">{escape(d.problem)}</p>'
    shown = len(d.backups)
    parts.append(f"<p>{d.folders} backup folder(s)" + (f"; the newest {shown} shown (LASTLINE_BACKUPS_PAGE_LIMIT)"
                                                        if d.folders > shown else "") + ".</p>")
    if d.problem:
        parts.append(f'<p class="bad">{escape(d.problem)}</p>')
    for w in d.archive:
        parts.append(f"<p>Binlog archive, branch <code>{escape(str(w['branch']))}</code>: recoverable from "
                     f"{escape(str(w['from_time']))} to {escape(str(w['to_time']))}"
                     + (f"; holes: {escape(', '.join(w['holes']))}" if w["holes"] else "") + ".</p>")
    if d.backups:
        parts.append("<table>" + HEAD + "".join(_row(b) for b in d.backups) + "</table>")
    return "".join(parts)


@app.get("/backups.json", dependencies=[Depends(d) for d in READ_BACKUPS])
def backups_json(user: GetUserDep) -> JSONResponse:
    return JSONResponse([d.to_dict() for d in _listing(user)])


@app.get("/", dependencies=[Depends(d) for d in READ_BACKUPS], response_class=HTMLResponse)
def backups_page(user: GetUserDep) -> HTMLResponse:
    found = _listing(user)
    body = ["<h1>Backups</h1>", f"<p>Listed {datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S UTC')}; a restore link "
            "opens its run configuration, prefilled, to trigger (a restore's own form offers <code>latest</code>).</p>"]
    body += [_destination(d) for d in found]
    return HTMLResponse(PAGE.format(title="lastline backups", body="\n".join(body)))


RESTORE_PAGE = """<h1>{dag_id}</h1>
<p>The run configuration for this restore, prefilled: the fields not named here take their form defaults. Change it if
you need (a target, <code>force</code>, databases), then Trigger. Airflow checks it as its own form does; a restore that
replaces data waits for approval under <b>Required actions</b> where the deployment or the target asks.</p>
<textarea id="conf" rows="{rows}" spellcheck="false">{conf}</textarea>
<p><button id="trigger" data-dag="{dag_id}" data-base="{base}">Trigger {dag_id}</button> <span id="out"></span> <span class="muted">(a paused DAG is unpaused, as Airflow's own Trigger does)</span></p>
<p class="muted">Or open <a id="dag" class="airflow" href="{base}/dags/{dag_id}">{dag_id}</a> and its Trigger form, and
paste the backup into its Backup field.</p>
{open_in_airflow}
<script>
const button = document.getElementById("trigger"), out = document.getElementById("out");
const dag = button.dataset.dag, base = button.dataset.base;
button.addEventListener("click", async () => {{
  let conf;
  try {{ conf = JSON.parse(document.getElementById("conf").value); }} catch (e) {{ out.textContent = "not JSON: " + e.message; return; }}
  button.disabled = true; out.textContent = "triggering...";
  // a paused DAG is unpaused on trigger, as Airflow's own Trigger form does by default: else the run would wait
  const dagUrl = base + "/api/v2/dags/" + encodeURIComponent(dag);
  const info = await fetch(dagUrl, {{credentials: "same-origin"}}).then(r => r.ok ? r.json() : {{}}).catch(() => ({{}}));
  if (info.is_paused) {{
    const unpaused = await fetch(dagUrl, {{method: "PATCH", credentials: "same-origin",
      headers: {{"Content-Type": "application/json"}}, body: JSON.stringify({{is_paused: false}})}});
    if (!unpaused.ok) {{ button.disabled = false; out.textContent = dag + " is paused and could not be unpaused (" +
      unpaused.status + "): unpause it in Airflow, then trigger"; return; }}
  }}
  const response = await fetch(base + "/api/v2/dags/" + encodeURIComponent(dag) + "/dagRuns", {{
    method: "POST", credentials: "same-origin", headers: {{"Content-Type": "application/json"}},
    body: JSON.stringify({{logical_date: null, conf: conf}})}});
  const answer = await response.json().catch(() => ({{}}));
  if (!response.ok) {{ button.disabled = false; out.textContent = response.status + ": " + JSON.stringify(answer.detail || answer); return; }}
  out.textContent = "triggered " + answer.dag_run_id;
  openInAirflow(base + "/dags/" + encodeURIComponent(dag) + "/runs/" + encodeURIComponent(answer.dag_run_id));
}});
</script>"""


@app.get("/restore/{dag_id}", dependencies=[Depends(READ_DAG)], response_class=HTMLResponse)
def restore_page(dag_id: str, request: Request, conf: str = "{}") -> HTMLResponse:
    if dag_id not in RESTORING:
        raise HTTPException(404, f"{dag_id!r} is not a restore of lastline's ({', '.join(RESTORING)})")
    try:
        given = json.loads(conf)
    except ValueError as exc:
        raise HTTPException(400, f"conf is not JSON ({exc}): the Backups page's links carry a JSON object") from exc
    if not isinstance(given, dict):
        raise HTTPException(400, "conf is a JSON object of the restore's fields, e.g. {\"backup\": \"<destination>/<id>\"}")
    foreign = sorted(set(given) - LINK_FIELDS)
    if foreign:
        raise HTTPException(400, f"conf names {', '.join(map(repr, foreign))}: a link of the Backups page carries only "
                                 f"{', '.join(sorted(LINK_FIELDS))}; open the link from the Backups page and set any "
                                 "other field in the page's text box")
    text = json.dumps(given, indent=2, sort_keys=True)
    root = request.scope.get("root_path", "")
    base = root[:-len(PREFIX)] if root.endswith(PREFIX) else ""  # Airflow's own root, under any base URL
    body = RESTORE_PAGE.format(dag_id=escape(dag_id), conf=escape(text), rows=text.count("\n") + 3, base=escape(base),
                              open_in_airflow=OPEN_IN_AIRFLOW)
    return HTMLResponse(PAGE.format(title=f"{escape(dag_id)}: prefilled", body=body))


class LastlineBackups(AirflowPlugin):
    name = "lastline_backups"
    fastapi_apps = [{"app": app, "url_prefix": PREFIX, "name": "lastline backups"}]
    external_views = [{"name": "Backups", "href": f"{PREFIX}/", "destination": "nav", "url_route": "lastline_backups",
                       "nav_top_level": True}]
