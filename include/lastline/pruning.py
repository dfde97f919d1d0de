"""The physical backup DAG's prune, whole: the bases beyond `keep` go, but never one the point-in-time window needs
(pitr.retention names them); then the archived binlogs no kept base needs. One function, so that the DAG and its
tests run the same composition and no caller can prune the bases without asking the window first."""
from __future__ import annotations

from typing import Any

from lastline.core.plans import RunParams
from lastline.physical import prune as physical_prune
from lastline.pitr import retention


def prune_physical(conf: RunParams) -> dict[str, Any]:
    """Prune the conf's destination (see the module): {"deleted": ids, "kept_for_the_window": {id: why},
    "binlogs_deleted": files}."""
    protect = retention.window_bases(conf)
    deleted = physical_prune.prune(conf, protect=protect)
    return {"deleted": deleted, "kept_for_the_window": protect, "binlogs_deleted": retention.prune_archive(conf, protect)}
