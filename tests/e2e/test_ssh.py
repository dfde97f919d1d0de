"""The SSH runner against a real sshd on loopback: streams through the channel, exit statuses, host keys."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from lastline.connections import host_for
from lastline.core.errors import LastlineError, PipelineError
from lastline.core.hosts import Stage
from lastline.core.pipeline import run_pipeline

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


def test_remote_stages_run_behind_one_ssh_and_taps_agree_at_both_ends(sshd):
    from lastline.core.pipeline import tap_result, tap_stage

    host = host_for("t_ssh")
    before = sshd.log.read_text().count("Accepted publickey")
    out: list[bytes] = []
    stages = [
        Stage("gen", ["head", "-c", "5000000", "/dev/urandom"]),
        tap_stage("sent"),
        tap_stage("received", host=host),
        Stage("gzip", ["gzip", "-1", "-c"], host=host),
        Stage("gunzip", ["gzip", "-d", "-c"], host=host),
    ]
    result = run_pipeline(stages, sink=out.append, label="across")
    assert sshd.log.read_text().count("Accepted publickey") - before == 1  # three remote stages, one ssh
    data = b"".join(out)
    crc = subprocess.run(["cksum"], input=data, capture_output=True, check=True).stdout.split()[0].decode()
    assert tap_result(result, "sent") == tap_result(result, "received") == (len(data), crc)
    assert len(data) == 5_000_000 and [s.name for s in result.stages] == ["gen", "sent", "received", "gzip", "gunzip"]

    bad = [Stage("ok", ["cat"], host=host), Stage("bad", ["sh", "-c", "cat >/dev/null; echo nope >&2; exit 4"], host=host)]
    with pytest.raises(PipelineError, match=r"stage 'bad' failed with exit status 4(.|\n)*nope"):
        run_pipeline(bad, source=[b"x" * 1000], sink=lambda b: None)


def test_physical_backup_to_ssh_and_restore_over_ssh(run_dag, source, target, sshd, tmp_path):
    """Source and target commands both run over SSH; the backup is written to and read from ssh://."""
    from conftest import set_conn
    from lastline_dev.compare import compare

    set_conn("t_source_ssh", source, ssh_conn_id="t_ssh")
    set_conn("t_target_ssh", target, ssh_conn_id="t_ssh")
    dest = f"ssh://t_ssh{tmp_path}/backups"
    state, tis, logs = run_dag("physical_backup", {
        "source_conn_id": "t_source_ssh", "destination": dest, "compression": "zstd", "parallel": 2,
        "aws_conn_id": None, "keep": 7, "incomplete_grace_hours": 24,
    })
    assert state == "success", tis
    (backup,) = [p for p in (tmp_path / "backups").iterdir() if p.is_dir()]
    assert (backup / "manifest.json").exists() and not list(backup.glob("*.partial"))
    state, tis, logs2 = run_dag("physical_restore", {
        "target_conn_id": "t_target_ssh", "backup": f"{dest}/latest", "parallel": 2, "use_memory": 256 << 20,
        "force": True, "aws_conn_id": None,
    })
    assert state == "success", tis
    assert "sha256 verified" in logs2 and "on t_ssh" in logs2
    password = source.server().password
    assert password not in logs + logs2
    assert compare(source.server(), target.server()) == []
