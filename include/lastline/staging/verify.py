"""The staging refresh's verify_masking step: the masked target checked against the values it held before
masking (which the restore had verified equal to the backup's)."""
from __future__ import annotations

import logging
from typing import Any

from lastline import connections
from lastline.core.errors import IntegrityError
from lastline.core.sql import META_DB, qualified
from lastline.logical.format import dialect
from lastline.staging import masking, quarantine
from lastline.staging.plans import MaskingVerified, StagingPlan
from lastline.staging.rules import HASHED, Rule

log = logging.getLogger(__name__)


def verify_masking(plan: StagingPlan, run_key: str) -> MaskingVerified:
    """No original value of a masked column survives (the target's values before masking, which the restore
    verified equal to the backup's, kept in mask_originals under the run's originals key): in its own column
    for every hashed strategy, in any masked column for email and hash; no row keeps its own phone number;
    null and fixed columns hold nothing else; joins between masked columns of one strategy still match (as
    many distinct values in common after as before). Marks the run verified (see quarantine). Returns the audit."""
    server = connections.server(plan.target_conn_id)
    rules = plan.rule_list()
    bad: list[str] = []
    audit: list[dict] = []
    with server.session(local_infile=1) as cur:  # LOCAL INFILE for set_key's own statement only
        masking.set_key(cur.connection, connections.secret(plan.masking_key_conn_id), run_key)  # the originals' key
        cur.execute(f"SELECT schema_name, table_name, column_name, strategy, values_masked, left_equal, rows_changed "
                    f"FROM {META_DB}.mask_audit WHERE run_key = %s", (run_key,))
        recorded = {(_s(a), _s(b), _s(c)): (_s(st), int(v), int(le), int(rc)) for a, b, c, st, v, le, rc in cur.fetchall()}
        infos = {(s, t): masking.column_infos(cur, s, t) for s, t in masking.by_table(rules)}
        for r in rules:
            info = infos[(r.schema, r.table)][r.column]
            where, c = qualified(r.schema, r.table), dialect.quote_ident(r.column)
            got = recorded.get((r.schema, r.table, r.column))
            if got is None:
                bad.append(f"{r.key}: not masked by this run")
                continue
            strategy, values, left_equal, changed = got
            row = {"column": r.key, "strategy": strategy, "values": values, "rows_changed": changed, "survivors": 0}
            audit.append(row)
            if r.strategy == "keep":
                continue
            if r.strategy == "null":
                cur.execute(f"SELECT COUNT({c}) FROM {where}")
                row["survivors"] = int(cur.fetchone()[0])
            elif r.strategy == "fixed":
                cur.execute("SET @lastline_fixed = %s", (r.value,))
                cur.execute(f"SELECT COUNT(*) FROM {where} WHERE {c} IS NOT NULL AND NOT ({c} <=> @lastline_fixed)")
                row["survivors"] = int(cur.fetchone()[0])
            else:
                cur.execute("SET @lastline_run = %s, @lastline_column = %s", (run_key, r.key))
                same_column = "o.column_key = @lastline_column AND " if r.strategy in ("name", "first_name", "last_name", "phone") else ""
                cur.execute(f"SELECT COUNT(*) FROM {where} t JOIN {META_DB}.mask_originals o ON o.run_key = @lastline_run AND "
                            f"{same_column}o.h = {masking.original_hash(r.column, info, 't')} WHERE t.{c} IS NOT NULL AND t.{c} <> ''")
                matches = int(cur.fetchone()[0])
                if r.strategy == "phone":  # a made-up number may be someone else's by chance: only a row's own counts
                    row["survivors"], row["coincidences"] = left_equal, matches
                else:
                    row["survivors"] = matches
            if row["survivors"]:
                bad.append(f"{r.key} ({strategy}): {row['survivors']} value(s) of the original data survive")
        joins = _joins_kept(cur, run_key, rules, infos)
    bad += [f"{j['a']} and {j['b']}: {j['after']} values in common after masking, {j['before']} before" for j in joins if j["after"] < j["before"]]
    if bad:
        raise IntegrityError("masking verification failed:\n  " + "\n  ".join(bad)
                             + "\nThe target stays read-only; fix the rules and run the refresh again.")
    quarantine.mark_verified(server, run_key)  # the teardown keeps the data now, and opens staging to its readers
    log.info("masking verified: %d column(s), no original value survives; %d join(s) between masked columns kept",
             len(audit), len(joins))
    return MaskingVerified(audit, joins)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _joins_kept(cur: Any, run_key: str, rules: list[Rule], infos: dict) -> list[dict]:
    """For each pair of masked columns of one strategy that shared values before masking: the distinct values
    they shared before (from mask_originals) and after."""
    out = []
    hashed = [r for r in rules if r.strategy in HASHED]
    for i, a in enumerate(hashed):
        for b in hashed[i + 1:]:
            if a.strategy != b.strategy:
                continue
            cur.execute(f"SELECT COUNT(*) FROM {META_DB}.mask_originals x JOIN {META_DB}.mask_originals y ON y.run_key = x.run_key "
                        "AND y.h = x.h AND y.column_key = %s WHERE x.run_key = %s AND x.column_key = %s", (b.key, run_key, a.key))
            before = int(cur.fetchone()[0])
            if not before:
                continue
            ha = masking.original_hash(a.column, infos[(a.schema, a.table)][a.column])
            hb = masking.original_hash(b.column, infos[(b.schema, b.table)][b.column])
            cur.execute(f"SELECT COUNT(*) FROM (SELECT DISTINCT {ha} h FROM {qualified(a.schema, a.table)}) x "
                        f"JOIN (SELECT DISTINCT {hb} h FROM {qualified(b.schema, b.table)}) y USING (h)")
            out.append({"a": a.key, "b": b.key, "strategy": a.strategy, "before": before, "after": int(cur.fetchone()[0])})
    return out
