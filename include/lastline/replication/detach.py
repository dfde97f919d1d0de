"""Detach a server from replication for good: check, detach, verify (also after a restart), and
optionally open it for writes. Each function is one task of the `detach_replication` task group."""
from __future__ import annotations

import logging
import time

from lastline import connections
from lastline.core.errors import ReplicationError
from lastline.core.option_files import Setting
from lastline.core.plans import safety_flag
from lastline.core.servers import Server
from lastline.replicas import flavour
from lastline.replication.plans import Detached, DetachPlan, ReadOnly, StillDetached

log = logging.getLogger(__name__)


def _shown(s: Setting) -> str:
    value = "****" if "password" in s.name else s.value
    return f"{s.where()}: {s.name}={value}"


def _switch(value: object, name: str, default: bool) -> bool:
    """A Param that switches a step on or off, as a template renders it: true or false (JSON or words), empty (None,
    rendered "None") for its default; anything else refused by name, never read as false."""
    if isinstance(value, str) and value.strip().lower() in ("none", "null"):
        value = None
    return bool(safety_flag(value, name, default, of="the Param"))


def check(target_conn_id: str, restart: object = True, read_only_off: object = False) -> DetachPlan:
    """Read-only: the server's flavour and connections, and no master-* line in its option files."""
    server = connections.server(target_conn_id)
    server.refuse_if_protected("detaches, restarts or opens it for writes")
    stale = flavour.stale_master_settings(server)
    if stale:
        raise ReplicationError(
            f"{server.describe()} reads option files that name a replication source; they would re-attach it "
            "at the next restart:\n  " + "\n  ".join(map(_shown, stale))
            + "\nRemove these lines, then run the detach again. Nothing was changed."
        )
    with server.session() as cur:
        fl = flavour.flavour(cur)
        statuses = flavour.replica_status(cur, fl)
    names = [str(s.get("Connection_name") or "") for s in statuses]
    plan = DetachPlan(
        target_conn_id=server.conn_id,
        flavour=fl.describe(),
        connections=[flavour.describe_status(s) for s in statuses],
        statements=flavour.detach_statements(fl, names),
        restart=_switch(restart, "restart", True),
        read_only_off=_switch(read_only_off, "read_only_off", False),
    )
    log.info("%s (%s): %d replication connection(s)%s; will run: %s", server.describe(), plan.flavour,
             len(statuses), "".join(f"\n  {c}" for c in plan.connections), "; ".join(plan.statements))
    return plan


def detach(plan: DetachPlan) -> Detached:
    """Stop and reset every replication connection (version-aware), clear gtid_slave_pos."""
    return Detached(flavour.detach(connections.server(plan.target_conn_id)))


def _require_clean(server: Server, when: str) -> None:
    left = flavour.leftovers(server)
    if left:
        raise ReplicationError(f"{server.describe()} is not detached {when}: " + "; ".join(left))


def verify(plan: DetachPlan, detached: Detached | None = None) -> StillDetached:
    """No replication connection and an empty gtid_slave_pos, now and (with `restart`) after a restart."""
    server = connections.server(plan.target_conn_id)
    _require_clean(server, "after the detach")
    seconds = 0.0
    if plan.restart:
        t0 = time.monotonic()
        server.stop_service()
        server.start_service()
        seconds = time.monotonic() - t0
        _require_clean(server, "after a restart")
        log.info("restarted %s in %.1f s: still detached", server.describe(), seconds)
    log.info("verify ok: %s has no replication connection and an empty gtid_slave_pos", server.describe())
    return StillDetached(plan.restart, round(seconds, 3))


def open_for_writes(plan: DetachPlan, verified: StillDetached | None = None) -> ReadOnly:
    """With read_only_off: SET GLOBAL read_only=OFF, last; warns about option files that set it back."""
    server = connections.server(plan.target_conn_id)
    if not plan.read_only_off:
        current = server.variables("read_only")["read_only"]
        log.info("read_only_off not asked: %s keeps read_only=%s", server.describe(), current)
        return ReadOnly(current)
    server.query("SET GLOBAL read_only = OFF")
    sticky = [s for s in flavour.server_settings(server)
              if s.name == "read-only" and s.value.upper() not in ("0", "OFF", "FALSE")]
    for s in sticky:
        log.warning("%s sets read_only again at the next restart: %s", server.describe(), _shown(s))
    log.info("%s: read_only=OFF", server.describe())
    return ReadOnly("OFF")
