"""core.impact: how much of the source's host a backup may take: the nice/ionice words of a priority (never idle for
the process holding the backup locks), the tools that needs, and the read cap checked and shared among workers."""
from __future__ import annotations

import subprocess

import pytest

from lastline.core.errors import PreflightError
from lastline.core.impact import prefix, pv_argv, read_cap, tools, worker_share


@pytest.mark.parametrize(("priority", "cpu", "words"), [
    ("normal", True, []), ("normal", False, []),
    ("low", True, ["nice", "-n", "10", "ionice", "-t", "-c", "2", "-n", "7"]),
    ("low", False, ["ionice", "-t", "-c", "2", "-n", "7"]),
    ("idle", True, ["nice", "-n", "19", "ionice", "-t", "-c", "3"]),
    ("idle", False, ["ionice", "-t", "-c", "2", "-n", "7"]),
], ids=["normal", "normal-io-only", "low", "low-io-only", "idle", "idle-lock-holder-is-best-effort"])
def test_prefix(priority, cpu, words):
    assert prefix(priority, cpu) == words


@pytest.mark.parametrize("priority", ["low", "idle"], ids=["low", "idle"])
def test_the_prefix_runs_a_command(priority):
    assert subprocess.run([*prefix(priority), "echo", "ran"], capture_output=True, check=True).stdout == b"ran\n"


def test_an_unknown_priority_is_refused():
    with pytest.raises(PreflightError, match="priority 'high': use one of normal, low, idle"):
        prefix("high")


@pytest.mark.parametrize(("priority", "cap", "pv", "needed"), [
    ("normal", 0, True, []), ("low", 0, True, ["nice", "ionice"]), ("normal", 50, True, ["pv"]),
    ("idle", 50, False, ["nice", "ionice"]),
], ids=["nothing", "low", "capped", "capped-without-pv"])
def test_tools(priority, cap, pv, needed):
    assert tools(priority, cap, pv) == needed


@pytest.mark.parametrize(("value", "ok"), [(0, True), (0.1, True), (100_000, True), (0.09, False), (100_001, False), (-1, False)],
                         ids=["no-cap", "lowest", "highest", "under", "over", "negative"])
def test_read_cap(value, ok):
    if ok:
        assert read_cap(value) == value
    else:
        with pytest.raises(PreflightError, match="use 0 \\(no cap\\) or 0.1 to 100000 MB/s"):
            read_cap(value)


@pytest.mark.parametrize(("cap", "workers", "share"), [(0, 4, 0), (8, 4, 2_000_000), (8, 0, 8_000_000), (0.1, 1_000_000, 1)],
                         ids=["no-cap", "four-workers", "zero-workers-is-one", "at-least-a-byte"])
def test_worker_share(cap, workers, share):
    assert worker_share(cap, workers) == share


def test_pv_argv_caps_in_bytes_per_second():
    assert pv_argv(1.5) == ["pv", "-q", "-L", "1500000"]
