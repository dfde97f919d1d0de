"""How far a run's conf may push a server: every knob that can harm one has a bound set by the deployment (a
`LASTLINE_*` setting) or by the server's connection (an extra of the same meaning, which wins for that server),
with a safe default.

A conf moves a knob only towards less impact, as the masking rules do (a revealing rule comes only from the
deployment): a harsher value is refused at once, naming the knob, the bound and where the bound is set. `parallel`
is also held within what the server's connections leave free (`free_connections`), which is a measurement of the
moment rather than a choice of the conf: fewer connections are taken, with a warning, instead of failing a run.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from lastline.core.errors import ConfigError, PreflightError, ServerError
from lastline.core.plans import safety_flag
from lastline.core.servers import Server

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Setting:
    """One bound: its deployment setting (LASTLINE_<env>), its connection extra and its default."""

    env: str
    extra: str
    default: str


KILL = Setting("ALLOW_KILL_LONG_QUERIES", "allow_kill_long_queries", "false")
GUARD_FLOOR = Setting("MIN_LONG_QUERY_GUARD", "min_long_query_guard", "60")  # statements younger are never killed
WAIT_CEILING = Setting("MAX_LONG_QUERY_WAIT", "max_long_query_wait", "1800")
LOCK_CEILING = Setting("MAX_LOCK_TIMEOUT", "max_lock_timeout", "0.5")  # the longest a write may wait on a lock attempt
FTWRL = Setting("ALLOW_FTWRL", "allow_ftwrl", "false")  # where BACKUP STAGE exists
PARALLEL_CEILING = Setting("MAX_PARALLEL", "max_parallel", "16")
RESERVE = Setting("CONNECTION_RESERVE", "connection_reserve", "10")  # connections always left to the application
READ_CEILING = Setting("MAX_READ_MB_PER_S", "max_read_mb_per_s", "0")  # 0: the deployment sets no cap
PRIORITY_CEILING = Setting("MAX_PRIORITY", "max_priority", "low")
LAG_CEILING = Setting("MAX_REPLICA_LAG", "max_replica_lag", "3600")  # 0: any lag, stopped replication too
REPLAY_CEILING = Setting("MAX_REPLAY_THREADS", "max_replay_threads", "16")
GENTLEST_FIRST = ("idle", "low", "normal")  # priorities, from the least impact to the most


def setting(server: Server | None, s: Setting) -> tuple[str, str]:
    """The bound's value as text and where it is set (the connection's extra, the deployment, or lastline's default)."""
    limits = (server.limits or {}) if server is not None else {}
    if limits.get(s.extra) not in (None, ""):
        return str(limits[s.extra]).strip(), f"the connection {server.conn_id!r}'s extra {s.extra}"  # type: ignore[union-attr]
    value = os.environ.get(f"LASTLINE_{s.env}", "").strip()
    if value:
        return value, f"the deployment setting LASTLINE_{s.env}"
    return s.default, (f"lastline's default (the deployment setting LASTLINE_{s.env}, or the server connection's extra "
                       f"{s.extra}, sets another)")


def number(server: Server | None, s: Setting) -> tuple[float, str]:
    """A numeric bound and where it is set; a value that is no number is refused, naming where it is."""
    text, where = setting(server, s)
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{where} is {text!r}: write a number.") from None
    if not 0 <= value < float("inf"):
        raise ConfigError(f"{where} is {text!r}: write a number of at least 0.")
    return value, where


def allowed(server: Server | None, s: Setting) -> tuple[bool, str]:
    """A yes/no bound and where it is set (read strictly: a typo is refused, never read as no or yes)."""
    text, where = setting(server, s)
    try:
        return bool(safety_flag(text, s.extra, False)), where
    except ConfigError:
        raise ConfigError(f"{where} is {text!r}: write true or false.") from None


def _harsher(knob: str, asked: Any, bound: str, where: str, gentler: str) -> PreflightError:
    return PreflightError(f"{knob}={asked} is harsher than {bound}, set by {where}: a run's conf may only make a run gentler "
                          f"on a server. {gentler}, or change the bound where it is set.")


def kill_long_queries(server: Server, asked: bool, guard: float) -> bool:
    """`kill_long_queries` only where the deployment or the connection allows it, never on a protected server, and
    only with a `long_query_guard` of at least the deployment's floor (younger statements are never killed)."""
    if not asked:
        return False
    if server.protected:
        raise PreflightError(f"kill_long_queries on {server.describe()}, which its connection marks protected (production): "
                             "lastline never kills a protected server's statements. Run without kill_long_queries.")
    ok, where = allowed(server, KILL)
    if not ok:
        raise _harsher("kill_long_queries", "true", "what is allowed (killing statements is off)", where,
                       "Run without kill_long_queries")
    floor, where = number(server, GUARD_FLOOR)
    if guard < floor:
        raise _harsher("long_query_guard", f"{guard:g}", f"the floor of {floor:g} s for statements it may kill", where,
                       f"Use a long_query_guard of {floor:g} or more")
    return True


def long_query_wait(server: Server, asked: float) -> float:
    """`long_query_wait` at most the deployment's ceiling (the lock is retried, each attempt holding writes a moment)."""
    ceiling, where = number(server, WAIT_CEILING)
    if asked > ceiling:
        raise _harsher("long_query_wait", f"{asked:g}", f"the ceiling of {ceiling:g} s", where, f"Use {ceiling:g} or less")
    return asked


def lock_timeout(server: Server, asked: float) -> float:
    """`lock_timeout` (the longest one lock attempt, so any write behind it, waits) at most the deployment's ceiling."""
    ceiling, where = number(server, LOCK_CEILING)
    if asked > ceiling:
        raise _harsher("lock_timeout", f"{asked:g}", f"the ceiling of {ceiling:g} s", where, f"Use {ceiling:g} or less")
    return asked


def lock_method(server: Server, asked: str, has_stages: bool) -> str:
    """`lock_method: ftwrl` (every write waits while it is held) only where it is allowed or the server has no
    backup stages (MySQL, MariaDB before 10.4.1: the only method there)."""
    if asked == "ftwrl" and has_stages:
        ok, where = allowed(server, FTWRL)
        if not ok:
            raise _harsher("lock_method", "ftwrl", "what is allowed where BACKUP STAGE exists (ftwrl is off)", where,
                           "Use auto or backup_stage, which hold commits for milliseconds only")
    return asked


def parallel(server: Server | None, asked: int, knob: str = "parallel") -> int:
    """`parallel` at most the deployment's ceiling (refused beyond it)."""
    ceiling, where = number(server, PARALLEL_CEILING)
    if asked > ceiling:
        raise _harsher(knob, asked, f"the ceiling of {ceiling:g}", where, f"Use {int(ceiling)} or less")
    return asked


def free_connections(server: Server, wanted: int, own: int = 0, label: str = "connections") -> int:
    """`wanted` connections, or fewer: at most what the server's max_connections leaves free beyond its threads
    connected and the reserve, and what the account's max_user_connections leaves (`own`: the other connections
    this task opens beside them). Clamped with a warning; none free is a transient ServerError (the task retries)."""
    reserve, where = number(server, RESERVE)
    with server.session() as cur:
        cur.execute("SELECT @@GLOBAL.max_connections, @@SESSION.max_user_connections, @@GLOBAL.max_user_connections")
        total, user_cap, global_user_cap = (int(x or 0) for x in cur.fetchone())
        cur.execute("SHOW GLOBAL STATUS LIKE 'Threads_connected'")  # MySQL 8 has no information_schema.GLOBAL_STATUS
        connected = int(cur.fetchone()[1])
        cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = SUBSTRING_INDEX(USER(), '@', 1)")
        mine = int(cur.fetchone()[0])
    # this session is one of `connected` and of `mine`, and it ends before the work starts
    free = total - (connected - 1) - int(reserve) - own
    cap = user_cap or global_user_cap
    if cap:
        free = min(free, cap - (mine - 1) - own)
    if free < 1:
        raise ServerError(f"{server.describe()} has no connection to spare: max_connections {total}, {connected} connected, "
                          f"{int(reserve)} kept for the application (reserve set by {where})"
                          + (f", max_user_connections {cap} with {mine} open" if cap else "")
                          + ". The task retries; raise max_connections or lower the load.")
    if wanted > free:
        log.warning("%s: %d %s asked, %d taken: max_connections %d, %d connected, %d kept free for the application%s",
                    server.describe(), wanted, label, free, total, connected, int(reserve),
                    f", max_user_connections {cap} with {mine} open" if cap else "")
        return free
    return wanted


def read_cap(server: Server, asked: float) -> float:
    """`max_read_mb_per_s` within the deployment's cap: 0 (no cap of the run's own) takes the deployment's; a
    higher cap is refused."""
    ceiling, where = number(server, READ_CEILING)
    if not ceiling:
        return asked
    if not asked:
        return ceiling
    if asked > ceiling:
        raise _harsher("max_read_mb_per_s", f"{asked:g}", f"the cap of {ceiling:g} MB/s", where, f"Use {ceiling:g} or less")
    return asked


def priority(server: Server, asked: str) -> str:
    """`priority` no harsher than the deployment's (idle, then low, then normal)."""
    ceiling, where = setting(server, PRIORITY_CEILING)
    if ceiling not in GENTLEST_FIRST:
        raise ConfigError(f"{where} is {ceiling!r}: use one of {', '.join(GENTLEST_FIRST)}.")
    if asked in GENTLEST_FIRST and GENTLEST_FIRST.index(asked) > GENTLEST_FIRST.index(ceiling):
        gentler = " or ".join(GENTLEST_FIRST[:GENTLEST_FIRST.index(ceiling) + 1])
        raise _harsher("priority", asked, f"the harshest priority allowed, {ceiling}", where, f"Use {gentler}")
    return asked


def replica_lag(server: Server, asked: float) -> float:
    """`max_replica_lag` at most the deployment's ceiling; 0 (any lag, stopped replication too) only where the
    ceiling is 0."""
    ceiling, where = number(server, LAG_CEILING)
    if ceiling and (not asked or asked > ceiling):
        raise _harsher("max_replica_lag", f"{asked:g}" + (" (any lag)" if not asked else ""),
                       f"the ceiling of {ceiling:g} s", where, f"Use a lag of at most {ceiling:g} s")
    return asked


def replay_threads(server: Server, wanted: int) -> int:
    """The applier threads a replay starts on the target: at most the deployment's ceiling (clamped, with a
    warning: the count is derived from `parallel`, which is checked against its own ceiling)."""
    ceiling, where = number(server, REPLAY_CEILING)
    if wanted > ceiling:
        log.warning("replay: %d applier threads wanted, %d taken (the ceiling set by %s)", wanted, int(ceiling), where)
        return max(1, int(ceiling))
    return wanted
