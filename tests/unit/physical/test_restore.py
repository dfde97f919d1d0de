"""The physical restore's stages (lastline.physical.restore) on the suite's shared sandboxes with the real mariabackup: a
backup of the source made once by physical.backup, then what preflight refuses (each refusal named, the target left
running) and what it plans, one real pass into the target (stop, extract, a retried extract, prepare, start, verify,
report) whose data ends the source's, what verify names in a manifest the restored server does not match and what it
does with the old datadir kept aside, and the pure parts: a row count's plausibility and the report's words."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import set_conn
from lastline.backups import BackupRef
from lastline.core.datadir import MARKER
from lastline.core.errors import ConfigError, IntegrityError, PreflightError, ProtectedTargetError
from lastline.mariabackup.target_datadir import StepResult
from lastline.physical import backup as pb
from lastline.physical import restore as pr
from lastline.physical.plans import RestorePlan, Verified
from lastline.storage import control, open_storage
from lastline_dev.compare import compare


@pytest.fixture(scope="module")
def good(source, tmp_path_factory) -> Path:
    """One complete backup of the source (its folder), made by the backup's stage functions."""
    dest = tmp_path_factory.mktemp("pr")
    plan = pb.preflight({"source_conn_id": "t_source", "destination": f"file://{dest}", "compression": "zstd"})
    pb.finish(plan, pb.stream(plan))
    return dest / plan.backup_id


def _copy(good: Path, tmp_path: Path, change=None) -> Path:
    """A copy of the backup; `change(manifest)` edits its manifest, signed again with the deployment's key (as lastline
    would have written it: what the restore checks after the MAC)."""
    folder = tmp_path / "dest" / good.name
    shutil.copytree(good, folder)
    if change:
        manifest = json.loads((folder / "manifest.json").read_text())
        change(manifest)
        manifest.pop("mac", None)
        control.write(open_storage(folder.parent.as_uri()), f"{good.name}/manifest.json", json.dumps(manifest))
    return folder


def _conf(backup: Path | str, **kw) -> dict:
    return {"target_conn_id": "t_target", "backup": backup if isinstance(backup, str) else backup.as_uri(), **kw}


@pytest.mark.parametrize("plausible, actual, estimate", [
    (True, 0, 0), (True, 1000, 0), (False, 1001, 0),
    (True, 16_000, 10_000), (False, 16_001, 10_000), (True, 4_000, 10_000), (False, 3_999, 10_000),
    (True, 0, 1_000), (True, 10**9, 10**9),
], ids=["empty", "a thousand over nothing", "one past a thousand", "60% over", "past 60% over", "60% under",
        "past 60% under", "none of a small estimate", "a billion"])
def test_plausible(plausible, actual, estimate):
    assert pr.plausible(actual, estimate) is plausible


def _protected(source, target):
    set_conn("t_pr_prod", target, protected=True)
    return {"target_conn_id": "t_pr_prod"}


def _drill(source, target):
    set_conn("t_pr_drill", target, role="drill")
    return {"target_conn_id": "t_pr_drill"}


def _into_source(source, target):
    return {"target_conn_id": "t_source"}


def _no_force(source, target):
    return {"force": False}


def _none(source, target):
    return {}


@pytest.mark.parametrize("conf, change, damage, error, message", [
    (_none, None, "no manifest", IntegrityError, "no manifest.json: the backup is incomplete"),
    (_none, None, "no artifact", IntegrityError, "is missing although the manifest lists it"),
    (_none, None, "truncated", IntegrityError, "is truncated or was replaced"),
    (_none, lambda m: m.update(prepare_options={**m["prepare_options"], "plugin_load_add": "evil"}), None,
     IntegrityError, "prepare option 'plugin_load_add' is not one mariabackup --prepare needs"),
    (_none, lambda m: m.update(server_version="10.1.48-MariaDB"), None, PreflightError,
     "cannot back up or prepare MariaDB 10.1.48"),
    (_protected, None, None, ProtectedTargetError, "is marked protected"),
    (_drill, None, None, ProtectedTargetError, "only restore_drill writes into it"),
    (_into_source, None, None, ProtectedTargetError, "is the server this backup was taken from"),
    (_no_force, None, None, PreflightError, "is not empty, and no person is asked to approve replacing data"),
    (lambda s, t: {"parallel": 17}, None, None, PreflightError, "parallel=17 is harsher than the ceiling of 16"),
    (lambda s, t: {"target_conn_id": None}, None, None, ConfigError, "the Param target_conn_id is required"),
    (lambda s, t: {"backup": "file:///var/lib/not-a-root/x"}, None, None, ConfigError, "is outside the storage"),
], ids=["incomplete backup", "artifact missing", "artifact truncated", "a prepare option not allowed",
        "another server series", "protected target", "a drill server", "the backup's own source", "data without force",
        "parallel above the ceiling", "no target", "backup outside the roots"])
def test_preflight_refuses_and_leaves_the_target_running(good, source, target, tmp_path, conf, change, damage, error,
                                                          message):
    folder = _copy(good, tmp_path, change)
    manifest = json.loads((folder / "manifest.json").read_text())
    if damage == "no manifest":
        (folder / "manifest.json").unlink()
    elif damage == "no artifact":
        (folder / manifest["artifact"]).unlink()
    elif damage == "truncated":
        with open(folder / manifest["artifact"], "r+b") as fh:
            fh.truncate(manifest["bytes"] // 2)
    pid = target.pid()
    full = {k: v for k, v in {**_conf(folder, force=True), **conf(source, target)}.items() if v is not None}
    with pytest.raises(error, match=message):
        pr.preflight(full)
    assert target.pid() == pid and pid is not None
    assert not (Path(target.datadir) / MARKER).exists()


def test_preflight_plans_and_pins_the_manifest_it_read(good, target):
    plan = pr.preflight(_conf(good.parent.as_uri() + "/latest", force=True, use_memory="256M", parallel=3))
    assert plan.backup.backup_id == good.name  # latest, resolved
    assert plan.backup.manifest_sha256 == hashlib.sha256((good / "manifest.json").read_bytes()).hexdigest()
    manifest = json.loads((good / "manifest.json").read_text())
    assert (plan.target_conn_id, plan.datadir, plan.datadir_state, plan.force, plan.at_risk) == (
        "t_target", str(target.datadir), "data", True, None)
    assert (plan.bytes, plan.use_memory, plan.parallel) == (manifest["bytes"], 256 << 20, 3)
    assert plan.authenticity.startswith("authenticated (storage key ")
    assert RestorePlan.of(plan.to_dict()) == plan


def test_preflight_where_a_person_approves_lists_what_is_at_risk(good, target):
    """Without force, a target whose connection asks for approval is planned as forced (the approval stands for it)
    with what the restore would replace."""
    set_conn("t_pr_ask", target, approval=True)
    plan = pr.preflight({"target_conn_id": "t_pr_ask", "backup": good.as_uri()})
    assert plan.force and plan.at_risk
    assert (plan.at_risk["datadir"], plan.at_risk["force"], plan.at_risk["backup_id"]) == (str(target.datadir), False,
                                                                                             good.name)
    assert "t_pr_ask" in plan.at_risk["target"]


def test_restore_into_its_own_source_when_the_param_names_it_is_planned(good, source):
    """Preflight only (read-only): the Param restore_into_source names the connection, so it is not refused."""
    set_conn("t_pr_own", source)
    plan = pr.preflight({"target_conn_id": "t_pr_own", "backup": good.as_uri(), "force": True,
                         "restore_into_source": "t_pr_own"})
    assert (plan.target_conn_id, plan.datadir_state) == ("t_pr_own", "data")


@pytest.fixture(scope="module")
def restored(good, source, target):
    """One real restore of the backup into the target, step by step, with the re-runs a retried task makes on the way;
    returns (plan, each step's result). The target is shared with the rest of the suite: earlier restores may have left
    their own aside copies (a failed restore keeps the old datadir), and a failure here must not leave it stopped."""
    asides = f"{Path(target.datadir).name}.lastline-aside-*"
    before = set(Path(target.datadir).parent.glob(asides))
    try:
        return _restore_step_by_step(good, target, asides, before)
    except BaseException:
        if target.pid() is None:
            target.start()  # what the later tests need; the failure above says what went wrong
        raise


def _restore_step_by_step(good, target, asides: str, before: set):
    plan = pr.preflight(_conf(good, force=True, use_memory="128M"))
    with pytest.raises(PreflightError, match="holds no extracted backup"):
        pr.prepare(plan)  # before any extract: the running target's datadir is never prepared over
    stop = pr.stop_target(plan)
    assert target.pid() is None
    first = pr.extract(plan)
    assert first.aside and Path(first.aside).is_dir() and (Path(target.datadir) / MARKER).exists()
    with pytest.raises(IntegrityError, match="refusing to start"):
        pr.start_target(plan)  # extracted, not prepared: never started
    extracted = pr.extract(plan)  # a retried extract: clears its own partial datadir, keeps the first one's aside
    assert extracted.aside == first.aside and extracted.bytes == plan.bytes
    assert len(set(Path(target.datadir).parent.glob(asides)) - before) == 1
    prepared = pr.prepare(plan)
    assert not (Path(target.datadir) / MARKER).exists()
    started = pr.start_target(plan)
    assert target.pid() is not None
    return plan, {"stop": stop, "extract": extracted, "prepare": prepared, "start": started}


def test_a_real_restore_verifies_removes_what_it_moved_aside_and_holds_the_sources_data(restored, source, target):
    plan, steps = restored
    verified = pr.verify(plan, steps["extract"])
    assert not Path(steps["extract"].aside).exists()
    assert compare(source.server(), target.server()) == []
    manifest = json.loads((Path(plan.backup.url[len("file://"):]) / "manifest.json").read_text())
    assert verified.tables == len(manifest["tables"]) and verified.rows > 0
    assert verified.server_version == target.server().variables("version")["version"]
    with pytest.raises(PreflightError, match="holds no extracted backup"):
        pr.prepare(plan)  # a re-run of prepare after the restore finished touches nothing


def _implausible(m):
    big = max(m["tables"], key=lambda t: t["rows"])
    big["rows"] = big["rows"] * 10 + 5000


def _missing(m):
    m["tables"].insert(0, {"schema": "store", "name": "no such `table`.x", "engine": "InnoDB", "rows": 0, "bytes": 0})


def _memory(m):
    (film,) = [t for t in m["tables"] if (t["schema"], t["name"]) == ("store", "film")]
    film.update(engine="MEMORY", rows=10**6)  # listed as MEMORY: its count is never held to the estimate


def _both(m):
    _implausible(m)
    _missing(m)


def _series(m):
    m["server_version"] = "10.1.48-MariaDB"


@pytest.mark.parametrize("change, problems", [
    (_implausible, [r"rows, the backup estimated \d+"]),
    (_missing, [r"`store`.`no such ``table``.x`: .*doesn't exist"]),
    (_both,
     [r"`store`.`no such ``table``.x`: ", r"rows, the backup estimated"]),
    (_series, [r"target runs \S+, the backup is of 10.1.48-MariaDB"]),
    (_memory, []),
], ids=["a count far from its estimate", "a table not there (its name quoted)", "both, in the manifest's order",
        "another server series", "a MEMORY table back empty"])
def test_verify_names_each_problem_and_keeps_the_old_datadir_only_while_it_fails(restored, tmp_path, caplog, change,
                                                                                  problems):
    plan, _steps = restored
    folder = _copy(Path(plan.backup.url[len("file://"):]), tmp_path, change)
    changed = dataclasses.replace(plan, backup=BackupRef.parse(folder.as_uri(), "physical"))
    aside = tmp_path / "data.lastline-aside-20990101T000000Z"
    (aside / "db").mkdir(parents=True)
    extracted = StepResult(1.0, 1, 1.0, str(aside))
    if not problems:
        with caplog.at_level("WARNING"):
            assert pr.verify(changed, extracted).tables == len(json.loads((folder / "manifest.json").read_text())["tables"])
        assert "1 MEMORY table(s) came back empty" in caplog.text and "`store`.`film` (1000000 rows" in caplog.text
        assert not aside.exists()  # verified: the old datadir contents go
        return
    with pytest.raises(IntegrityError) as err:
        pr.verify(changed, extracted)
    text = str(err.value)
    if len(problems) > 1:
        lines = text.splitlines()[1:-1]
        assert len(lines) == len(problems) and all(re.search(p, line) for p, line in zip(problems, lines))
    else:
        assert re.search(problems[0], text), text
    assert aside.is_dir()  # kept: the failed restore's old data stays where the message says
    if not problems[0].startswith("target runs"):  # the tables' problems name where the old data is
        assert f"previous contents are kept in {aside}" in text


def test_report_says_what_the_restore_proved_and_saves_it(restored, tmp_path, monkeypatch):
    monkeypatch.setenv("LASTLINE_REPORT_DIR", str(tmp_path / "reports"))
    monkeypatch.delenv("LASTLINE_REPORTS", raising=False)
    plan, steps = restored
    verified = Verified(tables=12, rows=34_567, server_version="11.4.2-MariaDB", seconds=0.5)
    out = pr.report(plan, steps["stop"], steps["extract"], steps["prepare"], steps["start"], verified,
                    run_id="manual__unit")
    assert out.verification == pr.verification(verified, plan)
    total = sum(s.seconds for s in steps.values()) + verified.seconds
    assert out.seconds == pytest.approx(total, abs=0.01)
    folder = tmp_path / "reports" / "physical_restore" / "manual__unit"
    summary = (folder / "summary.md").read_text().splitlines()
    assert summary[0].startswith(f"# Physical restore of {plan.backup.url} into t_target: verified, 12 tables, ")
    assert summary[2] == f"**{out.verification}**"
    saved = json.loads((folder / "physical_restore.json").read_text())
    assert list(saved["steps"]) == ["stop", "extract", "prepare", "start", "verify"] and saved["target"] == "t_target"
    assert (folder / "physical_restore.svg").read_text().startswith("<svg")
    assert pr.report(plan, steps["stop"], steps["extract"], steps["prepare"], steps["start"], verified).seconds == out.seconds


@pytest.mark.parametrize("authenticity, said", [
    ("authenticated (storage key k1)", "Its manifest was authenticated (storage key k1)."),
    ("", "Its manifest was not checked for authenticity."),
], ids=["authenticated", "not checked"])
def test_verification_in_words(authenticity, said):
    plan = RestorePlan(target_conn_id="t", backup=BackupRef.parse("file:///b/20990101T000000Z", "physical"),
                       bytes=1_234_567, authenticity=authenticity)
    text = pr.verification(Verified(tables=1_200, rows=3_456_789, server_version="11.4.2-MariaDB", seconds=1.0), plan)
    assert text.startswith("Verified: the backup's 1,234,567 bytes matched the sha256 its manifest records")
    assert "the server started (11.4.2-MariaDB) and all 1,200 tables of the backup answer, 3,456,789 rows" in text
    assert text.endswith(said)


def test_the_artifact_as_stored_is_counted_and_hashed_as_it_passes():
    counted = pr._Counted(iter([b"ab", b"", b"cde"]))
    assert b"".join(counted) == b"abcde"
    assert (counted.bytes, counted.digest.hexdigest()) == (5, hashlib.sha256(b"abcde").hexdigest())
