"""A target's datadir (lastline.mariabackup.target_datadir): the checks an extracted backup passes before prepare, run
by their real shell scripts on this host, on a real folder; the server-facing functions are the e2e tests' share
(tests/e2e/physical_restore/test_physical_e2e.py, tests/e2e/physical_restore/test_trust_physical.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from lastline.core.errors import IntegrityError
from lastline.core.hosts import LOCAL
from lastline.mariabackup import prepare_options, target_datadir
from lastline.mariabackup.target_datadir import StepResult


@pytest.mark.parametrize("files, refused", [
    ([], None),
    (["master.info", "relay-log.info"], "master.info"),
    (["mariadb-bin.index"], "mariadb-bin.index"),
    (["ddl_recovery.log"], "ddl_recovery.log"),
    (["master-east.info"], "master-east.info"),
    (["tc.log"], "tc.log"),
], ids=["clean", "replication state", "binlog index", "ddl log", "a named connection's state", "xa recovery log"])
def test_refuse_server_state(tmp_path: Path, files: list[str], refused: str | None):
    (tmp_path / "db").mkdir()
    (tmp_path / "ibdata1").write_bytes(b"")
    for name in files:
        (tmp_path / name).write_text("x")
    if refused:
        with pytest.raises(IntegrityError, match=refused):
            target_datadir.refuse_server_state(LOCAL, str(tmp_path), [], "backup x")
    else:
        target_datadir.refuse_server_state(LOCAL, str(tmp_path), [], "backup x")


def test_a_state_file_that_is_a_dangling_link_is_refused_too(tmp_path: Path):
    os.symlink("/nonexistent/primary", tmp_path / "master.info")
    with pytest.raises(IntegrityError, match="master.info"):
        target_datadir.refuse_server_state(LOCAL, str(tmp_path), [], "backup x")


def test_remove_links_removes_every_isl_file_and_returns_them(tmp_path: Path):
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "t1.isl").write_text("/elsewhere/t1.ibd")
    (tmp_path / "db" / "t2.isl").write_text("/elsewhere/t2.ibd")
    (tmp_path / "db" / "t3.ibd").write_bytes(b"data")
    removed = target_datadir.remove_links(LOCAL, str(tmp_path), [])
    assert sorted(removed) == ["./db/t1.isl", "./db/t2.isl"]
    assert sorted(p.name for p in (tmp_path / "db").iterdir()) == ["t3.ibd"]


def _plain(d: Path, size: int) -> None:
    (d / prepare_options.CNF).write_text("[mysqld]\n" + "#" * max(0, size - 9))


def _link(d: Path, size: int) -> None:
    target = d.parent / "elsewhere.cnf"
    target.write_text("[mysqld]\n")
    os.symlink(target, d / prepare_options.CNF)


def _folder(d: Path, size: int) -> None:
    (d / prepare_options.CNF).mkdir()


@pytest.mark.parametrize("make, size, ok", [
    (_plain, 300, True),
    (_plain, prepare_options.MAX_CNF_BYTES, True),
    (_plain, prepare_options.MAX_CNF_BYTES + 1, False),
    (None, 0, False),
    (_link, 0, False),
    (_folder, 0, False),
], ids=["plain file", "at its cap", "one byte over", "missing", "a symlink", "a folder"])
def test_backup_cnf_is_read_only_from_a_plain_file_within_its_cap(tmp_path: Path, make, size: int, ok: bool):
    datadir = tmp_path / "datadir"
    datadir.mkdir()
    if make:
        make(datadir, size)
    if ok:
        assert target_datadir._backup_cnf(LOCAL, str(datadir), [], "backup x") == (datadir / prepare_options.CNF).read_text()
    else:
        with pytest.raises(IntegrityError, match="not a plain file"):
            target_datadir._backup_cnf(LOCAL, str(datadir), [], "backup x")


@pytest.mark.parametrize("before", ["a plain file", "a symlink", "a folder"])
def test_write_prepare_cnf_replaces_what_the_backup_brought_with_the_rendered_options(tmp_path: Path, before: str):
    datadir, outside = tmp_path / "datadir", tmp_path / "outside.cnf"
    datadir.mkdir()
    outside.write_text("[mysqld]\nplugin_load_add=evil\n")
    cnf = datadir / prepare_options.CNF
    if before == "a plain file":
        cnf.write_text("[mysqld]\nplugin_load_add=evil\n")
    elif before == "a symlink":
        os.symlink(outside, cnf)
    else:
        (cnf / "sub").mkdir(parents=True)
    options = {"innodb_data_file_path": "ibdata1:12M:autoextend", "innodb_log_file_size": "100663296",
               "innodb_page_size": "16384"}
    target_datadir.write_prepare_cnf(LOCAL, str(datadir), options, [])
    assert cnf.is_file() and not cnf.is_symlink()
    assert cnf.read_text() == prepare_options.render(options)
    assert outside.read_text() == "[mysqld]\nplugin_load_add=evil\n"  # never written through the link


def test_step_result_crosses_xcom_whole():
    step = StepResult(1.5, 10, 2.0, "/d.lastline-aside-x")
    assert StepResult.of(step.to_dict()) == step
