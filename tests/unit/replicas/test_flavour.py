"""A replica's flavour and statements (lastline.replicas.flavour): version-aware SQL, status read; no server."""
from __future__ import annotations

import pytest

from lastline.replicas.flavour import (
    Flavour,
    broken,
    change_master_sql,
    connection_name,
    detach_statements,
    running,
    sql_thread,
    status_sql,
    stopped_on_error,
)

MARIADB = Flavour.parse("10.11.6-MariaDB-log")
MYSQL84 = Flavour.parse("8.4.0", "MySQL Community Server")
MYSQL57 = Flavour.parse("5.7.44", "MySQL Community Server")


@pytest.mark.parametrize("fl, expected", [
    (MARIADB, "SHOW ALL SLAVES STATUS"), (MYSQL84, "SHOW REPLICA STATUS"), (MYSQL57, "SHOW SLAVE STATUS"),
], ids=["mariadb", "mysql 8.4", "mysql 5.7"])
def test_status_sql(fl, expected):
    assert status_sql(fl) == expected


@pytest.mark.parametrize("fl, name, expected", [
    (MARIADB, "", "STOP SLAVE SQL_THREAD"),
    (MARIADB, "east", "STOP SLAVE 'east' SQL_THREAD"),
    (MYSQL84, "", "STOP REPLICA SQL_THREAD FOR CHANNEL ''"),
    (MYSQL57, "o'k", "STOP SLAVE SQL_THREAD FOR CHANNEL 'o''k'"),
], ids=["mariadb default", "mariadb named", "mysql 8.4 default", "mysql quoted"])
def test_sql_thread(fl, name, expected):
    assert sql_thread(fl, "STOP", name) == expected


@pytest.mark.parametrize("fl, names, first, last", [
    (Flavour.parse("5.1.73"), [], "STOP SLAVE", "RESET SLAVE"),
    (MYSQL84, [], "STOP REPLICA", "RESET REPLICA ALL"),
    (MARIADB, ["east"], "STOP SLAVE 'east'", "SET GLOBAL gtid_slave_pos = ''"),
], ids=["5.1", "mysql 8.4", "mariadb multi-source"])
def test_detach_statements(fl, names, first, last):
    statements = detach_statements(fl, names)
    assert statements[0] == first and statements[-1] == last


@pytest.mark.parametrize("status, threads, problem, on_error", [
    ({"Slave_IO_Running": "Yes", "Slave_SQL_Running": "Yes"}, ("Yes", "Yes"), None, None),
    ({"Replica_IO_Running": "Yes", "Replica_SQL_Running": "No", "Last_SQL_Error": "dup key"}, ("Yes", "No"),
     "SQL thread stopped: dup key", "SQL thread stopped: dup key"),
    ({"Slave_IO_Running": "No", "Slave_SQL_Running": "No"}, ("No", "No"), "replication threads not running (IO No, SQL No)",
     None),
], ids=["running", "stopped on an error", "stopped"])
def test_status_read(status, threads, problem, on_error):
    assert running(status) == threads
    assert broken(status) == problem and stopped_on_error(status) == on_error


def test_connection_name_and_change_master():
    assert connection_name({"Connection_name": "east"}) == "east" and connection_name({}) == ""
    assert "MASTER_USE_GTID=slave_pos" in change_master_sql(True)
    assert change_master_sql(False).endswith("MASTER_LOG_FILE=%s, MASTER_LOG_POS=%s")
