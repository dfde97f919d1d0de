"""logical.restore.schema_definitions: one definition between a CREATE TABLE's parentheses, as SHOW CREATE TABLE prints
it, read as its kind and name (a column, key, foreign key, check, period or unique constraint); anything else refused."""
from __future__ import annotations

import pytest

from lastline.logical.format import sql_text
from lastline.logical.restore.schema_definitions import Definition, read_definition
from lastline.logical.restore.schema_tokens import BadStatement


def _read(text: str) -> tuple[str, str | None]:
    return read_definition(sql_text.significant(sql_text.tokenize(text)))


@pytest.mark.parametrize(("text", "kind", "name"), [
    ("`id` int(11) NOT NULL AUTO_INCREMENT", "column", None),
    ("`a b` varchar(10) DEFAULT 'x, y'", "column", None),
    ("PRIMARY KEY (`id`)", "primary", None),
    ("PRIMARY KEY (`a`,`b`(10) DESC) USING BTREE", "primary", None),
    ("KEY `k` (`a`)", "index", "k"),
    ("UNIQUE KEY `u` (`a`,`b`)", "index", "u"),
    ("FULLTEXT KEY `f` (`txt`) WITH PARSER ngram", "index", "f"),
    ("SPATIAL KEY `g` (`geo`)", "index", "g"),
    ("KEY `k` (`a`) KEY_BLOCK_SIZE=8 COMMENT 'why' IGNORED", "index", "k"),
    ("UNIQUE `u` (`a`)", "index", "u"),
    ("UNIQUE KEY `p` (`id`,`p` WITHOUT OVERLAPS)", "index", "p"),
    ("CONSTRAINT `fk` FOREIGN KEY (`a`) REFERENCES `p` (`id`)", "foreign_key", "fk"),
    ("CONSTRAINT `fk` FOREIGN KEY `i` (`a`) REFERENCES `db`.`p` (`id`) ON DELETE SET NULL ON UPDATE CASCADE MATCH FULL",
     "foreign_key", "fk"),
    ("CONSTRAINT `c` CHECK (`a` > 0)", "check", "c"),
    ("CHECK (`a` > 0 AND (`b` < 1))", "check", None),
    ("CONSTRAINT `uc` UNIQUE KEY `u` (`a`)", "unique_constraint", "u"),
    ("PERIOD FOR `p` (`s`,`e`)", "period", None),
    ("PERIOD FOR SYSTEM_TIME (`row_start`,`row_end`)", "period", None),
], ids=["column", "column-quoted-space-with-comma-default", "primary", "primary-prefix-desc-using", "key", "unique-key",
        "fulltext-parser", "spatial", "key-options", "unique-without-key", "without-overlaps", "foreign-key",
        "foreign-key-every-clause", "named-check", "bare-check", "unique-constraint", "application-period",
        "system-period"])
def test_read_definition(text, kind, name):
    assert _read(text) == (kind, name)


@pytest.mark.parametrize(("text", "refusal"), [
    ("`a`", "column without a type"),
    ("`a` int REFERENCES `p` (`id`)", "REFERENCES another table"),
    ("KEY (`a`)", "not \\[UNIQUE|FULLTEXT|SPATIAL\\] KEY `name`"),
    ("FULLTEXT `f` (`a`)", "not \\[UNIQUE|FULLTEXT|SPATIAL\\] KEY `name`"),
    ("PRIMARY (`a`)", "PRIMARY that is not PRIMARY KEY"),
    ("KEY `k` `a`", "without its parenthesised columns"),
    ("KEY `k` (a)", "key part that is not a quoted column"),
    ("KEY `k` (`a` + 1)", "key part that is not a quoted column"),
    ("KEY `k` (`a`) DROP TABLE", "not a key option"),
    ("CONSTRAINT FOREIGN KEY (`a`) REFERENCES `p` (`id`)", "without a quoted constraint name"),
    ("CONSTRAINT fk FOREIGN KEY (`a`) REFERENCES `p` (`id`)", "not a column, key or constraint"),
    ("CONSTRAINT `fk` FOREIGN KEY (`a`) REFERENCES (`id`)", "does not reference one quoted table"),
    ("CONSTRAINT `fk` FOREIGN KEY (`a`) REFERENCES `p` (`id`) ON DELETE CASCADE ON DELETE CASCADE", "not ON DELETE/UPDATE"),
    ("CONSTRAINT `fk` FOREIGN KEY (`a`) REFERENCES `p` (`id`) ON DELETE EXPLODE", "not ON DELETE/UPDATE"),
    ("CHECK (`a` > 0) OR 1", "not one parenthesised condition"),
    ("CHECK `a` > 0", "not one parenthesised condition"),
    ("PERIOD FOR `p` (`s`,`e`) extra", "not a column, key or constraint"),
    ("SELECT 1", "not a column, key or constraint"),
], ids=["column-without-type", "column-references", "key-without-name", "fulltext-without-key", "primary-without-key",
        "key-without-parentheses", "bare-key-part", "expression-key-part", "after-a-key", "unnamed-constraint",
        "unquoted-constraint",
        "references-no-table", "on-delete-twice", "unknown-action", "check-with-more", "check-unparenthesised",
        "period-with-more", "a-statement"])
def test_read_definition_refuses(text, refusal):
    with pytest.raises(BadStatement, match=refusal):
        _read(text)


def test_a_definition_is_a_value():
    one = Definition("index", 10, 20, 9, "KEY `k` (`a`)", "k")
    assert one == Definition("index", 10, 20, 9, "KEY `k` (`a`)", "k") and len({one, one}) == 1
