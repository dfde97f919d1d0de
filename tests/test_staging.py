"""Staging refresh on real servers: a CRM-like database (customers with a UNIQUE email, name and phone;
orders that reference the customer's email; a free-text column holding card numbers) backed up, then
refreshed into a staging-role target: masked, verified, deterministic under the key, and refused with
nothing written when the target or the rules are wrong."""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from conftest import _loaded, set_conn
from lastline.core.errors import PreflightError, ProtectedTargetError, Refusal
from lastline.logical import backup as lb
from lastline.staging import pii
from lastline.staging import refresh as sr
from lastline.staging.rules import parse_rules, split_key

RULES = {
    "crm.customers.email": "email",
    "crm.customers.full_name": "name",
    "crm.customers.phone": "phone",
    "crm.orders.customer_email": "email",
    "crm.orders.ship_address": "hash",
    "crm.payments.memo": "null",
    "crm.products.name": "keep",
}
N_CUSTOMERS, N_ORDERS = 1500, 4000


def _crm(inst) -> None:
    rnd = random.Random(7)
    s = inst.server()
    conn = s.connect()
    try:
        cur = conn.cursor()
        cur.execute("CREATE DATABASE crm")
        cur.execute("CREATE TABLE crm.customers (id INT PRIMARY KEY, email VARCHAR(120) NOT NULL, full_name VARCHAR(100), "
                    "phone VARCHAR(30), created DATE, UNIQUE KEY email (email)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci")
        cur.execute("CREATE TABLE crm.orders (id INT PRIMARY KEY, customer_email VARCHAR(120) NOT NULL, amount DECIMAL(10,2), "
                    "ship_address VARCHAR(200), KEY ce (customer_email), CONSTRAINT fk_customer FOREIGN KEY (customer_email) "
                    "REFERENCES crm.customers (email)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci")
        cur.execute("CREATE TABLE crm.payments (id INT PRIMARY KEY, order_id INT, memo TEXT)")
        cur.execute("CREATE TABLE crm.products (id INT PRIMARY KEY, name VARCHAR(80))")
        first = ["Ann", "Bob", "Chloé", "Dmitri", "Eve", "Farah", "Günter", "Hana"]
        last = ["Smith", "O'Neil", "Müller", "Nakamura", "Diaz", "Kowalski"]
        customers = [(i, f"{rnd.choice(first).lower()}.{i}@mail{i % 7}.example.net", f"{rnd.choice(first)} {rnd.choice(last)}",
                      f"+1 ({rnd.randint(200, 999)}) {rnd.randint(100, 999)}-{rnd.randint(1000, 9999)}", "2020-01-01")
                     for i in range(1, N_CUSTOMERS + 1)]
        cur.executemany("INSERT INTO crm.customers VALUES (%s, %s, %s, %s, %s)", customers)
        # orders name the customer by email, some in another case (equal under the _ci collation: the join holds)
        orders = []
        for i in range(1, N_ORDERS + 1):
            email = customers[rnd.randrange(N_CUSTOMERS)][1]
            orders.append((i, email.upper() if i % 5 == 0 else email, rnd.randint(1, 99999) / 100, f"{i} Main Street, Springfield"))
        cur.executemany("INSERT INTO crm.orders VALUES (%s, %s, %s, %s)", orders)
        cur.executemany("INSERT INTO crm.payments VALUES (%s, %s, %s)",
                        [(i, i, "paid with 4111 1111 1111 1111" if i % 2 else "cash") for i in range(1, 201)])
        cur.executemany("INSERT INTO crm.products VALUES (%s, %s)", [(i, f"Widget {i}") for i in range(1, 51)])
        conn.commit()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def crm(sandbox_root, tmp_path_factory, logical_target):
    """The CRM source, one logical backup of it, and the connections of the staging cases."""
    inst = _loaded(sandbox_root, "crm", _crm)
    set_conn("t_crm", inst)
    set_conn("t_crm_as_staging", inst, role="staging")  # the backup's own source, dressed as staging
    set_conn("t_staging", logical_target, role="staging")
    set_conn("t_staging_protected", logical_target, role="staging", protected=True)
    os.environ["AIRFLOW_CONN_T_MASKING"] = json.dumps({"conn_type": "generic", "password": "key one: s3cret"})
    dest = tmp_path_factory.mktemp("crm-backups")
    plan = lb.preflight({"source_conn_id": "t_crm", "destination": f"file://{dest}", "databases": ["crm"], "parallel": 2})
    lb.dump(plan)
    yield inst, f"file://{dest}/{plan['backup_id']}"
    inst.destroy()
    for sql in ("DROP DATABASE IF EXISTS crm", "SET GLOBAL read_only = OFF", "DROP TABLE IF EXISTS _lastline.masked, "
                "_lastline.mask_originals, _lastline.mask_audit"):
        logical_target.server().query(sql)  # the shared target as the other tests expect it


def _conf(backup: str, **kw) -> dict:
    return {"target_conn_id": "t_staging", "backup": backup, "databases": [], "masking_rules": RULES,
            "masking_key_conn_id": "t_masking", "open_for_writes": True, "parallel": 2, "tune": True,
            "defer_indexes": True, "index_build": "after_all", "force": True, "restart": False,
            "redo_log_bytes": 128 << 20, "aws_conn_id": None, **kw}


def _column(server, sql: str) -> list:
    return [r[0] for r in server.query(sql)]


def _snapshot(server) -> dict:
    return {t: server.query(f"SELECT * FROM crm.{t} ORDER BY id") for t in ("customers", "orders", "payments", "products")}


def test_a_refresh_masks_every_pii_column_keeps_joins_and_is_deterministic_under_the_key(run_dag, crm, logical_target, caplog):
    source, backup = crm
    src, tgt = source.server(), logical_target.server()
    state, tis, logs = run_dag("staging_refresh", _conf(backup))
    assert state == "success", (tis, logs[-3000:])

    originals = {
        "email": set(_column(src, "SELECT LOWER(email) FROM crm.customers")),
        "name": set(_column(src, "SELECT full_name FROM crm.customers")),
        "phone": set(_column(src, "SELECT phone FROM crm.customers")),
        "address": set(_column(src, "SELECT ship_address FROM crm.orders")),
    }
    every_value = {str(v).lower() for t in _snapshot(tgt).values() for row in t for v in row if v is not None}
    assert not originals["email"] & every_value  # no original email anywhere in any table
    assert not {v.lower() for v in originals["name"]} & every_value
    assert not originals["phone"] & every_value and not {a.lower() for a in originals["address"]} & every_value
    assert not any("4111 1111 1111 1111" in v for v in every_value)  # the card numbers in payments.memo are gone

    masked = _column(tgt, "SELECT email FROM crm.customers")
    assert len(set(masked)) == N_CUSTOMERS and all(e.endswith("@example.com") for e in masked)  # UNIQUE kept
    phones = _column(tgt, "SELECT phone FROM crm.customers ORDER BY id")
    src_phones = _column(src, "SELECT phone FROM crm.customers ORDER BY id")
    assert all(len(a) == len(b) and [c for c in a if not c.isdigit()] == [c for c in b if not c.isdigit()]
               for a, b in zip(phones, src_phones))  # length and punctuation kept
    # every order still finds its customer by the masked email (the foreign key holds, case variants too)
    joined = "SELECT COUNT(*) FROM crm.orders o JOIN crm.customers c ON c.email = o.customer_email"
    assert tgt.query(joined)[0][0] == src.query(joined)[0][0] == N_ORDERS
    assert _column(tgt, "SELECT name FROM crm.products ORDER BY id") == _column(src, "SELECT name FROM crm.products ORDER BY id")
    assert tgt.query("SELECT @@global.read_only")[0][0] == 0  # open_for_writes
    assert tgt.query("SELECT COUNT(*) FROM _lastline.mask_originals")[0][0] == 0  # no hashes of personal data kept
    assert "s3cret" not in logs

    # the audit lists every rule, the keep included
    report = json.loads(next(p for p in _reports() if p.name == "staging_refresh.json").read_text())
    by_column = {c["column"]: c for c in report["columns"]}
    assert set(by_column) == set(RULES) and report["kept"] == ["crm.products.name"]
    assert by_column["crm.customers.email"]["values"] == N_CUSTOMERS and by_column["crm.customers.email"]["survivors"] == 0
    assert any(j["a"] == "crm.customers.email" and j["b"] == "crm.orders.customer_email" and j["after"] >= j["before"] > 0
               for j in report["joins"])

    first = _snapshot(tgt)
    state, tis, logs = run_dag("staging_refresh", _conf(backup))
    assert state == "success", (tis, logs[-3000:])
    assert _snapshot(tgt) == first  # same key: the same data, refresh after refresh

    os.environ["AIRFLOW_CONN_T_MASKING2"] = json.dumps({"conn_type": "generic", "password": "another key"})
    state, tis, logs = run_dag("staging_refresh", _conf(backup, masking_key_conn_id="t_masking2"))
    assert state == "success", (tis, logs[-3000:])
    other = _snapshot(tgt)
    assert [r[1] for r in other["customers"]] != [r[1] for r in first["customers"]]  # another key: other emails
    assert not {r[1] for r in other["customers"]} & {r[1] for r in first["customers"]}
    assert [r[0] for r in other["customers"]] == [r[0] for r in first["customers"]]  # the keys of the rows stay


def _reports():
    from lastline import reports

    base = Path(reports.url().removeprefix("file://"))
    return sorted(base.glob("staging_refresh/*/staging_refresh.json"), key=lambda p: p.stat().st_mtime, reverse=True)


def _untouched(server, before: dict) -> None:
    assert server.query("SELECT @@global.read_only")[0][0] == before["read_only"]
    assert _column(server, "SHOW DATABASES") == before["databases"]


def test_wrong_targets_and_unlisted_pii_are_refused_with_nothing_written(crm, logical_target):
    _, backup = crm
    tgt = logical_target.server()
    tgt.query("DROP DATABASE IF EXISTS crm")
    tgt.query("SET GLOBAL read_only = OFF")
    before = {"read_only": 0, "databases": _column(tgt, "SHOW DATABASES")}

    with pytest.raises(ProtectedTargetError, match=r"not marked as a staging server .*\"role\": \"staging\""):
        sr.preflight(_conf(backup, target_conn_id="t_ltarget"), RULES)
    _untouched(tgt, before)
    with pytest.raises(ProtectedTargetError, match="marked protected"):
        sr.preflight(_conf(backup, target_conn_id="t_staging_protected"), RULES)
    _untouched(tgt, before)
    with pytest.raises(ProtectedTargetError, match="taken from .*never writes into production"):
        sr.preflight(_conf(backup, target_conn_id="t_crm_as_staging"), RULES)

    unlisted = {k: v for k, v in RULES.items() if k not in ("crm.customers.phone", "crm.payments.memo")}
    with pytest.raises(PreflightError) as err:
        sr.preflight(_conf(backup), unlisted)
    text = str(err.value)
    assert "2 column(s) look like personal data" in text and "crm.customers.phone: its name suggests phone" in text
    assert "crm.payments.memo:" in text and "look like bank/card" in text  # found by its values (Luhn), not its name
    snippet = json.loads(text[text.index("{"): text.rindex("}") + 1])
    assert snippet == {"crm.customers.phone": "phone", "crm.payments.memo": "hash"}
    _untouched(tgt, before)

    for rules, match in (({**RULES, "crm.customers.nope": "hash"}, "no such column"),
                         ({**RULES, "crm.customers.email": "fixed:x"}, "fixed on a UNIQUE column"),
                         ({**RULES, "crm.customers.email": "null"}, "null on a NOT NULL column"),
                         ({**RULES, "crm.orders.customer_email": "hash"},
                          r"foreign key fk_customer joins crm.orders.customer_email \(hash\) to crm.customers.email \(email\)")):
        with pytest.raises(PreflightError, match=match):
            sr.preflight(_conf(backup), rules)
    with pytest.raises(PreflightError, match=r"database\(s\) nope are not in backup"):
        sr.preflight(_conf(backup, databases=["nope"]), RULES)
    with pytest.raises(Refusal, match="unknown strategy 'scramble'"):
        sr.preflight(_conf(backup), {**RULES, "crm.customers.email": "scramble"})
    _untouched(tgt, before)


def test_rule_names_with_dots_backquotes_and_spaces():
    assert split_key("`my.db`.`t 1`.`e``mail`") == ("my.db", "t 1", "e`mail")
    assert split_key("crm.customers.email") == ("crm", "customers", "email")
    assert parse_rules({"`a.b`.c.d": "fixed:x:y"})[0].value == "x:y"
    for bad in ("crm.customers", "a.b.c.d", "`a.b.c"):
        with pytest.raises(Refusal):
            split_key(bad)


def test_pii_by_name_is_not_fooled_by_keys_and_by_values_needs_a_real_check():
    assert pii.kinds_by_name("contactEmail", "varchar(100)", True) == ["email"]
    assert pii.kinds_by_name("address_id", "smallint(5) unsigned", False) == []
    assert pii.kinds_by_name("last_update", "timestamp", False) == []
    assert pii.kinds_by_name("birth_date", "date", False) == ["birth"]
    assert pii.kinds_by_values(["4111 1111 1111 1111"]) == {"bank/card": 1}
    assert pii.kinds_by_values(["4111 1111 1111 1112"]) == {}  # fails Luhn
    assert pii.kinds_by_values(["DE89 3704 0044 0532 0130 00"]) == {"bank/card": 1}
    assert pii.kinds_by_values(["12345678"]) == {}  # a bare number is not taken for a phone


@pytest.mark.e2e
def test_a_completed_logical_backup_refreshes_staging_under_the_scheduler(crm, logical_target, tmp_path):
    """The Asset path for real: `airflow standalone` (scheduler, dag-processor, api-server), a logical backup
    triggered, and the staging refresh it starts, with its rules from the Airflow Variable."""
    import sqlite3

    from lastline_dev.sandbox import free_port
    from lastline_dev.standalone import Standalone

    logical_target.server().query("DROP DATABASE IF EXISTS crm")
    port = free_port()
    env = {**os.environ, "LASTLINE_AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__API__PORT": str(port),
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
           "LASTLINE_STAGING_CONN_ID": "t_staging", "LASTLINE_MASKING_KEY_CONN_ID": "t_masking",
           "AIRFLOW_VAR_LASTLINE_MASKING_RULES": json.dumps(RULES), "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
           "LASTLINE_REPORT_DIR": str(tmp_path / "reports")}
    env.pop("AIRFLOW_HOME", None)
    dest = tmp_path / "backups"
    with Standalone(env, tmp_path / "standalone.log", wait_for_dag="staging_refresh") as af:
        af.airflow("dags", "unpause", "staging_refresh")
        backup = af.wait("logical_backup", af.trigger("logical_backup", {
            "source_conn_id": "t_crm", "destination": f"file://{dest}", "databases": ["crm"], "parallel": 2}), timeout=300)
        assert backup["state"] == "success", (tmp_path / "standalone.log").read_text()[-3000:]
        refresh = af.wait("staging_refresh", run_type="asset_triggered", timeout=600)
        with sqlite3.connect(af.db) as c:
            extra = json.loads(c.execute("SELECT extra FROM asset_event ORDER BY id DESC LIMIT 1").fetchone()[0])
    assert refresh["state"] == "success", (tmp_path / "standalone.log").read_text()[-3000:]
    assert extra["kind"] == "logical" and extra["url"] == f"file://{dest}/{extra['backup_id']}" and extra["gtid"]
    emails = _column(logical_target.server(), "SELECT email FROM crm.customers")
    assert len(emails) == N_CUSTOMERS and all(e.endswith("@example.com") for e in emails)
    report = json.loads(next((tmp_path / "reports").glob("staging_refresh/*/staging_refresh.json")).read_text())
    assert report["backup"] == extra["url"]  # the backup the event named was the one restored


def test_keys_are_read_from_create_statements_whatever_the_names():
    create = ("CREATE TABLE `or``ders` (\n  `id` int(11) NOT NULL,\n  `cu``st` varchar(9) DEFAULT NULL,\n"
              "  PRIMARY KEY (`id`),\n  UNIQUE KEY `u 1` (`a``b`,`c`),\n  KEY `k` (`cu``st`),\n"
              "  CONSTRAINT `fk``x` FOREIGN KEY (`cu``st`) REFERENCES `other db`.`cust.omers` (`em``ail`)\n) ENGINE=InnoDB")
    assert sr.unique_columns(create) == {"id", "a`b", "c"}
    assert sr.foreign_keys("my db", create) == [("fk`x", [("my db", "or`ders", "cu`st")], [("other db", "cust.omers", "em`ail")])]
