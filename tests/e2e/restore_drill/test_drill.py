"""restore_drill: a backup of each kind restored into a scratch server, verified, its RTO and MB/s in a
history the report charts; a failed drill or one over its budget alerts; only a drill server is accepted."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from lastline import reports
from lastline.core.errors import ProtectedTargetError
from lastline_dev.compare import compare
from lastline_dev.sandbox import Instance

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def drill_server(sandbox_root):
    """A scratch server marked as a drill server (`t_drill`), and the same server unmarked (`t_nodrill`)."""
    from conftest import set_conn

    inst = Instance(sandbox_root, "drill")
    inst.create()
    set_conn("t_drill", inst, role="drill")
    set_conn("t_nodrill", inst)
    yield inst
    inst.destroy()


@pytest.fixture(scope="module")
def both_backups(source, tmp_path_factory) -> Path:
    """A physical and a logical backup of the source, side by side in one destination."""
    from lastline.logical.backup import stages as logical_backup
    from lastline.physical import backup as pb

    dest = tmp_path_factory.mktemp("drills")
    plan = pb.preflight({"source_conn_id": "t_source", "destination": f"file://{dest}"})
    pb.finish(plan, pb.stream(plan))
    logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_source", "destination": f"file://{dest}", "databases": ["store", "bulk"]}))
    return dest


def _conf(dest: Path, kind: str, **kw) -> dict:
    return {"drill_conn_id": "t_drill", "backup": f"file://{dest}/latest", "kind": kind, "rto_budget_minutes": 60,
            "parallel": 2, "aws_conn_id": None, **kw}


def _history() -> list[dict]:
    return reports.history("restore_drill")


def test_a_drill_of_each_kind_restores_verifies_and_records_its_rto(run_dag, both_backups, drill_server, source, webhook):
    before = len(_history())
    for kind in ("logical", "physical"):
        state, tis, logs = run_dag("restore_drill", _conf(both_backups, kind))
        assert state == "success", (kind, tis, logs[-3000:])
        skipped = "physical" if kind == "logical" else "logical"
        assert tis[f"{kind}.verify"] == "success" and tis[f"{skipped}.preflight"] == "skipped", tis
        assert tis[f"{kind}.approve"] == "skipped", tis  # a drill server asks no person: preflight skipped it, no task ran
        if kind == "physical":  # the whole datadir: every table equal
            assert compare(source.server(), drill_server.server()) == []
        else:
            assert "verify ok" in logs
    history = _history()[before:]
    assert [(h["kind"], h["ok"], h["within_budget"]) for h in history] == [("logical", True, True), ("physical", True, True)]
    assert all(h["rto_seconds"] > 0 and h["mb_per_s"] > 0 for h in history)
    run = history[-1]["run_id"]
    chart = reports.read("restore_drill", run, "restore_drill.svg").decode()
    assert chart.startswith("<svg") and "time to restore per backup" in chart and history[0]["backup_id"] in chart
    assert json.loads(reports.read("restore_drill", run, "restore_drill.json"))["history"][-2:] == history
    assert not webhook.received  # good drills within budget: no alert
    assert reports.names("restore_drill", run)[0] == "restore_drill.md"  # the drill's verdict opens its report
    page = reports.read("restore_drill", run, "restore_drill.md").decode().splitlines()
    assert page[0] == (f"# Restore drill of physical backup {history[-1]['backup_id']} into t_drill: verified, RTO "
                       f"{history[-1]['rto_seconds']:,.1f} s, within the budget of 3,600 s "
                       f"({100 * history[-1]['rto_seconds'] / 3600:,.0f}%)"), page[:3]
    assert page[2].startswith("**Restored and verified as every restore is (") and " tables, " in page[2]


def _page(run_id: str) -> list[str]:
    return reports.read("restore_drill", run_id, "restore_drill.md").decode().splitlines()


def test_a_drill_over_its_budget_alerts_and_a_failed_drill_fails_and_alerts(run_dag, both_backups, drill_server, webhook, tmp_path):
    state, tis, _ = run_dag("restore_drill", _conf(both_backups, "logical", rto_budget_minutes=0.001))
    assert state == "success"  # restored and verified: a good backup, but slow
    assert "over the RTO budget" in webhook.wait_for("rto_exceeded", timeout=5)["text"]
    slow = _history()[-1]
    assert re.fullmatch(r"# Restore drill of logical backup \S+ into t_drill: verified, but RTO [0-9.,]+ s, OVER the "
                        r"budget of 0.06 s \([0-9,]+%\)", _page(slow["run_id"])[0]), _page(slow["run_id"])[:3]

    broken = tmp_path / "broken"
    shutil.copytree(both_backups, broken)
    (backup,) = [p for p in broken.iterdir() if (p / "schema.json").exists()]
    chunk = next((backup / "data").rglob("*.tsv.zst"))
    chunk.write_bytes(chunk.read_bytes()[:-5])  # truncated: the manifest's size and sha256 no longer fit
    state, tis, logs = run_dag("restore_drill", _conf(broken, "logical"))
    assert state == "failed" and tis["record"] == "failed", tis
    alert = webhook.wait_for("drill_failed", timeout=5)
    assert backup.name in alert["text"] and alert["ok"] is False
    assert _history()[-1]["backup_id"] == backup.name and _history()[-1]["ok"] is False
    assert _page(_history()[-1]["run_id"])[0].startswith(f"# Restore drill of logical backup {backup.name} into t_drill: "
                                                         "FAILED after ")


def test_only_a_drill_server_is_accepted(run_dag, both_backups, drill_server):
    from lastline import drill

    with pytest.raises(ProtectedTargetError, match=r"not marked as a drill server .*\"role\": \"drill\""):
        drill.preflight(_conf(both_backups, "logical", drill_conn_id="t_nodrill"))
    state, tis, _ = run_dag("restore_drill", _conf(both_backups, "logical", drill_conn_id="t_nodrill"))
    assert state == "failed" and tis["preflight"] == "failed" and tis["logical.preflight"] != "success"
