"""The Backups page (plugins/lastline_backups.py, lastline.inventory): backups made by the real backup stages, a real
binlog archive and a real restore drill, listed with each column; the restore links carry what the restore reads; the
page answers only to Airflow's own authentication and permissions (a real auth manager with per-DAG reads); a backup
is found there, and by a restore form's `latest`, as soon as it is made; and the hook's "Test connection" on a full, a
restricted and a backup-only account."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from html import unescape
from urllib.parse import parse_qs, urlparse

import pytest

from conftest import ROOT, set_conn
from lastline import connections, inventory
from lastline.logical.backup import stages as logical_backup
from lastline.manifest import new_backup_id, read_manifest
from lastline.physical import backup as physical_backup
from lastline.pitr import archive
from lastline.storage import open_storage
from lastline_dev.sandbox import Instance


def _plugin():
    spec = importlib.util.spec_from_file_location("lastline_backups", ROOT / "plugins" / "lastline_backups.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    return plugin


@pytest.fixture(scope="module")
def drill_server(sandbox_root):
    inst = Instance(sandbox_root, "bp_drill")
    inst.create()
    set_conn("t_bp_drill", inst, role="drill")
    yield inst
    inst.destroy()


@pytest.fixture(scope="module")
def made(source, tmp_path_factory, drill_server, airflow_db) -> dict:
    """A destination holding a physical and a logical backup of the source, the source's binlog archive, an
    incomplete backup folder, and a passed restore drill of the logical backup (restore_drill, run in Airflow)."""
    dest = tmp_path_factory.mktemp("backups-page")
    url = f"file://{dest}"
    storage = open_storage(url)
    archive.ship(connections.server("t_source"), storage)
    plan = physical_backup.preflight({"source_conn_id": "t_source", "destination": url})
    physical_backup.finish(plan, physical_backup.stream(plan))
    time.sleep(1.1)  # backup ids are stamped to the second
    logical = logical_backup.preflight({"source_conn_id": "t_source", "destination": url, "databases": ["store"]})
    logical_backup.dump(logical)
    time.sleep(2.1)  # the archive confirms what the source committed up to a second before it looked
    archive.ship(connections.server("t_source"), storage)
    unfinished = new_backup_id()  # a backup under way, or one that never finished (backup_verify: a problem after a day)
    (dest / unfinished).mkdir()
    return {"dest": dest, "url": url, "physical": str(plan.backup_id), "logical": str(logical.backup_id),
            "unfinished": unfinished}


@pytest.fixture(scope="module")
def drilled(made, run_dag_module) -> dict:
    state, tis, _ = run_dag_module("restore_drill", {
        "drill_conn_id": "t_bp_drill", "backup": f"{made['url']}/{made['logical']}", "kind": "logical",
        "rto_budget_minutes": 60, "parallel": 2, "aws_conn_id": None})
    assert state == "success", tis
    state, tis, _ = run_dag_module("backup_verify", {"destination": made["url"], "aws_conn_id": None})  # read back
    assert state == "success", tis
    return made


@pytest.fixture(scope="module")
def run_dag_module(dagbag):
    def run(dag_id: str, conf: dict):
        dr = dagbag.get_dag(dag_id).test(run_conf=conf)
        return str(dr.state), dr.run_id, None
    return run


try:
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
except ImportError:  # pragma: no cover - Airflow is installed wherever these tests run
    SimpleAuthManager = object  # type: ignore[assignment,misc]


class DagScopedAuthManager(SimpleAuthManager):  # type: ignore[misc,valid-type]
    """Airflow's simple auth manager, where a user named in READS may read only those DAGs (as a deployment's per-DAG
    permissions do); any other user is as the simple manager says (an admin reads all)."""

    READS = {"one_dag": {"physical_backup"}, "backups_only": {"physical_backup", "logical_backup"},
             "backups_and_restores": {"physical_backup", "logical_backup", *(
                 "physical_restore", "logical_restore", "point_in_time_restore", "staging_refresh")}}

    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        if user.username in self.READS:  # a DAG not named (every DAG) is not one of its DAGs
            return method == "GET" and details is not None and details.id in self.READS[user.username]
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)


@pytest.fixture
def token(monkeypatch, airflow_db):
    """`token(username, role)`: a JWT of Airflow's API for that user, with DagScopedAuthManager as the deployment's
    auth manager (set through Airflow's config; the previous one is back after the test)."""
    from airflow.api_fastapi import app as api_app
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", f"{__name__}.DagScopedAuthManager")
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "lastline tests' JWT secret, not a real one, 64 bytes or more "
                                                        "as HMAC-SHA512 asks")
    monkeypatch.setattr(api_app._AuthManagerState, "instance", None)
    manager = api_app.create_auth_manager()
    assert type(manager).__name__ == "DagScopedAuthManager"
    return lambda username, role="viewer": manager.generate_jwt(SimpleAuthManagerUser(username=username, role=role))


@pytest.fixture
def page(monkeypatch, drilled, token):
    """The plugin's app as an admin sees it (Airflow's access checks: tests below), listing the test destination."""
    from fastapi.testclient import TestClient

    monkeypatch.setenv("LASTLINE_BACKUPS_PAGE_DESTINATIONS", drilled["url"])
    plugin = _plugin()
    return plugin, TestClient(plugin.app, headers={"Authorization": f"Bearer {token('admin', 'admin')}"})


@pytest.mark.e2e
def test_the_page_lists_every_backup_with_each_column(page, made):
    _plugin_module, client = page
    data = client.get("/backups.json").json()
    (dest,) = data
    rows = {b["backup_id"]: b for b in dest["backups"]}
    assert dest["folders"] == 3 and len(rows) == 3
    html = client.get("/").text
    assert "<h1>Backups</h1>" in html and "Point-in-time window" in html and "<th>Read back</th>" in html
    storage = open_storage(dest["url"])
    for backup_id, row in rows.items():
        if row["problem"]:
            assert backup_id == made["unfinished"] and "incomplete" in row["problem"] and not row["restores"]
            assert "incomplete: no manifest" in html
            continue
        manifest = read_manifest(storage, backup_id, row["kind"], require=False)
        assert row["bytes"] == manifest.bytes > 0 and row["seconds"] == pytest.approx(manifest.seconds)
        assert row["taken_at"] == manifest.started_at and row["age_hours"] is not None and row["age_hours"] < 1
        assert row["authenticated"] and "authenticated (storage key tests-k1)" in row["authenticity"]
        assert row["read_back_ok"] and row["read_back"].startswith("ok ")  # backup_verify read every file back
        window = row["window"]
        assert window["from"] == manifest.finished_at[:19] + "Z" and window["to"] >= window["from"] and window["reaches"]
        assert f"<code>{backup_id}</code>" in html
        labels = [r["label"] for r in row["restores"]]
        assert labels == [f"{row['kind']} restore", "point-in-time restore"]
        if row["kind"] == "logical":  # the drill restored and verified it
            assert row["drill_ok"] and row["drilled"].startswith("passed ") and "restored and verified in" in row["drilled"]
            assert row["verified"] and "restored and verified by" in row["verified"]
        else:
            assert row["drilled"] is None and row["verified"] is None
    assert {r["kind"] for r in rows.values() if r["kind"]} == {"physical", "logical"}
    assert "Binlog archive, branch" in html


@pytest.mark.e2e
def test_a_restore_link_opens_that_restore_prefilled_with_the_backup(page, drilled):
    _plugin_module, client = page
    html = client.get("/").text
    links = [unescape(h) for h in re.findall(r'href="(restore/[^"]+)"', html)]
    confs = [(urlparse(h).path.rsplit("/", 1)[1], json.loads(parse_qs(urlparse(h).query)["conf"][0])) for h in links]
    url = drilled["url"]
    assert ("physical_restore", {"backup": f"{url}/{drilled['physical']}"}) in confs
    assert ("logical_restore", {"backup": f"{url}/{drilled['logical']}"}) in confs
    assert ("point_in_time_restore", {"destination": url, "base": drilled["physical"], "base_kind": "physical",
                                      "until": "latest"}) in confs
    # the link's page: that conf, editable, and a Trigger that posts to Airflow's REST API for that DAG
    link = next(h for h in links if "logical_restore" in h)
    form = client.get(link).text
    assert f'&quot;backup&quot;: &quot;{url}/{drilled["logical"]}&quot;' in form
    assert 'data-dag="logical_restore"' in form and '"/api/v2/dags/"' in form and "/dagRuns" in form
    # what the restore reads: the conf resolves to that very backup
    from lastline.manifest import resolve_backup

    assert resolve_backup(dict(confs)["logical_restore"]["backup"], None, "logical")[1] == drilled["logical"]
    assert client.get("/restore/logical_backup?conf={}").status_code == 404  # only restores
    assert client.get("/restore/logical_restore?conf=[1]").status_code == 400


@pytest.mark.e2e
def test_the_page_answers_only_to_airflows_authentication(drilled, monkeypatch):
    from fastapi.testclient import TestClient

    monkeypatch.setenv("LASTLINE_BACKUPS_PAGE_DESTINATIONS", drilled["url"])
    client = TestClient(_plugin().app)
    for path in ("/", "/backups.json", "/restore/logical_restore?conf={}"):
        answer = client.get(path)
        assert answer.status_code == 401 and drilled["logical"] not in answer.text


@pytest.mark.e2e
def test_a_destination_is_capped_and_says_how_many_it_holds(drilled, monkeypatch):
    monkeypatch.setenv("LASTLINE_BACKUPS_PAGE_LIMIT", "1")
    monkeypatch.setenv("LASTLINE_BACKUPS_PAGE_DESTINATIONS", f"{drilled['url']},file:///nonexistent-lastline-page")
    first, missing = inventory.listing()
    assert first.folders == 3 and [b.backup_id for b in first.backups] == [max(drilled["logical"], drilled["physical"],
                                                                               drilled["unfinished"])]  # the newest folder
    assert missing.folders == 0 and missing.backups == [] and "no such folder" in str(missing.problem)


@pytest.mark.e2e
def test_a_backup_is_found_as_soon_as_it_is_made(page, source, tmp_path, monkeypatch):
    """No parse stands between a backup and the person looking for it: the page lists each view afresh, and a restore
    form's default `<destination>/latest` resolves when the run starts, to the backup just made."""
    from lastline.airflow.params import params
    from lastline.manifest import resolve_backup

    _plugin_module, client = page
    url = f"file://{tmp_path}"
    monkeypatch.setenv("LASTLINE_BACKUPS_PAGE_DESTINATIONS", url)
    assert client.get("/backups.json").json()[0]["backups"] == []
    plan = logical_backup.preflight({"source_conn_id": "t_source", "destination": url, "databases": ["store"]})
    logical_backup.dump(plan)
    (dest,) = client.get("/backups.json").json()
    assert [b["backup_id"] for b in dest["backups"]] == [plan.backup_id]
    latest = params("backup")["backup"]
    assert latest.value.endswith("/latest") and latest.schema["examples"] == [latest.value]
    assert "the Backups page" in latest.description
    assert resolve_backup(f"{url}/latest", None, "logical")[1] == plan.backup_id


@pytest.mark.e2e
def test_test_connection_names_the_version_and_the_missing_privileges(source):
    from lastline.hooks.mariadb import MariaDbHook

    conn = source.connection("t_tc_full")
    conn["conn_type"] = "lastline"
    os.environ["AIRFLOW_CONN_T_TC_FULL"] = json.dumps(conn)
    ok, message = MariaDbHook("t_tc_full").test_connection()
    version = source.server().query("SELECT VERSION()")[0][0]
    assert ok, message
    assert version in message and "backup source and a restore target" in message and "Missing" not in message
    assert "Ready as a backup source and a restore target." in message
    with source.server().session() as cur:
        for sql in ("CREATE ROLE IF NOT EXISTS tc_reader", "GRANT RELOAD, PROCESS ON *.* TO tc_reader",
                    "CREATE USER IF NOT EXISTS 'tc_weak'@'%' IDENTIFIED BY 'tc-weak-pw-1'", "GRANT SELECT ON *.* TO 'tc_weak'@'%'",
                    "GRANT tc_reader TO 'tc_weak'@'%'", "SET DEFAULT ROLE tc_reader FOR 'tc_weak'@'%'"):
            cur.execute(sql)
    weak = {**conn, "login": "tc_weak", "password": "tc-weak-pw-1", "extra": {"protected": True}}
    weak.pop("schema", None)
    os.environ["AIRFLOW_CONN_T_TC_WEAK"] = json.dumps(weak)
    ok, message = MariaDbHook("t_tc_weak").test_connection()
    assert not ok and version in message and "Not ready" in message
    assert "backup source" in message and "restore target" not in message  # protected: only ever backed up
    for lacking in ("SHOW VIEW", "TRIGGER", "EVENT", "LOCK TABLES", "BINLOG MONITOR"):
        assert lacking in message, message
    assert "RELOAD" not in message and "PROCESS" not in message  # held through its role
    assert "role tc_reader" in message and "tc-weak-pw-1" not in message
    # the backup grants of docs/grants.md on a connection that is not protected (a backup source or a restore
    # target): ready as a backup source, which is what it is for; the restore target's lacks are named
    with source.server().session() as cur:
        for sql in ("CREATE USER IF NOT EXISTS 'tc_backup'@'%' IDENTIFIED BY 'tc-backup-pw-1'",
                    "GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, RELOAD, PROCESS, BINLOG MONITOR, BINLOG ADMIN, LOCK TABLES "
                    "ON *.* TO 'tc_backup'@'%'"):
            cur.execute(sql)
    backup_only = {**conn, "login": "tc_backup", "password": "tc-backup-pw-1", "extra": {}}
    backup_only.pop("schema", None)
    os.environ["AIRFLOW_CONN_T_TC_BACKUP"] = json.dumps(backup_only)
    ok, message = MariaDbHook("t_tc_backup").test_connection()
    assert ok, message
    assert "Ready as a backup source; not as a restore target" in message
    assert "every privilege lastline needs is granted on *.*" in message and "Missing on *.* for a restore target" in message
    assert "Missing on *.* for a backup source" not in message and "INSERT" in message
    os.environ["AIRFLOW_CONN_T_TC_WEAK"] = json.dumps({**weak, "password": "wrong"})
    ok, message = MariaDbHook("t_tc_weak").test_connection()
    assert not ok and "wrong user or password" in message


def test_a_link_carries_the_conf_its_restore_reads_and_nothing_of_it_escapes_the_page():
    """The href of each restore link, parsed as a browser does, gives the restore's conf exactly; a destination's
    name cannot break out of the page."""
    url = 'file:///b/"><script>x</script>'
    row = inventory.Backup("20261128T164122Z-733e7a", f"{url}/20261128T164122Z-733e7a", kind="logical", bytes=1,
                           seconds=1.0, window={"branch": "1-000001-ab", "from": "a", "to": "b", "reaches": True,
                                                "holes_after": []})
    row.restores = inventory._restores(url, row, "t_s3")
    html = _plugin()._row(row)
    assert "<script>" not in html
    links = [unescape(h) for h in re.findall(r'href="(restore/[^"]+)"', html)]
    confs = [(urlparse(h).path.rsplit("/", 1)[1], json.loads(parse_qs(urlparse(h).query)["conf"][0])) for h in links]
    assert confs == [("logical_restore", {"backup": f"{url}/20261128T164122Z-733e7a", "aws_conn_id": "t_s3"}),
                     ("point_in_time_restore", {"destination": url, "base": "20261128T164122Z-733e7a",
                                                "base_kind": "logical", "until": "latest", "aws_conn_id": "t_s3"})]
    row.window = {**row.window, "reaches": False}  # the archive has not confirmed a point past the backup yet
    assert [r["dag_id"] for r in inventory._restores(url, row, None)] == ["logical_restore"]


def test_grants_are_read_on_all_databases_only_with_roles_aliases_and_the_grant_option():
    from lastline.core import privileges

    have = privileges.held([
        "GRANT SELECT, RELOAD, PROCESS, LOCK TABLES, REPLICATION CLIENT, SHOW VIEW, EVENT, TRIGGER ON *.* TO `b`@`%` "
        "IDENTIFIED BY PASSWORD '*AB'",
        "GRANT INSERT, CREATE, DROP ON `shop`.* TO `b`@`%`",  # one database only: not enough for lastline
        "GRANT `r` TO `b`@`%`", "SET DEFAULT ROLE `r` FOR `b`@`%`", "GRANT UPDATE (`v`) ON `shop`.`t` TO `b`@`%`"])
    assert have == {"SELECT", "RELOAD", "PROCESS", "LOCK TABLES", "BINLOG MONITOR", "SHOW VIEW", "EVENT", "TRIGGER"}
    assert privileges.missing(have, privileges.BACKUP) == []
    lacking = {n.names[0] for n in privileges.missing(have, privileges.RESTORE)}
    assert {"INSERT", "CREATE", "DROP", "CREATE USER", "GRANT OPTION"} <= lacking and "SELECT" not in lacking
    admin = privileges.held(["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"])
    assert privileges.verdict(admin, [privileges.BACKUP, privileges.RESTORE])[0]
    no_grant = privileges.held(["GRANT ALL PRIVILEGES ON *.* TO `a`@`%`"])
    assert [n.label for n in privileges.missing(no_grant, privileges.RESTORE)] == ["GRANT OPTION"]
    assert privileges.uses(True, None) == [privileges.BACKUP] and privileges.uses(False, "drill") == [privileges.RESTORE]
    assert privileges.uses(False, None) == [privileges.BACKUP, privileges.RESTORE]


def test_an_s3_destination_is_read_through_the_connection_its_root_names(monkeypatch):
    monkeypatch.delenv("LASTLINE_BACKUPS_PAGE_DESTINATIONS", raising=False)
    monkeypatch.setenv("LASTLINE_DESTINATION", "s3://lastline-backups/nightly")
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", "file:///b,s3://lastline-backups/nightly?aws_conn_id=lastline_s3")
    assert inventory.destinations() == [("s3://lastline-backups/nightly", "lastline_s3")]
    monkeypatch.setenv("LASTLINE_BACKUPS_PAGE_DESTINATIONS", "file:///b/x/, s3://other/p?aws_conn_id=o")
    assert inventory.destinations() == [("file:///b/x", None), ("s3://other/p", "o")]


@pytest.mark.e2e
def test_an_s3_destination_is_listed_through_its_connection(source, s3_server):
    plan = logical_backup.preflight({"source_conn_id": "t_source", "destination": "s3://backups/page", "aws_conn_id": "t_s3",
                         "databases": ["store"]})
    logical_backup.dump(plan)
    found = inventory.list_destination("s3://backups/page", "t_s3", drill_history=[])
    assert found.problem is None and found.folders == 1
    (row,) = found.backups
    assert row.backup_id == plan.backup_id and row.kind == "logical" and row.authenticated and row.bytes
    assert row.restores[0]["conf"] == {"backup": f"s3://backups/page/{plan.backup_id}", "aws_conn_id": "t_s3"}


def test_the_restore_page_opens_airflow_through_the_one_shared_link_script():
    """The prefilled restore page routes the UI around its sandboxed frame with the script the Report tab uses too
    (lastline.airflow.ui_links: one copy), for its DAG link and for the run it triggers."""
    from fastapi.testclient import TestClient

    from lastline.airflow.ui_links import OPEN_IN_AIRFLOW

    plugin = _plugin()
    plugin.app.dependency_overrides[plugin.READ_DAG] = lambda: None
    form = TestClient(plugin.app).get("/restore/logical_restore", params={"conf": "{}"}).text
    assert form.count("function openInAirflow(") == 1 and OPEN_IN_AIRFLOW in form
    assert '<a id="dag" class="airflow" href="/dags/logical_restore">' in form
    assert 'openInAirflow(base + "/dags/" + encodeURIComponent(dag) + "/runs/"' in form
    assert 'target="_top"' not in form


@pytest.mark.e2e
def test_the_page_needs_both_backup_dags_whatever_the_query_says(drilled, monkeypatch, token):
    """A user who may read one backup DAG cannot open the page by naming that DAG in `?dag_id=`; a user who may read
    the backups but no restore sees no restore's or drill's verification; a restore's page checks its own DAG."""
    from fastapi.testclient import TestClient

    monkeypatch.setenv("LASTLINE_BACKUPS_PAGE_DESTINATIONS", drilled["url"])
    app = _plugin().app

    def get(user: str, path: str):
        return TestClient(app, headers={"Authorization": f"Bearer {token(user)}"}).get(path)

    for path in ("/", "/?dag_id=physical_backup", "/backups.json?dag_id=physical_backup", "/backups.json?dag_id=~"):
        answer = get("one_dag", path)
        assert answer.status_code == 403 and drilled["logical"] not in answer.text, (path, answer.text)
    rows = {b["backup_id"]: b for b in get("backups_only", "/backups.json").json()[0]["backups"]}
    logical = rows[drilled["logical"]]
    assert logical["verified"] is None and logical["drilled"] is None  # restore_drill is not the user's to read
    assert logical["read_back"] is None  # nor backup_verify
    assert logical["restores"] and "drill" not in get("backups_only", "/").text.split("<table>", 1)[1]
    admin = {b["backup_id"]: b for b in get("admin", "/backups.json").json()[0]["backups"]}
    assert admin[drilled["logical"]]["verified"].startswith("restored and verified by restore_drill")
    assert admin[drilled["logical"]]["read_back"].startswith("ok ")
    answer = get("backups_only", "/restore/logical_restore?dag_id=physical_backup&conf={}")
    assert answer.status_code == 403  # the DAG in the path is what is checked
    assert get("backups_and_restores", "/restore/logical_restore?conf={}").status_code == 200


@pytest.mark.e2e
def test_the_prefilled_restore_page_refuses_fields_its_links_never_carry(page, drilled):
    _plugin_module, client = page
    fine = {"destination": drilled["url"], "base": drilled["physical"], "base_kind": "physical", "until": "latest",
            "aws_conn_id": "t_s3"}
    assert client.get(f"/restore/point_in_time_restore?conf={json.dumps(fine)}").status_code == 200
    sneaked = {"backup": f"{drilled['url']}/{drilled['logical']}", "force": True, "target_conn_id": "prod"}
    answer = client.get(f"/restore/logical_restore?conf={json.dumps(sneaked)}")
    assert answer.status_code == 400
    detail = answer.json()["detail"]
    assert "'force', 'target_conn_id'" in detail and "text box" in detail and "aws_conn_id" in detail


@pytest.mark.e2e
def test_verified_and_drilled_match_the_destination_and_the_id(drilled, tmp_path):
    """The same backup id in another destination is another backup: neither its restores nor its drills count here."""
    url, backup_id = drilled["url"], drilled["logical"]
    elsewhere = f"file://{tmp_path}"
    named = [{"dag_id": "logical_restore", "run_id": "r1", "finished": "2099-01-01T00:00:00Z"}]
    drill = {"backup_id": backup_id, "kind": "logical", "ok": True, "finished": "2099-01-01T00:00:00Z", "rto_seconds": 5}

    def row(verifications, history):
        found = inventory.list_destination(url, drill_history=history, verifications=verifications)
        return next(b for b in found.backups if b.backup_id == backup_id)

    other = row({f"{elsewhere}/{backup_id}": named}, [{**drill, "backup": f"{elsewhere}/{backup_id}"}])
    assert other.verified is None and other.drilled is None and other.drill_ok is None
    here = row({f"{url}/{backup_id}": named}, [{**drill, "backup": f"{url}/{backup_id}"}])
    assert here.verified == "restored and verified by logical_restore 2099-01-01T00:00:00Z" and here.drill_ok
    assert here.verified_by == {"dag_id": "logical_restore", "run_id": "r1", "finished": "2099-01-01T00:00:00Z"}


def test_the_report_tab_checks_the_dag_in_its_path_whatever_the_query_says(token):
    """The reports plugin's routes carry the DAG in their path, which Airflow's check reads before any `?dag_id=`."""
    from fastapi.testclient import TestClient

    spec = importlib.util.spec_from_file_location("lastline_reports", ROOT / "plugins" / "lastline_reports.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    client = TestClient(plugin.app, headers={"Authorization": f"Bearer {token('one_dag')}"})
    for path in ("/reports/logical_restore/r1?dag_id=physical_backup",
                 "/reports/logical_restore/r1/report.md?dag_id=physical_backup"):
        assert client.get(path).status_code == 403, path
    assert client.get("/reports/physical_backup/no-such-run/report.md").status_code == 404  # its own DAG: read


@pytest.fixture(scope="module")
def restored_latest(drilled, run_dag_module, logical_target) -> dict:
    """A logical_restore of `<destination>/latest`, its form's default (the conf names no backup), run in Airflow
    after the drill: the newest run that verified the logical backup. The tests that use it come last in this file."""
    state, run_id, _ = run_dag_module("logical_restore", {
        "target_conn_id": "t_ltarget", "backup": f"{drilled['url']}/latest", "databases": ["store"], "parallel": 2,
        "tune": True, "restart_allowed": False, "defer_indexes": True, "index_build": "per_table", "force": True,
        "enable_events": False, "restore_grants": False, "restore_into_source": "", "redo_log_bytes": 128 << 20,
        "aws_conn_id": None})
    assert state == "success", run_id
    return {**drilled, "run_id": run_id}


@pytest.mark.e2e
def test_a_restore_of_latest_verifies_the_backup_it_restored(restored_latest, monkeypatch, token):
    """The page reads the backup the run's preflight resolved (its XCom), not the conf's `latest`: that backup, and
    only that one, is verified by that run; and only for a user who may read logical_restore."""
    from fastapi.testclient import TestClient

    url, logical, physical, run_id = (restored_latest[k] for k in ("url", "logical", "physical", "run_id"))
    monkeypatch.setenv("LASTLINE_BACKUPS_PAGE_DESTINATIONS", url)
    plugin = _plugin()
    found = plugin._verifications({"logical_restore"})
    mine = {backup: [v for v in runs if v["run_id"] == run_id] for backup, runs in found.items()}
    assert {backup for backup, runs in mine.items() if runs} == {f"{url}/{logical}"}
    (entry,) = mine[f"{url}/{logical}"]
    assert entry["dag_id"] == "logical_restore" and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", entry["finished"])

    def rows(user: str, role: str = "viewer") -> dict:
        client = TestClient(plugin.app, headers={"Authorization": f"Bearer {token(user, role)}"})
        return {b["backup_id"]: b for b in client.get("/backups.json").json()[0]["backups"]}

    admin = rows("admin", "admin")
    assert admin[logical]["verified_by"] == {"dag_id": "logical_restore", "run_id": run_id, "finished": entry["finished"]}
    assert admin[logical]["verified"] == f"restored and verified by logical_restore {entry['finished']}"
    assert admin[physical]["verified"] is None and admin[physical]["verified_by"] is None  # not what latest was
    client = TestClient(plugin.app, headers={"Authorization": f"Bearer {token('admin', 'admin')}"})
    assert f"restored and verified by logical_restore {entry['finished']}" in client.get("/").text
    # a reader of the restores but not of restore_drill: verified by the restore; one of neither: by nothing
    restores = rows("backups_and_restores")
    assert restores[logical]["verified_by"]["run_id"] == run_id and restores[logical]["drilled"] is None
    assert rows("backups_only")[logical]["verified"] is None


def test_a_window_says_which_holes_it_crossed_as_proven_empty_and_which_stop_it():
    row = inventory.Backup("20261128T164122Z-733e7a", "file:///b/20261128T164122Z-733e7a", kind="physical", bytes=1,
                           seconds=1.0, window={"branch": "1-000001-ab", "from": "a", "to": "b", "reaches": True,
                                                "holes_after": ["bin.000009"],
                                                "proven_empty_after": ["bin.000003", "bin.000004"]})
    html = _plugin()._row(row)
    assert "; a hole after it: bin.000009; crossed, proven empty: bin.000003, bin.000004)" in html
