"""The SSH runner against a real sshd on loopback: streams through the channel, exit statuses, host keys."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from lastline.errors import LastlineError, PipelineError
from lastline.runner import Stage, host_for, run_pipeline

pytestmark = pytest.mark.e2e


def test_a_stream_goes_through_the_ssh_channel_byte_exact(sshd):
    host = host_for("t_ssh")
    data = [os.urandom(1 << 20) for _ in range(24)]  # 24 MiB, incompressible
    out: list[bytes] = []
    result = run_pipeline([Stage("remote-cat", ["cat"])], source=iter(data), sink=out.append, label="ssh", host=host)
    whole = b"".join(data)
    assert b"".join(out) == whole
    assert result.sha256_in == result.sha256_out == hashlib.sha256(whole).hexdigest()


def test_remote_commands_report_their_status_and_stderr(sshd, tmp_path):
    host = host_for("t_ssh")
    assert host.run(["printf", "%s", "it's here"]).stdout == b"it's here"  # arguments survive quoting
    with pytest.raises(PipelineError, match="exited with status 3"):
        host.shell("echo broken >&2; exit 3")
    with pytest.raises(PipelineError, match="remote-false"):
        run_pipeline([Stage("remote-false", ["false"])], sink=lambda b: None, host=host)
    (tmp_path / "f").write_text("x")
    assert host.run(["ls"], check=True) and host.run(["cat", "f"], check=False).returncode != 0
    stage = Stage("ls", ["cat", "f"], cwd=str(tmp_path))
    out: list[bytes] = []
    run_pipeline([stage], sink=out.append, host=host)
    assert out == [b"x"]


def test_a_wrong_host_key_is_refused_and_none_is_not_accepted(sshd):
    conn = json.loads(os.environ["AIRFLOW_CONN_T_SSH"])
    conn["extra"]["host_key"] = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOl2IXKS1lYdW0M4ZpPp0b1FjHI8pJc7CWTwiGwbvHbv"
    os.environ["AIRFLOW_CONN_T_SSH_BADKEY"] = json.dumps(conn)
    with pytest.raises(PipelineError, match="[Hh]ost key verification failed"):
        host_for("t_ssh_badkey").run(["true"])
    del conn["extra"]["host_key"]
    os.environ["AIRFLOW_CONN_T_SSH_NOKEY"] = json.dumps(conn)
    with pytest.raises(LastlineError, match="always checks host keys"):
        host_for("t_ssh_nokey")
