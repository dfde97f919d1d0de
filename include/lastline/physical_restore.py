"""The physical restore's stages: preflight, stop, extract, prepare, start, verify, report.

Safety rules:
- the target is never started while `<datadir>/.lastline-restore-in-progress` exists (a restore that
  did not finish leaves it, so half-restored data never serves);
- with `force`, what the datadir held is moved aside to `<datadir>.lastline-aside-<time>` and
  deleted only once the restored server has been verified;
- a retry finds its own marker and starts the extraction again on a clean datadir.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from datetime import datetime, timezone

from lastline import physical
from lastline.errors import IntegrityError, PipelineError, PreflightError, ProtectedTargetError
from lastline.manifest import PhysicalManifest, read_manifest, resolve_backup
from lastline.runner import LOCAL, run_logged, run_pipeline
from lastline.servers import Server
from lastline.storage import Storage

log = logging.getLogger(__name__)

MARKER = ".lastline-restore-in-progress"
IGNORED = {"lost+found"}


def datadir_state(path: str) -> str:
    """'missing', 'empty', 'partial' (our marker: an unfinished restore) or 'data'."""
    if not os.path.isdir(path):
        return "missing"
    entries = set(os.listdir(path)) - IGNORED
    if not entries:
        return "empty"
    return "partial" if MARKER in entries else "data"


def _read_marker(datadir: str) -> dict:
    try:
        with open(os.path.join(datadir, MARKER)) as fh:
            return json.load(fh)
    except (FileNotFoundError, ValueError):
        return {}


def _clear(path: str) -> None:
    """Remove everything inside `path`, keeping the folder (and its owner and mode)."""
    for entry in os.scandir(path):
        if entry.name in IGNORED:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def _move_aside(datadir: str) -> str:
    """Move the datadir's contents into a sibling folder; return its path."""
    aside = f"{datadir.rstrip('/')}.lastline-aside-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    os.makedirs(aside)
    for name in os.listdir(datadir):
        if name not in IGNORED:
            os.rename(os.path.join(datadir, name), os.path.join(aside, name))
    log.info("moved the old datadir contents aside to %s (deleted once the restore is verified)", aside)
    return aside


def _target(plan: dict) -> Server:
    return Server.from_conn_id(plan["target_conn_id"])


def _manifest(plan: dict) -> tuple[Storage, PhysicalManifest]:
    storage, backup_id = resolve_backup(plan["backup"], plan.get("aws_conn_id"))
    return storage, read_manifest(storage, backup_id)


def preflight(conf: dict) -> dict:
    """Read-only checks: target not protected, manifest present, artifact whole, datadir, disk, tools."""
    server = Server.from_conn_id(conf["target_conn_id"])
    if server.protected:
        raise ProtectedTargetError(
            f"target {server.describe()} is marked protected (production): lastline never restores into it. "
            "Pick a non-production target, or remove 'protected' from its connection if this is wrong."
        )
    datadir = server.require_datadir()
    physical.require_local_datadir(server)
    storage, backup_id = resolve_backup(conf["backup"], conf.get("aws_conn_id"))
    manifest = read_manifest(storage, backup_id)
    key = f"{backup_id}/{manifest.artifact}"
    if not storage.exists(key):
        raise IntegrityError(f"{storage.location(key)} is missing although the manifest lists it: choose another backup.")
    size = storage.size(key)
    if size != manifest.bytes:
        raise IntegrityError(
            f"{storage.location(key)} is {size} bytes, the manifest says {manifest.bytes}: the artifact is "
            "truncated or was replaced. Choose another backup; the target was not touched."
        )
    c = physical.codec(manifest.compression)
    physical.require_tools("mariabackup", "mbstream", c.tool)
    physical.check_versions(physical.tool_version(), manifest.server_version)
    state = datadir_state(datadir)
    force = bool(conf.get("force"))
    if state == "data" and not force:
        raise PreflightError(
            f"target datadir {datadir} is not empty: set force=true to move its contents aside "
            f"(to {datadir}.lastline-aside-<time>, deleted only after a verified restore), or empty it yourself."
        )
    probe = datadir if state != "missing" else os.path.dirname(datadir.rstrip("/"))
    st = os.statvfs(probe)
    free = st.f_bavail * st.f_frsize
    need = int(manifest.datadir_bytes * 1.1)
    if free < need:
        raise PreflightError(
            f"{probe} has {free / 1e9:.2f} GB free; the unpacked backup needs about {need / 1e9:.2f} GB: "
            "free space on the target's datadir filesystem."
        )
    plan = {
        "target_conn_id": server.conn_id,
        "backup": f"{storage.url}/{backup_id}",
        "backup_id": backup_id,
        "aws_conn_id": conf.get("aws_conn_id"),
        "parallel": int(conf.get("parallel") or 2),
        "use_memory": int(conf.get("use_memory") or physical.default_use_memory()),
        "force": force,
        "datadir": datadir,
        "datadir_state": state,
        "bytes": manifest.bytes,
    }
    log.info("preflight ok: restore %s into %s (datadir %s: %s)", plan["backup"], server.describe(), datadir, state)
    return plan


def stop_target(plan: dict, timeout: float = 120) -> dict:
    """Stop the target with its service_stop command and wait until it no longer answers."""
    server = _target(plan)
    seconds = server.stop_service(timeout)
    log.info("target %s stopped in %.1f s", server.describe(), seconds)
    return {"seconds": round(seconds, 3)}


def extract(plan: dict) -> dict:
    """fetch | decompress | mbstream -x into the datadir, checking sha256 and size while reading."""
    datadir = plan["datadir"]
    storage, manifest = _manifest(plan)
    state = datadir_state(datadir)
    aside = _read_marker(datadir).get("aside") if state == "partial" else None
    if state == "missing":
        os.makedirs(datadir)
    elif state == "partial":
        log.info("datadir %s holds an unfinished restore: clearing it and starting again", datadir)
        _clear(datadir)
    elif state == "data":
        if not plan["force"]:
            raise PreflightError(f"target datadir {datadir} is not empty and force is off.")
        aside = _move_aside(datadir)
    with open(os.path.join(datadir, MARKER), "w") as fh:
        json.dump({"backup_id": manifest.backup_id, "aside": aside}, fh)
    key = f"{manifest.backup_id}/{manifest.artifact}"
    stages = physical.restore_stages(datadir, plan["parallel"], manifest.compression)
    log.info("extract: %s | %s", storage.location(key), " | ".join(s.display() for s in stages))
    try:
        result = run_pipeline(
            stages, source=storage.reader(key), label="restore stream", expected_bytes=manifest.bytes
        )
    except PipelineError as exc:
        raise IntegrityError(
            f"extracting {storage.location(key)} failed: the artifact is corrupt or truncated, or the datadir "
            f"filesystem is full.\n{exc}\nThe target was not started; its datadir holds partial data "
            f"marked by {MARKER}" + (f"; the previous contents are in {aside}." if aside else ".")
        ) from exc
    if result.bytes_in != manifest.bytes or result.sha256_in != manifest.sha256:
        raise IntegrityError(
            f"{storage.location(key)}: read {result.bytes_in} bytes with sha256 {result.sha256_in}, the manifest "
            f"says {manifest.bytes} bytes, {manifest.sha256}: the artifact is corrupt. Restore another backup; "
            "the target was not started."
        )
    log.info("extract ok: %.1f MB, sha256 verified, %.1f s (%.1f MB/s)", result.bytes_in / 1e6, result.seconds, result.mb_per_s)
    return {"bytes": result.bytes_in, "seconds": round(result.seconds, 3), "mb_per_s": round(result.mb_per_s, 2), "aside": aside}


def prepare(plan: dict) -> dict:
    """mariabackup --prepare, then give the files the datadir's owner; clears the in-progress marker."""
    datadir = plan["datadir"]
    if datadir_state(datadir) != "partial":
        raise PreflightError(f"{datadir} holds no extracted backup ({MARKER} missing): run the extract step first.")
    t0 = time.monotonic()
    run_logged(physical.prepare_argv(datadir, plan["use_memory"]), "prepare")
    LOCAL.run(["chown", "-R", "--reference", datadir, datadir])
    os.unlink(os.path.join(datadir, MARKER))
    seconds = time.monotonic() - t0
    log.info("prepare ok in %.1f s (use_memory %d MiB); ownership set", seconds, plan["use_memory"] >> 20)
    return {"seconds": round(seconds, 3)}


def start_target(plan: dict, timeout: float = 180) -> dict:
    """Start the target (never on a half-restored datadir) and wait until it answers."""
    server = _target(plan)
    if datadir_state(plan["datadir"]) == "partial":
        raise IntegrityError(f"{plan['datadir']} holds an unfinished restore ({MARKER}): refusing to start the target.")
    seconds = server.start_service(timeout)
    log.info("target %s started in %.1f s", server.describe(), seconds)
    return {"seconds": round(seconds, 3)}


def plausible(actual: int, estimate: int) -> bool:
    """Whether an exact row count fits InnoDB's estimate (estimates can be off by tens of percent)."""
    return abs(actual - estimate) <= max(1000, estimate * 0.6)


def verify(plan: dict, extracted: dict | None = None) -> dict:
    """The server answers and every table of the manifest is there with a plausible row count.

    Once it passes, the old datadir contents that extract moved aside (`extracted["aside"]`) are deleted.
    """
    aside = (extracted or {}).get("aside")
    server = _target(plan)
    _storage, manifest = _manifest(plan)
    t0 = time.monotonic()
    version = server.variables("version")["version"]
    if physical.base_version(version)[:2] != physical.base_version(manifest.server_version)[:2]:
        raise IntegrityError(f"target runs {version}, the backup is of {manifest.server_version}.")
    conn = server.connect()
    problems, counts = [], {}
    try:
        cur = conn.cursor()
        for t in manifest.tables:
            name = f"`{t.schema}`.`{t.name}`"
            try:
                cur.execute(f"SELECT COUNT(*) FROM {name}")
                n = int(cur.fetchone()[0])
            except Exception as exc:  # noqa: BLE001 - collected and reported together
                problems.append(f"{name}: {exc}")
                continue
            counts[f"{t.schema}.{t.name}"] = n
            if not plausible(n, t.rows):
                problems.append(f"{name}: {n} rows, the backup estimated {t.rows}")
    finally:
        conn.close()
    if problems:
        raise IntegrityError("restored server fails verification:\n  " + "\n  ".join(problems))
    if aside:
        shutil.rmtree(aside, ignore_errors=True)
        log.info("restore verified: removed the old datadir contents at %s", aside)
    log.info("verify ok: %d tables, %d rows, server %s", len(counts), sum(counts.values()), version)
    return {"tables": len(counts), "rows": sum(counts.values()), "seconds": round(time.monotonic() - t0, 3)}


def report(plan: dict, stop: dict, extract: dict, prepare: dict, start: dict, verify: dict) -> dict:
    """Log bytes, seconds and MB/s per step and in total; return the same as a dict."""
    steps = {"stop": stop, "extract": extract, "prepare": prepare, "start": start, "verify": verify}
    total = sum(s.get("seconds", 0) for s in steps.values())
    lines = [f"restore of {plan['backup']} into {plan['target_conn_id']}:"]
    for name, s in steps.items():
        mb = s.get("bytes", 0) / 1e6
        rate = f", {mb / s['seconds']:.1f} MB/s" if mb and s.get("seconds") else ""
        lines.append(f"  {name:<12} {s.get('seconds', 0):8.1f} s{f', {mb:,.1f} MB' if mb else ''}{rate}")
    lines.append(f"  {'total':<12} {total:8.1f} s, {plan['bytes'] / 1e6:,.1f} MB compressed, "
                 f"{plan['bytes'] / 1e6 / max(total, 1e-6):.1f} MB/s")
    log.info("\n".join(lines))
    return {"backup": plan["backup"], "target": plan["target_conn_id"], "seconds": round(total, 3), "steps": steps}
