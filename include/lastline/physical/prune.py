"""The physical backup's prune: complete backups beyond the `keep` newest, and incomplete ones older than the grace
period, deleted; a base the point-in-time window needs (pitr.retention.window_bases) is kept whatever `keep` says."""
from __future__ import annotations

from datetime import timedelta

from lastline.core.plans import KEEP, Conf, RunParams
from lastline.manifest import prune_backups
from lastline.storage import open_allowed


def prune(conf: RunParams, *, protect: dict[str, str]) -> list[str]:
    """Delete the destination's physical backups beyond `keep` (but none `protect` names: {id: why}, what
    pitr.retention.window_bases gives; a caller always says, an empty dict where there is no window) and
    incomplete ones older than `incomplete_grace_hours`. Returns the deleted ids."""
    params = Conf(conf)
    storage = open_allowed(params.required("destination"), params.text("aws_conn_id"))
    grace = timedelta(hours=params.number("incomplete_grace_hours", 24))
    return prune_backups(storage, "physical", int(params.number("keep", KEEP)), grace, protect)
