"""Every Param of lastline's DAGs, defined once: type, bounds, a title, a description and a section, so
the trigger forms read alike across DAGs. A DAG file picks its Params by name and says, where it must,
what one means there: `params("source_conn_id", "parallel", parallel="snapshot connections dumping at
once")`; or changes a default: `params(compression=Override("zstd-fast", enum=[...]))`.

In the trigger form only what must be named is required (the connections, the backup, the destination);
every other field may be left empty, which means its default.

Built when a DAG file is parsed, so from nothing but the environment: a parse reads no connection (servers()) and
lists no storage (the Backup field offers `<destination>/latest` and points to the Backups page).
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import Connection, Param

from lastline.airflow.defaults import DESTINATION, REPLICA_CONN_ID, SOURCE_CONN_ID, TARGET_CONN_ID, env
from lastline.core.errors import ConfigError
from lastline.core.impact import DEFAULT_PRIORITY
from lastline.core.plans import KEEP, MAX_REPLICA_LAG, PARALLEL, human_size, safety_flag
from lastline.logical.backup.stages import DEFAULT_CHUNK_ROWS
from lastline.logical.restore.plans import INDEX_BUILDS
from lastline.logical.restore.plans import RestorePlan as LogicalRestorePlan
from lastline.logical.restore.preflight import DEFAULT_REDO_BYTES

SERVERS, BACKUP, SAFETY, SPEED, KEEPING, MASKING = "Servers", "Backup", "Safety", "Performance", "Retention", "Masking"
IMPACT, STREAMING, ALERTS = "Production impact", "Streaming", "Alerts"
# a size: "1G", "256M" or a number of bytes. Not {"type": ["string", "integer"]}: the trigger form renders a field of
# two types as a multi-line JSON box; with anyOf (and no "type") it is a one-line text input, and a conf may still
# give bytes as a number
SIZE = {"anyOf": [{"type": "string", "pattern": r"^\s*[0-9]+(\.[0-9]+)?\s*([KMGTkmgt]([iI]?[bB])?)?\s*$"},
                  {"type": "integer", "minimum": 0}, {"type": "null"}]}
# a server field offers the connections of its kind: source (any server without a role), target (not protected, no
# role), staging and drill (that role); see servers()
ROLES = {"source_conn_id": "source", "target_conn_id": "target", "drill_conn_id": "drill"}
SERVER_TYPES = ("lastline", "mysql", "mariadb")
# where a form's Backup field sends a person for the backups themselves (plugins/lastline_backups.py)
BACKUPS_PAGE = ("every backup, with a link that opens its restore prefilled: the Backups page in Airflow's navigation")
# what a restore does without `force` (core.servers.Server.asks_approval); each restore DAG says what force replaces
FORCE_OFF = ("off: a restore onto a non-empty target waits for a person's approval (under Required actions) where the "
             "deployment (LASTLINE_APPROVAL) or the target's connection asks for one, and is refused where neither does; "
             "where one is asked, force does not skip it")


@dataclass(frozen=True)
class Spec:
    """One Param's definition."""

    default: Any
    title: str
    description: str
    section: str
    schema: dict[str, Any] = field(default_factory=dict)
    required: bool = False


@dataclass(frozen=True)
class Override:
    """What one DAG changes of a shared Param: its default, its enum, its description."""

    default: Any = None
    enum: list[str] | None = None
    description: str | None = None
    examples: list[str] | None = None
    servers: str | None = None  # the kind of server a connection field offers (see ROLES)


def _string(default: Any, title: str, description: str, section: str, required: bool = False) -> Spec:
    return Spec(default, title, description, section, {"type": "string"}, required)


def _flag(default: bool, title: str, description: str, section: str) -> Spec:
    return Spec(default, title, description, section, {"type": "boolean"})


SPECS: dict[str, Spec] = {
    "source_conn_id": _string(SOURCE_CONN_ID, "Source connection", "the source server's lastline connection", SERVERS, required=True),
    "target_conn_id": _string(TARGET_CONN_ID, "Target connection",
                              "the target server's lastline connection (its fields: datadir, SSH connection, start and stop commands)", SERVERS, required=True),
    "drill_conn_id": _string(env("DRILL_CONN_ID", "lastline_drill"), "Drill server connection",
                             "a scratch server's lastline connection (its role must be drill): its data is replaced at every drill", SERVERS, required=True),
    "replication_conn_id": _string(env("REPLICATION_CONN_ID", "lastline_replication"), "Replication connection",
                                   "the source as the replica reaches it (host, port) and the replication user (login, password; REPLICATION "
                                   "SLAVE on the source): a lastline connection", SERVERS, required=True),
    "destination": _string(DESTINATION, "Destination", "file:///dir, s3://bucket/prefix or ssh://<ssh_conn_id>/<path>", BACKUP, required=True),
    "backup": Spec(f"{DESTINATION}/latest", "Backup", f"<destination>/<backup_id>, or <destination>/latest for the newest "
                   f"complete backup; {BACKUPS_PAGE}", BACKUP,
                   {"type": "string", "examples": [f"{DESTINATION.rstrip('/')}/latest"]}, required=True),
    "aws_conn_id": Spec(None, "AWS connection", "for s3:// destinations (endpoint, region, keys, server-side encryption)",
                        BACKUP, {"type": ["null", "string"]}),
    "databases": Spec([], "Databases", "a subset by name; empty: every non-system database", BACKUP,
                      {"type": "array", "items": {"type": "string"}}),
    "kind": Spec("logical", "Kind of backup", "logical or physical: which backup a manual run drills (a run started by a "
                 "backup's Asset event drills that backup)", BACKUP, {"enum": ["logical", "physical"]}),
    "rto_budget_minutes": Spec(60, "RTO budget (minutes)", "a drill that takes longer to restore and verify alerts (0: no budget)",
                               ALERTS, {"type": "number", "minimum": 0}),
    "compression": Spec("zstd", "Compression", "how the bytes are compressed (zstd is the fastest here)", BACKUP,
                        {"enum": ["zstd", "pigz", "none"]}),
    "chunk_rows": Spec(DEFAULT_CHUNK_ROWS, "Rows per chunk", "rows per chunk file (100k-1M is the useful range)", BACKUP,
                       {"type": "integer", "minimum": 1000}),
    "include_grants": _flag(False, "Include grants", "also back up users and grants", BACKUP),
    "lock_nontransactional": _flag(True, "Lock non-transactional tables",
                                   "dump MyISAM/Aria tables under the lock (consistent with the rest)", BACKUP),
    "lock_method": Spec("auto", "Snapshot method", "how the backup opens its snapshot: auto (BACKUP STAGE on MariaDB 10.4.1+, "
                        "which holds commits for milliseconds; FLUSH TABLES WITH READ LOCK elsewhere, after the long-statement "
                        "guard), backup_stage or ftwrl (where BACKUP STAGE exists: only if the deployment allows it, LASTLINE_ALLOW_FTWRL "
                        "or the connection's allow_ftwrl)", IMPACT, {"enum": ["auto", "backup_stage", "ftwrl"]}),
    "long_query_guard": Spec(60.0, "Long statement (s)", "a statement running longer than this is waited for rather than "
                             "locked behind (FLUSH TABLES WITH READ LOCK would make every write queue behind it); with kill_long_queries, at "
                             "least the deployment's floor (LASTLINE_MIN_LONG_QUERY_GUARD, default 60)", IMPACT,
                             {"type": "number", "minimum": 0}),
    "long_query_wait": Spec(300.0, "Wait for long statements (s)", "how long the backup waits for them, and retries its "
                            "lock, before it gives up naming them (or kills them, with kill_long_queries); at most the deployment's "
                            "ceiling (LASTLINE_MAX_LONG_QUERY_WAIT, default 1800)", IMPACT,
                            {"type": "number", "minimum": 0}),
    "kill_long_queries": _flag(False, "Kill long statements", "at the end of the wait, KILL QUERY the statements that "
                               "keep the backup from its lock instead of giving up: only where the deployment allows it "
                               "(LASTLINE_ALLOW_KILL_LONG_QUERIES or the connection's allow_kill_long_queries), never on a "
                               "protected server", IMPACT),
    "lock_timeout": Spec(0.5, "Lock attempt (s)", "the longest one lock attempt waits, so the longest any write waits "
                         "behind the backup; a timed-out attempt is retried; at most the deployment's ceiling "
                         "(LASTLINE_MAX_LOCK_TIMEOUT, default 0.5)", IMPACT, {"type": "number", "minimum": 0.01}),
    "parallel": Spec(PARALLEL, "Parallel", "how many work at once: at most the deployment's ceiling (LASTLINE_MAX_PARALLEL, "
                     "default 16, or the connection's max_parallel), and no more connections than the server leaves free "
                     "beyond a reserve (fewer are taken, with a warning)", SPEED, {"type": "integer", "minimum": 1}),
    "tune": _flag(LogicalRestorePlan.tune, "Tune for the load", "apply the bulk-load profile while loading (always reverted)", SPEED),
    "restart_allowed": _flag(LogicalRestorePlan.restart_allowed, "Restart allowed",
                             "may restart the target for doublewrite, binlog and autoinc settings (reverted by a restart)", SPEED),
    "defer_indexes": _flag(LogicalRestorePlan.defer_indexes, "Defer indexes", "build secondary indexes and foreign keys after the data", SPEED),
    "index_build": Spec(INDEX_BUILDS[0], "Index builds", "with defer_indexes: per_table (the lane that loads a table's last "
                        "chunk builds its indexes at once, while the other lanes load) or after_all (finalize builds every "
                        "table's indexes once all rows are in)", SPEED, {"enum": list(INDEX_BUILDS)}),
    "redo_log_bytes": Spec(human_size(DEFAULT_REDO_BYTES), "Redo log while loading", "innodb_log_file_size while loading: "
                           "bytes, or with a unit (1G, 512M)", SPEED, SIZE),
    "use_memory": Spec(None, "Memory for --prepare", "for mariabackup --prepare: bytes, or with a unit (2G); default: a "
                       "quarter of free RAM, at most 8G", SPEED, SIZE),
    "priority": Spec(DEFAULT_PRIORITY, "Priority on the source's host", "CPU and I/O priority of the backup's own processes "
                     "(mariabackup, compressor, dump workers): low (nice 10, ionice best-effort 7), idle (nice 19, ionice "
                     "idle: may never finish on a busy disk) or normal; no harsher than the deployment's LASTLINE_MAX_PRIORITY "
                     "(default low)", IMPACT, {"enum": ["low", "idle", "normal"]}),
    "max_read_mb_per_s": Spec(0, "Cap on reads (MB/s)", "cap the bytes the backup reads from the source per second "
                              "(physical: pv -L on the uncompressed stream; logical: the dump workers' rows, shared "
                              "between them); 0: no cap of the run's own (the deployment's LASTLINE_MAX_READ_MB_PER_S, if set, then "
                              "applies; a higher cap is refused)", IMPACT, {"type": "number", "minimum": 0}),
    "from_replica": _flag(False, "The source is a replica", "record the primary's coordinates (GTID, binlog file and "
                          "position) and pause the replica's SQL thread only for the snapshot (also: \"replica\": true "
                          "in the connection's extra)", SERVERS),
    "max_replica_lag": Spec(MAX_REPLICA_LAG, "Replica lag limit (s)", "a replica further behind its primary than this is not backed "
                            "up (0: any lag, stopped replication too, only where the deployment's ceiling LASTLINE_MAX_REPLICA_LAG is 0; "
                            "at most that ceiling, default 3600)", SERVERS, {"type": "number", "minimum": 0}),
    "until_current": _flag(False, "Until the current position", "ship up to the source's position at the start of the "
                           "run, then end (tests, drills, catching up by hand); off (the default): hold a stream open "
                           "for stream_minutes (a run triggered by hand: a minute at most), shipping what the source "
                           "commits every ship_every_seconds", STREAMING),
    "ship_every_seconds": Spec(0.5, "Look every (s)", "when streaming: how often the stream looks at the source (one "
                               "SHOW BINARY LOGS) and ships what was committed since", STREAMING,
                               {"type": "number", "minimum": 0.1, "maximum": 60}),
    "merge_after_segments": Spec(120, "Merge after (segments)", "when streaming: the open binlog file's segments are "
                                 "merged (into objects of up to 32 MiB) once more than this many follow its last merged "
                                 "one (a closed file's, as soon as it closes)", STREAMING, {"type": "integer", "minimum": 2}),
    "retired_grace_seconds": Spec(3600, "Keep merged segments (s)", "the small segments a merge replaced are deleted "
                                  "this long after it (a restore that read the chain before reads them meanwhile)",
                                  STREAMING, {"type": "number", "minimum": 0}),
    "stream_minutes": Spec(60, "Stream for (min)", "when streaming: how long one run holds the stream open before it "
                           "ends, records the archive's head and checks the chain (the continuous schedule starts the "
                           "next at once); a run queued behind it (one triggered by hand) ends it early, within about "
                           "10 s", STREAMING, {"type": "number", "minimum": 0.1, "maximum": 60}),
    "until": _string("latest", "Until", "roll forward to: a UTC time YYYY-MM-DDTHH:MM:SSZ (every transaction committed "
                     "at or before it), a GTID domain-server-seq (up to and including it), or latest", BACKUP, required=True),
    "base": _string("auto", "Base backup", "the backup rolled forward: a backup id in the destination, or auto "
                    "(the newest complete one of base_kind before until)", BACKUP),
    "base_kind": Spec("any", "Kind of base", "physical (the whole server), logical (its databases, into a server that may "
                      "hold others), or any: whichever is newest", BACKUP, {"type": "string", "enum": ["any", "physical", "logical"]}),
    "branch": _string("", "Archive branch", "the binlog archive's branch to roll forward on (after a failover or a "
                      "restore the archive forks); empty: the newest branch that holds the base", BACKUP),
    "replay_method": Spec("auto", "Replay method", "parallel: the target's own parallel applier, resumable; pipe: "
                          "mariadb-binlog | mariadb; auto: parallel where the target allows it", SPEED,
                          {"type": "string", "enum": ["auto", "parallel", "pipe"]}),
    "pitr_window_days": Spec(7, "Point-in-time window (days)", "where the destination holds a binlog archive: keep every "
                             "base backup and archived binlog a point-in-time restore to any second of the last N days "
                             "needs, beyond keep; 0: keep only by count", KEEPING, {"type": "number", "minimum": 0}),
    "rpo_alert_seconds": Spec(600, "Alert when behind (s)", "alert (the connection lastline_alerts) when the stream "
                              "has shipped nothing for this long, or the archive's last confirmed position is older "
                              "than this when a run ends: the RPO at risk", ALERTS, {"type": "number", "minimum": 1}),
    "max_mb_per_s": Spec(0, "Cap on the wire (MB/s)", "cap the stream on the wire (pv -L on the source); 0: no cap", IMPACT,
                         {"type": "number", "minimum": 0}),
    "catch_up_timeout": Spec(3600, "Catch-up timeout (s)", "seconds to wait for the replica to catch up", SPEED,
                             {"type": "number", "minimum": 1}),
    "force": _flag(False, "Force", f"replace what is on the target (kept aside until the restore is verified) where no "
                   f"person is asked to approve it, as an unattended run needs; {FORCE_OFF}", SAFETY),
    "enable_events": _flag(False, "Enable events", "restored events come back enabled (off: disabled, to be turned on by "
                           "hand once the data is checked)", SAFETY),
    "restore_grants": _flag(False, "Restore grants", "also recreate the accounts and grants of a backup taken with include_grants", SAFETY),
    "restore_into_source": _string("", "Restore into the source",
                                   "the target's connection id, to allow restoring into the server the backup came from", SAFETY),
    "dry_run": _flag(False, "Dry run", "only say what the run would do (its report lists it); nothing is written", SAFETY),
    "restart": _flag(True, "Restart to prove it", "restart the server to prove the detach holds", SAFETY),
    "read_only_off": _flag(False, "Open for writes", "SET GLOBAL read_only=OFF at the very end", SAFETY),
    "masking_rules": Spec(None, "More masking rules", "for this run: a JSON object {\"<db>.<table>.<column>\": "
                          "\"<strategy>\"} (email, name, first_name, last_name, hash, null, fixed:<value>) added to the "
                          "deployment's rules (the Airflow Variable lastline_masking_rules, which every refresh uses), or one "
                          "of those changed to null, fixed or hash: a run masks more, never less. \"keep\" and \"phone\" "
                          "(which keeps a value's punctuation and letters) come only from that Variable",
                          MASKING, {"type": ["null", "object"]}),
    "open_for_writes": _flag(True, "Open for writes", "read_only=OFF once the masking is verified (off: it stays read-only)", MASKING),
    "keep": Spec(KEEP, "Keep", "complete backups to keep", KEEPING, {"type": "integer", "minimum": 1}),
    "incomplete_grace_hours": Spec(24, "Grace for incomplete backups (h)", "age before an incomplete backup is removed", KEEPING,
                                   {"type": "number", "minimum": 0}),
}


def params(*names: str, **changed: str | Override) -> dict[str, Param]:
    """The Params `names` (and those in `changed`), in that order; a string in `changed` is what the Param
    means in this DAG (its description), an Override also changes its default or enum."""
    out: dict[str, Param] = {}
    for name in [*names, *(n for n in changed if n not in names)]:
        spec = SPECS[name]
        change = changed.get(name)
        if isinstance(change, str):
            change = Override(description=change)
        schema = dict(spec.schema)
        if change and change.enum is not None:
            schema = {**schema, "enum": change.enum}
        if change and change.examples:
            schema = {**schema, "examples": change.examples}
        role = (change.servers if change else None) or ROLES.get(name)
        if role and "examples" not in schema:
            default = change.default if change and change.default is not None else spec.default
            schema = {**schema, "examples": servers(role, default)}
        kind = schema.get("type")
        if not spec.required and kind and "enum" not in schema:  # may be left empty: its default applies
            kinds = kind if isinstance(kind, list) else [kind]
            schema["type"] = [k for k in kinds if k != "null"] + ["null"]
        default = change.default if change and change.default is not None else spec.default
        description = change.description if change and change.description else spec.description
        out[name] = Param(default, title=spec.title, description=description, section=spec.section, **schema)
    return out


log = logging.getLogger(__name__)
# what the deployment's naming an id for a kind says of that connection: its role, and whether it is protected
# (None: it may be, so it is never offered as a restore's target)
DECLARED: dict[str, tuple[str | None, bool | None]] = {"source": (None, None), "target": (None, False),
                                                       "staging": ("staging", False), "drill": ("drill", False)}


def servers(role: str, default: str | None = None) -> list[str]:
    """The connection ids a server field of kind `role` offers, its default first: source (a server without a role),
    target (without a role, not protected), staging or drill (that role). Read when a DAG file is parsed, so from
    nothing but the environment (a parse reads no connection: not the metadata database, not a secrets backend):

    - a connection defined in the environment (AIRFLOW_CONN_<ID>, JSON or URI) is offered where its type and extras
      fit, read from that value as Airflow parses it, never looked up;
    - any other id only where the deployment says what it is: the field's default, the forms' defaults of each kind
      (LASTLINE_SOURCE_CONN_ID and LASTLINE_REPLICA_CONN_ID: source; LASTLINE_TARGET_CONN_ID: target, so a source
      too; LASTLINE_STAGING_CONN_ID, LASTLINE_DRILL_CONN_ID), and LASTLINE_CONNECTIONS, comma-separated ids each
      with its kind after a colon (`lastline_db2:target`, the deployment's word that it is not protected; without
      one: source, as a server that may be protected). A replica is a restore's target only in the forms that
      rebuild or detach it, where it is the field's default.

    A suggestion only: the run reads the connection and refuses one of the wrong kind by name."""
    declared = {default: role} if default else {}
    for entry in os.environ.get("LASTLINE_CONNECTIONS", "").split(","):
        conn_id, _, kind = (part.strip() for part in entry.partition(":"))
        kind = kind.lower() or "source"
        if conn_id and kind not in DECLARED:
            log.warning("LASTLINE_CONNECTIONS: %r names the kind %r, not one of %s: not offered", entry.strip(), kind,
                        ", ".join(DECLARED))
        elif conn_id:
            declared.setdefault(conn_id, kind)
    for conn_id, kind in ((SOURCE_CONN_ID, "source"), (TARGET_CONN_ID, "target"), (REPLICA_CONN_ID, "source"),
                          (env("STAGING_CONN_ID", "lastline_staging"), "staging"), (env("DRILL_CONN_ID", "lastline_drill"), "drill")):
        declared.setdefault(conn_id, kind)
    # Airflow finds a connection's environment value under AIRFLOW_CONN_<ID upper-cased> only: another key is no
    # connection of its (and none offered here)
    in_environment = [k[len("AIRFLOW_CONN_"):].lower() for k in os.environ
                      if k.startswith("AIRFLOW_CONN_") and k == k.upper()]
    offered = []
    for conn_id in dict.fromkeys([*declared, *in_environment]):
        value = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
        if value is None and conn_id not in declared:
            continue
        known = _kind_of(value, conn_id) if value is not None else DECLARED[declared[conn_id]]
        if known is None:
            continue  # not a server's connection
        server_role, protected = known
        if role in ("staging", "drill"):
            fits = server_role == role
        else:
            fits = server_role is None and not (role == "target" and protected is not False)
        if fits:
            offered.append(conn_id)
    return offered


def _kind_of(value: str, conn_id: str) -> tuple[str | None, bool | None] | None:
    """(role, protected) of a connection's environment value, parsed as Airflow parses it (JSON, else a URI) without
    asking anyone; None for another type's connection or an unreadable value."""
    try:
        conn = Connection.from_json(value, conn_id) if value.lstrip().startswith("{") else Connection.from_uri(value, conn_id)
        extra = json.loads(conn.extra) if conn.extra else {}
    except Exception:  # noqa: BLE001 - a malformed value is Airflow's to report where the connection is used
        return None
    if (conn.conn_type or "") not in SERVER_TYPES or not isinstance(extra, dict):
        return None
    try:
        protected = safety_flag(extra.get("protected"), "protected", False)
    except ConfigError:
        protected = True  # unreadable: never offered as a target (the restore refuses it by name)
    return str(extra.get("role") or "").strip().lower() or None, protected
