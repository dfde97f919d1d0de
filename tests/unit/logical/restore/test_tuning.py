"""logical.restore.tuning: the bulk-load profile never shrinks a setting, values compare as the server prints them,
and on a real server (the suite's target sandbox, no restart) snapshot -> tune -> revert puts every value back and
forgets the snapshot, while a snapshot left by a crashed run is kept as the production values."""
from __future__ import annotations

import dataclasses

import pytest

from lastline.core.errors import PreflightError
from lastline.logical.restore import tuning
from lastline.logical.restore.tuning import GIB, REQUIRED, dynamic_profile

LOW = {"innodb_io_capacity_max": "200", "innodb_io_capacity": "100", "innodb_log_file_size": str(96 << 20),
       "innodb_buffer_pool_size": str(128 << 20)}
HIGH = {"innodb_io_capacity_max": "20000", "innodb_io_capacity": "10000", "innodb_log_file_size": str(8 * GIB),
        "innodb_buffer_pool_size": str(64 * GIB)}


@pytest.mark.parametrize(("current", "redo", "pool", "expected"), [
    (LOW, 1 * GIB, 2 * GIB, {"innodb_io_capacity_max": "4000", "innodb_io_capacity": "2000",
                             "innodb_log_file_size": str(GIB), "innodb_buffer_pool_size": str(2 * GIB)}),
    (HIGH, 1 * GIB, 2 * GIB, HIGH),
    (LOW, 0, None, {"innodb_io_capacity_max": "4000", "innodb_io_capacity": "2000",
                    "innodb_log_file_size": str(96 << 20)}),
    ({}, 1 * GIB, None, {"innodb_io_capacity_max": "4000", "innodb_io_capacity": "2000"}),
], ids=["raises-low-values", "never-shrinks-high-values", "no-sizes-asked", "variables-the-server-lacks-stay-out"])
def test_dynamic_profile(current, redo, pool, expected):
    want = dynamic_profile(current, redo, pool)
    assert {k: want.get(k) for k in expected} == expected
    assert set(want) - set(expected) == {"read_only", "innodb_flush_log_at_trx_commit", "innodb_adaptive_hash_index",
                                         "max_allowed_packet", "sync_binlog", *REQUIRED}
    assert want["read_only"] == "ON" and want["max_allowed_packet"] == str(GIB) and set(want) <= set(tuning.TUNED_VARIABLES)


@pytest.mark.parametrize(("a", "b", "same"), [
    ("1", "ON", True), (0, "OFF", True), ("on", "ON", True), ("2", "ON", False), ("4000", 4000, True),
    (None, "OFF", False), ("", "OFF", False)],
    ids=["one-is-on", "zero-is-off", "any-case", "two-is-no-switch", "number-as-text", "unknown-value", "empty"])
def test_values_compare_as_the_server_prints_them(a, b, same):
    assert (tuning._normal(a) == tuning._normal(b)) is same


# --- on a real server ------------------------------------------------------------------------------------------------
def test_snapshot_tune_revert_puts_every_value_back(target):
    server = target.server()
    assert tuning.read_snapshot(server) is None or tuning.revert(server)  # a failed earlier run's snapshot goes first
    before = server.variables(*tuning.TUNED_VARIABLES)
    snap = tuning.take_snapshot(server, "unit-run", "2026-11-28T00:00:00Z")
    try:
        assert not snap.inherited and not snap.restart_profile
        assert {k: snap.variables[k] for k in before} == before
        tuned = tuning.apply(server, snap, restart_allowed=False, redo_bytes=0)
        assert not tuned.restarted and tuned.applied.get("read_only") == "ON"
        assert tuning.config_differs(server, snap.variables).keys() == tuned.applied.keys()
        # a second run finds the snapshot a crashed run would have left: it keeps it (the production values)
        again = tuning.take_snapshot(server, "unit-run-2", "2026-11-28T01:00:00Z")
        assert again.inherited and again.variables == snap.variables and again.run_id == "unit-run"
    finally:
        reverted = tuning.revert(server)
    assert reverted.reverted.keys() == tuned.applied.keys()
    assert tuning.config_differs(server, snap.variables) == {}
    assert tuning.read_snapshot(server) is None
    assert tuning.revert(server).reverted == {}  # nothing recorded: nothing to put back


def test_restart_allowed_needs_a_config_dir(target):
    server = dataclasses.replace(target.server(), config_dir=None)
    with pytest.raises(PreflightError, match="needs a config_dir extra"):
        tuning.apply(server, tuning.ConfigSnapshot({}, False, "", ""), restart_allowed=True, redo_bytes=0)
    assert tuning.drop_in_path(server) is None
    assert tuning.drop_in_path(dataclasses.replace(server, config_dir="/etc/my.cnf.d/")) == "/etc/my.cnf.d/" + tuning.DROP_IN
