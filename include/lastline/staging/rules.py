"""Masking rules: `{"<db>.<table>.<column>": "<strategy>"}`, parsed and checked against the backup's schema.

Names with dots or spaces are written in backquotes: `` "`my.db`.`t 1`.`e``mail`": "email" `` (a
backquote inside is doubled, as in SQL). Strategies, each deterministic under the masking key (the same
value masks to the same output in every table and every refresh with the same key):

- ``email``: ``u<hex>@example.com`` (a reserved domain), 96 bits of the value's HMAC: unique stays unique;
- ``name``, ``first_name``, ``last_name``: a made-up name from syllables (never a real person's);
- ``phone``: the same length and punctuation, every digit replaced;
- ``hash``: the hex of the value's keyed HMAC-SHA256 (cut to the column's length);
- ``null``; ``fixed:<value>``; ``keep`` (an explicit, audited opt-out).

A two-part key, `` "<db>.<object>": "keep" ``, acknowledges text that looks personal in a schema object's
own text (a table's COMMENT or a column's DEFAULT, a view, trigger, routine or event: see pii_objects),
which no rule can mask: `keep` is its only strategy, and the report lists it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lastline.core.errors import ConfigError
from lastline.core.sql import quote_ident

REVEALING = ("keep", "phone")  # strategies that let part of the original through: the deployment's alone
STRATEGIES = ("email", "name", "first_name", "last_name", "phone", "hash", "null", "fixed:<value>", "keep")
HASHED = ("email", "name", "first_name", "last_name", "phone", "hash")  # outputs derived from the keyed HMAC
EMAIL_DOMAIN = "example.com"
EMAIL_HEX = 24  # 96 bits: no two values of a UNIQUE column collide in practice


@dataclass(frozen=True)
class Rule:
    """One column's masking: where, and how."""

    schema: str
    table: str
    column: str
    strategy: str  # one of STRATEGIES' names; "fixed" with `value`
    value: str | None = None

    @property
    def key(self) -> str:
        """The rule's name as users write it (backquoted where a plain dotted name would be ambiguous)."""
        return column_key(self.schema, self.table, self.column)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "table": self.table, "column": self.column, "strategy": self.strategy, "value": self.value}


def column_key(schema: str, table: str, column: str) -> str:
    """`db.table.column`, with each part backquoted if it holds a dot, a backquote or a space."""
    return _dotted(schema, table, column)


def object_key(schema: str, name: str) -> str:
    """`db.object`, each part backquoted if it holds a dot, a backquote or a space."""
    return _dotted(schema, name)


def _dotted(*parts: str) -> str:
    return ".".join(p if re.fullmatch(r"[^.` ]+", p) else quote_ident(p) for p in parts)


def split_name(key: str) -> list[str]:
    """A dotted name's parts (each optionally backquoted, a backquote inside doubled)."""
    parts, i = [], 0
    while i <= len(key):
        if key[i:i + 1] == "`":
            m = re.match(r"`((?:[^`]|``)*)`", key[i:])
            if not m:
                raise ConfigError(f"masking rule {key!r}: an unclosed backquote.")
            parts.append(m.group(1).replace("``", "`"))
            i += m.end()
        else:
            j = key.find(".", i)
            j = len(key) if j < 0 else j
            parts.append(key[i:j])
            i = j
        if i < len(key) and key[i] != ".":
            raise ConfigError(f"masking rule {key!r}: expected a dot after {parts[-1]!r}.")
        i += 1
    if len(parts) not in (2, 3) or not all(parts):
        raise ConfigError(f"masking rule {key!r}: write it as <database>.<table>.<column>, or <database>.<object> with "
                          "\"keep\" to acknowledge a schema object (backquote names with dots).")
    return parts


def split_key(key: str) -> tuple[str, str, str]:
    """`db.table.column` (parts optionally backquoted) as its three names."""
    parts = split_name(key)
    if len(parts) != 3:
        raise ConfigError(f"masking rule {key!r}: write it as <database>.<table>.<column> (backquote names with dots).")
    return parts[0], parts[1], parts[2]


@dataclass(frozen=True)
class ObjectRule:
    """A schema object whose own text is kept as it is, on the record (`"<db>.<object>": "keep"`)."""

    schema: str
    name: str

    @property
    def key(self) -> str:
        return object_key(self.schema, self.name)


def parse_rules(rules: Any) -> list[Rule]:
    """The column rules of a JSON object (or its text); an unknown strategy or a malformed name is a
    ConfigError (object keys are checked too: see parse_rule_set)."""
    return parse_rule_set(rules)[0]


def parse_rule_set(rules: Any) -> tuple[list[Rule], list[ObjectRule]]:
    """The column rules and the object acknowledgements of a JSON object (or its text)."""
    if isinstance(rules, str):
        import json

        try:
            rules = json.loads(rules) if rules.strip() else {}
        except ValueError as exc:
            raise ConfigError(f"masking_rules is not valid JSON ({exc}).") from exc
    if rules is None:
        rules = {}
    if not isinstance(rules, dict):
        raise ConfigError("masking_rules must be a JSON object {\"<db>.<table>.<column>\": \"<strategy>\"}.")
    out, objects = [], []
    for key, strategy in rules.items():
        parts = split_name(str(key))
        text = str(strategy).strip()
        if len(parts) == 2:
            if text != "keep":
                raise ConfigError(
                    f"masking rule {key!r}: a two-part name acknowledges a schema object (a table's COMMENT or DEFAULT, "
                    f"a view, trigger, routine or event), whose text no rule can mask: its only strategy is \"keep\", "
                    f"not {text!r}. Change the object at the source, or mask a column with <database>.<table>.<column>."
                )
            objects.append(ObjectRule(parts[0], parts[1]))
            continue
        schema, table, column = parts
        name, _, value = text.partition(":")
        if name == "fixed" and _:
            out.append(Rule(schema, table, column, "fixed", value))
        elif text in STRATEGIES and text != "fixed:<value>":
            out.append(Rule(schema, table, column, text))
        else:
            raise ConfigError(f"masking rule {key!r}: unknown strategy {text!r}; choose one of {', '.join(STRATEGIES)}.")
    return out, objects


def run_rules(deployment: Any, conf: Any) -> tuple[list[Rule], list[ObjectRule]]:
    """The rules of a run: the deployment's (the Airflow Variable lastline_masking_rules), with what the run's
    conf (the masking_rules Param) adds or changes on top. A run may mask more, never less: a rule that lets
    part of the original through (`keep`, of a column or of an object's text; `phone`, which keeps every
    character but the digits) comes only from the deployment, and a run changes a deployment's rule only to
    one that keeps nothing of the value (`null`, `fixed`, `hash`)."""
    columns, objects = parse_rule_set(deployment)
    more, more_objects = parse_rule_set(conf)
    by_key = {r.key: r for r in columns}
    weaker = [f"{r.key} ({r.strategy})" for r in more
              if r.strategy in REVEALING and getattr(by_key.get(r.key), "strategy", None) != r.strategy
              or r.key in by_key and by_key[r.key].strategy != r.strategy and r.strategy not in ("null", "fixed", "hash")]
    weaker += [f"{o.key} (keep)" for o in more_objects]
    if weaker:
        raise ConfigError(
            f"masking_rules: {', '.join(weaker)}: a run's conf may mask more, never less. \"keep\" and \"phone\" (which keeps "
            "every character but the digits) come only from the deployment's rules (the Airflow Variable "
            "lastline_masking_rules), and a run changes one of those only to null, fixed or hash. Nothing was touched."
        )
    by_key.update((r.key, r) for r in more)
    return list(by_key.values()), objects
