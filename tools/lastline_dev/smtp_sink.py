"""A mail server on loopback for tests: it speaks enough SMTP (EHLO/HELO, MAIL, RCPT, DATA, QUIT, RSET, NOOP) to take
the messages an SMTP client sends, and keeps them (no TLS, no authentication: a test's own sink)."""
from __future__ import annotations

import email
import socketserver
import threading
from email.message import Message


class _Handler(socketserver.StreamRequestHandler):
    def _say(self, line: str) -> None:
        self.wfile.write(line.encode() + b"\r\n")

    def handle(self) -> None:
        self._say("220 lastline-test-sink")
        sender, rcpts = "", []
        while True:
            raw = self.rfile.readline()
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            verb = line.split(" ", 1)[0].upper()
            if verb in ("EHLO", "HELO"):
                self._say("250 lastline-test-sink")
            elif verb == "MAIL":
                sender, rcpts = line.split(":", 1)[1].strip(" <>"), []
                self._say("250 OK")
            elif verb == "RCPT":
                rcpts.append(line.split(":", 1)[1].strip(" <>"))
                self._say("250 OK")
            elif verb == "DATA":
                self._say("354 end with <CRLF>.<CRLF>")
                body = []
                while (chunk := self.rfile.readline()) not in (b".\r\n", b".\n", b""):
                    body.append(chunk[1:] if chunk.startswith(b"..") else chunk)
                self.server.received.append((sender, rcpts, email.message_from_bytes(b"".join(body))))  # type: ignore[attr-defined]
                self._say("250 OK")
            elif verb == "QUIT":
                self._say("221 bye")
                return
            else:
                self._say("250 OK")


class SmtpSink(socketserver.ThreadingTCPServer):
    """`SmtpSink()` listens on a free loopback port (`.port`); `.received` holds (from, to, message) tuples."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[tuple[str, list[str], Message]] = []
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()
