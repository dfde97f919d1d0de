"""airflow.ui_links: the script a plugin page includes so a link of class "airflow" opens in Airflow's own UI around
the sandboxed frame (a history entry and a popstate its router listens to), or in this window where the page is not
framed by the UI; a click with a modifier is left to the browser. The script runs in node, against the few browser
objects it touches (skipped where node is not installed)."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from lastline.airflow.ui_links import OPEN_IN_AIRFLOW

NODE = shutil.which("node")
HARNESS = """
const seen = {pushed: [], dispatched: [], prevented: 0};
class PopStateEvent { constructor(type, init) { this.type = type; this.state = init.state; } }
function makeWindow(framed, origin) {
  const self = {location: {origin: "http://ui", href: "/plugin"}};
  const parent = framed ? {location: {origin: origin}, history: {state: {idx: 4},
      pushState(state, title, url) { seen.pushed.push({idx: state.idx, url: url}); this.state = state; }},
      dispatchEvent(event) { seen.dispatched.push(event.type); }} : self;
  self.parent = parent;
  return self;
}
let listener = null;
const document = {addEventListener(type, fn) { if (type === "click") listener = fn; }};
const [framed, origin, clicks] = JSON.parse(process.argv[1]);
const window = makeWindow(framed, origin);
%s
for (const click of clicks) {
  const link = click.airflow ? {getAttribute: () => click.href} : null;
  listener({target: {closest: (sel) => (sel === "a.airflow" ? link : null)}, button: click.button || 0,
            ctrlKey: !!click.ctrl, metaKey: false, shiftKey: false, preventDefault() { seen.prevented += 1; }});
}
console.log(JSON.stringify({...seen, href: window.location.href}));
"""


def run(framed: bool, origin: str, clicks: list[dict]) -> dict:
    script = OPEN_IN_AIRFLOW.removeprefix("<script>").removesuffix("</script>")
    out = subprocess.run([str(NODE), "-e", HARNESS % script, json.dumps([framed, origin, clicks])],
                         capture_output=True, text=True, check=True, timeout=30)
    return json.loads(out.stdout)


pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


def test_inside_airflows_ui_the_ui_routes_itself():
    seen = run(True, "http://ui", [{"airflow": True, "href": "/dags/logical_backup"}])
    assert seen["pushed"] == [{"idx": 5, "url": "/dags/logical_backup"}]
    assert seen["dispatched"] == ["popstate"] and seen["prevented"] == 1 and seen["href"] == "/plugin"


@pytest.mark.parametrize(("framed", "origin"), [(False, ""), (True, "http://elsewhere")],
                         ids=["not-framed", "framed-by-another-origin"])
def test_elsewhere_this_window_goes_there(framed, origin):
    seen = run(framed, origin, [{"airflow": True, "href": "/dags/logical_backup"}])
    assert seen["pushed"] == [] and seen["href"] == "/dags/logical_backup"


@pytest.mark.parametrize("click", [{"airflow": False, "href": "/x"}, {"airflow": True, "href": "/x", "ctrl": True},
                                   {"airflow": True, "href": "/x", "button": 1}],
                         ids=["another-link", "with-ctrl", "middle-button"])
def test_other_clicks_are_left_to_the_browser(click):
    seen = run(True, "http://ui", [click])
    assert (seen["pushed"], seen["prevented"], seen["href"]) == ([], 0, "/plugin")
