"""Staging refresh on real servers: a CRM-like database (customers with a UNIQUE email, name and phone;
orders that reference the customer's email; a free-text column holding card numbers) backed up, then
refreshed into a staging-role target: masked, verified, deterministic under the key, and refused with
nothing written when the target or the rules are wrong."""
from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest

from conftest import _loaded, set_conn
from lastline.core.errors import ConfigError, PreflightError, ProtectedTargetError, Refusal
from lastline.logical.backup import stages as logical_backup
from lastline.staging import pii
from lastline.staging import refresh as sr
from lastline.staging.plans import Masked, MaskingVerified
from lastline.staging.rules import parse_rules, split_key
from lastline.storage import encryption_keys

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
    plan = logical_backup.preflight({"source_conn_id": "t_crm", "destination": f"file://{dest}", "databases": ["crm"], "parallel": 2})
    logical_backup.dump(plan)
    yield inst, f"file://{dest}/{plan.backup_id}"
    inst.destroy()
    for sql in ("DROP DATABASE IF EXISTS crm", "SET GLOBAL read_only = OFF", "DROP TABLE IF EXISTS _lastline.masked, "
                "_lastline.mask_originals, _lastline.mask_audit"):
        logical_target.server().query(sql)  # the shared target as the other tests expect it


@pytest.fixture
def deployment_rules(monkeypatch):
    """The deployment's settings of these refreshes: its masking rules (the Variable: `keep` comes only from
    there) and its key connection."""
    monkeypatch.setenv("AIRFLOW_VAR_LASTLINE_MASKING_RULES", json.dumps(RULES))
    monkeypatch.setenv("LASTLINE_MASKING_KEY_CONN_ID", "t_masking")
    return monkeypatch


def _conf(backup: str, **kw) -> dict:
    return {"target_conn_id": "t_staging", "backup": backup, "databases": [], "masking_rules": None,
            "open_for_writes": True, "parallel": 2, "tune": True,
            "defer_indexes": True, "index_build": "after_all", "force": True, "restart": False,
            "redo_log_bytes": 128 << 20, "aws_conn_id": None, **kw}


def _column(server, sql: str) -> list:
    return [r[0] for r in server.query(sql)]


def _snapshot(server) -> dict:
    return {t: server.query(f"SELECT * FROM crm.{t} ORDER BY id") for t in ("customers", "orders", "payments", "products")}


def test_a_refresh_masks_every_pii_column_keeps_joins_and_is_deterministic_under_the_key(run_dag, crm, logical_target, caplog,
                                                                                         deployment_rules):
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
    folder = _reports()[0].parent  # the masking's verdict and its table open the run's report, before the restore's
    assert json.loads((folder / "index.json").read_text())["files"][:2] == ["staging_refresh.md", "staging_refresh.json"]
    page = (folder / "staging_refresh.md").read_text().splitlines()
    assert page[0] == (f"# Staging refresh of t_staging from {report['backup']}: masking verified, {len(RULES) - 1} "
                       "columns masked, no original value survives"), page[:3]
    assert page[2].startswith("**Restored crm into t_staging (") and "no original value survives" in page[2]
    assert f"{len(report['joins'])} join" in page[2] and "1 column left unmasked by a keep rule" in page[2]
    assert page[4].startswith("| column | strategy |") and "| crm.customers.email | email | " in "\n".join(page[6:20])

    first = _snapshot(tgt)
    state, tis, logs = run_dag("staging_refresh", _conf(backup))
    assert state == "success", (tis, logs[-3000:])
    assert _snapshot(tgt) == first  # same key: the same data, refresh after refresh

    os.environ["AIRFLOW_CONN_T_MASKING2"] = json.dumps({"conn_type": "generic", "password": "another key"})
    deployment_rules.setenv("LASTLINE_MASKING_KEY_CONN_ID", "t_masking2")  # the deployment's key changed
    state, tis, logs = run_dag("staging_refresh", _conf(backup))
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
    (enforced,), = tgt.query("SELECT @@GLOBAL.enforce_storage_engine")
    tgt.query("SET GLOBAL enforce_storage_engine = 'InnoDB'")  # the key's MEMORY table would be refused (or on disk)
    try:
        with pytest.raises(PreflightError, match=r"makes every new table INNODB \(enforce_storage_engine\): the masking key is "
                                                 r"held in a MEMORY temporary table, never on disk"):
            sr.preflight(_conf(backup), RULES)
        from lastline.staging import masking
        made = not tgt.query("SHOW DATABASES LIKE '\\_lastline'")
        tgt.query("CREATE DATABASE IF NOT EXISTS _lastline")  # the key's table is made there
        conn = tgt.connect(local_infile=1)
        try:  # past the preflight, the key's table is refused, never made InnoDB (on disk), whatever the server's sql_mode
            conn.cursor().execute("SET SESSION sql_mode = 'ANSI_QUOTES'")
            with pytest.raises(Exception, match="running with the NO_ENGINE_SUBSTITUTION option so it cannot execute"):
                masking.set_key(conn, "k" * 32, "run")
            cur = conn.cursor()
            cur.execute("SELECT @@SESSION.sql_mode")
            assert cur.fetchone()[0] == "ANSI_QUOTES"  # for that statement alone
        finally:
            conn.close()
            if made:
                tgt.query("DROP DATABASE _lastline")
    finally:
        tgt.query("SET GLOBAL enforce_storage_engine = %s", (enforced,))
    _untouched(tgt, before)

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


# --- the PII guard fails closed: a second database whose personal data hides where a head-of-table sample of
# character columns never looks (binary columns, late rows, schema text) ------------------------------------
LEAKY_RULES = {"leaky.people.email": "email", "leaky.people.full_name": "name"}
N_PEOPLE, N_NOTES = 3000, 60_000
LEAKED = ("4111 1111 1111 1111", "jane.doe@example.net", "+44 20 7946", "5555 5555 5555 4444", "ann.",
          "ops.lead@example.org", "support.desk@example.com", "boss.person@example.com", "DE89370400440532013000")


def _leaky(inst) -> None:
    rnd = random.Random(11)
    conn = inst.server().connect()
    try:
        cur = conn.cursor()
        cur.execute("CREATE DATABASE leaky")
        # doc: a BLOB with a card and an email in some rows; reach: phone numbers as bytes; thumb and sig: bytes
        # that are not text (an image, a digest): nothing to read in them, so they need a rule of their own
        cur.execute("CREATE TABLE leaky.people (id INT PRIMARY KEY, email VARCHAR(120) NOT NULL, full_name VARCHAR(100), "
                    "doc BLOB, reach VARBINARY(40), thumb BLOB, sig BINARY(16) NOT NULL) DEFAULT CHARSET=utf8mb4")
        cur.executemany("INSERT INTO leaky.people VALUES (%s, %s, %s, %s, %s, %s, %s)", [
            (i, f"p{i}@example.com", f"Person {i}",
             b"invoice: paid by card 4111 1111 1111 1111, receipt to jane.doe@example.net" if i % 50 == 0 else b"invoice: paid",
             f"+44 20 7946 {i % 10000:04d}".encode(), rnd.randbytes(300), rnd.randbytes(16)) for i in range(1, N_PEOPLE + 1)])
        # notes: an email only in every 1000th row (never in the first 500), a card only in the last 2 of 60 chunks
        cur.execute("CREATE TABLE leaky.notes (id INT PRIMARY KEY, body TEXT, memo TEXT) DEFAULT CHARSET=utf8mb4")
        cur.executemany("INSERT INTO leaky.notes VALUES (%s, %s, %s)", [
            (i, f"note {i}: forward to ann.{i}@mail.example.net" if i % 1000 == 0 else f"note {i}: called back, all fine",
             "refund to 5555 5555 5555 4444" if i > N_NOTES - 2000 and i % 7 == 0 else "ok") for i in range(1, N_NOTES + 1)])
        # schema text: a table COMMENT, a column DEFAULT, a CHECK, a view, a trigger and a procedure that hold
        # personal data; dates, an IP address, a definer and a big AUTO_INCREMENT that do not
        cur.execute("CREATE TABLE leaky.settings (id INT PRIMARY KEY AUTO_INCREMENT, contact VARCHAR(100) DEFAULT "
                    "'ops.lead@example.org', created DATETIME DEFAULT '2020-01-01 00:00:00', host VARCHAR(40) DEFAULT "
                    "'192.168.100.200', CONSTRAINT chk_contact CHECK (contact <> 'DE89370400440532013000')) "
                    "AUTO_INCREMENT=4111111111111111 COMMENT='owner: jane.doe@example.net'")
        cur.executemany("INSERT INTO leaky.settings (id, contact, host) VALUES (%s, %s, %s)", [(1, "-", "db1"), (2, "n/a", "db2")])
        cur.execute("CREATE VIEW leaky.v_support AS SELECT id, 'support.desk@example.com' AS contact FROM leaky.settings")
        cur.execute("CREATE VIEW leaky.v_plain AS SELECT id, created FROM leaky.settings WHERE created > '2019-12-31 00:00:00'")
        cur.execute("CREATE TRIGGER leaky.trg_notes BEFORE INSERT ON leaky.notes FOR EACH ROW "
                    "SET NEW.memo = IFNULL(NEW.memo, 'call +44 20 7946 0958')")
        cur.execute("CREATE PROCEDURE leaky.p_escalate() BEGIN /* escalate to boss.person@example.com */ SELECT 1; END")
        conn.commit()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def leaky(crm, tmp_path_factory, logical_target):
    """Database `leaky` on the CRM source, backed up in chunks of 1000 rows (notes: 60 chunks)."""
    source, _ = crm
    _leaky(source)
    dest = tmp_path_factory.mktemp("leaky-backups")
    plan = logical_backup.preflight({"source_conn_id": "t_crm", "destination": f"file://{dest}", "databases": ["leaky"], "parallel": 2,
                         "chunk_rows": 1000})
    logical_backup.dump(plan)
    yield f"file://{dest}/{plan.backup_id}"
    for sql in ("DROP DATABASE IF EXISTS leaky", "SET GLOBAL read_only = OFF"):
        logical_target.server().query(sql)


def _refusal(backup: str, rules: dict, logical_target) -> tuple[str, dict, dict, dict]:
    """preflight refused with nothing touched: its text, its column lines, its object lines, its snippet."""
    tgt = logical_target.server()
    tgt.query("SET GLOBAL read_only = OFF")
    before = {"read_only": 0, "databases": _column(tgt, "SHOW DATABASES")}
    with pytest.raises(PreflightError) as err:
        sr.preflight(_conf(backup, databases=["leaky"]), rules)
    _untouched(tgt, before)
    text = str(err.value)
    columns = {m.group(1): m.group(2) for m in re.finditer(r"^  (leaky\.\S+\.\S+): (.*)$", text, re.M)}
    objects = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(r"^  (leaky\.\S+) \((.*?)\): (.*)$", text, re.M)}
    return text, columns, objects, json.loads(text[text.index("{"): text.rindex("}") + 1])


def test_the_pii_guard_reads_every_column_over_the_whole_table(leaky, logical_target):
    text, columns, _, snippet = _refusal(leaky, LEAKY_RULES, logical_target)
    assert "look like email" in columns["leaky.people.doc"] and "look like bank/card" in columns["leaky.people.doc"]  # a BLOB
    assert "look like phone" in columns["leaky.people.reach"]  # a VARBINARY
    assert "look like email" in columns["leaky.notes.body"]  # every 1000th row only
    assert "look like bank/card" in columns["leaky.notes.memo"]  # the last 2 of 60 chunks only
    for unreadable in ("leaky.people.thumb", "leaky.people.sig"):  # random bytes: refused, never waved through
        assert "are not text" in columns[unreadable] and "cannot be inspected" in columns[unreadable]
    assert {"leaky.people.email", "leaky.people.full_name", "leaky.people.id", "leaky.notes.id"}.isdisjoint(columns)
    assert snippet == {"leaky.people.doc": "null", "leaky.people.reach": "null", "leaky.people.thumb": "null",
                       "leaky.people.sig": "fixed:", "leaky.notes.body": "email", "leaky.notes.memo": "hash",
                       **{k: "keep" for k in snippet if k.count(".") == 1}}
    assert "(e.g. **** **** **** 1111)" in columns["leaky.people.doc"] and "(e.g. j***@example.net)" in columns["leaky.people.doc"]
    assert not [v for v in LEAKED if v in text]  # found values are named redacted, never in full


def test_the_pii_guard_reads_the_schema_text_rules_cannot_mask(leaky, logical_target):
    text, _, objects, snippet = _refusal(leaky, LEAKY_RULES, logical_target)
    assert "4 schema object(s) hold text that looks like personal data" in text
    assert set(objects) == {"leaky.settings", "leaky.v_support", "leaky.trg_notes", "leaky.p_escalate"}  # not v_plain
    kind, found = objects["leaky.settings"]
    assert kind == "table" and "email j***@example.net in the table COMMENT" in found
    assert "email o***@example.org in the DEFAULT of column `contact`" in found
    assert "bank/card DE****************3000 in a CHECK constraint" in found
    assert "in a CHECK constraint" in found and "192" not in found and "2020" not in found and "****1111" not in found
    assert objects["leaky.v_support"] == ("view", "email s***@example.com in a string in its text")
    assert objects["leaky.trg_notes"][0] == "trigger on leaky.notes" and "phone +** ** **** **58" in objects["leaky.trg_notes"][1]
    assert objects["leaky.p_escalate"] == ("procedure", "email b***@example.com in a comment in its text")
    assert 'acknowledge it on the record with "<db>.<object>": "keep"' in text
    assert {k: v for k, v in snippet.items() if k.count(".") == 1} == dict.fromkeys(objects, "keep")
    assert not [v for v in LEAKED if v in text]

    # acknowledging all but one leaves that one refused, alone
    all_but_one = {k: v for k, v in {**snippet, **LEAKY_RULES}.items() if k != "leaky.v_support"}
    _, columns, left, _ = _refusal(leaky, all_but_one, logical_target)
    assert set(left) == {"leaky.v_support"} and not columns
    with pytest.raises(Refusal, match=r"'leaky.v_support': a two-part name .* only strategy is \"keep\", not 'hash'"):
        sr.preflight(_conf(leaky, databases=["leaky"]), {**snippet, **LEAKY_RULES, "leaky.v_support": "hash"})
    with pytest.raises(PreflightError, match="leaky.nope: no table, view, trigger, routine or event of that name"):
        sr.preflight(_conf(leaky, databases=["leaky"]), {**snippet, **LEAKY_RULES, "leaky.nope": "keep"})


def test_the_snippet_merged_passes_the_pii_guard(leaky, logical_target, deployment_rules):
    _, _, _, snippet = _refusal(leaky, LEAKY_RULES, logical_target)
    tgt = logical_target.server()
    try:
        plan = sr.preflight(_conf(leaky, databases=["leaky"]), {**LEAKY_RULES, **snippet})
        assert plan.kept_objects == sorted(k for k in snippet if k.count(".") == 1)
        assert {f"{r['schema']}.{r['table']}.{r['column']}" for r in plan.rules} == {
            *LEAKY_RULES, *(k for k in snippet if k.count(".") == 2)}
        assert tgt.query("SELECT @@global.read_only")[0][0] == 1  # passed: staging kept read-only until masked
        saved = sr.report(plan, MaskingVerified([], []), Masked(0.0, 0, []), "staging_refresh", "leaky_preflight_only")["report"]
        assert json.loads(Path(saved.removeprefix("file://")).read_text())["kept"] == plan.kept_objects  # on the record
    finally:
        tgt.query("SET GLOBAL read_only = OFF")  # as the other tests expect the shared target


@pytest.fixture(scope="module")
def leaky_sealed(leaky, tmp_path_factory):
    """`leaky` backed up again, encrypted (a key connection: every file but the manifest sealed)."""
    dest = tmp_path_factory.mktemp("leaky-sealed")
    with pytest.MonkeyPatch.context() as mp:
        _key_connection(mp)
        plan = logical_backup.preflight({"source_conn_id": "t_crm", "destination": f"file://{dest}", "databases": ["leaky"],
                                         "parallel": 2, "chunk_rows": 1000})
        logical_backup.dump(plan)
    return f"file://{dest}/{plan.backup_id}"


def _key_connection(mp) -> None:
    mp.setenv(encryption_keys.KEY_CONN_ENV, "t_staging_enc")
    mp.setenv("AIRFLOW_CONN_T_STAGING_ENC", json.dumps({"conn_type": "generic", "login": "k1", "password": "5e" * 32}))


def test_the_pii_guard_opens_an_encrypted_backup_s_chunks_and_schema_and_finds_the_same(
        leaky, leaky_sealed, logical_target, monkeypatch):
    folder = Path(leaky_sealed.removeprefix("file://"))
    for name in ("schema.json", "schema.sql"):  # the table COMMENT's address is in neither in the clear
        stored = (folder / name).read_bytes()
        assert stored.startswith(b"LLSEAL") and b"example.net" not in stored and b"leaky" not in stored, name
    _key_connection(monkeypatch)
    _, columns, objects, snippet = _refusal(leaky_sealed, LEAKY_RULES, logical_target)
    _, plain_columns, plain_objects, plain_snippet = _refusal(leaky, LEAKY_RULES, logical_target)
    assert (columns, objects, snippet) == (plain_columns, plain_objects, plain_snippet) and objects and columns
    monkeypatch.delenv(encryption_keys.KEY_CONN_ENV)  # without the key: refused naming it, before any guard
    with pytest.raises(ConfigError, match=r"is encrypted \(its data key is wrapped under k1 \(kek\)\)"):
        sr.preflight(_conf(leaky_sealed, databases=["leaky"]), LEAKY_RULES)


def test_object_rules_take_only_keep():
    from lastline.staging.rules import ObjectRule, parse_rule_set

    columns, objects = parse_rule_set({"`my.db`.`v 1`": "keep", "crm.customers.email": "email"})
    assert objects == [ObjectRule("my.db", "v 1")] and objects[0].key == "`my.db`.`v 1`" and len(columns) == 1
    assert parse_rules({"crm.v": "keep", "crm.customers.email": "email"})[0].column == "email"
    for strategy in ("hash", "null", "fixed:x"):
        with pytest.raises(Refusal, match="only strategy is \"keep\""):
            parse_rule_set({"crm.v": strategy})
    with pytest.raises(Refusal, match="<database>.<table>.<column>"):
        split_key("crm.v")  # a column key still has three parts


def test_schema_text_is_read_as_sql_strings_and_comments_not_names():
    from lastline.staging import pii_objects

    sql = ("CREATE DEFINER=`root`@`localhost` PROCEDURE `p`() BEGIN -- ask it''s owner ann.lee@example.net\n"
           "SELECT '2020-01-01 00:00:00', '10.0.0.12', 'max 100 000 000 rows', `x@y.example.com`, 4111111111111112, "
           "x'6a6f6540782e6578616d706c652e6f7267', 'it''s DE89 3704 0044 0532 0130 00', \"tel (555) 010-7788\", "
           "5555555555554444; END")
    found = [(token, kind, pii.patterns.redact(kind, value)) for _, token, kind, value in pii_objects.find_in_sql(sql)]
    assert found == [("comment", "email", "a***@example.net"), ("hex", "email", "j***@x.example.org"),
                     ("string", "bank/card", "DE** **** **** **** **30 00"), ("string", "phone", "***) ***-**88"),
                     ("number", "bank/card", "************4444")]


def test_value_patterns_take_linear_time_and_a_sample_spreads_over_the_table():
    import time

    from lastline.manifest import ChunkInfo
    from lastline.staging import sampling

    for value in ("a" * 100_000, "1 " * 50_000, "@" * 100_000, "a@" * 50_000, "x@" + "a." * 50_000):
        started = time.monotonic()
        pii.kinds_by_values([value])
        assert time.monotonic() - started < 1, value[:10]  # a pattern like [a-z]+@ takes minutes here
    assert pii.kinds_by_values(["order 12 4111 1111 1111 1111 paid"]) == {"bank/card": 1}  # a card after another number
    chunks = [ChunkInfo(file=f"data/d/t/{i:05d}-000.tsv.zst", rows=1000, bytes=1, raw_bytes=1, sha256="") for i in range(100)]
    picked = [int(c.file[9:14]) for c in sampling.spread(list(reversed(chunks)))]
    assert len(picked) == sampling.SAMPLE_CHUNKS and picked[0] == 0 and picked[-1] == 99 and picked == sorted(picked)
    assert max(b - a for a, b in zip(picked, picked[1:])) <= 4  # even steps over the table
    assert len(sampling.spread(chunks[:5])) == 5
    rows = b"".join(b"%d\tx\n" % i for i in range(100_000, 200_000))  # 9 bytes a row: windows of whole rows, spread
    got = list(sampling.windows((rows[i:i + 4096] for i in range(0, len(rows), 4096)), [0, len(rows) // 2, len(rows) - 90], 45))
    assert got == [rows[:45], rows[len(rows) // 2: len(rows) // 2 + 45], rows[-90:-45]]


def test_a_run_s_conf_may_mask_more_but_never_less_and_never_names_the_key(crm, logical_target, deployment_rules):
    """The review's: `keep` on every column from a run's conf passed the guard; a conf naming the production
    source's connection as the key put its password, XOR 0x36, into the server's variables."""
    _, backup = crm
    tgt = logical_target.server()
    weakened = {k: "keep" for k in RULES}
    with pytest.raises(Refusal, match=r'"keep" and "phone" .* come only from the deployment\'s rules'):
        sr.preflight(_conf(backup, masking_rules=weakened), RULES)
    with pytest.raises(Refusal, match=r'crm.customers \(keep\): a run\'s conf may mask more, never less'):
        sr.preflight(_conf(backup, masking_rules={"crm.customers": "keep"}), RULES)
    # the review's: "phone" keeps every non-digit ("12 Baker St" became "47 Baker St"); a deployment rule turned
    # into it, or into another strategy than null/fixed/hash, is weaker
    for weaker in ({"crm.orders.ship_address": "phone"}, {"crm.orders.ship_address": "email"}):
        with pytest.raises(Refusal, match=r"a run's conf may mask more, never less"):
            sr.preflight(_conf(backup, masking_rules=weaker), RULES)
    try:  # more masking from the conf is fine: a deployment "keep" turned into a mask
        plan = sr.preflight(_conf(backup, masking_rules={"crm.products.name": "hash"}), RULES)
        assert {r["strategy"] for r in plan.rules if r["table"] == "products"} == {"hash"}
    finally:
        tgt.query("SET GLOBAL read_only = OFF")
    deployment_rules.setenv("LASTLINE_MASKING_KEY_CONN_ID", "t_crm")  # a server's connection is no key
    with pytest.raises(Refusal, match="is of type 'lastline': a key must be kept in a connection of its own"):
        sr.preflight(_conf(backup), RULES)

