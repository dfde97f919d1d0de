"""The newcomer's path, for real: `make demo` (twice, the second killed half way and run again), `make ui`, and
then in Debian's Chromium, as a person would: every DAG triggered from its form with its defaults, approved
under Required actions where it asks, to success; a run that fails explains itself in its Report tab; the
Backups page's link opens a prefilled restore form that succeeds.

The demo runs in a folder of its own (LASTLINE_DEMO_DIR) with an Airflow home of its own (LASTLINE_AIRFLOW_HOME)
and none of the suite's settings (a newcomer has none): its data is kept tiny (LASTLINE_DEMO_BULK_MB=2).
Screenshots go to $LASTLINE_TEST_OUTPUT/newcomer (default .test-output/newcomer).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from lastline_dev.browser import (
    chromium_missing,
    follow,
    launch,
    press_trigger,
    report_text,
    run_path,
    runs,
    task_states,
    trigger_form,
)
from lastline_dev.dataset import DEFAULT_SEED
from lastline_dev.deployment import Proc
from lastline_dev.sandbox import Instance, alive, bulk_rows, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.newcomer]

ROOT = Path(__file__).resolve().parents[2]
BULK_MB = 2
KILL_AT = "bin/airflow dags test logical_backup"  # the killed demo dies as its logical backup starts
# the newcomer's order: backups first, the archive before the point-in-time restore, a rebuild before a detach
WALK = ("physical_backup", "logical_backup", "binlog_archive", "physical_restore", "logical_restore",
        "point_in_time_restore", "staging_refresh", "restore_drill", "backup_verify", "key_rotation", "replica_rebuild",
        "replica_detach")
MISSING_BACKUP = "20000101T000000Z-000000"
TERMINAL = ("success", "failed")


@dataclass
class Newcomer:
    """The demo and the UI on it: where they live, and how to reach the UI."""

    demo: Path
    env: dict[str, str]
    base: str
    ui: Proc
    shots: Path
    http: httpx.Client = field(init=False)
    failed_on_purpose: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.base, timeout=120)  # every visitor is an admin: no token

    @property
    def destination(self) -> str:
        return f"file://{self.demo / 'backups'}"

    def get(self, path: str, **params: object) -> dict:
        r = self.http.get(path, params=params)
        r.raise_for_status()
        return r.json()

    def runs(self, dag_id: str) -> list[dict]:
        return runs(self.http, dag_id)

    def tasks(self, dag_id: str, run_id: str) -> dict[str, str]:
        return task_states(self.http, dag_id, run_id)

    def log_tail(self, dag_id: str, run_id: str, task_id: str, lines: int = 12) -> str:
        """The end of a task's last try's log, each line's event (and a failure's exception) as text."""
        ti = next(t for t in self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances", limit=1000)["task_instances"]
                  if t["task_id"] == task_id)
        r = self.http.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{max(ti['try_number'], 1)}",
                          params={"full_content": True}, headers={"Accept": "application/x-ndjson"})
        out = []
        for line in r.text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                out.append(line)
                continue
            out.append(str(entry.get("event", "")))
            out += [f"  {e.get('exc_type')}: {e.get('exc_value')}" for e in entry.get("error_detail") or []]
        return "\n".join(out[-lines:])

    def why(self, dag_id: str, run_id: str) -> str:
        """What a run that did not succeed says: its tasks' states and the failed tasks' logs' ends."""
        states = self.tasks(dag_id, run_id)
        out = [f"{dag_id} {run_id}: {states}"]
        for task_id, state in states.items():
            if state == "failed":
                out.append(f"--- {task_id}'s log ends:\n{self.log_tail(dag_id, run_id, task_id)}")
        return "\n".join(out)

    def quiet(self, timeout: float = 600) -> None:
        """Wait until no run is queued or running but the archive's per-minute one (runs a backup triggered, a
        drill, a refresh, are left to end first: the next trigger is one at a time, as a newcomer's is)."""
        deadline = time.monotonic() + timeout
        while True:
            busy = [f"{r['dag_id']} {r['dag_run_id']}" for dag_id in WALK if dag_id != "binlog_archive"
                    for r in self.runs(dag_id) if r["state"] in ("queued", "running")]
            if not busy:
                return
            assert time.monotonic() < deadline, f"runs still going after {timeout} s: {busy}"
            time.sleep(2)


def _env(demo: Path, home: Path) -> dict[str, str]:
    """A newcomer's environment: none of the suite's Airflow or lastline settings, the demo's folders."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "LASTLINE_"))}
    return {**env, "LASTLINE_DEMO_DIR": str(demo), "LASTLINE_AIRFLOW_HOME": str(home), "AIRFLOW_HOME": str(home),
            "LASTLINE_DEMO_BULK_MB": str(BULK_MB)}


def _demo(env: dict[str, str], log: Path) -> subprocess.CompletedProcess:
    """`make demo` without its setup (the suite runs after it): its output into `log`."""
    with open(log, "w") as out:
        return subprocess.run([sys.executable, "-m", "lastline_dev.demo"], env=env, cwd=ROOT, stdout=out,
                              stderr=subprocess.STDOUT, timeout=900)


def _killed_demo(env: dict[str, str], log: Path) -> None:
    """A demo killed (SIGKILL of its whole process group) once its log shows KILL_AT: a failure half way."""
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lastline_dev.demo"], env=env, cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 600
    try:
        while KILL_AT not in log.read_text():
            assert proc.poll() is None, f"the demo ended ({proc.returncode}) before {KILL_AT!r}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no {KILL_AT!r} in 600 s:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
        time.sleep(3)  # inside the DAG run: a backup half written
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _wait_ui(base: str, ui: Proc, timeout: float = 420) -> None:
    """The api-server answers, the scheduler is healthy, every DAG is parsed (a file that timed out on a busy
    machine is parsed again after the embedded Airflow's interval of 300 s: lastline.airflow.embedded)."""
    deadline = time.monotonic() + timeout
    waiting = "the api-server"
    while time.monotonic() < deadline:
        assert ui.popen and ui.popen.poll() is None, f"`make ui` exited ({ui.popen and ui.popen.returncode}):\n{ui.tail()}"
        try:
            health = httpx.get(f"{base}/api/v2/monitor/health", timeout=5).json()
            waiting = "the scheduler"
            if health["scheduler"]["status"] == "healthy":
                waiting = "the DAGs"
                dags = httpx.get(f"{base}/api/v2/dags", params={"limit": 100}, timeout=10).json()["dags"]
                if set(WALK) <= {d["dag_id"] for d in dags}:
                    return
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(2)
    try:
        errors = httpx.get(f"{base}/api/v2/importErrors", timeout=30).json()["import_errors"]
    except (httpx.HTTPError, KeyError, ValueError):
        errors = []
    failed = "\n".join(f"{e['filename']}: {e['stack_trace'].strip().splitlines()[-1]}" for e in errors)
    raise AssertionError(f"`make ui` did not come up in {timeout} s: waiting for {waiting}\n{failed}\n{ui.tail()}")


def _sandboxes(demo: Path) -> list[Instance]:
    root = demo / "sandbox"
    return [Instance(root, p.name) for p in sorted(root.iterdir()) if p.is_dir()] if root.exists() else []


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory):
    """`make demo`, `make demo` killed half way, `make demo` again (each must end 0), then `make ui`."""
    if missing := chromium_missing():
        pytest.skip(missing)
    tmp = tmp_path_factory.mktemp("newcomer")
    demo, home = tmp / "demo", tmp / "airflow"
    env = _env(demo, home)
    shots = Path(os.environ.get("LASTLINE_TEST_OUTPUT", ROOT / ".test-output")) / "newcomer"
    shots.mkdir(parents=True, exist_ok=True)
    ui = Proc("ui", [sys.executable, "-m", "lastline_dev.ui"], {}, tmp / "ui.log")
    try:
        migrate = subprocess.run([str(ROOT / "bin/airflow"), "db", "migrate"], env=env, cwd=ROOT, capture_output=True,
                                 text=True)
        assert migrate.returncode == 0, migrate.stderr[-3000:]
        first = _demo(env, tmp / "demo-1.log")
        assert first.returncode == 0, f"`make demo` failed:\n{(tmp / 'demo-1.log').read_text()[-4000:]}"
        _killed_demo(env, tmp / "demo-2.log")
        again = _demo(env, tmp / "demo-3.log")
        assert again.returncode == 0, f"`make demo` after a killed one failed:\n{(tmp / 'demo-3.log').read_text()[-4000:]}"
        source = Instance(demo / "sandbox", "source")
        assert source.holds_store(DEFAULT_SEED) is None and source.holds_tables("bulk", bulk_rows(BULK_MB)) is None

        port = free_port()
        # the log servers on ports of their own (their defaults are fixed: another Airflow here may hold them)
        ui.env = {**env, "LASTLINE_UI_PORT": str(port), "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                  "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port())}
        ui.start()
        base = f"http://127.0.0.1:{port}"
        _wait_ui(base, ui)
        yield Newcomer(demo, env, base, ui, shots)
    finally:
        ui.stop()
        for inst in _sandboxes(demo):
            inst.destroy()


@pytest.fixture(scope="module")
def browser(newcomer):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = launch(pw)
        try:
            context = chromium.new_context(viewport={"width": 1400, "height": 1000})
            # `make ui`: every visitor an admin; the UI's own sign-in page sets the token, no password asked
            page = context.new_page()
            page.goto(f"{newcomer.base}/auth/token/login?next={newcomer.base}/")
            yield page
        finally:
            chromium.close()


@pytest.mark.parametrize("dag_id", WALK)
def test_every_dag_succeeds_from_its_form_with_its_defaults(newcomer, browser, dag_id):
    """Its trigger form, no field changed, Trigger; approved where it asks; the run succeeds."""
    newcomer.quiet()
    dialog = trigger_form(browser, newcomer.base, dag_id)
    dialog.screenshot(path=str(newcomer.shots / f"{dag_id}-form.png"))
    started = press_trigger(dialog, lambda: newcomer.runs(dag_id))
    run = follow(browser, newcomer.http, newcomer.base, dag_id, started["dag_run_id"], shots=newcomer.shots)
    browser.goto(f"{newcomer.base}{run_path(dag_id, run['dag_run_id'])}")
    browser.wait_for_timeout(1000)
    browser.screenshot(path=str(newcomer.shots / f"{dag_id}-run.png"), full_page=True)
    assert run["state"] == "success", newcomer.why(dag_id, run["dag_run_id"])


def test_a_failed_run_names_its_failed_task_and_reason_in_its_report(newcomer, browser):
    """logical_restore of a backup that does not exist: the run fails in preflight, and its Report tab says so."""
    newcomer.quiet()
    missing = f"{newcomer.destination}/{MISSING_BACKUP}"
    dialog = trigger_form(browser, newcomer.base, "logical_restore")
    dialog.get_by_role("button", name="Backup", exact=True).click()
    dialog.locator("#element_backup").fill(missing)
    started = press_trigger(dialog, lambda: newcomer.runs("logical_restore"))
    assert started["conf"]["backup"] == missing, started["conf"]
    newcomer.failed_on_purpose.add(started["dag_run_id"])
    run = follow(browser, newcomer.http, newcomer.base, "logical_restore", started["dag_run_id"], timeout=300, shots=newcomer.shots)
    assert run["state"] == "failed", newcomer.why("logical_restore", run["dag_run_id"])
    assert newcomer.tasks("logical_restore", run["dag_run_id"])["preflight"] == "failed"
    deadline = time.monotonic() + 60
    while not (report := report_text(browser, newcomer.base, "logical_restore", run["dag_run_id"], wait_for="body")).strip():
        assert time.monotonic() < deadline, "the Report tab stayed empty"
        browser.wait_for_timeout(1000)
    browser.screenshot(path=str(newcomer.shots / "failed-report.png"), full_page=True)
    assert "preflight" in report, f"the failed run's Report tab does not name the failed task (preflight):\n{report[:2000]}"
    assert MISSING_BACKUP in report and re.search(r"does not exist|not found|no such backup|there is no backup", report, re.I), \
        f"the failed run's Report tab does not say why (the backup does not exist):\n{report[:2000]}"


def _open_backups_page(page, base: str) -> None:
    """The Backups page, as a newcomer finds it: a link named Backups in the UI's navigation (at the top, or in
    one of its menus)."""
    page.goto(f"{base}/")
    page.get_by_role("link", name="Dags", exact=True).first.wait_for(timeout=30000)
    page.wait_for_timeout(1500)  # the plugins' entries join the navigation once the UI has read them
    for direct in (page.get_by_role("link", name="Backups", exact=True), page.get_by_role("button", name="Backups", exact=True),
                   page.locator("nav").get_by_text("Backups", exact=True), page.get_by_text("Backups", exact=True)):
        if direct.count():
            direct.first.click()
            return
    for menu in ("Browse", "Plugins", "Admin"):
        button = page.get_by_role("button", name=menu, exact=True)
        if not button.count():
            continue
        button.first.click()
        item = page.get_by_role("menuitem", name="Backups", exact=True)
        if item.count():
            item.first.click()
            return
        page.keyboard.press("Escape")
    raise AssertionError("no link named 'Backups' in the UI's navigation (the Backups page plugin is missing)")


def test_the_backups_page_opens_a_prefilled_restore_form_that_succeeds(newcomer, browser):
    """The Backups page lists the demo's backups; the newest logical backup's link opens logical_restore's form
    with that backup in its backup field; Trigger, approve: the restore succeeds."""
    from lastline.manifest import complete_backups
    from lastline.storage import open_storage

    newcomer.quiet()
    storage = open_storage(newcomer.destination)
    logical, physical = complete_backups(storage, "logical"), complete_backups(storage, "physical")
    assert logical and physical, (logical, physical)
    _open_backups_page(browser, newcomer.base)
    browser.wait_for_timeout(2000)
    frames = [browser.main_frame, *browser.main_frame.child_frames]
    text = "\n".join(f.locator("body").inner_text() for f in frames)
    browser.screenshot(path=str(newcomer.shots / "backups-page.png"), full_page=True)
    for backup_id in (logical[-1], physical[-1]):
        assert backup_id in text, f"the Backups page does not list {backup_id}:\n{text[:3000]}"
    newest = logical[-1]
    frame = next(f for f in frames if newest in f.locator("body").inner_text())
    link = frame.locator(f"tr:has-text('{newest}') a, li:has-text('{newest}') a").filter(has_text=re.compile("restore", re.I))
    assert link.count(), f"no restore link beside {newest} on the Backups page"
    before = {r["dag_run_id"] for r in newcomer.runs("logical_restore")}
    link.first.click()
    # Airflow 3.3's trigger form cannot be opened prefilled from a URL (apache/airflow#59231, reverted): the link opens
    # the plugin's restore page, the run's conf prefilled and editable, whose Trigger posts through Airflow's REST API
    deadline, form = time.monotonic() + 30, None
    while form is None:
        form = next((f for f in browser.frames if f.locator("#conf").count()), None)
        if form is None:
            assert time.monotonic() < deadline, "the restore link beside the newest backup opened no prefilled restore page"
            browser.wait_for_timeout(500)
    conf = json.loads(form.locator("#conf").input_value())
    assert str(conf.get("backup", "")).endswith(newest), f"the restore page opened from the Backups page holds {conf}, not {newest}"
    browser.screenshot(path=str(newcomer.shots / "backups-restore-form.png"), full_page=True)
    form.locator("#trigger").click()
    deadline = time.monotonic() + 60
    while not (new := [r for r in newcomer.runs("logical_restore") if r["dag_run_id"] not in before]):
        assert time.monotonic() < deadline, "the restore page's Trigger started no run"
        time.sleep(0.5)
    assert str(new[0]["conf"].get("backup", "")).endswith(newest), new[0]["conf"]
    run = follow(browser, newcomer.http, newcomer.base, "logical_restore", new[0]["dag_run_id"], shots=newcomer.shots)
    assert run["state"] == "success", newcomer.why("logical_restore", run["dag_run_id"])


def test_no_run_failed_but_the_one_failed_on_purpose(newcomer):
    """Runs the walk's runs started (a drill after each backup, a refresh after a logical one, the archive each
    minute) end well too."""
    newcomer.quiet()
    bad = [f"{dag_id} {r['dag_run_id']} {r['state']}" for dag_id in WALK for r in newcomer.runs(dag_id)
           if r["state"] == "failed" and r["dag_run_id"] not in newcomer.failed_on_purpose]
    assert not bad, bad


def test_stopping_the_ui_leaves_nothing_running(newcomer):
    """`make ui` stopped by its process group: none of what it started (api-server, scheduler, dag-processor,
    triggerer, task processes) is left."""
    newcomer.ui.members()
    started = set(newcomer.ui.seen) | {newcomer.ui.pid}
    assert len(started) >= 4, started
    newcomer.ui.stop()
    assert [pid for pid in started if alive(pid)] == [], "processes left running"
