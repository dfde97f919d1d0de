"""The restore's verify step: per table, rows and the row-hash checksum recomputed on the target equal
the manifest's; every object present; the configuration back as the snapshot recorded it.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from lastline.core import stopping
from lastline.core.errors import IntegrityError
from lastline.core.servers import over_connections
from lastline.logical import dialect, tuning
from lastline.logical.backup_files import checked_schema, open_backup, selected, target_server
from lastline.logical.plans import RestorePlan
from lastline.logical.target_state import aside_name, drop_aside

log = logging.getLogger(__name__)


@stopping.stops_cleanly
def verify(plan: RestorePlan | dict, snapshot: dict) -> dict:
    """Per table rows and checksum equal to the manifest; every object present; configuration back."""
    plan = RestorePlan.of(plan)
    storage, manifest = open_backup(plan)
    schema = checked_schema(storage, manifest)
    server = target_server(plan)
    t0 = time.monotonic()
    bad: list[str] = []

    legacy = manifest.checksum != dialect.CHECKSUM
    if legacy:
        log.warning(
            "verify: backup %s predates row-hash checksums (%s): its checksums are over the dump's own text and "
            "cannot catch a value the dump got wrong; take a new backup", manifest.backup_id, manifest.format,
        )
    checksum_sql = dialect.legacy_checksum_sql if legacy else dialect.checksum_sql

    def check(cur: Any, t: Any) -> str | None:
        cur.execute(checksum_sql(t.schema, t.name, [dialect.Column(**c) for c in t.columns]))
        rows, checksum = cur.fetchone()
        if (int(rows), str(checksum)) != (t.rows, t.checksum):
            return f"{t.schema}.{t.name}: {rows} rows, checksum {checksum}; backup: {t.rows} rows, checksum {t.checksum}"
        return None

    tables = sorted(selected(manifest, plan.databases), key=lambda t: -t.raw_bytes)
    bad += [r for r in over_connections(server, plan.parallel, tables, check, setup=("SET SESSION time_zone = '+00:00'",)) if r]
    with server.session() as cur:
        for kind, sql in (
            ("views", "SELECT COUNT(*) FROM information_schema.VIEWS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"),
            ("triggers", "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s AND TRIGGER_NAME = %s"),
            ("routines", "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s AND ROUTINE_NAME = %s"),
            ("events", "SELECT COUNT(*) FROM information_schema.EVENTS WHERE EVENT_SCHEMA = %s AND EVENT_NAME = %s"),
            ("sequences", "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND TABLE_TYPE = 'SEQUENCE'"),
        ):
            for obj in schema[kind]:
                if obj["schema"] in plan.databases:
                    cur.execute(sql, (obj["schema"], obj["name"]))
                    if not cur.fetchone()[0]:
                        bad.append(f"{kind[:-1]} {obj['schema']}.{obj['name']} is missing")
    differ = tuning.config_differs(server, snapshot.get("variables", {})) if snapshot else {}
    bad += [f"configuration: {k} is {a!r}, was {b!r} before the restore" for k, (a, b) in sorted(differ.items())]
    if bad:
        kept = [f"{db} in {aside_name(db)}" for db in plan.databases]
        raise IntegrityError("verify failed:\n  " + "\n  ".join(bad) + "\nThe old tables that force replaced, if any, are "
                             "kept (" + ", ".join(kept) + "); a re-run that verifies drops them.")
    dropped = drop_aside(server, plan.databases)
    if dropped:
        log.info("verify: dropped the old tables force had kept: %s", ", ".join(dropped))
    log.info("verify ok: %d tables with rows and checksums equal to the backup's, every object present, configuration back (%.1f s)",
             len(tables), time.monotonic() - t0)
    return {"tables": len(tables), "seconds": round(time.monotonic() - t0, 3)}
