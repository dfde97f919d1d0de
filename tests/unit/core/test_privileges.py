"""core.privileges: what SHOW GRANTS lines give on *.* and on one database (MariaDB's choice of the most specific
database grant), what each use of a server needs, and the verdict's lines."""
from __future__ import annotations

import pytest

from lastline.core.privileges import BACKUP, NEEDS, RESTORE, held, held_on, missing, uses, verdict


@pytest.mark.parametrize(("protected", "role", "result"), [
    (True, None, [BACKUP]), (True, "staging", [BACKUP]), (False, "staging", [RESTORE]), (False, "drill", [RESTORE]),
    (False, None, [BACKUP, RESTORE]), (False, "other", [BACKUP, RESTORE])],
    ids=["protected", "protected-wins-over-role", "staging", "drill", "plain", "unknown-role"])
def test_uses(protected, role, result):
    assert uses(protected, role) == result


@pytest.mark.parametrize(("grants", "privileges"), [
    (["GRANT SELECT, RELOAD, PROCESS ON *.* TO `bk`@`%`"], {"SELECT", "RELOAD", "PROCESS"}),
    (["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"], {"ALL PRIVILEGES", "GRANT OPTION"}),
    (["GRANT REPLICATION CLIENT, SLAVE MONITOR ON *.* TO 'bk'@'%'"], {"BINLOG MONITOR", "REPLICA MONITOR"}),
    (["grant  select ,  show view on *.* to `bk`@`%`"], {"SELECT", "SHOW VIEW"}),
    (["GRANT SELECT ON `shop`.* TO `bk`@`%`", "GRANT INSERT ON `shop`.`t` TO `bk`@`%`"], set()),
    (["GRANT USAGE ON *.* TO `bk`@`%` IDENTIFIED BY PASSWORD '*ABC'"], {"USAGE"}),
    (["GRANT SELECT ON *.* TO `bk`@`%` WITH MAX_QUERIES_PER_HOUR 5 GRANT OPTION"], {"SELECT", "GRANT OPTION"}),
], ids=["list", "all-with-grant-option", "mysql-names-as-mariadb", "lower-case-and-spaces", "database-and-table-grants-ignored",
        "usage", "grant-option-after-limits"])
def test_held(grants, privileges):
    assert held(grants) == privileges


@pytest.mark.parametrize(("grants", "database", "privileges"), [
    (["GRANT SELECT ON `shop`.* TO `u`@`%`"], "shop", {"SELECT"}),
    (["GRANT SELECT ON `shop`.* TO `u`@`%`"], "shops", set()),
    (["GRANT SELECT ON `sh_p`.* TO `u`@`%`"], "shop", {"SELECT"}),
    (["GRANT SELECT ON `sh\\_p`.* TO `u`@`%`"], "shop", set()),
    (["GRANT SELECT ON `sh\\_p`.* TO `u`@`%`"], "sh_p", {"SELECT"}),
    (["GRANT SELECT ON `s%`.* TO `u`@`%`", "GRANT INSERT ON `shop`.* TO `u`@`%`"], "shop", {"INSERT"}),
    (["GRANT SELECT ON `s%`.* TO `u`@`%`", "GRANT INSERT ON `sh%`.* TO `u`@`%`"], "shop", {"INSERT"}),
    (["GRANT SELECT ON `s%`.* TO `u`@`%`", "GRANT INSERT ON `shop`.* TO `r`"], "shop", {"SELECT", "INSERT"}),
    (["GRANT RELOAD ON *.* TO `u`@`%`", "GRANT SELECT ON `shop`.`t` TO `u`@`%`"], "shop", {"RELOAD"}),
    (["GRANT SELECT ON `we``ird`.* TO `u`@`%`"], "we`ird", {"SELECT"}),
], ids=["exact-name", "no-prefix-match", "underscore-wildcard", "escaped-underscore-is-literal", "escaped-underscore-matches-itself",
        "exact-beats-pattern", "longer-prefix-wins", "grantees-add-up", "table-grant-does-not-count", "backquote-in-name"])
def test_held_on(grants, database, privileges):
    assert held_on(grants, database) == privileges


@pytest.mark.parametrize(("have", "use", "lacking"), [
    (set(), BACKUP, [n.label for n in NEEDS[BACKUP]]),
    ({"ALL PRIVILEGES"}, RESTORE, ["GRANT OPTION"]),
    ({"ALL PRIVILEGES", "GRANT OPTION"}, RESTORE, []),
    ({"SELECT", "SHOW VIEW", "TRIGGER", "EVENT", "LOCK TABLES", "RELOAD", "PROCESS", "SUPER"}, BACKUP, []),
    ({"SELECT", "SHOW VIEW", "TRIGGER", "EVENT", "LOCK TABLES", "RELOAD", "PROCESS", "BINLOG MONITOR"}, BACKUP, []),
    ({"SELECT", "SHOW VIEW", "TRIGGER", "EVENT", "LOCK TABLES", "RELOAD"}, BACKUP, ["PROCESS", "BINLOG MONITOR or REPLICATION CLIENT or SUPER"]),
], ids=["nothing", "all-but-grant-option", "all", "super-for-the-binlog", "binlog-monitor", "two-missing"])
def test_missing(have, use, lacking):
    assert [n.label for n in missing(have, use)] == lacking


def test_verdict_has_a_line_per_use_naming_what_is_missing_and_why():
    ok, lines = verdict({"ALL PRIVILEGES"}, [BACKUP, RESTORE])
    assert not ok
    assert lines[0] == "As a backup source: every privilege lastline needs is granted on *.*."
    assert lines[1] == "Missing on *.* for a restore target: GRANT OPTION (grant the run's account the restored databases only)."
    assert verdict({"ALL PRIVILEGES", "GRANT OPTION"}, [RESTORE]) == (True, ["As a restore target: every privilege lastline needs is granted on *.*."])
