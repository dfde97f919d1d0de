"""schema_grants: how far a GRANT of schema.json reaches beyond the restored databases, and the statements that
recreate one account (its own, and of it alone)."""
from __future__ import annotations

import pytest

from lastline.core.errors import IntegrityError
from lastline.logical.restore.schema_grants import checked_grants, grant_reach


@pytest.mark.parametrize("grant, reach", [
    ("GRANT USAGE ON *.* TO `a`@`%`", None),
    ("GRANT SELECT ON `shop`.* TO `a`@`%`", None),
    ("GRANT EXECUTE ON PROCEDURE `shop`.`p` TO `a`@`%`", None),
    ("GRANT SELECT ON *.* TO `a`@`%`", "is global (ON *.*)"),
    ("GRANT SELECT ON `other`.* TO `a`@`%`", "reaches database 'other'"),
    ("GRANT SELECT ON `sh_p`.* TO `a`@`%`", "matches several databases ('sh_p': `_` and `%` are wildcards there)"),
    ("GRANT SELECT ON `sh\\_p`.* TO `a`@`%`", "reaches database 'sh_p'"),
    ("GRANT `role1` TO `a`@`%`", "grants a role"),
    ("GRANT PROXY ON `b`@`%` TO `a`@`%`", "grants PROXY"),
], ids=["usage-everywhere", "own-database", "own-procedure", "global", "other-database", "wildcard", "escaped-underscore",
        "role", "proxy"])
def test_grant_reach(grant: str, reach: str | None) -> None:
    assert grant_reach(grant, ["shop"]) == reach


ACCOUNT = {"user": "a", "host": "%", "create": "CREATE USER `a`@`%` IDENTIFIED BY PASSWORD '*AB'"}


def test_checked_grants_recreates_the_account_if_it_is_missing() -> None:
    grant = "GRANT SELECT ON `shop`.* TO `a`@`%`"
    assert checked_grants({**ACCOUNT, "grants": [grant]}) == [
        "CREATE USER IF NOT EXISTS `a`@`%` IDENTIFIED BY PASSWORD '*AB'", grant]


@pytest.mark.parametrize("entry", [
    {**ACCOUNT, "grants": ["GRANT SELECT ON `shop`.* TO `b`@`%`"]},
    {**ACCOUNT, "grants": ["GRANT SELECT ON `shop`.* TO `a`@`%`, `b`@`%`"]},
    {**ACCOUNT, "grants": ["GRANT SELECT ON `shop`.* TO `a`@`%`; DROP DATABASE shop"]},
    {**ACCOUNT, "create": "CREATE USER `b`@`%`", "grants": []},
    {"user": "a", "host": "%", "grants": []},
], ids=["grant-to-another-account", "grant-to-a-second-account", "two-statements", "create-of-another-account",
        "no-create"])
def test_checked_grants_refuses_what_is_not_that_account_alone(entry: dict) -> None:
    with pytest.raises(IntegrityError):
        checked_grants(entry)
