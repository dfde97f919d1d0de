"""Airflow's UI in a real browser (Debian's Chromium driven by Playwright), for the browser tests and benches:
how it is launched, and the few steps an operator takes in it (a DAG's trigger form, a field of it, the Trigger
button, an approval under Required actions, a run's Report tab)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

CHROMIUM = "/usr/bin/chromium"
# headless, and none of the background traffic a closed network refuses
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_missing() -> str | None:
    """None when the browser tests can run here, else why not."""
    if not Path(CHROMIUM).exists():
        return f"the browser test needs {CHROMIUM} (make setup installs Debian's chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the browser test needs playwright (make setup installs it from requirements.txt)"
    return None


def launch(pw: Any) -> Any:
    """Chromium, headless, from Debian's package (Playwright downloads no browser)."""
    return pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def run_path(dag_id: str, run_id: str) -> str:
    """A run's page in the UI, relative to its base."""
    return f"/dags/{dag_id}/runs/{quote(run_id, safe='')}"


def field(dialog: Any, name: str) -> Any:
    """A Param's field in the trigger form (its label, input and help), whatever kind of input it has."""
    return dialog.locator(f"div[role='group']:has([id$='element_{name}'], [name='element_{name}'])").last


def trigger_form(page: Any, base: str, dag_id: str) -> Any:
    """Open `dag_id`'s trigger form from its page (the dialog)."""
    page.goto(f"{base}/dags/{dag_id}")
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    dialog.wait_for()
    return dialog


def press_trigger(dialog: Any, runs: Any, timeout: float = 60) -> dict:
    """Press the form's Trigger button; the run it started (`runs()` lists the DAG's runs, newest first or not)."""
    before = {r["dag_run_id"] for r in runs()}
    dialog.get_by_role("button", name="Trigger", exact=True).click()
    deadline = time.monotonic() + timeout
    while not (new := [r for r in runs() if r["dag_run_id"] not in before]):
        if time.monotonic() > deadline:
            raise AssertionError(f"the form's Trigger started no run in {timeout:g} s: {dialog.inner_text()[-1500:]}")
        time.sleep(0.5)
    return new[0]


def approve(page: Any, base: str, dag_id: str, run_id: str, task_id: str = "approve") -> str:
    """Approve a waiting task under its Required actions tab, as a person does; returns the text they were shown."""
    page.goto(f"{base}{run_path(dag_id, run_id)}/tasks/{task_id}/required_actions")
    button = page.get_by_role("button", name="Approve", exact=True)
    button.wait_for(timeout=30000)
    shown = page.locator("main").inner_text() if page.locator("main").count() else page.inner_text("body")
    button.click()
    page.get_by_text("response successful").or_(page.get_by_text("Approval Received")).first.wait_for(timeout=30000)
    return shown


def runs(http: Any, dag_id: str) -> list[dict]:
    """A DAG's runs, newest first (REST, through `http`: an httpx client on the UI, signed in or all admins)."""
    r = http.get(f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100, "order_by": "-run_after"})
    r.raise_for_status()
    return list(r.json()["dag_runs"])


def task_states(http: Any, dag_id: str, run_id: str) -> dict[str, str]:
    r = http.get(f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances", params={"limit": 1000})
    r.raise_for_status()
    return {ti["task_id"]: ti["state"] for ti in r.json()["task_instances"]}


READING_SECONDS = 8  # how long a person reads the approval before answering it (see follow)


def follow(page: Any, http: Any, base: str, dag_id: str, run_id: str, timeout: float = 600,
           shots: Path | None = None) -> dict:
    """Follow a run to its end, approving in the UI each task that waits for a person; the run at its end.

    Each request is answered after READING_SECONDS, as a person who reads what will be replaced would: Airflow 3.3
    can fail a deferred task whose answer arrives before the scheduler has taken in its pause (a stale executor
    event, apache/airflow#72716); the approval step then retries and asks again, and a new try is answered again."""
    deadline = time.monotonic() + timeout
    answered: set[tuple[str, int]] = set()
    seen: dict[tuple[str, int], float] = {}
    while True:
        run = next(r for r in runs(http, dag_id) if r["dag_run_id"] == run_id)
        if run["state"] in ("success", "failed"):
            return run
        r = http.get(f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances", params={"limit": 1000})
        r.raise_for_status()
        tis = r.json()["task_instances"]
        states = {ti["task_id"]: ti["state"] for ti in tis}
        for ti in tis:
            key = (ti["task_id"], int(ti.get("try_number") or 0))
            if ti["state"] != "awaiting_input" or key in answered:
                continue
            if time.monotonic() - seen.setdefault(key, time.monotonic()) < READING_SECONDS:
                continue
            shown = approve(page, base, dag_id, run_id, key[0])
            if shots:
                page.screenshot(path=str(shots / f"{dag_id}-{key[0]}.png"), full_page=True)
            if "Approve" not in shown:
                raise AssertionError(f"the approval page of {dag_id}.{key[0]} showed no Approve: {shown[:2000]}")
            answered.add(key)
        if time.monotonic() > deadline:
            raise AssertionError(f"{dag_id} {run_id} still {run['state']} after {timeout:g} s: {states}")
        time.sleep(2)


def report_text(page: Any, base: str, dag_id: str, run_id: str, wait_for: str = "h2", timeout: float = 30000) -> str:
    """A run's Report tab (the plugin's page in an iframe inside the run's page): its text."""
    page.goto(f"{base}{run_path(dag_id, run_id)}")
    page.get_by_role("tab", name="Report").or_(page.get_by_role("link", name="Report")).first.click()
    frame = page.frame_locator("iframe").first
    frame.locator(wait_for).first.wait_for(timeout=timeout)
    return str(frame.locator("body").inner_text())
