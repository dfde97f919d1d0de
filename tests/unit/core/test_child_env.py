"""core.child_env: every process lastline starts gets what a tool needs (PATH, HOME, LANG/LC_*, TMPDIR, TZ) and none of
the worker's secrets. With AIRFLOW_CONN_*, AIRFLOW_VAR_*, Airflow's own secret settings, AWS keys and MYSQL_PWD in the
worker's environment, `env` run through each entry point (a pipeline, a filter, a logged command, a host's run and
shell script, the ssh client of an SSH host, a chunk's decompressor, a dump part's compressor) sees none of them; and
no call in the package starts a process without child_env (read from its syntax tree)."""
from __future__ import annotations

import ast
import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest

from lastline.core import hosts
from lastline.core.child_env import child_env
from lastline.core.hosts import LOCAL, SshHost, Stage
from lastline.core.pipeline import filtered, run_logged, run_pipeline
from lastline.logical.backup.parts import PartWriter
from lastline.logical.format.chunk_files import write_chunk
from lastline.storage.file import FileStorage

PACKAGE = Path(hosts.__file__).resolve().parents[1]
SECRETS = {
    "AIRFLOW_CONN_LASTLINE_SOURCE": "mysql://root:qx-conn-password@db:3306",
    "AIRFLOW_VAR_LASTLINE_MASKING_RULES": "qx-variable-secret",
    "AIRFLOW__CORE__FERNET_KEY": "qx-fernet-key",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_SECRET": "qx-secret-setting",
    "AWS_SECRET_ACCESS_KEY": "qx-aws-secret",
    "AWS_SESSION_TOKEN": "qx-aws-token",
    "MYSQL_PWD": "qx-mysql-pwd",
}
KEPT = {"LANG": "C.UTF-8", "LC_COLLATE": "C", "TZ": "UTC", "HOME": "/home/qx-home", "TMPDIR": "/tmp"}


@pytest.fixture
def worker_env(monkeypatch):
    """The worker's environment with its secrets, and what a tool needs."""
    for name, value in {**SECRETS, **KEPT}.items():
        monkeypatch.setenv(name, value)


def _clean(text: str) -> None:
    """`env` output: no secret, by name or value; what a tool needs passed."""
    seen = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert not [n for n in SECRETS if n in seen], seen
    assert not [v for v in SECRETS.values() if v in text]
    assert not [n for n in seen if n.startswith(("AIRFLOW", "AWS_"))], seen
    assert {n: seen.get(n) for n in KEPT} == KEPT
    assert seen.get("PATH") == os.environ["PATH"]


def test_child_env_keeps_what_a_tool_needs_and_nothing_else(worker_env, monkeypatch):
    env = child_env({"LASTLINE_ON_PURPOSE": "1"})
    assert env == {**KEPT, "PATH": os.environ["PATH"], "LASTLINE_ON_PURPOSE": "1",
                   **{k: os.environ[k] for k in ("USER", "LOGNAME", "LANGUAGE", "LD_LIBRARY_PATH") if k in os.environ},
                   **{k: v for k, v in os.environ.items() if k.startswith("LC_")}}
    monkeypatch.delenv("PATH")
    assert child_env()["PATH"].startswith("/usr/local/sbin")  # a tool is still found


def test_a_pipeline_a_filter_and_a_logged_command_see_no_secret(worker_env):
    out = bytearray()
    run_pipeline([Stage("env", ["env"])], sink=out.extend, label="env", progress_every=None)
    _clean(out.decode())
    out2 = bytearray()
    run_pipeline([Stage("cat", ["cat"]), Stage("env", ["sh", "-c", "cat >/dev/null; env"])], source=[b"x"],
                 sink=out2.extend, label="env", progress_every=None)
    _clean(out2.decode())
    _clean(b"".join(filtered(["env"], iter([b""]), "env")).decode())
    _clean(run_logged(["env"], "env"))


def test_a_host_s_commands_see_no_secret(worker_env):
    _clean(LOCAL.run(["env"]).stdout.decode())
    _clean(LOCAL.sh("env"))
    _clean(LOCAL.shell("env").stdout.decode())
    proc = LOCAL.popen_script("env")
    _clean(proc.communicate()[0].decode())


def _fake_tool(folder: Path, name: str, script: str) -> None:
    """A command `name` first on PATH that runs `script` (what lastline would start under that name)."""
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_the_ssh_client_of_an_ssh_host_sees_no_secret(worker_env, tmp_path, monkeypatch):
    _fake_tool(tmp_path / "bin", "ssh", "cat >/dev/null; env")  # the local client: what the remote would get is its own
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    host = SshHost("h", "127.0.0.1", 22, "u", str(tmp_path / "key"), str(tmp_path / "known_hosts"))
    host._shared = False  # no master connection
    _clean(host.run(["true"]).stdout.decode())
    proc = host.popen(Stage("stream", ["true"]), subprocess.DEVNULL, subprocess.PIPE, subprocess.PIPE)  # a stream's
    _clean(proc.communicate()[0].decode())


def test_a_chunk_s_decompressor_and_a_dump_part_s_compressor_see_no_secret(worker_env, tmp_path, monkeypatch):
    _fake_tool(tmp_path / "bin", "zstd", "cat >/dev/null; env")
    _fake_tool(tmp_path / "bin", "pigz", "cat >/dev/null; env")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    store = FileStorage(str(tmp_path / "dest") + "/")
    (tmp_path / "dest" / "b1").mkdir(parents=True)
    (tmp_path / "dest" / "b1" / "c.zst").write_bytes(b"compressed")
    out = tmp_path / "out"
    with open(out, "wb") as fh:
        write_chunk(store, "b1/c.zst", "zstd", hashlib.sha256(b"compressed").hexdigest(), fh)
    _clean(out.read_text())
    part = PartWriter(store, "b1/part.gz", "pigz")  # the worker writes nothing: the compressor's output is its env
    part.complete()
    part.commit()
    _clean((tmp_path / "dest" / "b1" / "part.gz").read_text())


_STARTERS = {("subprocess", "Popen"), ("subprocess", "run"), ("subprocess", "call"), ("subprocess", "check_call"),
             ("subprocess", "check_output")}
_FORBIDDEN = {("os", n) for n in ("system", "popen", "execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp",
                                  "spawnv", "spawnve", "spawnl", "posix_spawn", "posix_spawnp", "fork")} | \
             {("subprocess", "getoutput"), ("subprocess", "getstatusoutput"), ("asyncio", "create_subprocess_exec"),
              ("asyncio", "create_subprocess_shell"), ("pty", "spawn")}


def test_every_process_the_package_starts_gets_child_env():
    """A new call site that forgets child_env fails here, naming it."""
    missing, forbidden, checked = [], [], 0
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)):
                continue
            called, where = (node.func.value.id, node.func.attr), f"{path.relative_to(PACKAGE)}:{node.lineno}"
            if called in _FORBIDDEN:
                forbidden.append(where)
            elif called in _STARTERS:
                checked += 1
                env = next((k.value for k in node.keywords if k.arg == "env"), None)
                if not (isinstance(env, ast.Call) and isinstance(env.func, ast.Name) and env.func.id == "child_env"):
                    missing.append(where)
    assert checked >= 8  # hosts (4), pipeline, chunk_files, parts, worker: the walk saw them
    assert not missing, f"processes started without env=child_env(): {missing}"
    assert not forbidden, f"processes started another way than subprocess with child_env: {forbidden}"
