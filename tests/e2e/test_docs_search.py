"""The documentation's search finds the runbooks: what a DBA types at 3am ("restore one database", "roll back",
"rebuild replica") brings up the runbook for that job first. The site is built as `make docs` builds it and
searched in a real browser (Debian's Chromium through Playwright), with the theme's own search. The runbooks'
front matter boosts them (`search: boost`): a short page that names a word often would come first otherwise."""
from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # a real browser, end to end (not part of make test-fast)

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# what is typed -> the page that must come first
QUERIES = {
    "restore one database": "runbooks/restore-one-database/",
    "roll back": "runbooks/roll-back-to-before-a-mistake/",
    "point in time": "runbooks/roll-back-to-before-a-mistake/",
    "broken replica": "runbooks/rebuild-a-replica/",
    "restore failed": "runbooks/restore-failed-half-way/",
    "refresh staging": "runbooks/refresh-staging/",
    "rebuild replica": "runbooks/rebuild-a-replica/",
    "grants": "grants/",
}


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The built site, served on a loopback port (stopped at the end)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"the search test needs {CHROMIUM} (make setup installs Debian's chromium)")
    out = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)], cwd=ROOT, check=True)
    handler = functools.partial(Quiet, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    thread.join()


def _search(page, query: str, site: str) -> list[str]:
    """The result pages of `query`, best first: the page opened with `?q=`, which the theme's search runs as soon as
    its worker has loaded the index (typing into the box before then is not run again)."""
    page.goto(f"{site}?{urllib.parse.urlencode({'q': query})}")
    links = page.locator(".md-search-result__item > a.md-search-result__link")
    links.first.wait_for(timeout=120_000)  # a busy machine
    return [h.removeprefix(site) for h in links.evaluate_all("els => els.map(e => e.href)")]


def test_what_a_dba_types_finds_the_runbook_first(site):
    from playwright.sync_api import sync_playwright

    found: dict[str, list[str]] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})  # the search box in the header
            for query in QUERIES:
                found[query] = _search(page, query, site)
        finally:
            browser.close()
    wrong = {q: f"first {found[q][:3]}, want {want}" for q, want in QUERIES.items() if not found[q] or found[q][0] != want}
    assert not wrong, wrong
