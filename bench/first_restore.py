"""A fresh clone to its first restore from the UI, timed as a newcomer lives it: `git clone` of the repository
into an empty temporary folder (nothing beside it), `make setup`, `make demo`, `make ui` in the background, then
in Debian's Chromium logical_restore's trigger form with its defaults, Trigger, Approve under Required actions,
until the run succeeds. Prints the wall time of each phase and from the clone to the restore's success, and
keeps a record in bench/records/first-restore-<time>.json.

    .venv/bin/python bench/first_restore.py [--repo PATH_OR_URL] [--bulk-mb N] [--keep]

Stops what it started (the UI by its process group, the demo's sandboxes by PID) and removes the clone (--keep
leaves it). The clone's `make setup` installs its venv from the pinned requirements through pip's configured
index or wheel folder; the Debian packages are taken as installed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "include"), str(ROOT / "tools")]

from lastline_dev.browser import chromium_missing, follow, launch, press_trigger, runs, trigger_form  # noqa: E402
from lastline_dev.deployment import Proc  # noqa: E402
from lastline_dev.sandbox import Instance, alive, free_port  # noqa: E402


def newcomer_env(bulk_mb: int | None) -> dict[str, str]:
    """A newcomer's shell: none of this checkout's Airflow or lastline settings, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "LASTLINE_")) and k != "PYTHONPATH"}
    if bulk_mb is not None:
        env["LASTLINE_DEMO_BULK_MB"] = str(bulk_mb)
    return env


def timed(phases: dict[str, float], name: str, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
    """Run one phase's command, its output to `log`; its wall time into `phases`; a failure ends the bench."""
    t0 = time.monotonic()
    with open(log, "w") as out:
        rc = subprocess.run(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    phases[name] = round(time.monotonic() - t0, 1)
    print(f"first_restore: {name:<8} {phases[name]:7.1f} s  ({' '.join(argv)})", flush=True)
    if rc:
        raise SystemExit(f"first_restore: {' '.join(argv)} failed ({rc}):\n{log.read_text()[-3000:]}")


def wait_ui(base: str, ui: Proc, timeout: float = 420) -> None:
    """The UI answers with a healthy scheduler and logical_restore parsed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ui.popen and ui.popen.poll() is not None:
            raise SystemExit(f"first_restore: `make ui` exited ({ui.popen.returncode}):\n{ui.tail()}")
        try:
            health = httpx.get(f"{base}/api/v2/monitor/health", timeout=10).json()
            if health["scheduler"]["status"] == "healthy" and \
                    httpx.get(f"{base}/api/v2/dags/logical_restore", timeout=10).status_code == 200:
                return
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(1)
    raise SystemExit(f"first_restore: `make ui` did not come up in {timeout} s:\n{ui.tail()}")


def restore_from_the_form(base: str, shots: Path) -> dict:
    """logical_restore from its form with its defaults, approved in the UI: the run at its end."""
    from playwright.sync_api import sync_playwright

    http = httpx.Client(base_url=base, timeout=120)  # `make ui`: every visitor an admin, no token
    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            page.goto(f"{base}/auth/token/login?next={base}/")
            dialog = trigger_form(page, base, "logical_restore")
            started = press_trigger(dialog, lambda: runs(http, "logical_restore"))
            return follow(page, http, base, "logical_restore", started["dag_run_id"], shots=shots)
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", default=str(ROOT), help="what to clone (default: this checkout's committed HEAD)")
    ap.add_argument("--bulk-mb", type=int, default=None, help="the demo's generated rows (default: the demo's own)")
    ap.add_argument("--keep", action="store_true", help="leave the clone (and its stopped sandboxes' files)")
    args = ap.parse_args(argv)
    if missing := chromium_missing():
        raise SystemExit(f"first_restore: {missing}")
    work = Path(tempfile.mkdtemp(prefix="lastline-first-restore-"))
    clone, logs = work / "lastline", work / "logs"
    logs.mkdir()
    env = newcomer_env(args.bulk_mb)
    phases: dict[str, float] = {}
    port = free_port()
    ui = Proc("ui", ["make", "--no-print-directory", "ui"],
              {**env, "LASTLINE_UI_PORT": str(port), "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
               "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port())}, logs / "ui.log")
    t0 = time.monotonic()
    state = "not run"
    try:
        timed(phases, "clone", ["git", "clone", "-q", args.repo, str(clone)], work, env, logs / "clone.log")
        timed(phases, "setup", ["make", "--no-print-directory", "setup"], clone, env, logs / "setup.log")
        timed(phases, "demo", ["make", "--no-print-directory", "demo"], clone, env, logs / "demo.log")
        t = time.monotonic()
        ui.argv = ["make", "--no-print-directory", "-C", str(clone), "ui"]  # Proc runs from this checkout: -C the clone
        ui.start()
        wait_ui(f"http://127.0.0.1:{port}", ui)
        phases["ui up"] = round(time.monotonic() - t, 1)
        print(f"first_restore: ui up    {phases['ui up']:7.1f} s  (make ui, until it answers)", flush=True)
        t = time.monotonic()
        run = restore_from_the_form(f"http://127.0.0.1:{port}", logs)
        phases["restore"] = round(time.monotonic() - t, 1)
        state = run["state"]
        print(f"first_restore: restore  {phases['restore']:7.1f} s  (logical_restore from its form, approved: {state})",
              flush=True)
    finally:
        total = round(time.monotonic() - t0, 1)
        ui.stop()
        left = [pid for pid in ui.seen if alive(pid)]
        root = clone / ".demo" / "sandbox"
        for inst in ([Instance(root, p.name) for p in root.iterdir() if p.is_dir()] if root.exists() else []):
            inst.destroy()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    record = {"bench": "first_restore", "at": datetime.now(UTC).isoformat(timespec="seconds"), "repo": args.repo,
              "bulk_mb": args.bulk_mb, "phases_s": phases, "total_s": total, "restore_state": state,
              "left_running": left, "cores": os.cpu_count(), "load_1m": os.getloadavg()[0]}
    out = ROOT / "bench" / "records" / f"first-restore-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"first_restore: a fresh clone to the first successful restore from the UI: {total:.1f} s "
          f"({total / 60:.1f} min; {state}); record {out.relative_to(ROOT)}")
    return 0 if state == "success" and not left else 1


if __name__ == "__main__":
    sys.exit(main())
