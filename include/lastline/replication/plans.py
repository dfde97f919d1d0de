"""The replication pipelines' plans (what the read-only first task decided) and their steps' results (see core.plans)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lastline.core.plans import Plan, Result


@dataclass(frozen=True)
class RebuildPlan(Plan):
    """One replica rebuild: both nodes, the stream and the attach."""

    source_conn_id: str
    target_conn_id: str
    replication_conn_id: str
    compression: str
    parallel: int
    use_memory: int
    source_datadir: str
    datadir: str
    datadir_state: str
    source_version: str
    force: bool = False
    catch_up_timeout: float = 3600.0
    gtid: bool = True
    max_mb_per_s: float = 0.0
    priority: str = "low"  # the source's mariabackup and compressor (core.impact), within the deployment's bound
    at_risk: dict | None = None  # what the rebuild would replace, when it asks for approval first (core.sql.tables_at_risk)


@dataclass(frozen=True)
class DetachPlan(Plan):
    """One detach: the server, what replicates into it and the statements that stop it."""

    target_conn_id: str
    flavour: str
    connections: list[str] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    restart: bool = True
    read_only_off: bool = False


@dataclass(frozen=True)
class Streamed(Result):
    """The rebuild stream: the compressed bytes counted and checksummed at both ends, and the backup's coordinates."""

    bytes: int
    crc32: str
    seconds: float
    mb_per_s: float
    binlog_file: str
    binlog_position: int
    gtid: str | None = None
    aside: str | None = None  # the target's old datadir contents, kept until verify

    def coordinates(self) -> dict[str, Any]:
        """Where the replica starts applying (flavour.attach)."""
        return {"binlog_file": self.binlog_file, "binlog_position": self.binlog_position, "gtid": self.gtid}


@dataclass(frozen=True)
class Attached(Result):
    """The attach: by GTID or file:position (`position`), and when (epoch seconds: catch_up counts from it)."""

    seconds: float
    gtid: bool
    attached_at: float
    position: str


@dataclass(frozen=True)
class CaughtUp(Result):
    """The catch_up sensor's last poke: seconds from attach until the replica applied what the source had written."""

    seconds: float


@dataclass(frozen=True)
class Marker(Result):
    """The rebuild's verify: the marker row written on the source that arrived on the replica."""

    marker: str
    seconds: float


@dataclass(frozen=True)
class Detached(Result):
    """A detach: the statements it ran."""

    statements: list[str]


@dataclass(frozen=True)
class StillDetached(Result):
    """The detach's verify: no replication connection, now and (when it restarted) after a restart."""

    restarted: bool
    restart_seconds: float


@dataclass(frozen=True)
class ReadOnly(Result):
    """open_for_writes: the server's read_only as the step left it."""

    read_only: str
