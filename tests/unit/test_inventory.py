"""inventory: the Backups page's rows: which destinations it lists, each backup's facts from its manifest (or why it
is not restorable), its drills and verifications matched by destination and id, the point-in-time window the archive
opens for it, and the restores it can start. On a real local destination, manifests signed with the tests' key."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lastline import inventory
from lastline import manifest as mf
from lastline.pitr.chain import Entry
from lastline.pitr.window import Line
from lastline.storage.file import FileStorage

T0 = 1_795_882_472  # 2026-11-28T16:14:32Z
NOW = datetime(2026, 11, 28, 18, 0, 0, tzinfo=UTC)
ID = "20261128T161432Z-7c93b6"


@pytest.mark.parametrize(("env", "expected"), [
    ({"LASTLINE_BACKUPS_PAGE_DESTINATIONS": "file:///a/, s3://b/x?aws_conn_id=prod,file:///a"},
     [("file:///a", None), ("s3://b/x", "prod")]),
    ({"LASTLINE_DESTINATION": "file:///d"}, [("file:///d", None)]),
    ({}, [("file:///var/backups/lastline", None)]),
    ({"LASTLINE_BACKUPS_PAGE_DESTINATIONS": "s3://bucket/prod/daily", "LASTLINE_BACKUP_ROOTS": "s3://bucket/prod?aws_conn_id=aws_prod"},
     [("s3://bucket/prod/daily", "aws_prod")]),
    ({"LASTLINE_BACKUPS_PAGE_DESTINATIONS": "s3://bucket/prod-old", "LASTLINE_BACKUP_ROOTS": "s3://bucket/prod?aws_conn_id=aws_prod"},
     [("s3://bucket/prod-old", None)]),
], ids=["listed-repeats-dropped", "the-destination", "default", "s3-takes-its-roots-connection", "segments-compared-whole"])
def test_destinations(monkeypatch, env, expected):
    for name in ("LASTLINE_BACKUPS_PAGE_DESTINATIONS", "LASTLINE_DESTINATION", "LASTLINE_BACKUP_ROOTS"):
        monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert inventory.destinations() == expected


@pytest.mark.parametrize(("value", "expected"), [(None, 30), ("5", 5), ("0", 1), ("lots", 30)],
                         ids=["default", "set", "at-least-one", "not-a-number"])
def test_limit(monkeypatch, value, expected):
    monkeypatch.delenv("LASTLINE_BACKUPS_PAGE_LIMIT", raising=False)
    if value is not None:
        monkeypatch.setenv("LASTLINE_BACKUPS_PAGE_LIMIT", value)
    assert inventory.limit() == expected


SHA = "ab" * 32


def ref(destination: str = "file:///b", backup_id: str = ID, kind: str = "logical", sha: str = SHA) -> dict:
    """A resolved BackupRef's XCom form, as a restore's preflight stores it (its plan's `backup`)."""
    return {"destination": destination, "backup_id": backup_id, "kind": kind, "aws_conn_id": None, "manifest_sha256": sha}


@pytest.mark.parametrize(("dag_id", "task_id", "value", "expected"), [
    ("logical_restore", "preflight", ref(), f"file:///b/{ID}"),
    ("physical_restore", "preflight", ref("s3://x/y/", kind="physical"), f"s3://x/y/{ID}"),
    ("staging_refresh", "restore.preflight", ref(), f"file:///b/{ID}"),
    ("restore_drill", "physical.preflight", ref(kind="physical"), f"file:///b/{ID}"),
    ("point_in_time_restore", "logical_base.preflight", ref("file:///a b/c.d/`e`"), f"file:///a b/c.d/`e`/{ID}"),
    ("staging_refresh", "preflight", ref(), None),
    ("restore_drill", "preflight", ref(), None),
    ("logical_backup", "preflight", ref(), None),
    ("logical_restore", "preflight", ref(backup_id="latest"), None),
    ("logical_restore", "preflight", ref(sha=""), None),
    ("logical_restore", "preflight", ref(kind="mysqldump"), None),
    ("logical_restore", "preflight", ref(destination=""), None),
    ("logical_restore", "preflight", f"file:///b/{ID}", None),
    ("logical_restore", "preflight", {}, None),
    ("logical_restore", "preflight", None, None),
], ids=["logical-restore", "physical-restore-s3", "staging-its-restore-group", "drill-its-branch",
        "pitr-its-base-odd-names", "staging-top-plan-not-the-restore", "drill-top-plan-not-the-restore",
        "not-a-restore", "unresolved-latest", "manifest-not-pinned", "unknown-kind", "no-destination",
        "a-string-not-a-plan", "empty", "none"])
def test_backup_restored(dag_id, task_id, value, expected):
    assert inventory.backup_restored(dag_id, task_id, value) == expected


OTHER = "20261128T170000Z-0d0d0d"


@pytest.mark.parametrize(("runs", "plans", "expected"), [
    ([("logical_restore", "r1", "T1")], [("logical_restore", "r1", "preflight", ref())],
     {f"file:///b/{ID}": [{"dag_id": "logical_restore", "run_id": "r1", "finished": "T1"}]}),
    ([("logical_restore", "r1", "T1"), ("physical_restore", "r1", "T2")],
     [("physical_restore", "r1", "preflight", ref(kind="physical")), ("logical_restore", "r1", "preflight", ref())],
     {f"file:///b/{ID}": [{"dag_id": "logical_restore", "run_id": "r1", "finished": "T1"},
                          {"dag_id": "physical_restore", "run_id": "r1", "finished": "T2"}]}),
    ([("logical_restore", "r1", "T1")], [], {}),
    ([("logical_restore", "r1", "T1")], [("logical_restore", "r2", "preflight", ref())], {}),
    ([("restore_drill", "d1", "T1")], [("restore_drill", "d1", "logical.preflight", ref()),
                                       ("restore_drill", "d1", "physical.preflight", ref(backup_id=OTHER))], {}),
    ([("staging_refresh", "s1", "T1")], [("staging_refresh", "s1", "preflight", ref(backup_id=OTHER)),
                                         ("staging_refresh", "s1", "restore.preflight", ref())],
     {f"file:///b/{ID}": [{"dag_id": "staging_refresh", "run_id": "s1", "finished": "T1"}]}),
    ([("logical_restore", "r1", "T1")], [("logical_restore", "r1", "preflight", ref(sha=""))], {}),
    ([], [("logical_restore", "r1", "preflight", ref())], {}),
], ids=["latest-resolved", "same-run-id-in-two-dags", "no-preflight-row", "another-runs-row",
        "two-backups-none-credited", "the-restore-groups-not-the-top-plan", "not-pinned", "not-a-successful-run"])
def test_verifications(runs, plans, expected):
    assert inventory.verifications(runs, plans) == expected


@pytest.mark.parametrize(("seconds", "text"), [(12.34, "12.3 s"), (90, "2 min"), (5399, "90 min"), (5400, "1.5 h")],
                         ids=["seconds", "minutes-from-90-s", "still-minutes", "hours-from-90-min"])
def test_hours(seconds, text):
    assert inventory._hours(seconds) == text


def entry(seq: int, first: int, last: int, **kw) -> tuple[str, Entry]:
    return "b1", Entry(f"bin.{seq:06d}", f"0-1-{seq * 10}", size=100, transactions=1, first_time=first, last_time=last,
                       end_gtids=f"0-1-{seq * 10 + 9}", **kw)


def facts(gtid: str | None = "0-1-15", file: str | None = "bin.000001") -> inventory.Facts:
    return inventory.Facts("physical", 10, 1.0, "2026-11-28T16:14:32Z", "2026-11-28T16:14:32Z", file, gtid, True, "ok")


@pytest.mark.parametrize(("files", "covered", "the_facts", "expected"), [
    ([entry(1, T0 - 10, T0 + 10), entry(2, T0 + 20, T0 + 30)], {"file": "bin.000002", "size": 100, "time": T0 + 99}, facts(),
     {"to": "2026-11-28T16:16:11Z", "reaches": True, "holes_after": []}),
    ([entry(1, T0 - 10, T0 + 10), entry(2, T0 + 20, T0 + 30)], None, facts(),
     {"to": "2026-11-28T16:15:02Z", "reaches": True, "holes_after": []}),
    ([entry(1, T0 - 10, T0 + 10), entry(2, 0, 0, missing=True), entry(3, T0 + 40, T0 + 50)], None, facts(),
     {"to": "2026-11-28T16:14:42Z", "reaches": True, "holes_after": ["bin.000002"]}),
    ([entry(1, T0 - 10, T0 + 10, tail_missing=True), entry(2, T0 + 20, T0 + 30)], None, facts(),
     {"to": "2026-11-28T16:15:02Z", "reaches": True, "holes_after": ["bin.000001"]}),
    ([entry(1, T0 - 20, T0 - 10)], None, facts(), {"to": "2026-11-28T16:14:22Z", "reaches": False, "holes_after": []}),
    ([entry(1, T0 - 10, T0 + 10, tail_missing=True, proven_empty="bin.000003"), entry(2, 0, 0, missing=True,
      proven_empty="bin.000003"), entry(3, T0 + 40, T0 + 50)], {"file": "bin.000003", "size": 100, "time": T0 + 99},
     facts(), {"to": "2026-11-28T16:16:11Z", "reaches": True, "holes_after": [],
               "proven_empty_after": ["bin.000001", "bin.000002"]}),
    ([entry(1, T0, T0)], None, facts(gtid=None), None),
    ([entry(1, T0, T0)], None, facts(file="bin.000009"), None),
], ids=["to-the-covered-end", "to-the-last-transaction", "up-to-a-hole", "tail-missing-after-the-base-file",
        "nothing-past-the-backup-yet", "holes-proven-empty-are-crossed", "no-gtid", "file-not-in-the-archive"])
def test_window(files, covered, the_facts, expected):
    found = inventory.window([Line("b1", files, covered)], the_facts)
    if expected is None:
        assert found is None
    else:
        assert found == {"branch": "b1", "from": "2026-11-28T16:14:32Z", "proven_empty_after": [], **expected}


def physical(backup_id: str) -> mf.PhysicalManifest:
    return mf.PhysicalManifest(backup_id=backup_id, source_conn_id="src", server_version="11.4.2", tool_version="11.4.2",
                               artifact="backup.mbstream.zst", compression="zstd", bytes=1234, sha256="0" * 64,
                               started_at="2026-11-28T16:14:32Z", finished_at="2026-11-28T16:15:32Z", seconds=60.0,
                               mb_per_s=1.0, parallel=2, datadir_bytes=5000, gtid="0-1-5", binlog_file="bin.000001")


def test_list_destination_rows(tmp_path):
    store = FileStorage(str(tmp_path))
    url = f"file://{tmp_path}"
    older = "20261127T100000Z-aaaaaa"
    for b in (ID, older):
        mf.write_manifest(store, physical(b))
    store.write_bytes("20261128T170000Z-bbbbbb/backup.mbstream.zst", b"still running")
    store.write_bytes("not-a-backup/x", b"x")
    drills = [{"backup": f"{url}/{ID}", "kind": "physical", "ok": True, "finished": "2026-11-28T17:00:00Z", "rto_seconds": 600},
              {"backup": ID, "kind": "physical", "ok": False, "finished": "2026-11-28T17:30:00Z"}]
    verified = {f"{url}/{older}": [{"dag_id": "physical_restore", "run_id": "r1", "finished": "2026-11-28T12:00:00Z"}]}
    dest = inventory.list_destination(url, cap=2, drill_history=drills, verifications=verified, now=NOW)
    assert dest.problem is None and dest.folders == 3 and dest.limit == 2
    running, newest = dest.backups
    assert running.problem.startswith("incomplete: no manifest") and running.restores == []
    assert newest.backup_id == ID and newest.kind == "physical" and newest.bytes == 1234 and newest.authenticated
    assert newest.drilled == "passed 2026-11-28T17:00:00Z: restored and verified in 10 min" and newest.drill_ok
    assert newest.verified == "restored and verified by restore_drill 2026-11-28T17:00:00Z"
    assert newest.verified_by == {"dag_id": "restore_drill", "run_id": None, "finished": "2026-11-28T17:00:00Z"}
    assert newest.window is None  # no binlog archive in this destination
    assert newest.restores == [{"dag_id": "physical_restore", "label": "physical restore", "conf": {"backup": f"{url}/{ID}"}}]
    third = inventory.list_destination(url, cap=3, drill_history=[], verifications=verified, now=NOW).backups[2]
    assert third.verified == "restored and verified by physical_restore 2026-11-28T12:00:00Z" and third.drilled is None
    assert third.verified_by == {"dag_id": "physical_restore", "run_id": "r1", "finished": "2026-11-28T12:00:00Z"}


def test_a_destination_that_cannot_be_listed_is_said_so(tmp_path):
    dest = inventory.list_destination(f"file://{tmp_path}/nowhere", drill_history=[])
    assert dest.backups == [] and "no such folder on the machine this page runs on" in dest.problem
    assert inventory.Destination("u", None, [], 0, 1).to_dict()["url"] == "u"


def test_each_backup_shows_its_newest_read_back_of_this_destination(tmp_path):
    store = FileStorage(str(tmp_path))
    url = f"file://{tmp_path}"
    older = "20261127T100000Z-aaaaaa"
    for b in (ID, older):
        mf.write_manifest(store, physical(b))
    history = [{"destination": url, "finished": "2026-11-29T04:00:00Z", "run_id": "r1",
                "backups": {ID: {"status": "damaged", "what": "backup.mbstream.zst: size"}, older: {"status": "ok", "what": ""}}},
               {"destination": "file:///elsewhere", "finished": "2026-11-30T04:00:00Z", "run_id": "r9",
                "backups": {ID: {"status": "ok", "what": ""}}},
               {"destination": url + "/", "finished": "2026-12-06T04:00:00Z", "run_id": "r2",
                "backups": {ID: {"status": "ok", "what": ""}}}]
    newest, second = inventory.list_destination(url, drill_history=[], verify_history=history, now=NOW).backups
    assert (newest.read_back, newest.read_back_ok) == ("ok 2026-12-06T04:00:00Z", True)
    assert (second.read_back, second.read_back_ok) == ("ok 2026-11-29T04:00:00Z", True)
    damaged = inventory.list_destination(url, drill_history=[], verify_history=history[:2], now=NOW).backups[0]
    assert (damaged.read_back, damaged.read_back_ok) == ("damaged 2026-11-29T04:00:00Z: backup.mbstream.zst: size", False)
    never = inventory.list_destination(url, drill_history=[], verify_history=[], now=NOW).backups[0]
    assert (never.read_back, never.read_back_ok) == (None, None)
