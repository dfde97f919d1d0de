"""The point_in_time_restore DAG's plan: which base backup, which line of the binlog archive, and the exact bytes
that take the base to `until`, all resolved (and every refusal made) before anything is touched. The base is
then restored by the physical restore's own steps and rolled forward by :mod:`lastline.pitr.replay`.
"""
from __future__ import annotations

import dataclasses
import logging
from datetime import datetime
from typing import Any

from lastline import connections
from lastline.backups import BackupRef, open_backup
from lastline.core import bounds
from lastline.core.errors import ConfigError, Refusal
from lastline.core.plans import PARALLEL, Conf, RunParams
from lastline.core.sql import never_restored
from lastline.manifest import ID_RE, MANIFEST, complete_backups, manifest_kind
from lastline.pitr import catalog, scoped, window
from lastline.pitr import span as span_of
from lastline.pitr.event_check import check_span
from lastline.pitr.plans import PitrPlan, ReplayPlan
from lastline.pitr.replay import METHODS
from lastline.storage import Storage, open_allowed

log = logging.getLogger(__name__)


def coordinates(manifest: Any) -> tuple[str | None, int | None, str]:
    """(binlog file, position, GTID state) where a base backup joins the binlog chain: its source's own, or, for a
    backup taken from a replica, its primary's (the chain archived is the primary's)."""
    primary = manifest.primary or {}
    if primary.get("gtid"):
        return primary.get("binlog_file"), primary.get("binlog_position"), str(primary["gtid"])
    if manifest.gtid is None:
        raise Refusal(f"base backup {manifest.backup_id} recorded no GTID position (its source wrote no binlog?): it "
                      "cannot be rolled forward. Choose another base.")
    return manifest.binlog_file, manifest.binlog_position, str(manifest.gtid)


def _candidates(storage: Storage, base: str, kind: str) -> list[tuple[str, str]]:
    """The base backups to try, newest first, as (backup id, kind): the one named, or every complete one of `kind`
    (`any`: physical and logical alike)."""
    if base and base != "auto":
        if not ID_RE.fullmatch(base):
            raise ConfigError(f"base {base!r}: a backup id in the destination (a UTC time and 6 hex digits, as "
                              "lastline names them: 20261128T161432Z-7c93b6) or auto.")
        of = manifest_kind(storage, base) if storage.exists(f"{base}/{MANIFEST}") else None
        if of is None or (kind != "any" and of != kind):
            raise Refusal(f"base {base} is not a complete {'' if kind == 'any' else kind + ' '}backup in "
                          f"{storage.location('')}.")
        return [(base, of)]
    kinds = ("physical", "logical") if kind == "any" else (kind,)
    found = sorted(((b, k) for k in kinds for b in complete_backups(storage, k)), reverse=True)
    if not found:
        raise Refusal(f"{storage.location('')} holds no complete {' or '.join(kinds)} backup to roll forward.")
    return found


USE = "a point-in-time restore"


def authenticate(storage: Storage, recorded: dict[str, Any] | None) -> str:
    """Refuse, before any byte of it is used, an archive whose control files are not authenticated (storage.auth) or
    that ends before, or differs from, the head recorded in Airflow (`recorded`, catalog.check_head); returns the
    anti-rollback sentence for the log."""
    for b in catalog.branches(storage, USE):
        catalog.read_branch(storage, b["id"], USE)
    return catalog.check_head(storage, recorded, USE)


def preflight(conf: RunParams, recorded: dict[str, Any] | None = None) -> PitrPlan:
    """Read-only: the base, the line of history and the span to replay; refuses before anything is touched an
    unauthenticated or rolled-back archive (`recorded`: the head Airflow recorded, see authenticate), an `until` in a
    hole, past the archive's end or before the base (the restore's own preflight follows)."""
    params = Conf(conf)
    target_conn_id = params.required("target_conn_id")
    target = connections.server(target_conn_id)
    target.require_target(None)
    # bounded here, before the archive is read (a run's conf only makes a run gentler); the base's restore takes it as is
    parallel = bounds.parallel(target, params.integer("parallel", PARALLEL, minimum=1))
    destination = params.required("destination").rstrip("/")
    storage = open_allowed(destination, params.text("aws_conn_id"))
    rollback = authenticate(storage, recorded)
    log.info("point-in-time restore: %s", rollback)
    until = window.Until.parse(params.text("until", "latest"))
    method = params.choice("replay_method", METHODS, "auto")
    branch = params.text("branch") or None
    named = params.text("base", "auto") not in ("", "auto")
    refusals: list[str] = []
    for backup_id, kind in _candidates(storage, params.text("base", "auto") or "auto",
                                       params.choice("base_kind", ("any", "physical", "logical"), "any")):
        base = open_backup(BackupRef(storage.url, backup_id, kind, params.text("aws_conn_id")), storage=storage, require=USE)
        manifest = base.manifest
        if until.kind == "time" and _started(manifest) > (until.time or 0):
            if named:
                raise Refusal(f"until {until.describe()} is before the base {backup_id}, begun at "
                              f"{manifest.started_at}: choose an older base backup (base) or a later time.")
            refusals.append(f"{backup_id}: started after {until.describe()}")
            continue
        file, position, gtid = coordinates(manifest)
        try:
            line = window.choose_line(storage, file, gtid, branch, position)
            span = span_of.resolve(storage, line, file, position, gtid, until)
        except Refusal as exc:  # auto: an older base may still reach until (another branch, or before this base)
            if not named and not isinstance(exc, ConfigError):
                refusals.append(f"{backup_id}: {exc}")
                continue
            raise
        log.info("point-in-time restore: %s base %s (%s:%s, GTID %s) on branch %s, until %s: %d binlog files; the "
                 "last transaction applied will be %s (%s); not applied: %s; base %s", kind, backup_id, file, position,
                 gtid, line.branch, until.describe(), len(span.files), span.last_gtid, window.utc(span.last_time),
                 span.not_applied, base.authenticity.describe())
        restore: dict[str, Any] = {"target_conn_id": target_conn_id, **base.ref.params(), "force": params.flag("force"),
                                   "parallel": parallel, "restore_into_source": params.text("restore_into_source")}
        replay = ReplayPlan(target_conn_id=target_conn_id, destination=destination, aws_conn_id=params.text("aws_conn_id"),
                            method=method, threads=bounds.replay_threads(target, max(2, parallel * 2)),
                            span=span.to_dict())
        if kind == "logical":  # the replay reaches the databases the logical restore restores, and no others
            in_backup = [d["name"] for d in base.logical.databases]
            databases = params.names("databases") or [d for d in in_backup if not never_restored(d)]
            missing = [d for d in databases if d not in in_backup]
            if missing:
                raise Refusal(f"database(s) {', '.join(missing)} are not in base {backup_id}; it holds: "
                              f"{', '.join(in_backup)}.")
            scoped.check_names(databases)
            if method == "pipe":
                raise Refusal("replay_method pipe: a logical base is rolled forward by the target's own applier, "
                              "filtered to the restored databases (mariadb-binlog | mariadb would run every event with "
                              "full rights). Use parallel or auto.")
            restore["databases"] = databases
            replay = dataclasses.replace(replay, databases=databases)
        elif params.names("databases"):
            raise ConfigError(f"databases: base {backup_id} is a physical backup, restored whole; leave databases "
                              "empty, or choose a logical base (base_kind).")
        else:  # every event the replay would apply checked before the base is restored (event_check)
            log.info("point-in-time restore: %d archived transactions checked: data changes only",
                     check_span(storage, span))
        return PitrPlan(kind=kind, base=backup_id, until=until.describe(), branch=line.branch,
                        window=window.line_window(line), replay=replay.to_dict(), archive=rollback,
                        physical=restore if kind == "physical" else None, logical=restore if kind == "logical" else None)
    raise Refusal(f"no base backup in {storage.location('')} can be rolled forward to until {until.describe()} (newest "
                  "first): " + "; ".join(refusals[:5]))


def _started(manifest: Any) -> int:
    return int(datetime.fromisoformat(manifest.started_at.replace("Z", "+00:00")).timestamp())
