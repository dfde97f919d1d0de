"""staging.patterns: what personal data looks like (emails, cards passing Luhn, IBANs passing mod 97, phone
numbers, not dates or thousands), in text and raw bytes, and how a found value is redacted."""
from __future__ import annotations

import pytest

from lastline.staging import patterns


@pytest.mark.parametrize(("digits", "ok"), [
    ("4111111111111111", True), ("4111111111111112", False), ("79927398713", True), ("0", True)],
    ids=["visa-test-number", "last-digit-off", "classic-example", "zero"])
def test_luhn(digits, ok):
    assert patterns.luhn(digits) is ok


@pytest.mark.parametrize(("iban", "ok"), [
    ("DE89 3704 0044 0532 0130 00", True), ("GB82WEST12345698765432", True), ("GB82WEST12345698765433", False)],
    ids=["german-grouped", "british", "check-digits-wrong"])
def test_iban_ok(iban, ok):
    assert patterns.iban_ok(iban) is ok


@pytest.mark.parametrize(("candidate", "card"), [
    ("4111 1111 1111 1111", "4111 1111 1111 1111"),
    ("4111-1111-1111-1111", "4111-1111-1111-1111"),
    ("12 4111 1111 1111 1111", "4111 1111 1111 1111"),
    ("1234 5678 9012 3456", None),
], ids=["grouped", "dashes", "card-after-another-number", "fails-luhn"])
def test_card_in(candidate, card):
    assert patterns.card_in(candidate) == card


@pytest.mark.parametrize(("text", "phones", "found"), [
    ("write to ann.lee+x@mail.example.org today", False, [("email", "ann.lee+x@mail.example.org")]),
    ("card 4111 1111 1111 1111 ok", False, [("bank/card", "4111 1111 1111 1111")]),
    ("order 1234567890123 shipped", False, []),
    ("iban DE89 3704 0044 0532 0130 00.", False, [("bank/card", "DE89 3704 0044 0532 0130 00")]),
    ("call +1 (555) 010-7788 now", True, [("phone", "+1 (555) 010-7788")]),
    ("call +1 (555) 010-7788 now", False, []),
    ("at 2026-11-28 16:14:32 from 10.0.0.12", True, []),
    ("population 100 000 000", True, []),
    ("user@localhost", False, []),
], ids=["email", "card", "digits-failing-luhn", "iban", "phone", "phones-only-when-asked", "date-time-and-ip-are-no-phone",
        "thousands-are-no-phone", "email-needs-a-domain"])
def test_find(text, phones, found):
    assert [(kind, value) for _, kind, value in patterns.find(text, phones=phones)] == found


def test_find_bytes_then_valid_and_value_at():
    data = b"\x00\x01ann@example.com\xff4111111111111111\xfe4111111111111112"
    found = [(patterns.value_at(data, s, e, k), patterns.valid(data, s, e, k)) for s, e, k in patterns.find_bytes(data)]
    assert found == [("ann@example.com", True), ("4111111111111111", True), ("4111111111111112", False)]


@pytest.mark.parametrize(("value", "phone"), [
    ("+1 (555) 010-7788", True), ("555-010-7788", True), ("+4915112345678", True), ("5550107788", False),
    ("2026-11-28", False), ("10.0.0.12", False), ("12:30:00", False), ("+1 23", False)],
    ids=["formatted", "dashes", "plus-only", "bare-digits", "date", "ipv4", "time", "too-short"])
def test_is_phone(value, phone):
    assert patterns.is_phone(value) is phone


@pytest.mark.parametrize(("data", "text"), [
    (b"plain text, with punctuation\n", True), ("café".encode(), True), ("hello world".encode("utf-16-le"), True),
    (bytes(range(256)), False), (b"\x00" * 40, False)],
    ids=["ascii", "utf8", "utf16", "binary", "nul-bytes"])
def test_is_text(data, text):
    assert patterns.is_text(data) is text


@pytest.mark.parametrize(("data", "charset", "text"), [
    ("hi".encode("utf-16-be"), "ucs2", "hi"), ("hello".encode("utf-16-le"), None, "hello"), (b"hello", "utf8mb4", None),
    (b"hello", None, None)],
    ids=["wide-charset", "utf16-blob", "ascii-compatible-charset", "ascii-blob"])
def test_decoded(data, charset, text):
    assert patterns.decoded(data, charset) == text


@pytest.mark.parametrize(("kind", "value", "shown"), [
    ("email", "ann@example.net", "a***@example.net"),
    ("bank/card", "4111 1111 1111 1111", "**** **** **** 1111"),
    ("bank/card", "DE89 3704 0044 0532 0130 00", "DE** **** **** **** **30 00"),
    ("phone", "+1 (555) 010-7788", "+* (***) ***-**88"),
], ids=["email", "card", "iban", "phone"])
def test_redact(kind, value, shown):
    assert patterns.redact(kind, value) == shown
