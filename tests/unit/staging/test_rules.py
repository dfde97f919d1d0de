"""staging.rules: masking rules as users write them (dotted names, backquoted where a part holds a dot, a space or a
backquote), every strategy, object acknowledgements, and each malformed rule refused with its reason."""
from __future__ import annotations

import pytest

from lastline.core.errors import ConfigError
from lastline.staging.rules import ObjectRule, Rule, column_key, object_key, parse_rule_set, parse_rules, split_key, split_name


@pytest.mark.parametrize(("key", "parts"), [
    ("shop.users.email", ["shop", "users", "email"]),
    ("`my.db`.`t 1`.`e``mail`", ["my.db", "t 1", "e`mail"]),
    ("shop.`a.b`.c", ["shop", "a.b", "c"]),
    ("shop.v_users", ["shop", "v_users"]),
], ids=["plain", "backquoted-with-dot-space-backquote", "one-part-backquoted", "two-part-object"])
def test_split_name(key, parts):
    assert split_name(key) == parts


@pytest.mark.parametrize(("key", "message"), [
    ("shop", "write it as <database>.<table>.<column>"),
    ("a.b.c.d", "write it as"),
    ("shop..email", "write it as"),
    ("`shop.users.email", "an unclosed backquote"),
    ("`shop`x.users.email", "expected a dot after 'shop'"),
], ids=["one-part", "four-parts", "empty-part", "unclosed-backquote", "text-after-backquote"])
def test_split_name_refuses(key, message):
    with pytest.raises(ConfigError, match=message):
        split_name(key)


def test_split_key_needs_three_parts():
    assert split_key("a.b.c") == ("a", "b", "c")
    with pytest.raises(ConfigError, match="<database>.<table>.<column>"):
        split_key("a.b")


@pytest.mark.parametrize(("parts", "key"), [
    (("shop", "users", "email"), "shop.users.email"),
    (("my.db", "t 1", "e`mail"), "`my.db`.`t 1`.`e``mail`"),
], ids=["plain", "quoted-where-needed"])
def test_column_key_round_trips_with_split_name(parts, key):
    assert column_key(*parts) == key
    assert split_name(key) == list(parts)


def test_object_key():
    assert object_key("shop", "v 1") == "shop.`v 1`"


@pytest.mark.parametrize(("rules", "expected"), [
    ({"shop.users.email": "email"}, [Rule("shop", "users", "email", "email")]),
    ({"shop.users.note": " null "}, [Rule("shop", "users", "note", "null")]),
    ({"shop.users.tier": "fixed:gold:1"}, [Rule("shop", "users", "tier", "fixed", "gold:1")]),
    ({"shop.users.tier": "fixed:"}, [Rule("shop", "users", "tier", "fixed", "")]),
    ('{"shop.users.name": "first_name"}', [Rule("shop", "users", "name", "first_name")]),
    ("  ", []),
    (None, []),
], ids=["email", "stripped", "fixed-keeps-colons", "fixed-empty", "json-text", "blank-text", "none"])
def test_parse_rules(rules, expected):
    assert parse_rules(rules) == expected


def test_a_two_part_keep_acknowledges_an_object():
    columns, objects = parse_rule_set({"shop.v_users": "keep", "shop.users.phone": "phone"})
    assert columns == [Rule("shop", "users", "phone", "phone")]
    assert objects == [ObjectRule("shop", "v_users")] and objects[0].key == "shop.v_users"


@pytest.mark.parametrize(("rules", "message"), [
    ({"shop.users.email": "scramble"}, "unknown strategy 'scramble'"),
    ({"shop.users.email": "fixed"}, "unknown strategy 'fixed'"),
    ({"shop.v_users": "null"}, "its only strategy is \"keep\""),
    ("{not json", "masking_rules is not valid JSON"),
    ("[1]", "must be a JSON object"),
], ids=["unknown", "fixed-without-value", "object-not-kept", "bad-json", "not-an-object"])
def test_parse_rules_refuses(rules, message):
    with pytest.raises(ConfigError, match=message):
        parse_rule_set(rules)
