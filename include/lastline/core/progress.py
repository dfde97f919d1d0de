"""One progress line for every long step: `label: done MB[/total MB], MB/s[, ETA]`, plus counts."""
from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)


class Progress:
    """Logs `label: done MB[/total MB], MB/s[, ETA]` at most every `every` seconds."""

    def __init__(self, label: str, total: int | None = None, every: float = 5.0) -> None:
        self.label, self.total, self.every = label, total, every
        self.start = self.last = time.monotonic()
        self.done = 0

    def add(self, n: int) -> None:
        """Count n more bytes and log if it is time."""
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            log.info("%s", self.line(now))

    def line(self, now: float | None = None) -> str:
        """One progress line in the house shape."""
        elapsed = max((now or time.monotonic()) - self.start, 1e-6)
        rate = self.done / 1e6 / elapsed
        text = f"{self.label}: {self.done / 1e6:,.1f} MB"
        if self.total:
            text += f" / {self.total / 1e6:,.1f} MB ({100 * self.done / self.total:.0f}%)"
        text += f", {rate:.1f} MB/s"
        if self.total and rate > 0 and self.done < self.total:
            text += f", ETA {(self.total - self.done) / 1e6 / rate:.0f} s"
        return text


