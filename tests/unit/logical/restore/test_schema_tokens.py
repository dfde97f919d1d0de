"""schema_tokens: the token look-ups every schema check shares, and the executable comments MariaDB never runs."""
from __future__ import annotations

import pytest

from lastline.logical.format import sql_text
from lastline.logical.restore.schema_tokens import BadStatement, near, never_run, object_name, token_at


@pytest.mark.parametrize("text, runs", [
    ("CREATE TABLE `t` (`id` int) /*!40101 ENGINE=InnoDB */", True),
    ("CREATE TABLE `t` (`id` int) /*M!100100 ENGINE=InnoDB */", True),
    ("CREATE TABLE `t` (`id` int) /*!50700 ENGINE=InnoDB */", False),
    ("CREATE TABLE `t` (`id` int) /*!80000 ENGINE=InnoDB */", False),
], ids=["mysql-4.1", "mariadb-only", "mysql-5.7", "mysql-8"])
def test_never_run(text: str, runs: bool) -> None:
    tokens = sql_text.tokenize(text)
    if runs:
        assert never_run(tokens) == tokens
    else:
        with pytest.raises(BadStatement, match="MariaDB never runs"):
            never_run(tokens)


def _sig(text: str) -> list[sql_text.Token]:
    return sql_text.significant(sql_text.tokenize(text))


@pytest.mark.parametrize("text, exact, after", [
    ("VIEW `v` AS", True, 2), ("VIEW `s`.`v` AS", True, 4), ("VIEW V AS", False, 2),
], ids=["name", "own-database", "bare-word-any-case"])
def test_object_name(text: str, exact: bool, after: int) -> None:
    assert object_name(_sig(text), 1, "s", "v", "view", exact) == after


@pytest.mark.parametrize("text, exact", [("VIEW `w` AS", True), ("VIEW `o`.`v` AS", True), ("VIEW v AS", True)],
                         ids=["another-name", "another-database", "bare-word-where-quoted"])
def test_object_name_refuses(text: str, exact: bool) -> None:
    with pytest.raises(BadStatement):
        object_name(_sig(text), 1, "s", "v", "view", exact)


def test_token_at_and_near_past_the_end() -> None:
    sig = _sig("CREATE VIEW")
    assert token_at(sig, 5) is None and token_at(sig, -1) is None
    assert near(sig, 5) == "the end" and near(sig, 1).startswith("character 7")
