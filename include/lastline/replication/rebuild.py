"""Rebuild a replica from its source in one stream, node to node, then attach and verify it.

    mariabackup --backup --stream | compress [| pv -L rate] | tap   (on the source's host)
      | ssh target "tap | decompress | mbstream -x --parallel -C datadir"

No file is written anywhere but the target's datadir. The two taps count and checksum (CRC-32) the
compressed bytes as they leave the source and as they reach the target; both must agree. The target's datadir is
marked in progress until prepare succeeds, so a cut stream never leaves a server running on partial
data, and a retry starts again from an empty datadir. Each function is one Airflow task.
"""
from __future__ import annotations

import json
import logging
import time
import uuid

from lastline import connections, reports
from lastline.core import bounds, impact, stopping
from lastline.core import datadir as datadirs
from lastline.core.compression import codec
from lastline.core.datadir import MARKER
from lastline.core.errors import IntegrityError, PipelineError, PreflightError, ReplicationError, ServerError
from lastline.core.hosts import Stage, require_tools
from lastline.core.option_files import option_file
from lastline.core.pipeline import run_pipeline, tap_result, tap_stage
from lastline.core.plans import PARALLEL, Conf, RunParams
from lastline.core.progress import step_report
from lastline.core.servers import Server, base_version
from lastline.core.sql import tables_at_risk
from lastline.mariabackup import commands
from lastline.mariabackup.target_datadir import StepResult, check_datadir, options_of, prepare_datadir, start_server
from lastline.replicas import flavour
from lastline.replication.plans import Attached, CaughtUp, Marker, RebuildPlan, Streamed

log = logging.getLogger(__name__)

MARKER_TABLE = "_lastline.replica_marker"
STREAM_COMPRESSION = "zstd-fast"  # nothing is kept: the fast level (`make bench-rebuild` times -1 against -3)


def _servers(plan: RebuildPlan) -> tuple[Server, Server]:
    return connections.server(plan.source_conn_id), connections.server(plan.target_conn_id)


def check_replication_user(repl: Server) -> None:
    """The replication user logs in to the source and holds REPLICATION SLAVE (checked from here; if the
    source is only reachable from the replica's network, a warning and the attach step tell)."""
    try:
        grants = [g[0] for g in repl.query("SHOW GRANTS")]
    except ServerError as exc:
        if "wrong user or password" in str(exc):
            raise PreflightError(f"replication connection {repl.conn_id!r}: {exc}") from exc
        log.warning("could not check the replication user from this worker: %s", exc)
        return
    if not any(w in g.upper() for g in grants for w in ("REPLICATION SLAVE", "REPLICATION REPLICA", "ALL PRIVILEGES")):
        raise PreflightError(
            f"replication user {repl.user!r} lacks REPLICATION SLAVE on the source: "
            f"GRANT REPLICATION SLAVE ON *.* TO {repl.user!r}@'<replica host>'."
        )


def preflight(conf: RunParams) -> RebuildPlan:
    """Read-only checks on both nodes: target not protected; source has a binlog and a server_id; the
    versions fit; tools on both hosts; the target's datadir (empty, or force, or a person's approval where the
    target asks for one) and room; the replication user."""
    params = Conf(conf)
    source, target = connections.server(params.required("source_conn_id")), connections.server(params.required("target_conn_id"))
    repl = connections.server(params.required("replication_conn_id"))
    target.require_target(None, "rebuilds it")
    src_dir, tgt_dir = source.require_datadir(), target.require_datadir()
    src_host, tgt_host = source.runner(), target.runner()
    facts = source.variables("log_bin", "server_id", "version", "gtid_binlog_pos")
    if facts.get("log_bin", "OFF").upper() != "ON":
        raise PreflightError(f"source {source.describe()} has no binary log (log_bin=OFF): set log-bin and restart it.")
    if int(facts.get("server_id", 0)) == 0:
        raise PreflightError(f"source {source.describe()} has server_id=0: a source needs a unique non-zero server_id.")
    version = facts["version"]
    compression = params.text("compression", STREAM_COMPRESSION)
    c = codec(compression)
    # the source is production: its read cap and priority within the deployment's bounds, as a backup's are
    limit = bounds.read_cap(source, params.number("max_mb_per_s", 0, minimum=0))
    priority = bounds.priority(source, impact.DEFAULT_PRIORITY)
    require_tools("mariabackup", c.tool, "pv" if limit else None, host=src_host)
    commands.check_open_files(src_host, src_dir, f"source {source.describe()}")
    require_tools("mariabackup", "mbstream", c.tool, host=tgt_host)
    commands.check_versions(commands.tool_version(src_host), version)
    commands.check_versions(commands.tool_version(tgt_host), version)
    if target.answers():
        tv = target.variables("version", "server_id")
        if base_version(tv["version"])[:2] != base_version(version)[:2]:
            raise PreflightError(f"target runs {tv['version']}, the source {version}: a physical copy needs one series.")
        if tv["server_id"] == facts["server_id"]:
            raise PreflightError(
                f"target {target.describe()} has the source's server_id {tv['server_id']}: give it its own in its "
                "option files, or its events would be dropped as its own."
            )
    else:
        log.info("target %s does not answer: rebuilding a stopped replica", target.describe())
    force, asks = params.flag("force"), target.asks_approval()
    need = int(datadirs.used_bytes(src_host, src_dir) * 1.1)
    state = check_datadir(target, need, force)
    at_risk = None
    if state == "data" and asks:  # the replica's whole datadir is replaced: a person approves first
        at_risk = {"source": source.describe(), "target": target.describe(), "datadir": tgt_dir, "force": force}
        if target.answers():
            with target.session() as cur:
                at_risk.update(tables_at_risk(cur))
        else:
            at_risk["note"] = "the target server is not running: its tables could not be listed"
    check_replication_user(repl)
    plan = RebuildPlan(
        source_conn_id=source.conn_id,
        target_conn_id=target.conn_id,
        replication_conn_id=repl.conn_id,
        compression=compression,
        parallel=bounds.parallel(source, params.integer("parallel", PARALLEL, minimum=1)),  # mariabackup's threads
        use_memory=params.size("use_memory", 0) or commands.default_use_memory(tgt_host),
        force=force or at_risk is not None,  # without force, the approval stands for it: nothing after it runs unless approved
        at_risk=at_risk,
        source_datadir=src_dir,
        datadir=tgt_dir,
        datadir_state=state,
        source_version=version,
        catch_up_timeout=params.number("catch_up_timeout", 3600),
        gtid=bool(facts.get("gtid_binlog_pos")),
        max_mb_per_s=limit,
        priority=priority,
    )
    log.info("preflight ok: rebuild %s (%s on %s) from %s (%s on %s), %s, datadir %s",
             target.describe(), tgt_dir, tgt_host.name, source.describe(), src_dir, src_host.name, compression, state)
    return plan


def stop_target(plan: RebuildPlan, timeout: float = 120) -> StepResult:
    """Stop the target with its service_stop command (also when it already is down)."""
    _source, target = _servers(plan)
    seconds = target.stop_service(timeout)
    log.info("target %s stopped in %.1f s", target.describe(), seconds)
    return StepResult(round(seconds, 3))


def stream_stages(source: Server, target: Server, optfile: str, plan: RebuildPlan) -> list:
    """The one pipeline, stage by stage, each on its node."""
    src_host, tgt_host = source.runner(), target.runner()
    limit = float(plan.max_mb_per_s or 0)
    throttle = [Stage("throttle", ["pv", "-q", "-L", f"{int(limit * 1e6)}"], host=src_host)] if limit else []
    return (
        commands.backup_stages(optfile, plan.source_datadir, plan.parallel, plan.compression, host=src_host,
                               priority=plan.priority,
                               open_files=commands.check_open_files(src_host, plan.source_datadir, "the source"))
        + throttle
        + [tap_stage("sent", host=src_host), tap_stage("received", host=tgt_host)]
        + commands.restore_stages(plan.datadir, plan.parallel, plan.compression, host=tgt_host,
                                  run_as=datadirs.as_owner(tgt_host, plan.datadir))
    )


@stopping.stops_cleanly
def stream(plan: RebuildPlan) -> Streamed:
    """Source to target in ONE pipeline; byte counts and checksums compared at both ends; returns the
    backup's binlog/GTID coordinates."""
    source, target = _servers(plan)
    if target.answers():
        raise PreflightError(f"target {target.describe()} is running: stop it before streaming into its datadir.")
    tgt_host = target.runner()
    aside = datadirs.prepare_for_restore(tgt_host, plan.datadir, plan.force, f"rebuild from {source.conn_id}")
    with option_file(source, ("client", "mariabackup"), on_host=True) as opt:
        stages = stream_stages(source, target, opt, plan)
        log.info("stream: %s", " | ".join(f"[{(s.host.name if s.host else 'local')}] {s.name}" for s in stages))
        try:
            result = run_pipeline(stages, label="rebuild stream")
        except PipelineError as exc:
            raise IntegrityError(
                f"the rebuild stream failed: {exc}\nThe target was not started: its datadir {plan.datadir} holds "
                f"partial data marked by {MARKER}" + (f" (its old contents are in {aside})" if aside else "")
                + ". A retry of this task starts again on an empty datadir."
            ) from exc
    mb_log = result.stderr["mariabackup"]
    if not commands.backup_completed(mb_log):
        raise IntegrityError("mariabackup exited 0 without `completed OK!`: the stream is not trusted; retry.")
    sent, received = tap_result(result, "sent"), tap_result(result, "received")
    if sent != received:
        raise IntegrityError(
            f"the source sent {sent[0]} bytes (CRC-32 {sent[1]}), the target received {received[0]} bytes "
            f"(CRC-32 {received[1]}): the stream was damaged in transit. The target was not started; retry."
        )
    facts = commands.parse_backup_log(mb_log)
    if not facts["binlog_file"]:
        raise IntegrityError("mariabackup did not report the binlog position: cannot attach the replica; retry.")
    mb_s = sent[0] / 1e6 / max(result.seconds, 1e-6)
    log.info("rebuild stream ok: %.1f MB compressed in %.1f s (%.1f MB/s), byte count and CRC-32 %s equal at "
             "both ends; binlog %s:%s, gtid %s", sent[0] / 1e6, result.seconds, mb_s, sent[1],
             facts["binlog_file"], facts["binlog_position"], facts["gtid"])
    return Streamed(sent[0], sent[1], round(result.seconds, 3), round(mb_s, 2), facts["binlog_file"],
                    int(facts["binlog_position"]), facts["gtid"], aside)


def prepare(plan: RebuildPlan) -> StepResult:
    """mariabackup --prepare on the target's host as the datadir's owner, with the source's options (never the
    stream's backup-my.cnf), ownership, then the in-progress marker goes."""
    source, target = _servers(plan)
    # the options the source runs with (static ones: page size, data files), never the stream's own backup-my.cnf
    seconds = prepare_datadir(target, plan.datadir, plan.use_memory, options_of(source),
                              f"the rebuild from {source.describe()}")
    log.info("prepare ok on %s in %.1f s", target.runner().name, seconds)
    return StepResult(round(seconds, 3))


def start_target(plan: RebuildPlan, timeout: float = 180) -> StepResult:
    """Start the rebuilt target (never on partial data) and check it is not the source's twin."""
    source, target = _servers(plan)
    seconds = start_server(target, timeout)
    if target.variables("server_id")["server_id"] == source.variables("server_id")["server_id"]:
        raise ReplicationError(
            f"{target.describe()} started with the source's server_id: give it its own before attaching."
        )
    log.info("target %s started in %.1f s", target.describe(), seconds)
    return StepResult(round(seconds, 3))


def attach(plan: RebuildPlan, streamed: Streamed) -> Attached:
    """CHANGE MASTER from the backup's own coordinates (GTID when the source has one), START SLAVE."""
    _source, target = _servers(plan)
    repl = connections.server(plan.replication_conn_id)
    use_gtid = bool(streamed.gtid) and plan.gtid
    t0 = time.monotonic()
    flavour.attach(target, repl, streamed.coordinates(), use_gtid)
    return Attached(round(time.monotonic() - t0, 3), use_gtid, time.time(),
                    str(streamed.gtid) if use_gtid else f"{streamed.binlog_file}:{streamed.binlog_position}")


def caught_up(plan: RebuildPlan, attached: Attached, within: float = 20.0) -> CaughtUp | None:
    """One poke of the catch_up sensor (reschedule mode: no worker slot is held between pokes): True once the
    replica applies, within `within` s, what the source has written by now; a ReplicationError when a
    replication thread stopped with an error, or when catch_up_timeout has passed since attach. Returns
    the seconds waited since attach once caught up, else None."""
    source, target = _servers(plan)
    done, coords, statuses = flavour.applied(source, target, within)
    waited = time.time() - attached.attached_at
    if done:
        log.info("replica caught up with %s, %.1f s after attach", coords.get("gtid") or coords["binlog_file"], waited)
        return CaughtUp(round(waited, 3))
    if waited > plan.catch_up_timeout:
        raise ReplicationError(
            f"{target.describe()} did not catch up with {source.describe()} within catch_up_timeout "
            f"({plan.catch_up_timeout:.0f} s) after attach ({'; '.join(map(flavour.describe_status, statuses))}); "
            "raise catch_up_timeout or check the link."
        )
    log.info("catching up [%.0f s after attach]: %s", waited, "; ".join(map(flavour.describe_status, statuses)))
    return None


def verify(plan: RebuildPlan, timeout: float = 120) -> Marker:
    """Write a marker row on the source now; it must arrive on the replica, and both threads must run."""
    source, target = _servers(plan)
    token = uuid.uuid4().hex
    with source.session() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS _lastline")
        cur.execute(f"CREATE TABLE IF NOT EXISTS {MARKER_TABLE} (token CHAR(32) PRIMARY KEY, "
                    "replica VARCHAR(255) NOT NULL, written_at DATETIME(6) NOT NULL) ENGINE=InnoDB")
        cur.execute(f"INSERT INTO {MARKER_TABLE} VALUES (%s, %s, UTC_TIMESTAMP(6))", (token, target.conn_id))
        cur.connection.commit()
    t0 = time.monotonic()
    flavour.wait_for(source, target, timeout)
    found = target.query(f"SELECT COUNT(*) FROM {MARKER_TABLE} WHERE token = %s", (token,))[0][0]
    if not found:
        raise ReplicationError(f"the marker row {token} written on {source.describe()} did not reach {target.describe()}.")
    with target.session() as cur:
        statuses = flavour.replica_status(cur)
    problems = [p for p in map(flavour.broken, statuses) if p]
    if problems:
        raise ReplicationError(f"{target.describe()}: " + "; ".join(problems))
    seconds = time.monotonic() - t0
    log.info("verify ok: marker %s replicated in %.2f s; %s", token, seconds,
             "; ".join(map(flavour.describe_status, statuses)))
    return Marker(token, round(seconds, 3))


def finish(plan: RebuildPlan, streamed: Streamed, verified: Marker) -> None:
    """After a verified rebuild, delete the old datadir contents that the stream moved aside."""
    _source, target = _servers(plan)
    if streamed.aside:
        datadirs.remove(target.runner(), streamed.aside)
        log.info("removed the old datadir contents at %s (marker %s arrived)", streamed.aside, verified.marker)


def report(plan: RebuildPlan, stop: StepResult, stream: Streamed, prepare: StepResult, start: StepResult,
           attach: Attached, catch_up: CaughtUp, verify: Marker, dag_id: str = "replica_rebuild",
           run_id: str | None = None) -> dict:
    """Log seconds per step and the stream's size and rate; save the report (its verdict first: rebuilt, attached and
    verified by a marker row) where the UI reads it (lastline.reports); return the figures.
    `run_id`: the run's (as a task, Airflow's context gives it)."""
    steps = {name: r.to_dict() for name, r in (("stop", stop), ("stream", stream), ("prepare", prepare), ("start", start),
                                                 ("attach", attach), ("catch_up", catch_up), ("verify", verify))}
    text, total = step_report(f"rebuild of {plan.target_conn_id} from {plan.source_conn_id}:", steps)
    log.info("%s", text)
    verdict = (f"Streamed {plan.source_conn_id}'s datadir into {plan.target_conn_id} in one pipeline ({stream.bytes:,} "
               f"bytes, CRC-32 {stream.crc32} equal at both ends), prepared and started it, attached it "
               + f"at {'GTID ' if attach.gtid else ''}{attach.position} and it caught up in {catch_up.seconds:,.1f} s. Verified: a marker row written on the source "
               f"arrived in {verify.seconds:,.2f} s and both replication threads run.")
    out = {"verdict": verdict, "source": plan.source_conn_id, "target": plan.target_conn_id,
           "seconds": round(total, 3), "steps": steps}
    lines = [f"# Replica rebuild of {plan.target_conn_id} from {plan.source_conn_id}: attached and verified, "
             f"{stream.bytes / 1e6:,.1f} MB streamed, {total:,.1f} s in all", "", f"**{verdict}**", "",
             f"- **Stream:** {stream.bytes:,} bytes ({plan.compression}) in {stream.seconds:,.1f} s at "
             f"{stream.mb_per_s:,.1f} MB/s",
             *(f"- **{name}:** {float(s['seconds']):,.1f} s" for name, s in steps.items())]
    where = reports.save(dag_id, run_id or "manual", {"replica_rebuild.md": "\n".join(lines) + "\n",
                                                      "replica_rebuild.json": json.dumps(out, indent=1, default=str)})
    log.info("report: %s", verdict)
    log.info("report: %s/replica_rebuild.md", where)
    return {"seconds": round(total, 3), "steps": steps}
