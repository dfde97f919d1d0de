"""What personal data looks like in text, found in linear time: email addresses, card numbers that pass
Luhn's check, IBANs that pass mod 97, phone numbers; and how a found value is shown (redacted: a task log
never gets the value itself).

Every pattern is ASCII and anchored on something rare (an `@`, a digit that starts a run, a capital that
starts a word), with bounded repeats: the time is linear in the text's length whatever it holds (a
pattern like `[a-z]+@` is quadratic on a long run of letters). The same patterns run over raw bytes (an
ASCII email inside a BLOB, any ASCII-compatible charset) and over decoded text.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from itertools import accumulate

_LOCAL = "A-Za-z0-9._%+'-"  # an email's local part, as a character class
_LOCAL_SET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+'-")
_DOUBLED = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)  # Luhn: a digit doubled, its digits summed
_EMAIL = r"@(?<=[" + _LOCAL + r"]@)[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}"
# a run of 13-19 digits, in groups split by single spaces or dashes, not inside a longer run of digits
_CARD = r"[0-9](?<![0-9][0-9])(?:[ -]?[0-9]){12,40}(?![0-9]|[ -][0-9])"
_IBAN = r"[A-Z](?<=\b[A-Z])[A-Z][0-9]{2}(?: ?[A-Z0-9]){11,30}\b"
EMAIL, EMAIL_B = re.compile(_EMAIL), re.compile(_EMAIL.encode())
CARD, CARD_B = re.compile(_CARD), re.compile(_CARD.encode())
IBAN, IBAN_B = re.compile(_IBAN), re.compile(_IBAN.encode())
PHONE = re.compile(r"\+?[0-9][0-9 ().-]{5,22}[0-9]")  # a whole value
PHONE_IN_TEXT = re.compile(r"(?<![0-9A-Za-z_+])\+?[0-9][0-9 ().-]{5,22}[0-9](?![0-9A-Za-z_])")
# dates, times and IPv4 addresses: digits with separators that are not phone numbers
NOT_PHONE = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[ T][0-9]{1,2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?)?"
                       r"|[0-9]{1,3}(?:\.[0-9]{1,3}){3}|[0-9]{1,2}:[0-9]{2}(?::[0-9]{2})?")
THOUSANDS = re.compile(r"[0-9]{1,3}(?:[ .,][0-9]{3})+")
SEPARATORS = re.compile(r"[ ().-]+")
# a column's charset whose bytes are not ASCII-compatible: decoded before matching
WIDE = {"ucs2": "utf-16-be", "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be"}
CONTROL = bytes(b for b in range(32) if b not in (9, 10, 13)) + b"\x7f"


def luhn(digits: str) -> bool:
    """Luhn's check digit (every second digit from the right doubled, its digits summed)."""
    return (sum(map(int, digits[::-2])) + sum(_DOUBLED[int(d)] for d in digits[-2::-2])) % 10 == 0


@lru_cache(maxsize=4096)
def iban_ok(text: str) -> bool:
    """An IBAN's check digits (mod 97, the country and check digits moved to the end)."""
    s = text.replace(" ", "")
    moved = s[4:] + s[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97 == 1


@lru_cache(maxsize=4096)
def card_in(candidate: str) -> str | None:
    """The card number in a run of digit groups, or None: the whole run if it has 13-19 digits and passes
    Luhn's check, else consecutive groups of 3+ digits that do (`12 4111 1111 1111 1111`)."""
    groups = candidate.replace("-", " ").split(" ")
    digits = "".join(groups)
    if 13 <= len(digits) <= 19 and luhn(digits):
        return candidate
    ends = list(accumulate(map(len, groups), initial=0))
    for a in range(len(groups)):
        for b in range(a + 1, len(groups) + 1):
            n = ends[b] - ends[a]
            if len(groups[b - 1]) < 3 or n > 19:
                break
            if n >= 13 and (a, b) != (0, len(groups)) and luhn(digits[ends[a]:ends[b]]):
                return " ".join(groups[a:b])
    return None


def _email_at(text: str, at: int, end: int) -> str:
    """The address whose `@` is at `at` (its local part: up to 64 characters before it)."""
    start = at
    while start > max(0, at - 64) and text[start - 1] in _LOCAL_SET:
        start -= 1
    return text[start:end]



def find(text: str, phones: bool = False) -> Iterator[tuple[int, str, str]]:
    """(position, kind, value) of each email address, card number (Luhn) and IBAN (mod 97) in `text`; with
    `phones`, phone numbers inside free text too (7-15 digits with a + or two groups of separators; dates,
    times, IP addresses and thousands like `100 000 000` are not taken for one)."""
    for m in EMAIL.finditer(text):
        yield m.start(), "email", _email_at(text, m.start(), m.end())
    for m in CARD.finditer(text):
        card = card_in(m.group())
        if card:
            yield m.start(), "bank/card", card
    for m in IBAN.finditer(text):
        if iban_ok(m.group()):
            yield m.start(), "bank/card", m.group()
    if phones:
        clean = NOT_PHONE.sub(lambda m: " " * len(m.group()), text)
        for m in PHONE_IN_TEXT.finditer(clean):
            s = m.group()
            digits = sum(ch.isdigit() for ch in s)
            if 7 <= digits <= 15 and not THOUSANDS.fullmatch(s) and (s.startswith("+") or len(SEPARATORS.findall(s)) >= 2):
                yield m.start(), "phone", s


def find_bytes(data: bytes) -> Iterator[tuple[int, int, str]]:
    """(start, end, kind) of each candidate email, card and IBAN in raw bytes (ASCII patterns: what any
    ASCII-compatible encoding or a blob holds as ASCII), in order of position within each kind; a card or
    IBAN still needs valid() (Luhn, mod 97), value_at() gives the value. Phones are left to whole values."""
    for m in EMAIL_B.finditer(data):
        yield m.start(), m.end(), "email"
    for m in CARD_B.finditer(data):
        yield m.start(), m.end(), "bank/card"
    for m in IBAN_B.finditer(data):
        yield m.start(), m.end(), "bank/card"


def valid(data: bytes, start: int, end: int, kind: str) -> bool:
    """Whether a candidate of find_bytes is one: an email is; a card passes Luhn, an IBAN mod 97."""
    if kind == "email":
        return True
    text = data[start:end].decode("latin-1")
    return card_in(text) is not None if text[:1].isdigit() else iban_ok(text)


def value_at(data: bytes, start: int, end: int, kind: str) -> str:
    """The value find_bytes found at [start, end) (an email with its local part)."""
    if kind == "email":
        before = max(0, start - 64)
        window = data[before:end].decode("latin-1")
        return _email_at(window, start - before, len(window))
    text = data[start:end].decode("latin-1")
    return (card_in(text) if text[:1].isdigit() else None) or text


def is_phone(value: str) -> bool:
    """A whole value that is a phone number: 7-15 digits with a + or separators (`+1 (555) 010-7788`; not a
    date, a time or an IPv4 address)."""
    s = value.strip()
    return (len(s) <= 30 and PHONE.fullmatch(s) is not None and 7 <= sum(ch.isdigit() for ch in s) <= 15
            and (s.startswith("+") or SEPARATORS.search(s) is not None) and not NOT_PHONE.fullmatch(s))


def is_text(data: bytes) -> bool:
    """Whether bytes read as text (at most 1 in 20 control bytes or invalid UTF-8 sequences), in UTF-8, a
    single-byte charset or UTF-16; images, compressed or encrypted bytes do not."""
    if _mostly_text(data):
        return True
    wide = utf16(data)
    return wide is not None and _mostly_text(wide.encode("utf-8", "replace"))


def _mostly_text(data: bytes) -> bool:
    controls = len(data) - len(data.translate(None, CONTROL))
    invalid = data.decode("utf-8", "replace").count("\ufffd")
    return (controls + invalid) * 20 <= len(data)


def utf16(data: bytes) -> str | None:
    """The text of bytes that look like UTF-16 (ASCII-range text with every other byte 0), else None."""
    if len(data) < 4:
        return None
    half = len(data) // 2
    if data[1::2].count(0) * 5 >= half * 4:
        return data.decode("utf-16-le", "replace")
    if data[0::2].count(0) * 5 >= half * 4:
        return data.decode("utf-16-be", "replace")
    return None


def decoded(data: bytes, charset: str | None) -> str | None:
    """A value as text where its raw bytes would hide ASCII (a UTF-16/32 charset, a UTF-16 blob), else None
    (find_bytes sees it as it is)."""
    if charset in WIDE:
        return data.decode(WIDE[charset], "replace")
    return utf16(data) if charset is None else None


def redact(kind: str, value: str) -> str:
    """A found value as a log may show it: `a***@example.net`, `**** **** **** 1111`, `DE** ... **30 00`,
    `+* (***) ***-**88`."""
    if kind == "email":
        local, _, domain = value.partition("@")
        return f"{local[:1]}***@{domain}"
    if kind == "bank/card":
        return _stars(value, 2 if value[:1].isalpha() else 0, 4)
    return _stars(value, 0, 2)


def _stars(value: str, head: int, tail: int) -> str:
    alnum = sum(ch.isalnum() for ch in value)
    out, seen = [], 0
    for ch in value:
        if ch.isalnum():
            seen += 1
            out.append(ch if seen <= head or seen > alnum - tail else "*")
        else:
            out.append(ch)
    return "".join(out)
