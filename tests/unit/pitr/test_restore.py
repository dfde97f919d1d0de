"""pitr.restore: where a base backup joins the binlog chain (its own coordinates, or its primary's when it was taken
from a replica; none refused), and the bases a point-in-time restore tries: the one named (its id checked first) or
every complete one, newest first. The whole preflight runs end to end in tests/e2e/point_in_time_restore/test_pitr_restore.py."""
from __future__ import annotations

import dataclasses

import pytest

from lastline.core.errors import ConfigError, Refusal
from lastline.manifest import PhysicalManifest
from lastline.pitr.restore import _candidates, _started, coordinates
from lastline.storage.file import FileStorage

BASE = PhysicalManifest(backup_id="20261128T161432Z-7c93b6", source_conn_id="src", server_version="10.11.9",
                        tool_version="10.11.9", artifact="backup.xbstream.zst", compression="zstd", bytes=1, sha256="ab",
                        started_at="2026-11-28T16:14:32Z", finished_at="2026-11-28T16:15:00Z", seconds=28.0, mb_per_s=1.0,
                        parallel=1, datadir_bytes=1, binlog_file="bin.000007", binlog_position=1234, gtid="0-1-42")


@pytest.mark.parametrize(("changes", "joins"), [
    ({}, ("bin.000007", 1234, "0-1-42")),
    ({"primary": {"gtid": "0-9-100", "binlog_file": "p.000003", "binlog_position": 99}}, ("p.000003", 99, "0-9-100")),
    ({"primary": {"gtid": "0-9-100"}}, (None, None, "0-9-100")),
    ({"primary": {"binlog_file": "p.000003"}}, ("bin.000007", 1234, "0-1-42")),
    ({"binlog_file": None, "binlog_position": None}, (None, None, "0-1-42")),
], ids=["its-own", "its-primarys", "primary-by-gtid-only", "a-primary-without-gtid-is-not-used", "by-gtid-only"])
def test_coordinates(changes, joins):
    assert coordinates(dataclasses.replace(BASE, **changes)) == joins


def test_a_base_without_gtid_cannot_be_rolled_forward():
    with pytest.raises(Refusal, match="recorded no GTID position .* Choose another base"):
        coordinates(dataclasses.replace(BASE, gtid=None))


def test_started_reads_the_manifests_utc_time():
    assert _started(BASE) == 1_795_882_472


@pytest.mark.parametrize("base", ["latest", "2026-11-28T16:14:32Z", "../20261128T161432Z-7c93b6"],
                         ids=["a-word", "a-utc-time", "a-path"])
def test_a_named_base_of_another_shape_is_refused(tmp_path, base):
    with pytest.raises(ConfigError, match="a backup id in the destination"):
        _candidates(FileStorage(str(tmp_path)), base, "any")


def test_a_named_base_not_in_the_destination_is_refused(tmp_path):
    with pytest.raises(Refusal, match="base 20261128T161432Z-7c93b6 is not a complete physical backup"):
        _candidates(FileStorage(str(tmp_path)), "20261128T161432Z-7c93b6", "physical")


@pytest.mark.parametrize(("kind", "refused"), [("any", "complete physical or logical backup"), ("logical", "complete logical backup")],
                         ids=["any", "logical"])
def test_auto_in_an_empty_destination_is_refused(tmp_path, kind, refused):
    with pytest.raises(Refusal, match=f"holds no {refused}"):
        _candidates(FileStorage(str(tmp_path)), "auto", kind)
