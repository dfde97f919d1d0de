"""The distributed path for real: CeleryExecutor on Postgres and Redis, an api-server, a scheduler, a
dag-processor, a triggerer and two Celery workers as separate processes, driven through the REST API.

Skipped where PostgreSQL (127.0.0.1:5432) or Redis (127.0.0.1:6379) do not answer; `make test-distributed`
runs this module alone. Worker w1 serves the queues default and near_source, w2 default and near_target:
the source's and the target's connections name those queues, so their heavy tasks run next to them.
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from lastline.airflow.params import SPECS
from lastline.core.sql import META_DB
from lastline_dev.browser import chromium_missing, field, launch, press_trigger, report_text, trigger_form
from lastline_dev.compare import compare
from lastline_dev.deployment import Deployment, services_available
from lastline_dev.sandbox import Instance
from lastline_dev.webhook import Webhook

pytestmark = [pytest.mark.distributed, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = {name for name, spec in SPECS.items() if spec.required}
WORKERS = {"w1": ["default", "near_source"], "w2": ["default", "near_target"]}
BIG = {"t1": 400_000, "t2": 400_000}  # ~140 MB of TSV: 3 work units (a unit is 64 MB at least) for 2 lanes
CHUNK = 20_000


@pytest.fixture(scope="module")
def servers(sandbox_root):
    """A source (the store dataset + two 400k-row tables), a physical target and a logical target of the suite's own."""
    if missing := services_available():
        pytest.skip(f"the distributed suite needs PostgreSQL and Redis: {missing}")
    made = []
    try:
        for name in ("dsource", "dtarget", "dltarget", "ddrill"):
            inst = Instance(sandbox_root, name)
            inst.create()
            made.append(inst)
        made[0].load_store()
        made[0].load_tables("dist_big", BIG)
        yield dict(zip(("source", "target", "ltarget", "drill"), made))
    finally:
        for inst in made:
            inst.destroy()


@pytest.fixture(scope="module")
def deployment(servers, tmp_path_factory):
    home = tmp_path_factory.mktemp("deployment")
    hook = Webhook()
    env = {
        "LASTLINE_RETRIES": "2", "LASTLINE_RETRY_DELAY_SECONDS": "2",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
        "LASTLINE_BACKUP_DEADLINE_MINUTES": "0.02",  # 1.2 s: every backup here misses it, and alerts
        "LASTLINE_REPORT_DIR": str(home / "reports"),
        "LASTLINE_DESTINATION": f"file://{home / 'backups' / 'logical'}",  # the restore forms offer its latest
        "LASTLINE_DRILL_CONN_ID": "d_drill",
        # manual runs only: unpausing a nightly DAG would also start its last scheduled interval
        "LASTLINE_PHYSICAL_BACKUP_SCHEDULE": "none", "LASTLINE_LOGICAL_BACKUP_SCHEDULE": "none",
    }
    # the servers' connections, in the deployment's environment (as a secrets backend would hold them): the
    # dag-processor's first parse already sees them, so the forms' server fields offer them by kind
    queues = {"source": "near_source", "target": "near_target"}
    for key, inst in servers.items():
        conn = inst.connection()
        if key in queues:
            conn["extra"]["queue"] = queues[key]
        if key == "drill":
            conn["extra"]["role"] = "drill"  # a scratch server: restore_drill replaces its data every time
        env[f"AIRFLOW_CONN_D_{key.upper()}"] = json.dumps(conn)
        if key == "ltarget":  # the same server, under a connection that asks a person before data is replaced
            env["AIRFLOW_CONN_D_LTARGET_ASK"] = json.dumps({**conn, "extra": {**conn["extra"], "approval": True}})
    d = Deployment(home, WORKERS, env)
    d.hook, d.dest = hook, home / "backups"
    with d:
        api = d.api
        api.put_connection("lastline_alerts", {"conn_type": "http", "host": f"http://127.0.0.1:{hook.server_port}/alerts"})
        api.put_pool("lastline_d_ltarget", 2, "heavy work on the logical target: 2 at once, whatever the DAG")
        assert "d_ltarget" in _offered(api, "logical_restore", "target_conn_id")
        yield d
    hook.shutdown()


def _offered(api, dag_id: str, param: str) -> list[str]:
    return api.call("GET", f"/api/v2/dags/{dag_id}/details")["params"][param]["schema"].get("examples") or []


def _hosts(api, run, task_id: str) -> dict[int, str]:
    return {ti["map_index"]: ti["hostname"] for ti in api.task_instances(run) if ti["task_id"] == task_id}


def test_physical_backup_and_restore_run_on_the_servers_queues_and_a_late_backup_alerts(deployment, servers):
    api = deployment.api
    backup = api.trigger("physical_backup", {"source_conn_id": "d_source", "destination": f"file://{deployment.dest}/physical"})
    assert api.wait(backup, 300)["state"] == "success", deployment.logs()
    restore = api.trigger("physical_restore", {"target_conn_id": "d_target", "backup": f"file://{deployment.dest}/physical/latest",
                                               "force": True})
    assert api.wait(restore, 300)["state"] == "success", deployment.logs()
    assert compare(servers["source"].server(), servers["target"].server()) == []
    # the heavy tasks ran on the worker next to their server (the connection's "queue")
    assert _hosts(api, backup, "stream") == {-1: "w1"}
    for step in ("stop_target", "extract", "prepare", "start_target", "verify"):
        assert _hosts(api, restore, step) == {-1: "w2"}, step
    late = deployment.hook.wait_for("deadline_missed")
    assert late["deadline_minutes"] == 0.02 and "not complete" in late["text"]


def test_logical_backup_and_restore_spread_lanes_over_both_workers(deployment, servers):
    api = deployment.api
    dest = f"file://{deployment.dest}/logical"
    backup = api.trigger("logical_backup", {"source_conn_id": "d_source", "destination": dest, "chunk_rows": CHUNK,
                                            "databases": ["store", "dist_big"]})
    assert api.wait(backup, 300)["state"] == "success", deployment.logs()
    # Both lane locks are held here until both lane tasks run: each claims a unit and waits for a lane, so the
    # work is shared whichever worker starts first (a Celery worker can finish its previous task seconds late).
    held = servers["ltarget"].server().connect()
    try:
        cur = held.cursor()
        cur.execute("SELECT GET_LOCK('lastline-load-lane-0', 0), GET_LOCK('lastline-load-lane-1', 0)")
        assert cur.fetchone() == (1, 1)
        restore = api.trigger("logical_restore", {"target_conn_id": "d_ltarget", "backup": f"{dest}/latest", "parallel": 2})
        deadline = time.monotonic() + 300
        while sum(ti["task_id"] == "load" and ti["state"] == "running" for ti in api.task_instances(restore)) < 2:
            assert time.monotonic() < deadline and api.run(restore)["state"] in ("queued", "running"), api.task_instances(restore)
            time.sleep(0.5)
        time.sleep(3)  # each lane claims its first unit, then waits for a lane lock
    finally:
        held.close()
    assert api.wait(restore, 300)["state"] == "success", deployment.logs()
    assert compare(servers["source"].server(), servers["ltarget"].server()) == []
    lanes = [ti for ti in api.task_instances(restore) if ti["task_id"] == "load"]
    assert {ti["hostname"] for ti in lanes} == {"w1", "w2"}  # one lane on each worker
    assert all(ti["rendered_map_index"] for ti in lanes)  # each lane named in the UI
    loaded = [api.call("GET", f"/api/v2/dags/logical_restore/dagRuns/{restore[1]}/taskInstances/load/xcomEntries/return_value",
                       params={"map_index": ti["map_index"], "deserialize": True}) for ti in lanes]
    assert all(entry["value"] for entry in loaded), loaded  # and both loaded units: the work was shared
    assert {ti["pool"] for ti in lanes} == {"lastline_d_ltarget"}  # the target's pool, found by the policy
    assert {ti["queue"] for ti in lanes} == {"default"}  # this target's connection names no queue
    # the run's report, served by the api-server's plugin from where verify saved it, behind Airflow's auth
    plugins = api.call("GET", "/api/v2/plugins")["plugins"]
    view = next(v for p in plugins if p["name"] == "lastline_reports" for v in p["external_views"])
    assert view["destination"] == "dag_run" and view["href"] == "/lastline/reports/{DAG_ID}/{RUN_ID}"
    page = api.call_raw("GET", f"/lastline/reports/logical_restore/{restore[1]}")
    assert page.status_code == 200 and "logical_restore.svg" in page.text and "dist_big.t1" in page.text
    chart = api.call_raw("GET", f"/lastline/reports/logical_restore/{restore[1]}/logical_restore.svg")
    assert chart.headers["content-type"].startswith("image/svg+xml") and chart.text.startswith("<svg")
    assert api.http.get(f"/lastline/reports/logical_restore/{restore[1]}").status_code in (401, 403)  # no token, no report


def _awaiting_approval(api, run, deadline: float) -> dict:
    """The run's approval request, once its `approve` task waits for a person."""
    while True:
        assert time.monotonic() < deadline, api.task_instances(run)
        states = {ti["task_id"]: ti["state"] for ti in api.task_instances(run)}
        assert states.get("snapshot_config") in (None, "scheduled", "queued"), states  # nothing touched before the answer
        if states.get("approve") == "awaiting_input":
            return api.call("GET", f"/api/v2/dags/{run[0]}/dagRuns/{run[1]}/taskInstances/approve/-1/hitlDetails")
        time.sleep(0.5)


def test_a_restore_that_replaces_data_waits_for_approval_and_a_rejection_touches_nothing(deployment, servers):
    api = deployment.api
    target = servers["ltarget"].server()
    before = target.query("CHECKSUM TABLE dist_big.t1, store.film")
    # the connection asks for approval; a run's conf could not skip it (`approval` there is not a Param any more);
    # force is left at the form's default (off): the approval is what lets the restore replace the data
    conf = {"target_conn_id": "d_ltarget_ask", "backup": f"file://{deployment.dest}/logical/latest", "approval": False}
    rejected = api.trigger("logical_restore", conf)
    ask = _awaiting_approval(api, rejected, time.monotonic() + 120)
    # what the person is shown: the tables to be replaced with their rows and last write, the backup and its age
    assert ask["subject"].startswith("Replace ") and "dist_big" not in ask["subject"]  # the counts; the tables are below
    for text in ("`store.film`", "last write", "hours old", "Reject", "**without force**"):
        assert text in ask["body"], (text, ask["body"])
    rows = int(re.search(r"\| `dist_big.t1` \| ([\d,]+) \|", ask["body"]).group(1).replace(",", ""))
    assert 300_000 < rows < 500_000  # InnoDB's estimate of its 400,000 rows
    assert ask["options"] == ["Approve", "Reject"]
    alert = deployment.hook.wait_for("approval_needed", run_id=rejected[1])
    assert "approval needed" in alert["text"]
    api.call("PATCH", f"/api/v2/dags/logical_restore/dagRuns/{rejected[1]}/taskInstances/approve/-1/hitlDetails",
             json={"chosen_options": ["Reject"]})
    assert api.wait(rejected, 120)["state"] == "failed"
    states = {ti["task_id"]: ti["state"] for ti in api.task_instances(rejected)}
    assert states["approve"] == "failed" and states["snapshot_config"] == "upstream_failed", states
    assert [t["try_number"] for t in api.tries(rejected, "approve")] == [1]  # a refusal: no retry asks again
    assert target.query("CHECKSUM TABLE dist_big.t1, store.film") == before  # nothing touched
    assert not target.query("SHOW DATABASES LIKE 'lastline_aside%'")

    approved = api.trigger("logical_restore", conf)
    _awaiting_approval(api, approved, time.monotonic() + 120)
    api.call("PATCH", f"/api/v2/dags/logical_restore/dagRuns/{approved[1]}/taskInstances/approve/-1/hitlDetails",
             json={"chosen_options": ["Approve"]})
    assert api.wait(approved, 300)["state"] == "success", deployment.logs()
    assert compare(servers["source"].server(), target) == []


def test_a_worker_killed_mid_load_leaves_a_run_that_completes_exactly(deployment, servers):
    """SIGKILL of a worker (and the task it runs) while its lane is inside a unit: the scheduler sees the
    heartbeat stop, the lane is retried on the other worker and resumes after the ledger."""
    api = deployment.api
    target = servers["ltarget"].server()
    manifest = json.loads(next((deployment.dest / "logical").glob("*/manifest.json")).read_text())
    restore = api.trigger("logical_restore", {"target_conn_id": "d_ltarget", "backup": f"file://{deployment.dest}/logical/latest",
                                              "parallel": 2, "force": True})
    deadline = time.monotonic() + 180
    while not any(ti["task_id"] == "prepare" and ti["state"] == "success" for ti in api.task_instances(restore)):
        assert time.monotonic() < deadline, deployment.logs()
        time.sleep(0.2)
    # The 8th and 18th chunk of each big table are taken in the ledger by an open transaction of ours: a
    # lane that reaches one waits there on its row lock, inside its unit, with the chunks before committed.
    held = [c["file"] for t in manifest["tables"] if t["schema"] == "dist_big" for c in t["chunks"][7::10]]
    holder = target.connect()
    cur = holder.cursor()
    cur.executemany(f"INSERT INTO {META_DB}.ledger (backup_id, file, rows_loaded) VALUES (%s, %s, 0)",
                    [(manifest["backup_id"], f) for f in held])
    waiting: list = []
    while len(waiting) < 2:  # both lanes stopped at a held chunk
        assert time.monotonic() < deadline, deployment.logs()
        waiting = target.query("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE %s AND TIME >= 1",
                               (f"INSERT INTO {META_DB}.ledger%",))
        time.sleep(0.2)
    committed = target.query(f"SELECT COUNT(*) FROM {META_DB}.ledger")[0][0]  # not ours: they are not committed
    running = [ti for ti in api.task_instances(restore) if ti["task_id"] == "load" and ti["state"] == "running"]
    victim = running[0]
    killed = deployment.kill_worker(victim["hostname"])
    holder.rollback()
    holder.close()
    try:
        assert api.wait(restore, 400)["state"] == "success", deployment.logs()
    finally:
        deployment.start_worker(victim["hostname"])
    assert len(killed) >= 2  # the worker and the task it was running
    tries = [t for t in api.tries(restore, "load") if t["map_index"] == victim["map_index"]]
    assert [t["try_number"] for t in tries] == [1, 2] and tries[-1]["state"] == "success", tries
    assert tries[-1]["hostname"] != victim["hostname"]  # the retry ran on the worker that was left
    assert 0 < committed < sum(BIG.values()) // CHUNK  # it was cut mid-load
    assert compare(servers["source"].server(), target) == []  # exact: nothing lost, nothing twice


def test_a_failed_run_alerts_through_the_alert_connection(deployment):
    run = deployment.api.trigger("logical_restore", {"target_conn_id": "d_ltarget",
                                                     "backup": f"file://{deployment.dest}/nothing-here/latest"})
    assert deployment.api.wait(run, 120)["state"] == "failed"
    alert = deployment.hook.wait_for("failed", dag_id="logical_restore", run_id=run[1])
    assert "failed" in alert["text"] and alert["state"] == "failed"
    # under the scheduler too: the alert names the failed task and its reason, the Report tab leads with them
    assert alert["task_id"] == "preflight" and "holds no complete logical backup" in alert["reason"], alert
    page = deployment.api.call_raw("GET", f"/lastline/reports/logical_restore/{run[1]}").text
    assert "Failed: task <code>preflight</code>" in page and "holds no complete logical backup" in page


def test_a_completed_backup_is_drilled_under_the_scheduler(deployment, servers):
    """restore_drill runs on the backup's Asset event: the new backup restored into the drill server,
    verified, and its RTO recorded in the history its Report charts. (The physical backup of the first test
    left an event too, while the drill was paused: the run drills the newest backup, this logical one.)"""
    api = deployment.api
    api.call("PATCH", "/api/v2/dags/restore_drill", json={"is_paused": False})
    backup = api.trigger("logical_backup", {"source_conn_id": "d_source", "destination": f"file://{deployment.dest}/drill",
                                            "databases": ["store"]})
    assert api.wait(backup, 300)["state"] == "success", deployment.logs()
    deadline = time.monotonic() + 120
    while not (runs := [r for r in _runs(api, "restore_drill") if r["run_type"] == "asset_triggered"]):
        assert time.monotonic() < deadline, "no restore_drill run after the backup's Asset event"
        time.sleep(1)
    drill = ("restore_drill", runs[0]["dag_run_id"])
    assert api.wait(drill, 300)["state"] == "success", deployment.logs()
    states = {ti["task_id"]: ti["state"] for ti in api.task_instances(drill)}
    assert states["logical.verify"] == "success" and states["physical.preflight"] == "skipped", states
    page = api.call_raw("GET", f"/lastline/reports/restore_drill/{drill[1]}")
    assert page.status_code == 200 and '<img alt="restore_drill.svg"' in page.text  # the history's chart
    entry = json.loads(api.call_raw("GET", f"/lastline/reports/restore_drill/{drill[1]}/restore_drill.json").text)
    assert entry["ok"] and entry["kind"] == "logical" and entry["rto_seconds"] > 0 and entry["backup_id"] in entry["backup"]
    checked = "CHECKSUM TABLE store.film, store.payment, store.rental"
    assert servers["drill"].server().query(checked) == servers["source"].server().query(checked)


MANUAL = ("logical_restore", "physical_restore", "replica_rebuild", "replica_detach", "staging_refresh", "restore_drill",
          "logical_backup", "physical_backup")


def test_the_ui_in_a_real_browser_forms_a_restore_from_the_form_and_its_report(deployment, servers):
    """Debian's Chromium, driven by Playwright, against the api-server: every trigger form with its titled,
    described fields (only what must be named marked required), a restore triggered from the form, and the
    run's Report tab. Screenshots go to $LASTLINE_TEST_OUTPUT/ui (default .test-output/ui)."""
    if missing := chromium_missing():
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    api = deployment.api
    shots = Path(os.environ.get("LASTLINE_TEST_OUTPUT", ROOT / ".test-output")) / "ui"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.add_cookies([{"name": "_token", "value": api.token(), "url": api.base}])  # signed in as the operator
            page = context.new_page()
            for dag_id in MANUAL:
                params = api.call("GET", f"/api/v2/dags/{dag_id}/details")["params"]
                dialog = trigger_form(page, api.base, dag_id)
                for section in sorted({p["schema"].get("section") for p in params.values()} - {None}):
                    dialog.get_by_role("button", name=section, exact=True).click()
                    page.wait_for_timeout(300)
                    dialog.screenshot(path=str(shots / f"{dag_id}-{section.lower()}.png"))
                    for name, param in params.items():
                        if param["schema"].get("section") != section:
                            continue
                        group = field(dialog, name)
                        label = group.locator("label").first
                        assert label.inner_text().replace("*", "").strip() == param["schema"]["title"], (dag_id, name)
                        assert param["description"] in group.inner_text(), (dag_id, name)  # the help under the field
                        required = label.get_attribute("data-required") is not None
                        assert required == (name in REQUIRED), (dag_id, name, required)
                page.keyboard.press("Escape")

            _connection_form(page, api, shots)

            # a restore triggered from the form, as an operator would
            dialog = trigger_form(page, api.base, "logical_restore")
            dialog.get_by_role("button", name="Servers", exact=True).click()
            targets = dialog.locator("#list_target_conn_id option").evaluate_all("opts => opts.map(o => o.value)")
            assert "d_ltarget" in targets and "d_drill" not in targets, targets  # targets, never the drill server
            dialog.locator("#element_target_conn_id").fill("d_ltarget")
            dialog.get_by_role("button", name="Backup", exact=True).click()
            offered = dialog.locator("#list_backup option").evaluate_all("opts => opts.map(o => o.value)")
            assert f"file://{deployment.dest}/logical/latest" in offered  # latest (the Backups page lists the others)
            dialog.locator("#element_backup").fill(offered[0])
            dialog.get_by_role("button", name="Safety", exact=True).click()
            dialog.locator("[id='switch:element_force']").click()
            dialog.screenshot(path=str(shots / "logical_restore-filled.png"))
            started = press_trigger(dialog, lambda: _runs(api, "logical_restore"))
            run = ("logical_restore", started["dag_run_id"])
            assert started["conf"]["target_conn_id"] == "d_ltarget" and started["conf"]["force"] is True
            assert api.wait(run, 300)["state"] == "success", deployment.logs()

            # its Report tab: the plugin's page inside the UI, charts and all
            report = report_text(page, api.base, "logical_restore", run[1], wait_for="img")
            frame = page.frame_locator("iframe").first
            assert "logical_restore.svg" in report
            assert "Verified: all " in report and "tables hold exactly the backup's" in report  # verification, in words
            assert frame.locator("img").first.evaluate("img => img.naturalWidth") > 0  # the chart loaded
            page.screenshot(path=str(shots / "logical_restore-report.png"), full_page=True)

            # a logical backup's Report tab: what it backed up, against the backups before it
            backup_run = next(r for r in _runs(api, "logical_backup") if r["state"] == "success")
            report = report_text(page, api.base, "logical_backup", backup_run["dag_run_id"])
            assert "Logical backup " in report and " tables, " in report and "x compressed" in report, report[:2000]
            assert "Consistent with:" in report and "Point-in-time:" in report
            page.screenshot(path=str(shots / "logical_backup-report.png"), full_page=True)
        finally:
            browser.close()
    assert len(list(shots.glob("*.png"))) >= len(MANUAL) + 2


def _connection_form(page, api, shots: Path) -> None:
    """A lastline connection made in the UI's form: each of lastline's settings is a described field of its own, and
    what the form saves is what lastline reads (a role, protected, a datadir, through the hook's own builder)."""
    from types import SimpleNamespace

    from lastline.core.servers import Server
    from lastline.get_provider_info import CONN_FIELDS

    page.goto(f"{api.base}/connections")
    page.get_by_role("button", name="Add Connection").click()
    dialog = page.get_by_role("dialog")
    dialog.wait_for()
    dialog.get_by_role("combobox").first.click()
    page.keyboard.type("MariaDB / MySQL (lastline)")
    page.keyboard.press("Enter")
    dialog.get_by_role("button", name="Extra Fields", exact=True).click()
    page.wait_for_timeout(500)
    text = dialog.inner_text()
    for name, f in CONN_FIELDS.items():
        assert f["label"] in text and f["description"] in text, name
    dialog.locator("input[name='connection_id']").fill("d_formmade")
    dialog.locator("#element_datadir").fill("/srv/mariadb/data")
    field(dialog, "role").get_by_role("combobox").click()
    page.get_by_role("option", name="staging", exact=True).click()
    dialog.locator("[id='switch:element_protected']").click()
    dialog.screenshot(path=str(shots / "connection-form.png"))
    dialog.get_by_role("button", name="Save").click()
    deadline = time.monotonic() + 30
    while (saved := api.call_raw("GET", "/api/v2/connections/d_formmade")).status_code != 200:
        assert time.monotonic() < deadline, "the connection form saved nothing"
        time.sleep(0.5)
    conn = saved.json()
    assert conn["conn_type"] == "lastline", conn
    extra = json.loads(conn["extra"] or "{}")
    server = Server.from_connection(SimpleNamespace(conn_id="d_formmade", host=conn["host"], port=conn["port"],
                                                    login=conn["login"], password="", extra_dejson=extra))
    assert (server.datadir, server.role, server.protected) == ("/srv/mariadb/data", "staging", True), extra


def _runs(api, dag_id: str) -> list[dict]:
    return api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100})["dag_runs"]


def test_clean_shutdown_stops_every_process_it_started(deployment):
    pids = deployment.pids()
    assert len(pids) >= 6  # api-server, scheduler, dag-processor, triggerer, two workers (and what they forked)
    deployment.__exit__()
    assert deployment.alive() == [], "processes left running"
