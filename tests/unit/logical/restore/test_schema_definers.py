"""schema_definers: the header edits a restore makes to views, routines and events (DEFINER, SQL SECURITY,
DISABLE), and the CREATE of each such object checked to be its own."""
from __future__ import annotations

import pytest

from lastline.core.errors import ConfigError, IntegrityError
from lastline.logical.restore.schema_checks import checked_create
from lastline.logical.restore.schema_definers import definer_security, disabled_event, with_definer, without_definer

VIEW = "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY INVOKER VIEW `v` AS select 1 AS `1`"
EVENT = "CREATE DEFINER=`root`@`localhost` EVENT `e` ON SCHEDULE EVERY 1 DAY "


@pytest.mark.parametrize("kind, create, expected", [
    ("views", VIEW, "CREATE ALGORITHM=UNDEFINED SQL SECURITY INVOKER VIEW `v` AS select 1 AS `1`"),
    ("events", EVENT + "DO select 1", "CREATE EVENT `e` ON SCHEDULE EVERY 1 DAY DO select 1"),
    ("tables", "CREATE TABLE `t` (`id` int)", "CREATE TABLE `t` (`id` int)"),
], ids=["view", "event", "table-unchanged"])
def test_without_definer(kind: str, create: str, expected: str) -> None:
    assert without_definer(kind, create) == expected


def test_with_definer_puts_the_deployments_account_in_place_of_the_backups() -> None:
    assert with_definer("views", VIEW, "owner@localhost") == VIEW.replace("`root`", "`owner`")
    with pytest.raises(ConfigError):
        with_definer("views", VIEW, "owner")


@pytest.mark.parametrize("create, expected", [
    (EVENT + "ON COMPLETION NOT PRESERVE ENABLE DO select 1", EVENT + "ON COMPLETION NOT PRESERVE DISABLE DO select 1"),
    (EVENT + "DISABLE ON SLAVE DO select 1", EVENT + "DISABLE DO select 1"),
    (EVENT + "DO select 1", EVENT + "DISABLE DO select 1"),
    (EVENT + "COMMENT 'x' DO select 1", EVENT + "DISABLE COMMENT 'x' DO select 1"),
], ids=["enable", "disable-on-slave", "no-status", "status-before-comment"])
def test_disabled_event(create: str, expected: str) -> None:
    assert disabled_event(create) == expected


def test_definer_security_makes_invoker_definer() -> None:
    assert definer_security("views", {"schema": "s", "name": "v"}, VIEW) == VIEW.replace("INVOKER", "DEFINER")
    assert definer_security("triggers", {"schema": "s", "name": "t"}, "anything") == "anything"


@pytest.mark.parametrize("kind, obj", [
    ("views", {"name": "other"}),
    ("views", {"create": VIEW + "; DROP DATABASE s"}),
    ("routines", {"type": "FUNCTION", "create": "CREATE DEFINER=`r`@`%` PROCEDURE `v`() SELECT 1"}),
    ("events", {"name": "v", "create": "CREATE EVENT `s2`.`v` ON SCHEDULE EVERY 1 DAY DO SELECT 1"}),
], ids=["another-name", "two-statements", "procedure-said-function", "another-database"])
def test_checked_create_refuses_what_is_not_that_object(kind: str, obj: dict) -> None:
    with pytest.raises(IntegrityError):
        checked_create(kind, {"schema": "s", "name": "v", "create": VIEW, **obj})
