"""The staging refresh's own stages, around the logical restore and the detach (dags/staging_refresh.py):
preflight (the target guard, the rules, the PII guard) -> [restore] -> [detach] -> mask -> verify_masking
(staging.verify) -> open -> report.

The masking key is the password of the `masking_key_conn_id` connection: each task that needs it reads it
there; it never crosses XCom, a log line or a command line (it reaches the server as HMAC pads in session
variables of one connection).
"""
from __future__ import annotations

import json
import logging
import os
import re
import time
from typing import Any

from lastline import connections, reports
from lastline.backups import BackupRef, open_backup
from lastline.core.errors import IntegrityError, PreflightError, ProtectedTargetError
from lastline.core.plans import Conf, RunParams
from lastline.core.progress import plural
from lastline.core.sql import META_DB, never_restored, objects_present, server_identity
from lastline.logical.format import dialect, infile
from lastline.logical.restore.backup_files import enforced_engine
from lastline.logical.restore.finalize import objects as create_objects
from lastline.logical.restore.schema_tables import split_deferred
from lastline.staging import masking, pii, pii_objects
from lastline.staging.plans import LateObjects, Masked, MaskingVerified, Opened, StagingPlan
from lastline.staging.rules import EMAIL_DOMAIN, HASHED, REVEALING, Rule, run_rules

log = logging.getLogger(__name__)

# the logical restore's own knobs a staging refresh passes on
RESTORE_KNOBS = ("parallel", "tune", "restart_allowed", "defer_indexes", "index_build", "redo_log_bytes", "aws_conn_id")


_NAME = r"`((?:[^`]|``)*)`"  # a backquoted name as SHOW CREATE TABLE prints it (group 1: its text, `` doubled)


def _names(text: str) -> list[str]:
    return [n.replace("``", "`") for n in re.findall(_NAME, text)]


def unique_columns(create: str) -> set[str]:
    """The columns that are part of the PRIMARY KEY or a UNIQUE key in a CREATE TABLE statement."""
    out: set[str] = set()
    for m in re.finditer(r"^\s*(?:PRIMARY KEY|UNIQUE KEY(?: `(?:[^`]|``)*`)?)\s*\((.*)\)", create, re.M):
        out |= set(_names(m.group(1)))
    return out


def foreign_keys(schema: str, create: str) -> list[tuple[str, list[tuple[str, str, str]], list[tuple[str, str, str]]]]:
    """A CREATE TABLE's foreign keys: (name, child columns, parent columns), columns as (db, table, column)."""
    table = re.match(r"CREATE TABLE " + _NAME, create)
    out = []
    for line in split_deferred(create)[2]:
        m = re.search(r"CONSTRAINT " + _NAME + r" FOREIGN KEY \((.*?)\) REFERENCES (?:" + _NAME + r"\.)?" + _NAME + r" \((.*?)\)", line)
        if not m or not table:
            continue
        name, child, parent_db, parent, parents = m.groups()
        unquote = lambda n: n.replace("``", "`")  # noqa: E731
        out.append((unquote(name), [(schema, unquote(table.group(1)), n) for n in _names(child)],
                    [(unquote(parent_db) if parent_db else schema, unquote(parent), n) for n in _names(parents)]))
    return out


def _rule_problem(r: Rule, col: dialect.Column, unique: bool) -> str | None:
    """Why `r` cannot mask `col`, or None."""
    text = col.charset is not None
    length = re.search(r"\((\d+)\)", col.column_type)
    chars = int(length.group(1)) if length and text else None
    if r.strategy == "null" and not col.nullable:
        return "null on a NOT NULL column: use fixed:<value> or another strategy"
    if r.strategy == "fixed" and unique:
        return "fixed on a UNIQUE column would repeat one value: use hash or email"
    if r.strategy == "phone" and unique:
        return "phone keeps the length and punctuation, which leaves too few numbers to keep a UNIQUE column unique: use hash"
    if r.strategy in HASHED and r.strategy != "phone" and not text:
        return f"{r.strategy} writes text, and this column is {col.column_type}: use null, fixed:<value> or keep"
    if r.strategy == "email" and chars is not None and chars < len(EMAIL_DOMAIN) + 10:
        return f"email needs {len(EMAIL_DOMAIN) + 10}+ characters, the column holds {chars}: use hash"
    if r.strategy == "hash" and unique and chars is not None and chars < 16:
        return f"hash cut to {chars} characters cannot keep a UNIQUE column unique: widen it or use null"
    return None


def _pii_refusal(columns: list[pii.Finding], objects: list[pii_objects.ObjectFinding], tables: dict, creates: dict) -> str:
    """The PII guard's refusal: each column without a rule and each object whose text looks personal, why
    (values redacted), and a rules snippet to start from."""
    parts, snippet = [], {}
    if columns:
        for f in columns:
            col = next(dialect.Column(**c) for c in tables[(f.schema, f.table)].columns if c["name"] == f.column)
            snippet[f.key] = f.suggestion(col, f.column in unique_columns(creates.get((f.schema, f.table), "")))
        parts.append(f"{len(columns)} column(s) look like personal data and have no masking rule:\n  "
                     + "\n  ".join(f"{f.key}: {'; '.join(f.why)}" for f in columns))
    if objects:
        snippet.update((f.key, "keep") for f in objects)
        parts.append(f"{len(objects)} schema object(s) hold text that looks like personal data, which no masking rule can "
                     "change (staging would get it as it is):\n  "
                     + "\n  ".join(f"{f.key} ({f.kind}): {'; '.join(f.found)}" for f in objects))
    todo = [("Add a rule for each" + (" column" if objects else "") + " (\"keep\" to leave one as it is, on the record)")
            if columns else "",
            "change each object at the source, or acknowledge it on the record with \"<db>.<object>\": \"keep\""
            if objects else ""]
    advice = "; ".join(t for t in todo if t)
    revealing = sorted({v for v in snippet.values() if v in REVEALING})
    where = ("A run's masking_rules (the form's field) may add the others for that run alone; "
             + " and ".join(f'"{v}"' for v in revealing) + (" come" if len(revealing) > 1 else " comes")
             + " only from the Variable. " if revealing else
             "The same rules in a run's masking_rules (the form's field) cover that run alone. ")
    return ("\n".join(parts) + "\n" + advice[:1].upper() + advice[1:] + ". To start from, add these to the deployment's "
            "rules, the Airflow Variable lastline_masking_rules (Admin > Variables), which every refresh reads, the ones "
            "a backup starts too. " + where + "The rules:\n" + json.dumps(snippet, indent=1) + "\nNothing was touched.")


def key_conn_id() -> str:
    """The connection holding the masking key: the deployment's LASTLINE_MASKING_KEY_CONN_ID (never a run's conf,
    which could name any connection's password)."""
    return os.environ.get("LASTLINE_MASKING_KEY_CONN_ID", "lastline_masking") or "lastline_masking"


def preflight(conf: RunParams, rules: Any) -> StagingPlan:
    """The target guard (role staging, not protected, not the backup's source), the rules (the deployment's
    `rules`, plus the run's masking_rules: see run_rules; every one names a column of the backup and fits it),
    the PII guard (every column that looks personal has a rule) and the masking key's presence. Refusals change
    nothing; once all pass, the target is set read-only (writes stay out until the masking is verified)."""
    params = Conf(conf)
    target_conn_id = params.required("target_conn_id")
    server = connections.server(target_conn_id)
    server.require_role("staging", "refreshes staging into it", "a staging refresh replaces its databases every time")
    backup = open_backup(BackupRef.param(params, "logical"))
    storage, manifest, schema, backup_id = backup.storage, backup.logical, backup.schema, backup.ref.backup_id
    with server.session() as cur:
        if manifest.source_identity and server_identity(cur) == manifest.source_identity:
            raise ProtectedTargetError(
                f"target {server.describe()} is the server backup {backup_id} was taken from ({manifest.source_conn_id}): "
                "a staging refresh never writes into production. Nothing was touched."
            )
        enforced = enforced_engine(cur)
        if enforced not in (None, "MEMORY"):
            raise PreflightError(
                f"{server.describe()} makes every new table {enforced} (enforce_storage_engine): the masking key "
                "is held in a MEMORY temporary table, never on disk, which this server would refuse. Unset "
                "enforce_storage_engine there (SET GLOBAL enforce_storage_engine = NULL, and in my.cnf). Nothing was touched.")
    in_backup = [d["name"] for d in manifest.databases]
    databases = params.names("databases") or [d for d in in_backup if not never_restored(d)]
    if any(never_restored(d) for d in databases):
        raise PreflightError(f"{', '.join(d for d in databases if never_restored(d))}: system schemas and lastline's own "
                             "databases are never restored; leave them out of databases. Nothing was touched.")
    missing = [d for d in databases if d not in in_backup]
    if missing:
        raise PreflightError(f"database(s) {', '.join(missing)} are not in backup {backup_id}; it holds: {', '.join(in_backup)}.")

    tables = {(t.schema, t.name): t for t in manifest.tables}
    creates = {(t["schema"], t["name"]): t["create"] for t in schema["tables"]}
    column_rules, object_rules = run_rules(rules, params.raw.get("masking_rules"))
    parsed = [r for r in column_rules if r.schema in databases]
    acknowledged = [o for o in object_rules if o.schema in databases]
    known_objects = pii_objects.object_names(schema, databases)
    problems = [f"{o.key}: no table, view, trigger, routine or event of that name in backup {backup_id}"
                for o in acknowledged if (o.schema, o.name) not in known_objects]
    for r in parsed:
        t = tables.get((r.schema, r.table))
        cols = {c["name"]: dialect.Column(**c) for c in t.columns} if t else {}
        if r.column not in cols:
            problems.append(f"{r.key}: no such column in backup {backup_id}")
            continue
        problem = _rule_problem(r, cols[r.column], r.column in unique_columns(creates.get((r.schema, r.table), "")))
        if problem:
            problems.append(f"{r.key}: {problem}")
    strategy_of = {(r.schema, r.table, r.column): r.strategy for r in parsed}
    for (db, _), create in creates.items():
        if db not in databases:
            continue
        for name, child, parent in foreign_keys(db, create):
            for c, p in zip(child, parent):
                a, b = strategy_of.get(c, "keep"), strategy_of.get(p, "keep")
                if a != b and not (a == "null" and b != "null"):
                    problems.append(f"foreign key {name} joins {'.'.join(c)} ({a}) to {'.'.join(p)} ({b}): "
                                    "mask both with the same strategy, or the rows no longer join")
    if problems:
        raise PreflightError("masking rules that cannot be applied:\n  " + "\n  ".join(problems) + "\nNothing was touched.")

    covered = {r.key for r in parsed}
    uncovered = [f for f in pii.scan(storage, manifest, databases) if f.key not in covered]
    kept = {o.key for o in acknowledged}
    unacknowledged = [f for f in pii_objects.scan_objects(schema, databases) if f.key not in kept]
    if uncovered or unacknowledged:
        raise PreflightError(_pii_refusal(uncovered, unacknowledged, tables, creates))
    key_conn = key_conn_id()
    connections.secret(key_conn)  # present; read again where it is used, never kept

    restore = {k: params.raw[k] for k in RESTORE_KNOBS if params.raw.get(k) is not None}
    restore.update(target_conn_id=target_conn_id, **backup.ref.params(),  # the very manifest the PII guard read
                   databases=databases, force=params.flag("force", True), restore_into_source="", restore_grants=False)
    # (nobody is asked to approve: a staging server, whose connection says so, is replaced every morning by design)
    with server.session() as cur:  # everything checked: keep writes out until masking is verified
        cur.execute("SET GLOBAL read_only = ON")
    log.info("staging refresh of %s from backup %s: %d database(s), %d rule(s) (%d keep), %d schema object(s) kept; every "
             "PII-looking column covered", server.describe(), backup_id, len(databases), len(parsed),
             sum(r.strategy == "keep" for r in parsed), len(acknowledged))
    return StagingPlan(
        target_conn_id=target_conn_id, backup=backup.ref, databases=databases,
        rules=[r.to_dict() for r in parsed], masking_key_conn_id=key_conn,
        open_for_writes=params.flag("open_for_writes", True), restore=restore,
        kept_objects=sorted({o.key for o in acknowledged}),
    )


def mask(plan: StagingPlan, run_key: str) -> Masked:
    """Mask every ruled table, one UPDATE per table, exactly once per run (`run_key`: the run's id; see masking)."""
    server = connections.server(plan.target_conn_id)
    key = connections.secret(plan.masking_key_conn_id)
    t0 = time.monotonic()
    done, skipped = {}, []
    conn = server.connect(local_infile=1)  # LOCAL INFILE for set_key's own statement only (lastline's handler)
    try:
        infile.install(conn)  # at once: before set_key's, no statement may meet the client library's own handler
        cur = conn.cursor()
        cur.execute("SET SESSION sql_log_bin = 0, foreign_key_checks = 0, autocommit = 0")
        masking.ensure_tables(cur)
        masking.set_key(conn, key, run_key)
        for (schema, table), rules in masking.by_table(plan.rule_list()).items():
            s = time.monotonic()
            audit = masking.mask_table(conn, run_key, schema, table, rules, masking.column_infos(cur, schema, table))
            name = f"{schema}.{table}"
            if audit is None:
                skipped.append(name)
                continue
            done[name] = audit
            log.info("masked %s in %.1f s: %s", name, time.monotonic() - s,
                     ", ".join(f"{c} ({a['strategy']}, {a['values']} values)" for c, a in audit.items()))
    finally:
        conn.close()
    if skipped:
        log.info("already masked by this run (a retry): %s", ", ".join(skipped))
    return Masked(round(time.monotonic() - t0, 3), len(done), skipped)


def late_objects(plan: StagingPlan) -> LateObjects:
    """Triggers and events, once the masking is verified (none exists while the mask's UPDATEs run, so none
    can copy an original value or the key anywhere), created as the restore creates its objects
    (logical.restore.finalize.objects: by the locked owner of these databases, events disabled); each checked present."""
    server = connections.server(plan.target_conn_id)
    schema = open_backup(plan.backup).schema
    kinds = ("triggers", "events")
    definer = create_objects(server, schema, plan.databases, kinds=kinds)
    in_dbs = set(plan.databases)
    wanted = [(k, o["schema"], o["name"]) for k in kinds for o in schema[k] if o["schema"] in in_dbs]
    with server.session() as cur:  # one query a kind, none per object
        present = {k: objects_present(cur, k, plan.databases) for k in kinds}
        missing = [f"{kind[:-1]} {db}.{name}" for kind, db, name in wanted if (db.casefold(), name.casefold()) not in present[kind]]
    if missing:
        raise IntegrityError("after the masking, these are missing: " + ", ".join(missing) + "; re-run the task.")
    log.info("triggers and events created after the masking: %d, as %s", len(wanted), definer)
    return LateObjects(len(wanted), str(definer))


def open_target(plan: StagingPlan) -> Opened:
    """read_only=OFF if the run asked for it (open_for_writes), else the target stays read-only."""
    server = connections.server(plan.target_conn_id)
    with server.session() as cur:
        if plan.open_for_writes:
            cur.execute("SET GLOBAL read_only = OFF")
        cur.execute(f"DELETE FROM {META_DB}.mask_originals")  # hashes of personal data: not kept past the check
        cur.connection.commit()
    log.info("%s: %s", server.describe(), "open for writes" if plan.open_for_writes else "left read-only (open_for_writes is off)")
    return Opened(plan.open_for_writes)


def report(plan: StagingPlan, verified: MaskingVerified, masked: Masked, dag_id: str = "staging_refresh",
           run_id: str | None = None) -> dict:
    """The refresh's record: backup, target, the audit (column, strategy, values, rows changed, survivors),
    the joins kept, the columns kept on purpose; JSON and Markdown beside the restore's report (lastline.reports).
    `run_id`: the run's (as a task, Airflow's context gives it)."""
    out = {"backup": plan.backup.url, "target_conn_id": plan.target_conn_id, "databases": plan.databases,
           "mask_seconds": masked.seconds, "columns": verified.columns, "joins": verified.joins,
           "kept": [c["column"] for c in verified.columns if c["strategy"] == "keep"] + plan.kept_objects}
    masked_columns = [c for c in verified.columns if c["strategy"] != "keep"]
    kept_as_is = len(verified.columns) - len(masked_columns)
    lines = [f"# Staging refresh of {plan.target_conn_id} from {plan.backup.url}: masking verified, "
             f"{plural(len(masked_columns), 'column')} masked, no original value survives", "",
             f"**Restored {', '.join(plan.databases)} into {plan.target_conn_id} (the restore's report follows), masked "
             f"in {masked.seconds:,.1f} s, and checked: in every masked column no original value survives; "
             f"{plural(len(verified.joins), 'join')} between masked columns kept"
             + (f"; {plural(kept_as_is, 'column')} left unmasked by a keep rule" if kept_as_is else "")
             + ". Staging's readers were locked out until then; staging is now "
             + ("open for writes." if plan.open_for_writes else "read-only (open_for_writes is off).") + "**", "",
             "| column | strategy | values | rows changed | survivors |", "|---|---|---|---|---|"]
    lines += [f"| {c['column']} | {c['strategy']} | {c['values']} | {c['rows_changed']} | {c['survivors']} |" for c in verified.columns]
    if verified.joins:
        lines += ["", "| joined columns | strategy | values in common before | after |", "|---|---|---|---|"]
        lines += [f"| {j['a']} = {j['b']} | {j['strategy']} | {j['before']} | {j['after']} |" for j in verified.joins]
    if plan.kept_objects:
        lines += ["", "Schema objects kept as they are, on the record: " + ", ".join(plan.kept_objects)]
    where = reports.save(dag_id, run_id or "manual", {"staging_refresh.md": "\n".join(lines) + "\n",
                                                      "staging_refresh.json": json.dumps(out, indent=1)},
                         lead=True)  # the masking's verdict opens the run's report, before the restore's
    log.info("staging report: %s/staging_refresh.md", where)
    return {"report": f"{where}/staging_refresh.json"}

