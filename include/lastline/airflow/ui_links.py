"""Links from lastline's plugin pages into Airflow's own UI.

Airflow 3.3 shows a plugin's page in a frame sandboxed without `allow-top-navigation`: a link with target="_top"
does nothing there. `OPEN_IN_AIRFLOW` (a <script>) asks the UI around the frame to route itself (its history and a
popstate, as its router listens to), and opens the URL in this window where the page is not framed by the UI.
"""
from __future__ import annotations

OPEN_IN_AIRFLOW = """<script>
// openInAirflow(url): show `url` (a path of Airflow's UI, under its base URL) in the UI around this frame
function openInAirflow(url) {
  try {
    if (window.parent !== window && window.parent.location.origin === window.location.origin) {
      const idx = ((window.parent.history.state || {}).idx || 0) + 1;
      window.parent.history.pushState({usr: null, key: Math.random().toString(36).slice(2, 10), idx: idx}, "", url);
      window.parent.dispatchEvent(new PopStateEvent("popstate", {state: window.parent.history.state}));
      return;
    }
  } catch (e) { /* not inside Airflow's UI: this window goes there */ }
  window.location.href = url;
}
// a link of class "airflow" opens in the UI around the frame
document.addEventListener("click", (event) => {
  const link = event.target.closest && event.target.closest("a.airflow");
  if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
  event.preventDefault(); openInAirflow(link.getAttribute("href"));
});
</script>"""
