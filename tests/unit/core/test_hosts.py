"""core.hosts: a stage as a shell line, the group script a remote shell runs (each stage's status and stderr read back),
private files that leave nothing on disk, and the missing tools named. Run here (LocalHost); an SSH host is tested in
tests/e2e/test_ssh.py."""
from __future__ import annotations

import os
import subprocess

import pytest

from lastline.core.errors import LastlineError, PipelineError, PreflightError
from lastline.core.hosts import LOCAL, Stage, anonymous_file, group_script, memfd, require_tools, split_group_stderr


@pytest.mark.parametrize(("stage", "line"), [
    (Stage("a", ["cat"]), "exec cat"),
    (Stage("b", ["echo", "a b", "`x`", "it's"]), "exec echo 'a b' '`x`' 'it'\"'\"'s'"),
    (Stage("c", ["ls"], cwd="/tmp/a dir"), "cd '/tmp/a dir' && exec ls"),
], ids=["plain", "spaces-backticks-quote", "with-cwd"])
def test_shell_line(stage, line):
    assert stage.shell_line() == line


@pytest.mark.parametrize("argv", [["echo", "a b"], ["printf", "%s|", "`x`", "$HOME", "it's"]],
                         ids=["spaces", "backticks-dollar-quote"])
def test_the_shell_line_runs_the_argv_as_given(argv):
    out = subprocess.run(["bash", "-c", Stage("x", argv).shell_line()], capture_output=True, check=True).stdout
    assert out == subprocess.run(argv, capture_output=True, check=True).stdout


@pytest.mark.parametrize(("stages", "statuses", "exit_code"), [
    ([Stage("one", ["sh", "-c", "echo err1 >&2; cat"])], {0: (0, "err1")}, 0),
    ([Stage("up", ["sh", "-c", "echo up >&2; echo data"]), Stage("down", ["sh", "-c", "cat >/dev/null; echo bad >&2; exit 5"])],
     {0: (0, "up"), 1: (5, "bad")}, 5),
    ([Stage("a", ["true"]), Stage("b", ["true"]), Stage("c", ["true"])], {0: (0, ""), 1: (0, ""), 2: (0, "")}, 0),
], ids=["one-stage", "second-fails", "three-silent"])
def test_group_script_reports_each_stage(stages, statuses, exit_code):
    proc = subprocess.run(["bash", "-c", group_script(stages)], input=b"", capture_output=True)
    own, found = split_group_stderr(proc.stderr.decode())
    assert proc.returncode == exit_code
    assert found == statuses and own.strip() == ""


@pytest.mark.parametrize(("text", "own", "found"), [
    ("", "", {}),
    ("Connection reset", "Connection reset", {}),
    ("warning\n@@lastline-stage 0 0\n\n@@lastline-stage 1 2\nboom\n", "warning\n", {0: (0, ""), 1: (2, "boom")}),
], ids=["empty", "ssh-only", "ssh-warning-then-stages"])
def test_split_group_stderr(text, own, found):
    assert split_group_stderr(text) == (own, found)


@pytest.mark.parametrize("text", ["", "[client]\npassword=p`a s.s\n", "x" * (1 << 20)], ids=["empty", "secret", "one-mib"])
def test_a_private_file_is_readable_by_path_and_named_nowhere(text):
    with anonymous_file(text) as path:
        assert path.startswith(f"/proc/{os.getpid()}/fd/")
        assert open(path).read() == text
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        fd = int(path.rsplit("/", 1)[1])
    with pytest.raises(OSError):
        os.fstat(fd)  # closed: gone with the block


def test_local_private_file_is_read_by_a_child():
    with LOCAL.private_file("secret") as path:
        assert LOCAL.sh('cat "$1"', path) == "secret"


def test_memfd_holds_the_text():
    fd = memfd("abc", "t")
    try:
        assert os.pread(fd, 10, 0) == b"abc"
    finally:
        os.close(fd)


def test_local_run_and_sh():
    assert LOCAL.sh('printf "%s-%s" "$1" "$2"', "a b", "`c`") == "a b-`c`"
    assert LOCAL.run(["cat"], input=b"in").stdout == b"in"
    assert LOCAL.run(["false"], check=False).returncode == 1
    with pytest.raises(PipelineError, match="`sh -c 'echo no >&2; exit 3'` exited with status 3:\nno"):
        LOCAL.run(["sh", "-c", "echo no >&2; exit 3"])
    with pytest.raises(PipelineError, match="did not finish within 0.05 s"):
        LOCAL.run(["sleep", "5"], timeout=0.05)
    with pytest.raises(PipelineError, match="command 'no-such-tool-lastline' not found"):
        LOCAL.run(["no-such-tool-lastline"])


def test_a_local_host_runs_one_stage_per_process():
    with pytest.raises(LastlineError, match="runs one stage per process, got 2"):
        LOCAL.start([Stage("a", ["true"]), Stage("b", ["true"])], None, None, None)
    assert not LOCAL.groups_stages()


def test_require_tools_names_every_missing_command():
    require_tools("sh", None, "cat")
    with pytest.raises(PreflightError, match="missing commands: no-such-a-lastline, no-such-b-lastline; run `make setup`"):
        require_tools("sh", "no-such-a-lastline", "no-such-b-lastline")
