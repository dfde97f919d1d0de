"""The physical restore's stages: preflight, stop, extract, prepare, start, verify, report.

The target's datadir may be on this machine or on the host of its connection's ssh_conn_id: every
file operation and command on it goes through that host (see :mod:`lastline.core.datadir`).

Safety rules:
- the target is never started while `<datadir>/.lastline-restore-in-progress` exists (a restore that
  did not finish leaves it, so half-restored data never serves);
- with `force` (or, without it, once a person approved: see lastline.airflow.approval), what the datadir held is
  moved aside to `<datadir>.lastline-aside-<time>[-N]` and deleted only once the restored server has been verified;
- a retry finds its own marker and starts the extraction again on a clean datadir;
- an encrypted backup (storage.sealing) is refused in preflight without a key that opens it; extract checks the size
  and sha256 of the artifact as stored and opens each sealed chunk in this process, authenticated before a byte of it
  goes on to the decompressor (the key never reaches a child process).
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

from lastline import connections, reports
from lastline.backups import BackupRef, open_backup
from lastline.core import bounds, stopping, svg
from lastline.core import datadir as dd
from lastline.core.compression import codec
from lastline.core.datadir import MARKER
from lastline.core.errors import IntegrityError, PipelineError
from lastline.core.hosts import require_tools
from lastline.core.pipeline import run_pipeline
from lastline.core.plans import PARALLEL, Conf, RunParams
from lastline.core.progress import step_report
from lastline.core.servers import Server, base_version, over_connections, refuse_restore_into_source
from lastline.core.sql import VOLATILE, qualified, sql_error, tables_at_risk
from lastline.manifest import TableInfo, backup_age
from lastline.mariabackup import commands, prepare_options
from lastline.mariabackup.target_datadir import StepResult, check_datadir, prepare_datadir, start_server
from lastline.physical.plans import RestorePlan, RestoreReport, Verified
from lastline.storage.sealing import SealError

log = logging.getLogger(__name__)


def _target(plan: RestorePlan) -> Server:
    return connections.server(plan.target_conn_id)


def preflight(conf: RunParams, role: str | None = None) -> RestorePlan:
    """Read-only checks: target not protected, manifest present, artifact whole, datadir (empty, or force, or a
    person's approval where the target asks for one), disk, tools."""
    params = Conf(conf)
    server = connections.server(params.required("target_conn_id"))
    server.require_target(role)  # role: the DAG's (restore_drill), never the conf's
    parallel = bounds.parallel(server, params.integer("parallel", PARALLEL, minimum=1))  # mariabackup's threads
    datadir = server.require_datadir()
    host = server.runner()
    backup = open_backup(BackupRef.param(params, "physical"))  # a drill or a point-in-time restore pins what it read
    storage, manifest, backup_id = backup.storage, backup.physical, backup.ref.backup_id
    backup.seal  # noqa: B018 - encrypted: refused here, naming the key ids it needs, unless a key held opens it
    if server.answers():  # a stopped target cannot be the running source
        refuse_restore_into_source(server, server.identity(), manifest.source_identity, manifest.source_conn_id,
                                   params.text("restore_into_source"))
    key = f"{backup_id}/{manifest.artifact}"
    size = storage.size_if_exists(key)
    if size is None:
        raise IntegrityError(f"{storage.location(key)} is missing although the manifest lists it: choose another backup.")
    if size != manifest.bytes:
        raise IntegrityError(
            f"{storage.location(key)} is {size} bytes, the manifest says {manifest.bytes}: the artifact is "
            "truncated or was replaced. Choose another backup; the target was not touched."
        )
    if manifest.prepare_options is not None:  # checked again when prepare writes them
        prepare_options.checked(manifest.prepare_options, f"backup {backup_id}")
    c = codec(manifest.compression)
    require_tools("mariabackup", "mbstream", c.tool, host=host)
    commands.check_versions(commands.tool_version(host), manifest.server_version)
    force, asks = params.flag("force"), server.asks_approval()
    state = check_datadir(server, int(manifest.datadir_bytes * 1.1), force)
    at_risk = None
    if state == "data" and asks:  # the whole datadir is replaced: a person approves first
        at_risk = {**backup_age(backup_id), "target": server.describe(), "datadir": datadir, "force": force}
        if server.answers():
            with server.session() as cur:
                at_risk.update(tables_at_risk(cur))
        else:
            at_risk["note"] = "the target server is not running: its tables could not be listed"
    plan = RestorePlan(
        target_conn_id=server.conn_id,
        backup=backup.ref,
        parallel=parallel,
        use_memory=params.size("use_memory", 0) or commands.default_use_memory(host),
        force=force or at_risk is not None,  # without force, the approval stands for it: nothing after it runs unless approved
        datadir=datadir,
        datadir_state=state,
        bytes=manifest.bytes,
        at_risk=at_risk,
        authenticity=backup.authenticity.describe(),
    )
    log.info("preflight ok: restore %s into %s (datadir %s: %s)", plan.backup.url, server.describe(), datadir, state)
    return plan


def stop_target(plan: RestorePlan, timeout: float = 120) -> StepResult:
    """Stop the target with its service_stop command and wait until it no longer answers."""
    server = _target(plan)
    seconds = server.stop_service(timeout)
    log.info("target %s stopped in %.1f s", server.describe(), seconds)
    return StepResult(round(seconds, 3))


class _Counted:
    """A storage reader's pieces, counted and hashed as they pass."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self.pieces, self.bytes, self.digest = pieces, 0, hashlib.sha256()

    def __iter__(self) -> Iterator[bytes]:
        for piece in self.pieces:
            self.bytes += len(piece)
            self.digest.update(piece)
            yield piece


@stopping.stops_cleanly
def extract(plan: RestorePlan) -> StepResult:
    """fetch | decompress | mbstream -x into the datadir (on the target's host, as the datadir's owner), checking
    sha256 and size while reading."""
    datadir = plan.datadir
    host = _target(plan).runner()
    backup = open_backup(plan.backup)
    storage, manifest = backup.storage, backup.physical
    aside = dd.prepare_for_restore(host, datadir, plan.force, manifest.backup_id)
    key = f"{manifest.backup_id}/{manifest.artifact}"
    stages = commands.restore_stages(datadir, plan.parallel, manifest.compression, host=host,
                                     run_as=dd.as_owner(host, datadir))
    log.info("extract: %s | %s (on %s)", storage.location(key), " | ".join(s.display() for s in stages), host.name)
    stored = _Counted(storage.reader(key))  # the artifact as stored: its size and sha256 are the manifest's
    source = backup.seal.opened_stream(iter(stored), key) if backup.seal else stored  # each chunk authenticated
    try:
        result = run_pipeline(stages, source=source, label="restore stream", expected_bytes=manifest.bytes, hash_source=False)
    except PipelineError as exc:  # a cut stream or a full disk may pass: retried (a bad artifact fails its size check first)
        raise PipelineError(
            f"extracting {storage.location(key)} failed: the artifact is corrupt or truncated, the stream was "
            f"cut, or the datadir filesystem is full.\n{exc}\nThe target was not started; its datadir holds "
            f"partial data marked by {MARKER}" + (f"; the previous contents are in {aside}." if aside else ".")
            + " A retry starts the extraction again."
        ) from exc
    except SealError as exc:  # the sealed artifact was changed, cut or moved: a refusal, never retried
        raise IntegrityError(f"{exc}\nRestore another backup; the target was not started, its datadir holds partial data "
                             f"marked by {MARKER}" + (f"; the previous contents are in {aside}." if aside else ".")) from exc
    if stored.bytes != manifest.bytes or stored.digest.hexdigest() != manifest.sha256:
        raise IntegrityError(
            f"{storage.location(key)}: read {stored.bytes} bytes with sha256 {stored.digest.hexdigest()}, the manifest "
            f"says {manifest.bytes} bytes, {manifest.sha256}: the artifact is corrupt. Restore another backup; "
            "the target was not started."
        )
    log.info("extract ok: %.1f MB, sha256 verified, %.1f s (%.1f MB/s)", stored.bytes / 1e6, result.seconds, result.mb_per_s)
    return StepResult(round(result.seconds, 3), stored.bytes, round(result.mb_per_s, 2), aside)


@stopping.stops_cleanly
def prepare(plan: RestorePlan) -> StepResult:
    """mariabackup --prepare as the datadir's owner, reading the options the manifest records (never the backup's own
    backup-my.cnf), then give the files the datadir's owner; clears the in-progress marker."""
    manifest = open_backup(plan.backup).physical
    seconds = prepare_datadir(_target(plan), plan.datadir, plan.use_memory, manifest.prepare_options,
                              f"backup {manifest.backup_id}")
    log.info("prepare ok in %.1f s (use_memory %d MiB); ownership set", seconds, plan.use_memory >> 20)
    return StepResult(round(seconds, 3))


def start_target(plan: RestorePlan, timeout: float = 180) -> StepResult:
    """Start the target (never on a half-restored datadir) and wait until it answers."""
    server = _target(plan)
    seconds = start_server(server, timeout)
    log.info("target %s started in %.1f s", server.describe(), seconds)
    return StepResult(round(seconds, 3))


VERIFY_CONNECTIONS = 8


def plausible(actual: int, estimate: int) -> bool:
    """Whether an exact row count fits InnoDB's estimate (estimates can be off by tens of percent)."""
    return abs(actual - estimate) <= max(1000, estimate * 0.6)


def verify(plan: RestorePlan, extracted: StepResult | None = None) -> Verified:
    """The server answers and every table of the manifest is there with a plausible row count.

    Once it passes, the old datadir contents that extract moved aside (`extracted["aside"]`) are deleted.
    """
    aside = extracted.aside if extracted else None
    server = _target(plan)
    manifest = open_backup(plan.backup).physical
    t0 = time.monotonic()
    with server.session() as cur:  # the session's max_user_connections is the account's own limit, if it has one
        cur.execute("SELECT @@version, @@max_user_connections")
        version, limit = cur.fetchone()
    if base_version(version)[:2] != base_version(manifest.server_version)[:2]:
        raise IntegrityError(f"target runs {version}, the backup is of {manifest.server_version}.")

    def count(cur: Any, t: TableInfo) -> tuple[str, int | None, str | None]:
        name = qualified(t.schema, t.name)
        try:
            cur.execute(f"SELECT COUNT(*) FROM {name}")
            return name, int(cur.fetchone()[0]), None
        except Exception as exc:
            if sql_error(exc)[0] is None:  # not the server's answer about this table
                raise
            return name, None, str(exc)  # collected and reported together

    problems, counts, emptied = [], {}, []
    # on VERIFY_CONNECTIONS (fewer if the account may not open as many), the biggest tables first (the shortest
    # tail). A count waits on its page reads more than it works, even on 2 cores: 10,000 small tables took 23 s on
    # one connection, 6.7 s on 2, 4.4 s on 4 and 4.0 s on 8; 8 tables of 10 GB in all 10.4 s on 1, 6.6 s on 2,
    # 4.4 s on 4, 3.2 s on 8
    tables = sorted(manifest.tables, key=lambda t: -t.rows)
    on = VERIFY_CONNECTIONS if int(limit) <= 0 else max(1, min(VERIFY_CONNECTIONS, int(limit) - 1))
    found = {(t.schema, t.name): got for t, got in zip(tables, over_connections(server, on, tables, count), strict=True)}
    for t in manifest.tables:  # said in the manifest's order
        name, n, error = found[(t.schema, t.name)]
        if n is None:
            problems.append(f"{name}: {error}")
            continue
        counts[f"{t.schema}.{t.name}"] = n
        if (t.engine or "").lower() in VOLATILE:  # a physical backup holds no MEMORY rows: they start empty
            emptied += [f"{name} ({t.rows} rows on the source)"] if t.rows else []
        elif not plausible(n, t.rows):
            problems.append(f"{name}: {n} rows, the backup estimated {t.rows}")
    if problems:
        raise IntegrityError("restored server fails verification:\n  " + "\n  ".join(problems) + (
            f"\nThe datadir's previous contents are kept in {aside} on {server.runner().name}." if aside else ""))
    if emptied:
        log.warning("%d MEMORY table(s) came back empty, as after any restart (a physical backup copies no MEMORY rows): "
                    "%s", len(emptied), ", ".join(emptied[:10]))
    if aside:
        dd.remove(server.runner(), aside)
        log.info("restore verified: removed the old datadir contents at %s", aside)
    log.info("verify ok: %d tables, %d rows, server %s", len(counts), sum(counts.values()), version)
    return Verified(len(counts), sum(counts.values()), version, round(time.monotonic() - t0, 3))


def verification(verified: Verified, plan: RestorePlan) -> str:
    """What the restore proved, in words (the report's first line)."""
    return (f"Verified: the backup's {plan.bytes:,} bytes matched the sha256 its manifest records, mariabackup prepared "
            f"them, the server started ({verified.server_version}) and all {verified.tables:,} tables of the backup "
            f"answer, {verified.rows:,} rows, each count plausible against the backup's estimate. Its manifest was "
            f"{plan.authenticity or 'not checked for authenticity'}.")


def report(plan: RestorePlan, stop: StepResult, extract: StepResult, prepare: StepResult, start: StepResult,
           verify: Verified, dag_id: str = "physical_restore", run_id: str | None = None) -> RestoreReport:
    """Log bytes, seconds and MB/s per step and in total; save them (a summary opening with the verification in
    words, JSON and an SVG chart) where the UI reads them (lastline.reports)."""
    steps = {name: r.to_dict() for name, r in (("stop", stop), ("extract", extract), ("prepare", prepare),
                                                 ("start", start), ("verify", verify))}
    text, total = step_report(f"restore of {plan.backup.url} into {plan.target_conn_id}:", steps, plan.bytes)
    log.info("%s", text)
    verified = verification(verify, plan)
    log.info("report: %s", verified)
    out = {"verification": verified, "backup": plan.backup.url, "target": plan.target_conn_id, "seconds": round(total, 3),
           "steps": steps}
    if run_id:
        at, timeline = 0.0, []
        for name, s in steps.items():  # one after another
            timeline.append((name, at, float(s["seconds"]), "#4477aa"))
            at += float(s["seconds"])
        head = f"physical restore of {plan.backup.backup_id} into {plan.target_conn_id}: {plan.bytes / 1e6:,.0f} MB in {total:.1f} s"
        summary = "\n".join([f"# Physical restore of {plan.backup.url} into {plan.target_conn_id}: verified, "
                              f"{verify.tables:,} tables, {plan.bytes / 1e6:,.1f} MB in {total:,.1f} s", "", f"**{verified}**", "",
                              f"- **Took:** {total:,.1f} s for {plan.bytes:,} bytes",
                              *(f"- **{name}:** {float(s['seconds']):,.1f} s" for name, s in steps.items())]) + "\n"
        where = reports.save(dag_id, run_id, {"summary.md": summary,
                                              "physical_restore.svg": svg.document(head, [(timeline, "timeline of the steps")]),
                                              "physical_restore.json": json.dumps(out, indent=1, default=str)})
        log.info("report: %s/summary.md", where)
    return RestoreReport(verified, round(total, 3))
