"""One progress line for every long step: `label: [counts, ]done MB[ / total MB (%)], MB/s[, ETA]`."""
from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)


def step_report(title: str, steps: dict[str, dict], total_bytes: int | None = None) -> tuple[str, float]:
    """The closing report of a pipeline of steps: seconds per step (and MB, MB/s where a step moved bytes),
    then the total; returns (the text, total seconds)."""
    total = sum(s.get("seconds", 0) for s in steps.values())
    lines = [title]
    for name, s in steps.items():
        mb, seconds = s.get("bytes", 0) / 1e6, s.get("seconds", 0)
        moved = f", {mb:,.1f} MB, {mb / seconds:.1f} MB/s" if mb and seconds else ""
        lines.append(f"  {name:<12} {seconds:8.1f} s{moved}")
    tail = f", {total_bytes / 1e6:,.1f} MB, {total_bytes / 1e6 / max(total, 1e-6):.1f} MB/s" if total_bytes else ""
    lines.append(f"  {'total':<12} {total:8.1f} s{tail}")
    return "\n".join(lines), total


class Progress:
    """Counts bytes (`add`) and named things (`count`: chunks, rows, tables...) and logs one line in the house
    shape at most every `every` seconds. A count with a total prints as `3/12 chunks`; one named `*_bytes`
    prints in MB. The ETA comes from the bytes when their total is known, else from the `eta_by` count."""

    def __init__(self, label: str, total: int | None = None, every: float = 5.0,
                 counts: dict[str, int | None] | None = None, eta_by: str | None = None) -> None:
        self.label, self.total, self.every, self.eta_by = label, total, every, eta_by
        self.totals = dict(counts or {})
        self.counts = {name: 0 for name in self.totals}
        self.start = self.last = time.monotonic()
        self.done = 0

    def add(self, n: int) -> None:
        """Count n more bytes and log if it is time."""
        self.done += n
        self.tick()

    def count(self, **more: int) -> None:
        """Add to the named counts and log if it is time."""
        for name, n in more.items():
            self.counts[name] = self.counts.get(name, 0) + n
        self.tick()

    def tick(self) -> None:
        """Log the line if `every` seconds have passed since the last one."""
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            log.info("%s", self.line(now))

    def line(self, now: float | None = None, final: bool = False) -> str:
        """One progress line in the house shape."""
        elapsed = max((now or time.monotonic()) - self.start, 1e-6)
        rate = self.done / 1e6 / elapsed
        parts = []
        for name, value in self.counts.items():
            if name.endswith("_bytes"):
                parts.append(f"{value / 1e6:,.1f} MB {name[:-6]}")
            else:
                total = self.totals.get(name)
                parts.append(f"{value:,}/{total:,} {name}" if total else f"{value:,} {name}")
        text = f"{self.label}: " + "".join(p + ", " for p in parts) + f"{self.done / 1e6:,.1f} MB"
        if self.total:
            text += f" / {self.total / 1e6:,.1f} MB ({100 * self.done / self.total:.0f}%)"
        text += f", {rate:.1f} MB/s"
        if final:
            return text
        if self.total and rate > 0 and self.done < self.total:
            text += f", ETA {(self.total - self.done) / 1e6 / rate:.0f} s"
        elif self.eta_by and self.totals.get(self.eta_by) and 0 < self.counts[self.eta_by] < (self.totals[self.eta_by] or 0):
            done, total = self.counts[self.eta_by], self.totals[self.eta_by] or 0
            text += f", ~{(total - done) * elapsed / done:.0f} s left (estimated {self.eta_by})"
        return text


def plural(n: int, noun: str) -> str:
    """`1 work unit`, `2 work units`, `1,024 tables`: a count with its noun, thousands separated."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"
