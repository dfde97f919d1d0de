"""How much of the source's host a backup may take: a CPU and I/O priority and a cap on the bytes it reads.

`priority` (normal, low, idle) runs the backup's own processes (the compressor, the dump workers, pv) under
`nice` and `ionice`, and mariabackup under `ionice` alone, never idle (it holds the backup locks for its last
copies): the server's threads come first for the CPU and, with a scheduler that honours I/O classes (bfq; not
mq-deadline or none), for the disk. For a logical backup the server's own threads serving the reads keep their
priority: `max_read_mb_per_s` and `parallel` bound those. `ionice -t`: where I/O classes cannot be set, the
command runs anyway. `max_read_mb_per_s` caps the bytes read from the
server: for a physical backup `pv -L` on the uncompressed stream (mariabackup reads no faster than the
pipe drains), for a logical backup the rows the workers fetch (each paces its connection to its share,
and the server's send blocks).
"""
from __future__ import annotations

from lastline.core.errors import PreflightError

# nice and ionice: `low` is best-effort at the lowest level (never starved), `idle` only runs when the disk has
# nothing else to do (a backup may then never finish on a busy disk)
PRIORITIES: dict[str, tuple[list[str], list[str]]] = {
    "normal": ([], []),
    "low": (["nice", "-n", "10"], ["ionice", "-t", "-c", "2", "-n", "7"]),
    "idle": (["nice", "-n", "19"], ["ionice", "-t", "-c", "3"]),
}
MAX_READ_MB_PER_S = (0.1, 100_000.0)  # a cap outside these bounds is refused (each worker must wake well within net_write_timeout)
DEFAULT_PRIORITY = "low"


def prefix(priority: str, cpu: bool = True) -> list[str]:
    """The command words that run a command at `priority` (nothing for normal). `cpu=False`: its I/O only, for a
    process that holds the server's backup locks a moment (mariabackup): starved of CPU while it holds them, it
    would make the writes that wait on them wait longer."""
    try:
        nice, io = PRIORITIES[priority]
    except KeyError:
        raise PreflightError(f"priority {priority!r}: use one of {', '.join(PRIORITIES)}.") from None
    if not cpu and priority == "idle":  # the lock holder must not wait for an idle disk either
        io = PRIORITIES["low"][1]
    return (list(nice) if cpu else []) + list(io)


def tools(priority: str, max_read_mb_per_s: float = 0, pv: bool = True) -> list[str]:
    """The commands a backup at `priority` (and with a read cap through pv) needs on its host."""
    words = prefix(priority)
    needed = [w for w in ("nice", "ionice") if w in words]
    return needed + (["pv"] if pv and max_read_mb_per_s else [])


def read_cap(mb_per_s: float) -> float:
    """A `max_read_mb_per_s` checked: 0 (no cap) or within MAX_READ_MB_PER_S."""
    low, high = MAX_READ_MB_PER_S
    if mb_per_s and not low <= mb_per_s <= high:
        raise PreflightError(f"max_read_mb_per_s={mb_per_s:g}: use 0 (no cap) or {low:g} to {high:g} MB/s.")
    return mb_per_s


def pv_argv(max_read_mb_per_s: float) -> list[str]:
    """`pv` capping a stream at `max_read_mb_per_s` (MB, 10^6 bytes, per second)."""
    return ["pv", "-q", "-L", str(int(max_read_mb_per_s * 1e6))]


def worker_share(max_read_mb_per_s: float, workers: int) -> int:
    """Bytes per second each of `workers` dump connections may read (0: no cap)."""
    if not max_read_mb_per_s:
        return 0
    return max(1, int(max_read_mb_per_s * 1e6 / max(1, workers)))
