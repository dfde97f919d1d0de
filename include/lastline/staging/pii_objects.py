"""Personal data in a backup's schema text, where no masking rule reaches: a table's CREATE statement
(table and column COMMENTs, column DEFAULTs, CHECK constraints, partition definitions), sequences, views,
triggers, routines and events, each read whole from schema.json.

The text is tokenized as SQL (backquoted identifiers skipped; strings, comments and hex literals read;
numbers checked for card numbers only), so that names never count: `DEFINER=`root`@`localhost`` is not an
email address. Strings and comments are searched for email addresses, card numbers (Luhn), IBANs (mod 97)
and phone numbers; hex literals as the bytes they stand for. A finding is refused unless the object is
acknowledged with `"<db>.<object>": "keep"` (rules.ObjectRule); its value is only ever shown redacted.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from lastline.staging import patterns
from lastline.staging.rules import object_key

TOKEN = re.compile(r"""
    (?P<ident>`(?:[^`]|``)*`?)
  | (?P<hex>[xX]'[0-9a-fA-F]*'|0x[0-9a-fA-F]+)
  | (?P<string>'(?:[^'\\]|\\.|'')*'?|"(?:[^"\\]|\\.|"")*"?)
  | (?P<comment>--[ \t][^\n]*|\#[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<number>(?<![\w$.])[0-9]{13,19}(?![\w$.]))
""", re.S | re.X)
TABLE_OPTION = re.compile(r"[A-Z_]+=$")  # AUTO_INCREMENT=, MAX_ROWS=...: a number there is a setting
CONTEXT_WORD = re.compile(r"\b(DEFAULT|COMMENT|CHECK|VALUES|PARTITION|GENERATED|AS)\b", re.I)
PLACES = {"string": "a string", "comment": "a comment", "hex": "a hex literal", "number": "a number"}


@dataclass
class ObjectFinding:
    """A schema object whose own text looks like it holds personal data, and what was found where."""

    schema: str
    name: str
    kind: str  # table, view, trigger on <table>, procedure, function, event, sequence
    found: list[str] = field(default_factory=list)  # "email a***@example.net in the table COMMENT"

    @property
    def key(self) -> str:
        return object_key(self.schema, self.name)


def find_in_sql(text: str, numbers: bool = True) -> Iterator[tuple[int, str, str, str]]:
    """(position, token: string/comment/hex/number, kind of data, value) of what looks personal in SQL text."""
    for m in TOKEN.finditer(text):
        token = m.lastgroup or ""
        if token == "ident":
            continue
        raw = m.group()
        if token == "number":
            if numbers and not TABLE_OPTION.search(text, max(0, m.start() - 40), m.start()):
                card = patterns.card_in(raw)
                if card:
                    yield m.start(), token, "bank/card", card
            continue
        if token == "hex":
            digits = raw[2:-1] if raw[:1] in "xX" else raw[2:]
            data = bytes.fromhex(digits[: len(digits) // 2 * 2])
            body = data.decode("latin-1")
            texts = [body] + [t for t in (patterns.utf16(data),) if t]
        elif token == "string":  # without its quotes (a quote is a character of an email's local part)
            texts = [raw[1:-1] if len(raw) > 1 and raw[-1] == raw[0] else raw[1:]]
        else:
            texts = [raw]
        seen = set()
        for t in texts:
            for _, kind, value in patterns.find(t, phones=True):
                if (kind, value) not in seen:
                    seen.add((kind, value))
                    yield m.start(), token, kind, value


def _place_in_table(create: str, at: int, token: str) -> str:
    """Where in a CREATE TABLE statement a position is (as SHOW CREATE TABLE prints it: one definition a line)."""
    start, end = create.rfind("\n", 0, at) + 1, create.find("\n", at)
    line, before = create[start:end if end >= 0 else len(create)], create[start:at]
    words = [w.upper() for w in CONTEXT_WORD.findall(before)]
    word = words[-1] if words else ""
    stripped = line.lstrip()
    column = re.match(r"`((?:[^`]|``)*)`", stripped)
    if token == "comment":
        return "a comment"
    if stripped.startswith(")") and word == "COMMENT":
        return "the table COMMENT"
    if stripped.upper().startswith(("PARTITION", "SUBPARTITION", "(PARTITION")) or word in ("VALUES", "PARTITION"):
        return "the partitioning"
    if stripped.upper().startswith(("CONSTRAINT", "CHECK")) or word == "CHECK":
        return "a CHECK constraint"
    if column and line.startswith(" "):
        name = column.group(1).replace("``", "`")
        what = {"DEFAULT": "the DEFAULT", "COMMENT": "the COMMENT", "AS": "the expression",
                "GENERATED": "the expression"}.get(word, "the definition")
        return f"{what} of column `{name}`"
    return "the table's options" if stripped.startswith(")") else PLACES.get(token, "its text")


def _objects(schema: dict, databases: list[str]) -> Iterator[tuple[str, str, str, str]]:
    """(database, name, kind, text) of every object of `databases` whose text a restore creates."""
    for kind, label in (("tables", "table"), ("sequences", "sequence"), ("views", "view"), ("triggers", "trigger"),
                        ("routines", ""), ("events", "event")):
        for o in schema.get(kind) or []:
            if o.get("schema") not in databases:
                continue
            what = label or str(o.get("type") or "routine").lower()
            if kind == "triggers" and o.get("table"):
                what = f"trigger on {object_key(o['schema'], o['table'])}"
            yield o["schema"], o["name"], what, str(o.get("create") or "")


def object_names(schema: dict, databases: list[str]) -> set[tuple[str, str]]:
    """(database, name) of every object in `databases` (what a two-part rule may name)."""
    return {(db, name) for db, name, _, _ in _objects(schema, databases)}


def scan_objects(schema: dict, databases: list[str]) -> list[ObjectFinding]:
    """Every object of `databases` whose text holds what looks like personal data (values shown redacted)."""
    out = []
    for db, name, kind, text in _objects(schema, databases):
        f = ObjectFinding(db, name, kind)
        for at, token, found, value in find_in_sql(text, numbers=kind != "sequence"):
            place = _place_in_table(text, at, token) if kind == "table" else f"{PLACES[token]} in its text"
            entry = f"{found} {patterns.redact(found, value)} in {place}"
            if entry not in f.found:
                f.found.append(entry)
        if f.found:
            out.append(f)
    return out
