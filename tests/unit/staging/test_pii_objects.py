"""staging.pii_objects: personal data in a backup's schema text, where no masking rule reaches. SQL is tokenized so
names never count, strings, comments and hex literals are searched, and a finding in a table says where it is."""
from __future__ import annotations

import pytest

from lastline.staging import pii_objects

UTF16_HEX = "ann@example.net".encode("utf-16-le").hex()


@pytest.mark.parametrize(("sql", "found"), [
    ("SELECT 'ann@example.net'", [("string", "email", "ann@example.net")]),
    ("SELECT 'it''s bob@mail.example.org'", [("string", "email", "bob@mail.example.org")]),
    ("SELECT 'unterminated ann@example.net", [("string", "email", "ann@example.net")]),
    ("SELECT 1 -- call +1 (555) 123-4567\n", [("comment", "phone", "+1 (555) 123-4567")]),
    ("/* ann@example.net */", [("comment", "email", "ann@example.net")]),
    ("SELECT x'616e6e406578616d706c652e6e6574'", [("hex", "email", "ann@example.net")]),
    ("SELECT 0x616e6e406578616d706c652e6e6574", [("hex", "email", "ann@example.net")]),
    (f"SELECT x'{UTF16_HEX}'", [("hex", "email", "ann@example.net")]),
    ("SELECT 4111111111111111", [("number", "bank/card", "4111111111111111")]),
    ("SELECT 'DE89 3704 0044 0532 0130 00'", [("string", "bank/card", "DE89 3704 0044 0532 0130 00")]),
    ("SELECT 4111111111111112", []),
    (") ENGINE=InnoDB AUTO_INCREMENT=4111111111111111", []),
    ("CREATE DEFINER=`root`@`localhost` VIEW v AS SELECT 1", []),
    ("SELECT `ann@example.net` FROM t", []),
    ("SELECT 'nothing personal', 42", []),
], ids=["email-in-a-string", "doubled-quote-in-a-string", "unterminated-string", "phone-in-a-dash-comment",
        "email-in-a-block-comment", "x-hex-literal", "0x-hex-literal", "utf16-hex-literal", "luhn-card-number",
        "iban-in-a-string", "number-failing-luhn", "table-option-number", "definer-is-a-name", "backquoted-name",
        "nothing"])
def test_find_in_sql(sql, found):
    assert [(token, kind, value) for _, token, kind, value in pii_objects.find_in_sql(sql)] == found


def test_find_in_sql_skips_numbers_when_told():
    assert list(pii_objects.find_in_sql("SELECT 4111111111111111", numbers=False)) == []
    assert [at for at, *_ in pii_objects.find_in_sql("SELECT 'x', 'ann@example.net'")] == [12]


CREATE = """CREATE TABLE `t` (
  `id` int(11) NOT NULL,
  `email` varchar(100) DEFAULT 'ann@example.net',
  `note` text COMMENT 'ask bob@example.org',
  `g` varchar(50) GENERATED ALWAYS AS (concat('x','eve@example.com')) VIRTUAL,
  CONSTRAINT `c` CHECK (`email` <> 'zed@example.com'),
  PRIMARY KEY (`id`)
) ENGINE=InnoDB AUTO_INCREMENT=4111111111111111 COMMENT='owner kim@example.com'
 PARTITION BY LIST COLUMNS(`email`)
(PARTITION `p0` VALUES IN ('pat@example.com') ENGINE = InnoDB)"""
SCHEMA = {
    "tables": [{"schema": "crm", "name": "t", "create": CREATE}, {"schema": "other", "name": "t", "create": CREATE}],
    "views": [{"schema": "crm", "name": "v",
               "create": "CREATE DEFINER=`root`@`localhost` VIEW `v` AS SELECT 'ann@example.net' AS e"}],
    "triggers": [{"schema": "crm", "name": "tr", "table": "t",
                  "create": "CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET @a = 'tim@example.com'"}],
    "routines": [{"schema": "crm", "name": "r", "type": "PROCEDURE", "create": "CREATE PROCEDURE r() SELECT 4111111111111111"}],
    "sequences": [{"schema": "crm", "name": "s", "create": "CREATE SEQUENCE s start with 4111111111111111"}],
    "events": [{"schema": "crm", "name": "e", "create": "CREATE EVENT e ON SCHEDULE EVERY 1 DAY DO SELECT 'x'"}],
}


def test_scan_objects_says_where_in_each_object_redacted():
    found = {(f.key, f.kind): f.found for f in pii_objects.scan_objects(SCHEMA, ["crm"])}
    assert found == {
        ("crm.t", "table"): ["email a***@example.net in the DEFAULT of column `email`",
                             "email b***@example.org in the COMMENT of column `note`",
                             "email e***@example.com in the expression of column `g`",
                             "email z***@example.com in a CHECK constraint",
                             "email k***@example.com in the table COMMENT",
                             "email p***@example.com in the partitioning"],
        ("crm.v", "view"): ["email a***@example.net in a string in its text"],
        ("crm.tr", "trigger on crm.t"): ["email t***@example.com in a string in its text"],
        ("crm.r", "procedure"): ["bank/card ************1111 in a number in its text"],
    }  # the sequence's start is a setting, never a card; the event holds nothing; `other` is not scanned


def test_scan_objects_lists_a_value_once_per_object():
    schema = {"views": [{"schema": "d", "name": "v", "create": "SELECT 'a@example.com', 'a@example.com'"}]}
    assert [f.found for f in pii_objects.scan_objects(schema, ["d"])] == [["email a***@example.com in a string in its text"]]


def test_object_names_are_every_object_of_the_databases():
    assert pii_objects.object_names(SCHEMA, ["crm"]) == {("crm", n) for n in ("t", "v", "tr", "r", "s", "e")}
    assert pii_objects.object_names(SCHEMA, []) == set()


@pytest.mark.parametrize(("schema", "name", "key"), [("crm", "t", "crm.t"), ("a.b", "c d", "`a.b`.`c d`")],
                         ids=["plain", "dotted-and-spaced"])
def test_a_finding_s_key_is_the_rule_name(schema, name, key):
    assert pii_objects.ObjectFinding(schema, name, "table").key == key
