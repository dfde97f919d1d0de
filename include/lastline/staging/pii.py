"""Which columns of a backup look like personal data: by name (email, phone, name, address, birth, national
ids, bank and card numbers, IP addresses, passports...) and by a sample of every column's values, binary
ones too (email addresses, card numbers that pass Luhn's check, IBANs that pass mod 97, phone numbers),
spread over the whole table and bounded in cost (staging.sampling).

It fails closed: a binary column whose values are not text (images, compressed or encrypted bytes)
cannot be inspected and is flagged too. A column that holds no personal data gets an explicit rule
(`keep`, listed in the report; `null` or `fixed:<value>` for bytes nobody needs in staging). What the
schema's own text holds (comments, defaults, views, triggers, routines, events) is pii_objects' part.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from lastline.backups import backup_seal
from lastline.logical.format import dialect
from lastline.manifest import LogicalManifest, LogicalTable
from lastline.staging import patterns
from lastline.staging.patterns import iban_ok, luhn  # noqa: F401 (part of this module's interface)
from lastline.staging.rules import column_key
from lastline.staging.sampling import ENOUGH, TableSample, category, sample
from lastline.storage import Storage

NOT_TEXT_SHARE = 10  # a binary column is unreadable when over 1 in NOT_TEXT_SHARE sampled values is not text

# name tokens (a column name split at _, -, spaces, digits and camelCase) -> the kind of data
TOKENS: dict[str, str] = {
    **dict.fromkeys(("email", "mail", "emailaddress"), "email"),
    **dict.fromkeys(("phone", "tel", "telephone", "mobile", "cell", "cellphone", "fax", "msisdn", "phonenumber"), "phone"),
    **dict.fromkeys(("name", "firstname", "lastname", "surname", "fullname", "givenname", "forename", "middlename",
                     "fname", "lname", "username", "nickname"), "name"),
    **dict.fromkeys(("address", "addr", "street", "zip", "zipcode", "postcode", "postal", "postalcode"), "address"),
    **dict.fromkeys(("birth", "birthday", "birthdate", "dob"), "birth"),
    **dict.fromkeys(("ssn", "nino", "nin", "nationalid", "taxid", "tin", "passport", "passportno", "idcard"), "national id"),
    **dict.fromkeys(("iban", "bic", "card", "pan", "ccnumber", "creditcard", "cardnumber", "cvv"), "bank/card"),
    **dict.fromkeys(("ip", "ipaddr", "ipaddress", "ipv4", "ipv6"), "ip"),
}
# markers found inside a joined name too ("contactemail", "homephone", "billingaddress")
INSIDE = {"email": "email", "phone": "phone", "mobile": "phone", "address": "address", "street": "address",
          "postcode": "address", "zipcode": "address", "birth": "birth", "passport": "national id", "iban": "bank/card",
          "surname": "name", "firstname": "name", "lastname": "name", "fullname": "name", "creditcard": "bank/card",
          "cardnumber": "bank/card", "nationalid": "national id", "ipaddress": "ip"}
# kinds a number or date column may hold (an `address_id` integer is a key, not an address)
NOT_TEXT_KINDS = {"phone", "birth", "national id", "bank/card", "ip"}
SUGGEST = {"email": "email", "phone": "phone", "name": "name"}
UNREADABLE = "unreadable binary"


@dataclass
class Finding:
    """A column that looks like personal data, and why."""

    schema: str
    table: str
    column: str
    kinds: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return column_key(self.schema, self.table, self.column)

    def add(self, kind: str, how_many: str, example: str | None) -> None:
        """A kind found by value: `<how_many> look like <kind> (e.g. <example, redacted>)`."""
        if kind not in self.kinds:
            self.kinds.append(kind)
        self.why.append(f"{how_many} look like {kind}" + (f" (e.g. {example})" if example else ""))

    def suggestion(self, col: dialect.Column, unique: bool = False) -> str:
        """A rule to paste: the strategy of its kind (a text column), else hash; bytes: null, an empty fixed
        value (NOT NULL), keep (NOT NULL and UNIQUE: a key); numbers and dates: null, else keep."""
        kind = category(col)
        if kind == "binary":
            return "null" if col.nullable else "keep" if unique else "fixed:"
        if kind != "text":
            return "null" if col.nullable else "keep"
        if "name" in self.kinds:
            words = tokens(self.column)
            return "last_name" if {"last", "lastname", "surname"} & set(words) else \
                "first_name" if {"first", "firstname", "given", "forename"} & set(words) else "name"
        return next((SUGGEST[k] for k in self.kinds if k in SUGGEST), "hash")


def tokens(name: str) -> list[str]:
    """A column name's words, lowercased (`contactEmail_2` -> contact, email)."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    return [t for t in re.split(r"[^A-Za-z]+", spaced.lower()) if t]


def kinds_by_name(name: str, column_type: str, text: bool) -> list[str]:
    """The kinds of personal data a column's name suggests (for its type)."""
    words = tokens(name)
    found = [TOKENS[w] for w in words if w in TOKENS]
    joined = "".join(words)
    found += [kind for marker, kind in INSIDE.items() if marker in joined]
    if words and words[-1] in ("id", "key", "count", "type", "status", "flag") and not text:
        return []  # address_id, phone_type: keys and codes, not the data
    if not text and not column_type.lower().startswith(("date", "datetime", "timestamp")):
        found = [k for k in found if k in NOT_TEXT_KINDS]
    return list(dict.fromkeys(found))


def kinds_by_values(values: Iterable[str]) -> dict[str, int]:
    """How many values hold an email address, a card number (Luhn) or an IBAN (mod 97), or are a phone
    number (a whole value of 7-15 digits with a + or separators)."""
    counts = {"email": 0, "phone": 0, "bank/card": 0}
    for v in values:
        for kind in {kind for _, kind, _ in patterns.find(v)}:
            counts[kind] += 1
        if patterns.is_phone(v):
            counts["phone"] += 1
    return {k: n for k, n in counts.items() if n}


def column_findings(t: LogicalTable, s: TableSample) -> list[Finding]:
    """The columns of a sampled table that look like personal data, by name or by value, or cannot be read."""
    found = []
    for col, c in zip((dialect.Column(**c) for c in t.columns), s.columns):
        kind = category(col)
        f = Finding(t.schema, t.name, col.name)
        for k in kinds_by_name(col.name, col.column_type, kind in ("text", "binary")):  # a VARBINARY email too
            f.kinds.append(k)
            f.why.append(f"its name suggests {k}")
        for k in ("email", "bank/card"):
            if c.rows.get(k):
                n = len(c.rows[k])
                f.add(k, f"{n}{'+' if n >= ENOUGH else ''} of {s.rows_read} values read", c.example.get(k))
        if c.phones and c.phones * 2 >= c.values:  # a column of phone numbers, not one that happens to hold a few
            f.add("phone", f"{c.phones} of {c.values} sampled values", c.example.get("phone"))
        if kind == "number" and c.cards * 2 > c.values:  # a tenth of all long numbers pass Luhn: most must
            f.add("bank/card", f"{c.cards} of {c.values} sampled values", c.example.get("bank/card"))
        if kind == "binary" and (c.not_text * NOT_TEXT_SHARE > c.values or (t.rows and not s.rows_decoded)):
            f.kinds.append(UNREADABLE)
            f.why.append((f"{c.not_text} of {c.values} sampled values are not text" if s.rows_decoded else
                          "no row of it could be read whole") + " (images, compressed or encrypted bytes?): it cannot "
                         "be inspected; give it a rule (null, fixed:<value>, or keep on the record)")
        if f.kinds:
            found.append(f)
    return found


def scan(storage: Storage, manifest: LogicalManifest, databases: list[str]) -> list[Finding]:
    """Every column of the databases in scope that looks like personal data, by name or by its values, or
    whose values cannot be inspected."""
    found: list[Finding] = []
    seal = backup_seal(storage, manifest)  # an encrypted backup's chunks are opened with the deployment's key
    for t in manifest.tables:
        if t.schema in databases:
            found += column_findings(t, sample(storage, manifest, t, seal))
    return found
