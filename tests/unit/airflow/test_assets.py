"""airflow.assets: what Airflow records of a destination (its newest backup of each kind, the binlog archive's head)
is kept in a Variable named after the destination's canonical place, so another spelling of the same folder finds
the same record and a record of another place is never read as this one's. The Variables are given as a deployment
gives them, in the environment (AIRFLOW_VAR_*)."""
from __future__ import annotations

import json

import pytest

from lastline.airflow.assets import (
    head_variable,
    newest_variable,
    record_archive_head,
    record_newest,
    recorded_archive_head,
    recorded_newest,
)
from lastline.storage import canonical


@pytest.fixture
def place(tmp_path, monkeypatch) -> str:
    """A destination this deployment allows, by its canonical name."""
    monkeypatch.setenv("LASTLINE_BACKUP_ROOTS", f"file://{tmp_path}")
    return canonical(f"file://{tmp_path}/dest")


def variable(monkeypatch, name: str, value) -> None:
    monkeypatch.setenv(f"AIRFLOW_VAR_{name.upper()}", value if isinstance(value, str) else json.dumps(value))


def test_another_spelling_of_a_destination_finds_the_same_variable(tmp_path, place):
    spellings = [f"file://{tmp_path}/dest", f"file://{tmp_path}/dest/", f"file://{tmp_path}//dest"]
    assert len({head_variable(s) for s in spellings}) == 1
    assert head_variable(f"file://{tmp_path}/other") != head_variable(spellings[0])
    assert head_variable(spellings[0]).startswith("lastline_archive_head_")


def test_each_kind_has_its_own_newest(place):
    assert newest_variable(place, "logical") != newest_variable(place, "physical")
    assert newest_variable(place, "logical").startswith("lastline_newest_logical_")


@pytest.mark.parametrize(("stored", "found"), [
    (None, None),
    ({"backup_id": "b2", "manifest_sha256": "ab"}, {"backup_id": "b2", "manifest_sha256": "ab"}),
    ({"backup_id": "b2", "destination": "file:///elsewhere"}, None),
    ("[1, 2]", None),
    ("", None),
], ids=["nothing-recorded", "recorded", "recorded-for-another-place", "not-an-object", "empty"])
def test_recorded_newest(monkeypatch, place, stored, found):
    if stored is not None:
        if isinstance(stored, dict) and "destination" not in stored:
            stored = {**stored, "destination": place}
        variable(monkeypatch, newest_variable(place, "logical"), stored)
    recorded = recorded_newest(place, "logical")
    assert recorded == (None if found is None else {**found, "destination": place})
    assert recorded_newest(place, "physical") is None


def test_an_older_backup_never_replaces_a_newer_record(monkeypatch, tmp_path, place):
    newer = {"backup_id": "20261128T161432Z-7c93b6", "manifest_sha256": "ab", "destination": place}
    variable(monkeypatch, newest_variable(place, "physical"), newer)
    record_newest(f"file://{tmp_path}/dest/", "physical", "20261127T161432Z-000000", "cd")  # nothing to write
    assert recorded_newest(place, "physical") == newer


def test_the_archive_head_is_read_back_by_any_spelling(monkeypatch, tmp_path, place):
    head = {"branch": "b1", "file": "bin.000007", "bytes": 1024, "destination": place}
    variable(monkeypatch, head_variable(place), head)
    assert recorded_archive_head(f"file://{tmp_path}/dest/") == head
    assert recorded_archive_head(f"file://{tmp_path}/other") is None
    record_archive_head(place, None)  # an empty archive: nothing recorded, nothing asked of Airflow
    assert recorded_archive_head(place) == head


def test_a_rotation_pins_the_new_sha256_of_the_recorded_newest_backup_only(monkeypatch, tmp_path, place):
    from lastline.airflow import assets

    newest = {"backup_id": "20261128T161432Z-7c93b6", "manifest_sha256": "ab", "destination": place}
    variable(monkeypatch, newest_variable(place, "logical"), newest)
    written = []
    monkeypatch.setattr(assets, "_record", lambda what, where, value, _: written.append((what, where, value)))
    pin = assets.newest_pin(f"file://{tmp_path}/dest/")  # another spelling of the same place
    assert not pin("logical", "20261127T161432Z-000000", "cd")  # an older backup: its pin is not the record
    assert not pin("physical", newest["backup_id"], "cd")  # nothing recorded of that kind
    assert not pin("logical", newest["backup_id"], "ab") and written == []  # already pinned (a re-run)
    assert pin("logical", newest["backup_id"], "cd")
    assert written == [("newest_logical", place, {"backup_id": newest["backup_id"], "manifest_sha256": "cd"})]
