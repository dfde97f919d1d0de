"""physical.plans: the physical pipelines' plans and results cross XCom as plain dicts and come back the same (the
restore's pinned BackupRef too), and a plan's defaults are the ones the pipelines share (core.plans)."""
from __future__ import annotations

import pytest

from lastline.backups import BackupRef
from lastline.core.errors import ConfigError
from lastline.core.impact import DEFAULT_PRIORITY
from lastline.core.plans import MAX_REPLICA_LAG, PARALLEL, Plan
from lastline.physical.plans import BackupPlan, RestorePlan, RestoreReport, StreamResult, Verified

REF = BackupRef("file:///b", "20261128T161432Z-7c93b6", "physical", manifest_sha256="ab" * 32)
BACKUP = BackupPlan(backup_id="b1", source_conn_id="s", destination="/b", compression="zstd", parallel=4,
                    artifact="backup.xbstream.zst", server_version="11.4.2-MariaDB", tool_version="11.4.2")


@pytest.mark.parametrize("value", [
    BACKUP,
    BackupPlan(backup_id="b1", source_conn_id="s", destination="s3://bucket/x", compression="none", parallel=1,
               artifact="backup.xbstream", server_version="10.11.9-MariaDB", tool_version="10.11.9",
               source_identity="host:3306", aws_conn_id="aws", priority="low", max_read_mb_per_s=50.5,
               replica={"primaries": [{"host": "p"}]}),
    RestorePlan(target_conn_id="t", backup=REF, at_risk={"replaces": ["shop"]}, authenticity="signed"),
    StreamResult(bytes=10, sha256="cd" * 32, seconds=1.5, mb_per_s=6.6, started_at="a", finished_at="b",
                 datadir_bytes=100, binlog_file="bin.000002", binlog_position=4, gtid="0-1-5",
                 server_version="11.4.2-MariaDB", tables=3, tables_sha256="ef" * 32, tables_bytes=42,
                 primary={"gtid": "0-2-9"}, prepare_options={"innodb_page_size": "16384"}),
    StreamResult(bytes=0, sha256="", seconds=0.0, mb_per_s=0.0, started_at="a", finished_at="b", datadir_bytes=0,
                 binlog_file=None, binlog_position=None, gtid=None, server_version="", tables=0, tables_sha256="",
                 tables_bytes=0),
    Verified(tables=3, rows=10, server_version="11.4.2-MariaDB", seconds=0.5),
    RestoreReport(verification="3 tables, 10 rows", seconds=9.0),
], ids=["backup-plan", "backup-plan-every-field", "restore-plan", "stream-result", "stream-result-no-binlog",
        "verified", "restore-report"])
def test_round_trip_through_a_dict(value: Plan) -> None:
    assert type(value).of(value.to_dict()) == value


def test_the_restore_plans_backup_comes_back_as_a_backup_ref() -> None:
    plan = RestorePlan.of(RestorePlan(target_conn_id="t", backup=REF).to_dict())
    assert isinstance(plan.backup, BackupRef) and plan.backup.manifest_sha256 == "ab" * 32


def test_the_plans_defaults() -> None:
    assert (BACKUP.priority, BACKUP.max_replica_lag, BACKUP.max_read_mb_per_s, BACKUP.replica) == (
        DEFAULT_PRIORITY, MAX_REPLICA_LAG, 0.0, None)
    restore = RestorePlan(target_conn_id="t", backup=REF)
    assert (restore.parallel, restore.use_memory, restore.force, restore.at_risk) == (PARALLEL, 0, False, None)


@pytest.mark.parametrize(("form", "match"), [
    ({**BACKUP.to_dict(), "threads": 4}, "unknown field"),
    ({k: v for k, v in BACKUP.to_dict().items() if k != "artifact"}, "artifact"),
], ids=["a-field-of-another-version", "a-field-missing"])
def test_a_dict_of_another_shape_is_refused_by_name(form, match) -> None:
    with pytest.raises(ConfigError, match=match):
        BackupPlan.of(form)
