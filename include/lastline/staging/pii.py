"""What looks like personal data in a backup: column names (email, phone, name, address, birth, national
ids, bank and card numbers, IP addresses, passports...) and a sample of each text column's values (email
addresses, phone numbers, card numbers that pass Luhn's check, IBANs that pass mod 97).

The scan reads the backup's manifest and the head of each table's first chunk (untrusted input: only
decoded and matched, never executed). It errs on the side of flagging: a flagged column that holds no
personal data gets an explicit `keep` rule, which the report lists.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from lastline.logical import dialect
from lastline.logical.chunk_files import read_chunk
from lastline.manifest import LogicalManifest, LogicalTable
from lastline.staging.rules import column_key
from lastline.storage import Storage

SAMPLE_BYTES = 256 << 10
SAMPLE_ROWS = 500

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

EMAIL = re.compile(r"[A-Za-z0-9._%+'-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
PHONE = re.compile(r"\+?[0-9][0-9 ().-]{5,22}[0-9]")
CARD = re.compile(r"(?<![0-9])[0-9](?:[ -]?[0-9]){12,18}(?![0-9])")
IBAN = re.compile(r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}\b")


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

    def suggestion(self, nullable: bool, text: bool) -> str:
        """A rule to paste: the strategy of its kind (a text column), else hash, null, or keep."""
        if not text:
            return "null" if nullable else "keep"
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


def luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def iban_ok(text: str) -> bool:
    s = text.replace(" ", "")
    moved = s[4:] + s[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97 == 1


def kinds_by_values(values: Iterable[str]) -> dict[str, int]:
    """How many sampled values hold an email address, a card number (Luhn), an IBAN (mod 97), or are a
    phone number (a whole value of 7-15 digits with a + or separators)."""
    counts = {"email": 0, "phone": 0, "bank/card": 0}
    for v in values:
        if EMAIL.search(v):
            counts["email"] += 1
        if any(luhn(re.sub(r"[ -]", "", m.group())) for m in CARD.finditer(v)) or any(iban_ok(m.group()) for m in IBAN.finditer(v)):
            counts["bank/card"] += 1
        s = v.strip()
        if PHONE.fullmatch(s) and 7 <= sum(ch.isdigit() for ch in s) <= 15 and (s.startswith("+") or re.search(r"[ ().-]", s)):
            counts["phone"] += 1
    return {k: n for k, n in counts.items() if n}


def sample(storage: Storage, manifest: LogicalManifest, t: LogicalTable) -> list[list[bytes | None]]:
    """Up to SAMPLE_ROWS rows from the head of the table's first chunk (whole lines only)."""
    if not t.chunks:
        return []
    c = t.chunks[0]
    data = bytearray()
    reader = read_chunk(storage, f"{manifest.backup_id}/{c.file}", manifest.compression, c.sha256, f"{t.schema}.{t.name}")
    try:
        for piece in reader:
            data += piece
            if len(data) >= SAMPLE_BYTES:
                break
    finally:
        reader.close()
    complete = bytes(data[: data.rfind(b"\n") + 1]) if len(data) >= SAMPLE_BYTES else bytes(data)
    return list(dialect.decode_rows(complete))[:SAMPLE_ROWS]


def scan(storage: Storage, manifest: LogicalManifest, databases: list[str]) -> list[Finding]:
    """Every column of the databases in scope that looks like personal data, by name or by its values."""
    found: list[Finding] = []
    for t in manifest.tables:
        if t.schema not in databases:
            continue
        columns = [dialect.Column(**c) for c in t.columns]
        rows = None
        for i, col in enumerate(columns):
            text = col.charset is not None
            f = Finding(t.schema, t.name, col.name)
            for kind in kinds_by_name(col.name, col.column_type, text):
                f.kinds.append(kind)
                f.why.append(f"its name suggests {kind}")
            if text:
                if rows is None:
                    rows = sample(storage, manifest, t)
                values = [r[i].decode("utf-8", "replace") for r in rows if len(r) == len(columns) and r[i]]
                for kind, n in kinds_by_values(values).items():
                    if kind == "phone" and n * 2 < len(values):
                        continue  # a column of phone numbers, not one that happens to hold a few
                    if kind not in f.kinds:
                        f.kinds.append(kind)
                    f.why.append(f"{n} of {len(values)} sampled values look like {kind}")
            if f.kinds:
                found.append(f)
    return found
