"""staging.verify on a real server (the suite's logical target): a table masked by staging.masking passes, with its
audit and the joins between masked columns kept; an original value that survives, a column left holding data under
`null`, or a rule this run never masked fails it."""
from __future__ import annotations

import json

import pytest

from lastline.backups import BackupRef
from lastline.core.errors import IntegrityError
from lastline.staging import masking, verify
from lastline.staging.plans import StagingPlan
from lastline.staging.rules import Rule

from .bookkeeping import kept

CONN = "t_ltarget"  # the logical target's connection (tests/conftest.py)
KEY_CONN = "unit_verify_key"
KEY = "unit verify key"
DB = "unit_verify"
RUN = "unit_verify_run"
BOOKKEEPING = ("masked", "mask_originals", "mask_audit", "staging_locks")
RULES = [Rule(DB, "people", "email", "email"), Rule(DB, "people", "full_name", "name"), Rule(DB, "people", "phone", "phone"),
         Rule(DB, "people", "memo", "null"), Rule(DB, "people", "city", "fixed", "Springfield"),
         Rule(DB, "people", "note", "keep"), Rule(DB, "orders", "email", "email")]


def _plan(rules: list[Rule]) -> StagingPlan:
    return StagingPlan(target_conn_id=CONN, backup=BackupRef("file:///unused", "b1", "logical"), databases=[DB],
                       rules=[r.to_dict() for r in rules], masking_key_conn_id=KEY_CONN, open_for_writes=False)


@pytest.fixture
def masked(logical_target, monkeypatch):
    """`unit_verify`.`people` and `orders` (sharing email addresses) masked by RULES under run RUN; afterwards the
    bookkeeping as it was before (this run's rows removed, tables or `_lastline` dropped if they were new)."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{KEY_CONN.upper()}", json.dumps({"conn_type": "generic", "password": KEY}))
    server = logical_target.server()
    with kept(server, DB, RUN, BOOKKEEPING):
        with server.session() as cur:
            cur.execute(f"CREATE TABLE {DB}.people (id INT PRIMARY KEY, email VARCHAR(120) UNIQUE, full_name VARCHAR(100), "
                        "phone VARCHAR(30), memo TEXT, city VARCHAR(40), note VARCHAR(40)) DEFAULT CHARSET=utf8mb4")
            cur.executemany(f"INSERT INTO {DB}.people VALUES (%s, %s, %s, %s, %s, %s, %s)", [
                (1, "ann@example.com", "Ann Smith", "+1 555 123 4567", "vip", "Paris", "n1"),
                (2, "bob@example.org", "Bob Diaz", "555-987-6543", None, "Rome", "n2"),
                (3, "eve@example.net", None, None, "call back", None, None)])
            cur.execute(f"CREATE TABLE {DB}.orders (id INT PRIMARY KEY, email VARCHAR(120)) DEFAULT CHARSET=utf8mb4")
            cur.executemany(f"INSERT INTO {DB}.orders VALUES (%s, %s)",
                            [(1, "ann@example.com"), (2, "ANN@example.com"), (3, "bob@example.org"), (4, "zed@example.com")])
            cur.connection.commit()
        conn = server.connect(local_infile=1)
        try:
            cur = conn.cursor()
            masking.ensure_tables(cur)
            masking.set_key(conn, KEY, RUN)
            for (schema, table), rules in masking.by_table(RULES).items():
                masking.mask_table(conn, RUN, schema, table, rules, masking.column_infos(cur, schema, table))
        finally:
            conn.close()
        yield server


def test_a_masked_run_passes_with_its_audit_and_joins(masked):
    got = verify.verify_masking(_plan(RULES), RUN)
    audit = {c["column"]: (c["strategy"], c["values"], c["survivors"]) for c in got.columns}
    assert audit == {f"{DB}.people.email": ("email", 3, 0), f"{DB}.people.full_name": ("name", 2, 0),
                     f"{DB}.people.phone": ("phone", 2, 0), f"{DB}.people.memo": ("null", 2, 0),
                     f"{DB}.people.city": ("fixed:Springfield", 2, 0), f"{DB}.people.note": ("keep", 2, 0),
                     f"{DB}.orders.email": ("email", 4, 0)}
    # ann and bob were in both tables before (case-insensitive): they still are, under their masks
    assert [(j["a"], j["b"], j["before"], j["after"]) for j in got.joins] == [(f"{DB}.people.email", f"{DB}.orders.email", 2, 2)]


@pytest.mark.parametrize(("change", "rules", "message"), [
    # (counted per original it matches: bob's address was in both email columns)
    ("UPDATE unit_verify.people SET email = 'bob@example.org' WHERE id = 1", RULES,
     f"{DB}.people.email (email): 2 value(s) of the original data survive"),
    ("UPDATE unit_verify.orders SET email = 'eve@example.net' WHERE id = 4", RULES,
     f"{DB}.orders.email (email): 1 value(s) of the original data survive"),
    ("UPDATE unit_verify.people SET memo = 'x' WHERE id = 1", RULES, f"{DB}.people.memo (null): 1 value(s)"),
    ("UPDATE unit_verify.people SET city = 'Rome' WHERE id = 2", RULES, f"{DB}.people.city (fixed:Springfield): 1 value(s)"),
    ("UPDATE unit_verify.people SET full_name = 'Bob Diaz' WHERE id = 2", RULES, f"{DB}.people.full_name (name): 1 value(s)"),
    (None, [*RULES, Rule(DB, "orders", "id", "hash")], f"{DB}.orders.id: not masked by this run"),
    ("UPDATE unit_verify.orders SET email = CONCAT(email, 'x')", RULES,
     f"{DB}.people.email and {DB}.orders.email: 0 values in common after masking, 2 before"),
], ids=["an-original-in-its-own-column", "an-original-of-another-email-column", "a-null-column-holding-data",
        "a-fixed-column-holding-another-value", "a-name-back-in-its-column", "a-rule-this-run-never-masked", "a-broken-join"])
def test_what_survives_fails_the_verification(masked, change, rules, message):
    if change:
        with masked.session() as cur:
            cur.execute(change)
            cur.connection.commit()
    with pytest.raises(IntegrityError, match="masking verification failed") as failed:
        verify.verify_masking(_plan(rules), RUN)
    assert message in str(failed.value)
