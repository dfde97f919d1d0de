"""The replication pipelines' plans: what the read-only first task decided (see core.plans)."""
from __future__ import annotations

from dataclasses import dataclass, field

from lastline.core.plans import Plan


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


@dataclass(frozen=True)
class DetachPlan(Plan):
    """One detach: the server, what replicates into it and the statements that stop it."""

    target_conn_id: str
    flavour: str
    connections: list[str] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    restart: bool = True
    read_only_off: bool = False
