"""mariabackup's commands and the facts read from its output (lastline.mariabackup.commands): no server, no tool."""
from __future__ import annotations

import pytest

from lastline.core.errors import PreflightError, ReplicationError
from lastline.mariabackup import commands


@pytest.mark.parametrize("stderr, expected", [
    ("[00] MySQL slave binlog position: gtid_slave_pos '0-1-42'", {"gtid": "0-1-42", "binlog_file": None, "binlog_position": None}),
    ("[00] MySQL slave binlog position: gtid_slave_pos ''", {"gtid": None, "binlog_file": None, "binlog_position": None}),
    ("[00] MySQL slave binlog position: master '' filename 'mariadb-bin.000007' position '1234'",
     {"gtid": None, "binlog_file": "mariadb-bin.000007", "binlog_position": 1234}),
], ids=["gtid", "empty gtid", "file and position"])
def test_primary_position_reads_what_slave_info_printed(stderr, expected):
    assert commands.primary_position(stderr) == expected


def test_primary_position_refuses_a_log_without_one():
    with pytest.raises(ReplicationError, match="no primary position"):
        commands.primary_position("[00] completed OK!")


@pytest.mark.parametrize("stderr, expected", [
    ("Using server version 10.11.6-MariaDB\nMySQL binlog position: filename 'b.000003', position '4', GTID of the last "
     "change '0-1-9'", {"binlog_file": "b.000003", "binlog_position": 4, "gtid": "0-1-9", "server_version": "10.11.6-MariaDB"}),
    ("MySQL binlog position: filename 'b.000003', position '77'",
     {"binlog_file": "b.000003", "binlog_position": 77, "gtid": None, "server_version": None}),
    ("nothing", {"binlog_file": None, "binlog_position": None, "gtid": None, "server_version": None}),
], ids=["coordinates and version", "no gtid", "nothing"])
def test_parse_backup_log(stderr, expected):
    assert commands.parse_backup_log(stderr) == expected


@pytest.mark.parametrize("tool, server, fits", [
    ("10.11.19-MariaDB", "10.11.6-MariaDB-log", True),
    ("10.11.19-MariaDB", "11.4.2-MariaDB", False),
    ("11.4.2-MariaDB", "11.8.1-MariaDB", False),
], ids=["same series", "older tool", "other minor"])
def test_check_versions(tool, server, fits):
    if fits:
        commands.check_versions(tool, server)
    else:
        with pytest.raises(PreflightError, match="mariadb-backup package"):
            commands.check_versions(tool, server)


@pytest.mark.parametrize("replica, open_files, present, absent", [
    (False, 0, ["--backup", "--stream=xbstream", "--log-copy-interval=20"], ["--slave-info", "--open-files-limit"]),
    (True, 0, ["--slave-info", "--safe-slave-backup"], ["--open-files-limit"]),
    (False, 4096, ["--open-files-limit=4096"], ["--slave-info"]),
], ids=["primary", "replica", "open files"])
def test_backup_stages_flags(replica, open_files, present, absent):
    argv = commands.backup_stages("/o.cnf", "/d", 2, "none", replica=replica, open_files=open_files)[0].argv
    assert all(flag in argv for flag in present)
    assert not any(a.startswith(flag) for flag in absent for a in argv)


@pytest.mark.parametrize("stderr, completed", [("... [00] completed OK!", True), ("error", False)], ids=["ok", "not"])
def test_backup_completed(stderr, completed):
    assert commands.backup_completed(stderr) is completed
