"""core.plans: a run's Params read with one set of coercions (a form, the CLI's JSON and the REST API send different
types), sizes with binary units, safety flags that refuse a typo, and typed plans through their XCom form."""
from __future__ import annotations

import dataclasses

import pytest

from lastline.core.errors import ConfigError
from lastline.core.plans import Conf, Plan, as_bool, human_size, parse_size, plain, safety_flag

MIB = 1 << 20


@pytest.mark.parametrize(("value", "expected"), [
    (True, True), (False, False), ("true", True), (" YES ", True), ("on", True), (1, True), ("1", True),
    ("false", False), ("", False), (None, False), (0, False), ("maybe", False),
], ids=["json-true", "json-false", "true", "yes-padded", "on", "one", "one-text", "false", "empty", "none", "zero",
        "a-word"])
def test_as_bool(value, expected):
    assert as_bool(value) is expected


@pytest.mark.parametrize(("value", "default", "expected"), [
    (None, True, True), ("", False, False), ("", None, None), (True, False, True), (" No ", True, False),
    ("on", False, True), ("0", True, False),
], ids=["none-is-default", "empty-is-default", "no-default", "json-bool", "no-padded", "on", "zero"])
def test_safety_flag(value, default, expected):
    assert safety_flag(value, "protected", default) is expected


@pytest.mark.parametrize("value", ["ture", "2", "protected", 2], ids=["typo", "two", "a-word", "a-number"])
def test_safety_flag_refuses_what_is_neither(value):
    with pytest.raises(ConfigError, match="the connection extra protected is .*: write true or false"):
        safety_flag(value, "protected", True)


@pytest.mark.parametrize(("value", "expected"), [
    (0, 0), (1, 1), (16 * MIB, 16 * MIB), ("16M", 16 * MIB), ("16 MiB", 16 * MIB), ("16mb", 16 * MIB),
    ("1G", 1 << 30), ("1.5g", 3 << 29), ("512k", 512 << 10), ("2T", 2 << 40), ("1073741824", 1 << 30),
    (16 * MIB - 1, 16 * MIB - 1), (2.5, 2),
], ids=["zero", "one-byte", "16-mib-int", "16M", "16-MiB-spaced", "16mb", "1G", "1.5g", "512k", "2T", "digits",
        "one-under-16-mib", "float-truncated"])
def test_parse_size(value, expected):
    assert parse_size(value) == expected


@pytest.mark.parametrize("value", ["-1", "1X", "", "G", "inf", "nan", True, 1 << 61],
                         ids=["negative", "unknown-unit", "empty", "unit-only", "inf", "nan", "a-bool", "too-large"])
def test_parse_size_refuses(value):
    with pytest.raises(ValueError):
        parse_size(value)


@pytest.mark.parametrize(("n", "text"), [
    (0, "0"), (1, "1"), (1023, "1023"), (1024, "1K"), (1536 << 10, "1536K"), (16 * MIB, "16M"), (16 * MIB + 1, str(16 * MIB + 1)),
    (1 << 30, "1G"), (3 << 40, "3T"),
], ids=["zero", "one", "under-1k", "1k", "not-whole-megabytes", "16M", "16M-plus-one", "1G", "3T"])
def test_human_size(n, text):
    assert human_size(n) == text
    assert parse_size(text) == n  # what it prints reads back


@dataclasses.dataclass(frozen=True)
class Sample(Plan):
    name: str
    parallel: int = 2
    items: list = dataclasses.field(default_factory=list)


def test_a_plan_crosses_xcom_as_its_dict_and_comes_back_equal():
    plan = Sample("x", 4, [Sample("inner")])
    assert Sample.of(plan) is plan
    form = plain(plan)
    assert form == {"name": "x", "parallel": 4, "items": [{"name": "inner", "parallel": 2, "items": []}]}
    assert Sample.of({"name": "x", "parallel": 4}) == Sample("x", 4)


@pytest.mark.parametrize(("form", "message"), [
    ({"name": "x", "speed": 1}, "unknown field.*speed: a plan from another lastline version"),
    ({"parallel": 1}, "missing 1 required positional argument.*re-run from preflight"),
], ids=["unknown-field", "missing-field"])
def test_a_plan_of_another_shape_is_refused_with_its_fields_named(form, message):
    with pytest.raises(ConfigError, match=message):
        Sample.of(form)


def test_plain_walks_lists_tuples_and_dicts():
    assert plain({"a": (Sample("y"), 1), "b": [{"c": Sample("z", 3)}]}) == {
        "a": [{"name": "y", "parallel": 2, "items": []}, 1], "b": [{"c": {"name": "z", "parallel": 3, "items": []}}]}


@pytest.mark.parametrize(("raw", "expected"), [
    ({}, None), ({"p": ""}, None), ({"p": "x"}, "x"), ({"p": 3}, "3"),
], ids=["unset", "empty", "text", "a-number-as-text"])
def test_conf_text(raw, expected):
    assert Conf(raw).text("p") == expected
    assert Conf(raw).text("p", "d") == (expected or "d")


def test_conf_of_a_conf_and_replaced_values():
    """A stage reads `Conf(conf)`, whether the Airflow layer handed it a Conf or a test a dict."""
    conf = Conf({"backup": "latest", "parallel": 2})
    assert Conf(conf).raw == conf.raw and Conf(conf) is not conf and Conf(None).raw == {}
    replaced = conf.replace(backup="file:///b/1")
    assert replaced.raw == {"backup": "file:///b/1", "parallel": 2} and conf.text("backup") == "latest"


def test_conf_required_and_choice():
    assert Conf({"p": "a"}).required("p") == "a"
    with pytest.raises(ConfigError, match="the Param p is required"):
        Conf({"p": ""}).required("p")
    assert Conf({}).choice("p", ("a", "b"), "b") == "b"
    with pytest.raises(ConfigError, match="the Param p is 'c'; it must be one of a, b"):
        Conf({"p": "c"}).choice("p", ("a", "b"), "a")


@pytest.mark.parametrize(("value", "expected"), [
    (None, 7), ("", 7), (0, 7), ("4", 4), (4.0, 4), (12, 12),
], ids=["none", "empty", "zero-is-default", "text", "float", "int"])
def test_conf_integer(value, expected):
    assert Conf({"p": value}).integer("p", 7) == expected


@pytest.mark.parametrize(("value", "message"), [
    ("four", "is 'four', not a number"), (True, "give a finite number"), (float("inf"), "not a number"),
    (1, "it must be at least 2"),
], ids=["a-word", "a-bool", "inf", "under-the-minimum"])
def test_conf_integer_refuses(value, message):
    with pytest.raises(ConfigError, match=message):
        Conf({"p": value}).integer("p", 7, minimum=2)


@pytest.mark.parametrize(("value", "expected"), [(None, 1.5), ("", 1.5), (0, 0.0), ("2.5", 2.5)],
                         ids=["none", "empty", "zero-is-a-value", "text"])
def test_conf_number(value, expected):
    assert Conf({"p": value}).number("p", 1.5) == expected


@pytest.mark.parametrize(("value", "message"), [
    (-1, "it must be at least 0"), (11, "it may be at most 10"), ("nan", "give a finite number"),
], ids=["under", "over", "nan"])
def test_conf_number_refuses(value, message):
    with pytest.raises(ConfigError, match=message):
        Conf({"p": value}).number("p", 1, minimum=0, maximum=10)


@pytest.mark.parametrize(("value", "expected"), [
    (None, 99), ("", 99), (0, 99), ("0G", 99), ("16M", 16 * MIB), (16 * MIB, 16 * MIB), ("1.5GiB", 3 << 29),
], ids=["none", "empty", "zero", "zero-with-unit", "with-unit", "bytes", "fraction-gib"])
def test_conf_size(value, expected):
    assert Conf({"p": value}).size("p", 99) == expected


def test_conf_size_refuses_names_the_param():
    with pytest.raises(ConfigError, match="the Param chunk_size is '16Q': a size is a number of bytes"):
        Conf({"chunk_size": "16Q"}).size("chunk_size", 1)


@pytest.mark.parametrize(("value", "expected"), [
    (None, []), ("", []), ("a, b ,,a", ["a", "b"]), (["x", " y ", "", "x"], ["x", "y"]), (["a b", "c.d", "`e`"], ["a b", "c.d", "`e`"]),
], ids=["none", "empty", "comma-separated-repeats-dropped", "json-list", "spaces-dots-backticks-kept"])
def test_conf_names(value, expected):
    assert Conf({"p": value}).names("p") == expected


@pytest.mark.parametrize(("value", "default", "expected"), [
    (None, True, True), ("", False, False), ("false", True, False), (True, False, True), ("yes", False, True),
], ids=["unset-default-true", "empty-default-false", "false-text", "json-true", "yes"])
def test_conf_flag(value, default, expected):
    assert Conf({"p": value}).flag("p", default) is expected


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("", None), (0, None), ("5", 5)],
                         ids=["none", "empty", "zero", "text"])
def test_conf_optional_integer(value, expected):
    assert Conf({"p": value}).optional_integer("p") == expected
