"""A target's datadir (lastline.mariabackup.target_datadir): what its checks ask the host and refuse, on a fake host."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

import pytest

from lastline.core.errors import IntegrityError
from lastline.mariabackup import prepare_options, target_datadir
from lastline.mariabackup.target_datadir import StepResult


@dataclass
class FakeHost:
    """A Host that answers every command with `stdout` (and `returncode`) and keeps what it was asked."""

    stdout: bytes = b""
    returncode: int = 0
    name: str = "fake"
    calls: list[tuple[list[str], bytes | None]] = field(default_factory=list)

    def run(self, argv: list[str], *, check: bool = True, input: bytes | None = None, **_: object) -> subprocess.CompletedProcess:
        self.calls.append((argv, input))
        return subprocess.CompletedProcess(argv, self.returncode, self.stdout, b"")


@pytest.mark.parametrize("found, refused", [
    (b"", False),
    (b"master.info\nrelay-log.info\n", True),
    (b"mariadb-bin.index\n", True),
    (b"ddl_recovery.log\n", True),
], ids=["clean", "replication state", "binlog index", "ddl log"])
def test_refuse_server_state(found, refused):
    host = FakeHost(stdout=found)
    if refused:
        with pytest.raises(IntegrityError, match=found.split()[0].decode()):
            target_datadir.refuse_server_state(host, "/d", ["sudo", "-u", "mysql"], "backup x")
    else:
        target_datadir.refuse_server_state(host, "/d", [], "backup x")
    assert host.calls[0][0][-2:] == ["lastline", "/d"]


def test_remove_links_returns_what_it_removed():
    host = FakeHost(stdout=b"./db/t1.isl\n./db/t2.isl\n")
    assert target_datadir.remove_links(host, "/d", []) == ["./db/t1.isl", "./db/t2.isl"]


@pytest.mark.parametrize("stdout, returncode, ok", [
    (b"[mysqld]\ninnodb_page_size=16384\n", 0, True),
    (b"", 3, False),
    (b"x" * (prepare_options.MAX_CNF_BYTES + 1), 0, False),
], ids=["plain file", "missing or a link", "too big"])
def test_backup_cnf_reads_a_plain_file_within_its_cap(stdout, returncode, ok):
    host = FakeHost(stdout=stdout, returncode=returncode)
    if ok:
        assert target_datadir._backup_cnf(host, "/d", [], "backup x") == stdout.decode()
    else:
        with pytest.raises(IntegrityError, match="not a plain file"):
            target_datadir._backup_cnf(host, "/d", [], "backup x")


def test_write_prepare_cnf_writes_the_rendered_options():
    host = FakeHost()
    options = {"innodb_data_file_path": "ibdata1:12M:autoextend", "innodb_log_file_size": "100663296",
               "innodb_page_size": "16384"}
    target_datadir.write_prepare_cnf(host, "/d", options, ["runas"])
    argv, written = host.calls[0]
    assert argv[0] == "runas" and argv[-1] == prepare_options.CNF
    assert written == prepare_options.render(options).encode()


def test_step_result_crosses_xcom_whole():
    step = StepResult(1.5, 10, 2.0, "/d.lastline-aside-x")
    assert StepResult.of(step.to_dict()) == step
