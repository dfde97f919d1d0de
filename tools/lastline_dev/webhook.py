"""A webhook receiver on loopback for tests: where lastline's alerts (the `lastline_alerts` connection) go."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Webhook(ThreadingHTTPServer):
    """A webhook on loopback that keeps every JSON body POSTed to it."""

    def __init__(self) -> None:
        self.received: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                outer.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def wait_for(self, event: str, timeout: float = 120, **fields: str) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for body in self.received:
                if body.get("event") == event and all(body.get(k) == v for k, v in fields.items()):
                    return body
            time.sleep(0.5)
        raise AssertionError(f"no {event!r} alert in {timeout} s; received: {self.received}")
