"""staging.masking: the HMAC pads and the originals' key in Python, and on a real server (the suite's logical target)
that the masked values are the keyed HMAC the server computes from pads it got through LOAD DATA LOCAL, that text
hashes as its collation compares it, NULL and '' stay, and a table masks exactly once per run."""
from __future__ import annotations

import hashlib
import hmac
import re

import pytest

from lastline.core.sql import META_DB, qualified
from lastline.staging import masking
from lastline.staging.rules import EMAIL_DOMAIN, EMAIL_HEX, Rule

from .bookkeeping import kept

KEY = "unit key: s3cret"
RUN = "unit_masking_run"
DB = "unit_masking"
BOOKKEEPING = ("masked", "mask_originals", "mask_audit")


@pytest.mark.parametrize("key", ["", "k", b"\x00\xff", "x" * 64, "y" * 65, b"z" * 200],
                         ids=["empty", "one-char", "bytes", "exactly-a-block", "one-past-a-block", "long-bytes"])
def test_key_pads_give_hmac_sha256(key):
    ipad, opad = masking.key_pads(key)
    message = b"ann@example.net"
    raw = key.encode() if isinstance(key, str) else key
    assert len(ipad) == len(opad) == 64
    assert hashlib.sha256(opad + hashlib.sha256(ipad + message).digest()).digest() == \
        hmac.new(raw, message, hashlib.sha256).digest()


def test_originals_key_depends_on_the_key_and_the_run():
    one = masking.originals_key(KEY, "run1")
    assert len(one) == 32 and one == masking.originals_key(KEY, "run1")
    assert one not in (masking.originals_key(KEY, "run2"), masking.originals_key("other key", "run1"))


def test_by_table_groups_rules_in_their_order():
    rules = [Rule("d", "a", "x", "email"), Rule("d", "b", "y", "hash"), Rule("d", "a", "z", "null")]
    assert masking.by_table(rules) == {("d", "a"): [rules[0], rules[2]], ("d", "b"): [rules[1]]}
    assert masking.by_table([]) == {}


def _hmac_hex(value: str) -> str:
    return hmac.new(KEY.encode(), value.encode(), hashlib.sha256).hexdigest()


ROWS = [
    (1, "Ann@Example.com", "Ann Smith", "+1 (555) 123-4567", "12 Main St", "memo 1", "x1"),
    (2, "bob@example.org", "Bob Diaz", "555.987.6543", "3 Elm Rd", "memo 2", "x2"),
    (3, "", None, None, None, None, "x3"),
]


@pytest.fixture
def crm(logical_target):
    """`unit_masking`.`people` (a UNIQUE case-insensitive email among other personal columns) and `orders` naming
    people by email in another case; the masking bookkeeping as it was before, this run's rows removed after."""
    server = logical_target.server()
    with kept(server, DB, RUN, BOOKKEEPING):
        with server.session() as cur:
            cur.execute(f"CREATE TABLE {DB}.people (id INT PRIMARY KEY, email VARCHAR(120) NOT NULL, full_name VARCHAR(100), "
                        "phone VARCHAR(30), address VARCHAR(200), memo TEXT, code VARBINARY(20), UNIQUE KEY (email)) "
                        "DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci")
            cur.executemany(f"INSERT INTO {DB}.people VALUES (%s, %s, %s, %s, %s, %s, %s)", ROWS)
            cur.execute(f"CREATE TABLE {DB}.orders (id INT PRIMARY KEY, email VARCHAR(120)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")
            cur.executemany(f"INSERT INTO {DB}.orders VALUES (%s, %s)", [(1, "ann@example.com"), (2, "BOB@EXAMPLE.ORG")])
            cur.connection.commit()
        yield server


def test_column_infos_read_what_masking_needs(crm):
    with crm.session() as cur:
        infos = masking.column_infos(cur, DB, "people")
    assert infos["email"] == masking.ColumnInfo("varchar", 120, "utf8mb4_general_ci", False, True)
    assert infos["phone"] == masking.ColumnInfo("varchar", 30, "utf8mb4_general_ci", True, False)
    assert infos["id"].unique and not infos["id"].text
    assert infos["code"].data_type == "varbinary" and not infos["code"].text
    assert infos["memo"].text and infos["memo"].nullable


def test_mask_table_writes_the_keyed_hmac_once_per_run(crm):
    people = [Rule(DB, "people", "email", "email"), Rule(DB, "people", "full_name", "name"),
              Rule(DB, "people", "phone", "phone"), Rule(DB, "people", "address", "hash"),
              Rule(DB, "people", "memo", "fixed", "redacted"), Rule(DB, "people", "code", "null")]
    orders = [Rule(DB, "orders", "email", "email")]
    conn = crm.connect(local_infile=1)
    try:
        cur = conn.cursor()
        masking.ensure_tables(cur)
        masking.ensure_tables(cur)  # idempotent
        masking.set_key(conn, KEY, RUN)
        audit = masking.mask_table(conn, RUN, DB, "people", people, masking.column_infos(cur, DB, "people"))
        assert masking.mask_table(conn, RUN, DB, "orders", orders, masking.column_infos(cur, DB, "orders")) is not None
        # a retry of the same run masks nothing again
        assert masking.mask_table(conn, RUN, DB, "people", people, masking.column_infos(cur, DB, "people")) is None
    finally:
        conn.close()
    assert audit is not None
    assert {c: (a["strategy"], a["values"], a["rows_changed"]) for c, a in audit.items()} == {
        "email": ("email", 3, 3), "full_name": ("name", 2, 3), "phone": ("phone", 2, 3), "address": ("hash", 2, 3),
        "memo": ("fixed:redacted", 2, 3), "code": ("null", 3, 3)}
    assert audit["phone"]["left_equal"] == 0

    got = {r[0]: r[1:] for r in crm.query(f"SELECT id, email, full_name, phone, address, memo, code FROM {DB}.people")}
    for id_, email, name, phone, address, _memo, _code in ROWS[:2]:
        m_email, m_name, m_phone, m_address, m_memo, m_code = got[id_]
        # a case-insensitive column hashes its lowercased value: the email is the documented HMAC form
        assert m_email == f"u{_hmac_hex(email.lower())[:EMAIL_HEX]}@{EMAIL_DOMAIN}"
        assert m_address == _hmac_hex(address.lower())  # under its limit: the whole 64 hex digits
        # a made-up first and last name of capitalized syllables (the column is not UNIQUE: no digits added)
        assert re.fullmatch(r"[A-Z][a-z]+ [A-Z][a-z]+", m_name) and m_name != name
        # a phone keeps its shape: same length, same separators, other digits
        assert len(m_phone) == len(phone) and m_phone != phone
        assert [c for c in m_phone if not c.isdigit()] == [c for c in phone if not c.isdigit()]
        assert (m_memo, m_code) == ("redacted", None)
    # NULL stays NULL and the empty string stays empty under the hashed strategies; a fixed value fills every row
    assert got[3] == ("", None, None, None, "redacted", None)
    # the same address in another table and another case masks alike: the join still holds
    orders_got = dict(crm.query(f"SELECT id, email FROM {DB}.orders"))
    assert orders_got[1] == got[1][0]
    assert orders_got[2] != got[2][0]  # utf8mb4_bin compares case: BOB@... is another value there

    with crm.session() as cur:
        cur.execute(f"SELECT table_name FROM {META_DB}.masked WHERE run_key = %s ORDER BY table_name", (RUN,))
        assert [r[0] for r in cur.fetchall()] == [b"orders", b"people"]
        # the originals kept for verify: one hash per distinct value of each masked column, none of them plain
        cur.execute(f"SELECT column_key, COUNT(*) FROM {META_DB}.mask_originals WHERE run_key = %s GROUP BY column_key", (RUN,))
        counts = {k.decode(): int(n) for k, n in cur.fetchall()}
        cur.execute(f"SELECT h FROM {META_DB}.mask_originals WHERE run_key = %s", (RUN,))
        hashes = {r[0] for r in cur.fetchall()}
    assert counts == {f"{DB}.people.email": 3, f"{DB}.people.full_name": 2, f"{DB}.people.phone": 2,
                      f"{DB}.people.address": 2, f"{DB}.people.memo": 2, f"{DB}.people.code": 3, f"{DB}.orders.email": 2}
    assert hashlib.sha256(b"ann@example.com").digest() not in hashes


def test_a_unique_name_column_gets_the_hmac_s_digits(crm):
    with crm.session() as cur:
        cur.execute(f"CREATE TABLE {qualified(DB, 'nick names')} (id INT PRIMARY KEY, nick VARCHAR(40) UNIQUE)")
        cur.execute(f"INSERT INTO {qualified(DB, 'nick names')} VALUES (1, 'ann'), (2, 'bob')")
        cur.connection.commit()
    conn = crm.connect(local_infile=1)
    try:
        cur = conn.cursor()
        masking.ensure_tables(cur)
        masking.set_key(conn, KEY, RUN)
        rules = [Rule(DB, "nick names", "nick", "first_name")]
        masking.mask_table(conn, RUN, DB, "nick names", rules, masking.column_infos(cur, DB, "nick names"))
    finally:
        conn.close()
    got = dict(crm.query(f"SELECT id, nick FROM {qualified(DB, 'nick names')}"))
    assert re.fullmatch(r"[A-Z][a-z]+ [0-9a-f]{12}", got[1]) and got[1] != got[2]
    assert got[1].split(" ")[1] == _hmac_hex("ann")[16:28]
