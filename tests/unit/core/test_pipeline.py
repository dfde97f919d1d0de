"""core.pipeline: OS pipelines run here with their two Python ends: bytes and sha256 counted at each end (read in 1 MiB
chunks), the stage that failed first blamed (not the ones SIGPIPE killed after it), a source's own error raised as it
is. Real local commands (cat, head, sh), milliseconds each; pipelines over SSH are tested in tests/e2e/test_ssh.py."""
from __future__ import annotations

import hashlib
import signal
import subprocess

import pytest

from lastline.core.errors import LastlineError, PipelineError
from lastline.core.hosts import Stage
from lastline.core.pipeline import (
    PipelineResult,
    StageResult,
    filtered,
    run_logged,
    run_pipeline,
    tap_result,
    tap_stage,
)

MIB = 1 << 20


def chunks(total: int, size: int = 64 << 10) -> list[bytes]:
    data = (bytes(range(256)) * (total // 256 + 1))[:total]
    return [data[i:i + size] for i in range(0, total, size)]


@pytest.mark.parametrize("total", [0, 1, MIB - 1, MIB, MIB + 1, 3 * MIB],
                         ids=["empty", "one-byte", "under-a-chunk", "one-chunk", "over-a-chunk", "many-chunks"])
def test_bytes_and_sha256_at_both_ends(total):
    parts = chunks(total)
    got: list[bytes] = []
    result = run_pipeline([Stage("copy", ["cat"]), Stage("again", ["cat"])], source=parts, sink=got.append,
                          progress_every=None)
    digest = hashlib.sha256(b"".join(parts)).hexdigest()
    assert (result.bytes_in, result.bytes_out) == (total, total)
    assert result.sha256_in == result.sha256_out == digest
    assert b"".join(got) == b"".join(parts)
    assert [s.name for s in result.stages] == ["copy", "again"] and all(s.returncode == 0 for s in result.stages)


def test_hash_source_false_counts_without_hashing():
    result = run_pipeline([Stage("drop", ["cat"])], source=[b"abc"], hash_source=False, progress_every=None)
    assert result.bytes_in == 3 and result.sha256_in is None and result.sha256_out is None


def test_hash_sink_false_counts_what_the_sink_gets_without_hashing_it():
    got: list[bytes] = []
    result = run_pipeline([Stage("copy", ["cat"])], source=[b"abc", b"de"], sink=got.append, hash_sink=False,
                          progress_every=None)
    assert b"".join(got) == b"abcde" and result.bytes_out == 5 and result.sha256_out is None
    assert result.sha256_in == hashlib.sha256(b"abcde").hexdigest()  # the source's hash is still taken


def test_the_stage_that_failed_is_blamed_with_its_stderr_not_the_one_sigpipe_killed():
    """`yes` dies of SIGPIPE because `fail` stopped reading: `fail` is named, with its stderr."""
    stages = [Stage("yes", ["yes"]), Stage("fail", ["sh", "-c", "head -c 10 >/dev/null; echo 'disk on fire' >&2; exit 3"])]
    with pytest.raises(PipelineError) as caught:
        run_pipeline(stages, progress_every=None)
    message = str(caught.value)
    assert "stage 'fail' failed with exit status 3" in message and "disk on fire" in message
    assert f"yes=-{int(signal.SIGPIPE)}" in message


def test_a_missing_command_is_named():
    with pytest.raises(PipelineError, match="command 'no-such-command-lastline' not found"):
        run_pipeline([Stage("x", ["no-such-command-lastline"])], progress_every=None)


def test_an_empty_pipeline_is_refused():
    with pytest.raises(LastlineError, match="empty pipeline"):
        run_pipeline([])


def test_an_error_of_the_source_rises_as_it_is():
    def source():
        yield b"abc"
        raise OSError("the archive read failed")

    with pytest.raises(OSError, match="the archive read failed"):
        run_pipeline([Stage("copy", ["cat"])], source=source(), sink=lambda _: None, progress_every=None)


def test_keep_stderr_returns_the_whole_stderr():
    result = run_pipeline([Stage("talk", ["sh", "-c", "echo one >&2; echo two >&2"], keep_stderr=True)],
                          progress_every=None)
    assert result.stderr == {"talk": "one\ntwo\n"}


@pytest.mark.parametrize("total", [0, 1, MIB + 7], ids=["empty", "one-byte", "over-a-chunk"])
def test_a_tap_counts_and_checksums_what_crosses_it(total):
    data = b"".join(chunks(total))
    result = run_pipeline([tap_stage("tap")], source=[data], sink=lambda _: None, progress_every=None)
    n, crc = tap_result(result, "tap")
    cksum = subprocess.run(["cksum"], input=data, capture_output=True, check=True).stdout.split()
    assert (n, crc) == (total, cksum[0].decode())  # POSIX cksum's CRC, as the tap prints it
    assert result.bytes_out == total
    again = run_pipeline([tap_stage("tap")], source=[data], sink=lambda _: None, progress_every=None)
    assert tap_result(again, "tap") == (n, crc)


def test_tap_result_refuses_a_stage_that_did_not_report():
    result = PipelineResult(stages=[], seconds=1.0, stderr={"tap": "nothing"})
    with pytest.raises(PipelineError, match="did not report its byte count"):
        tap_result(result, "tap")


@pytest.mark.parametrize(("code", "tail", "sigpipe"), [
    (-int(signal.SIGPIPE), "", True), (128 + int(signal.SIGPIPE), "", True), (1, "write error: Broken pipe", True),
    (1, "No space left", False), (0, "", False),
], ids=["killed-by-sigpipe", "shell-status-of-sigpipe", "broken-pipe-message", "another-error", "success"])
def test_stage_result_sigpipe(code, tail, sigpipe):
    assert StageResult("s", code, tail).sigpipe is sigpipe


def test_mb_per_s_takes_the_larger_end():
    assert PipelineResult([], 2.0, bytes_in=4_000_000, bytes_out=1_000_000).mb_per_s == 2.0
    assert PipelineResult([], 0.0).mb_per_s == 0.0


def test_filtered_yields_a_commands_output_and_names_its_failure():
    assert b"".join(filtered(["tr", "a-z", "A-Z"], iter([b"abc", b"def"]), "upper")) == b"ABCDEF"
    with pytest.raises(PipelineError, match="bad: `sh -c 'echo oops >&2; exit 4'` exited with status 4: oops"):
        list(filtered(["sh", "-c", "echo oops >&2; exit 4"], iter([b"x"]), "bad"))


def test_run_logged_returns_the_output_and_names_a_failure():
    assert run_logged(["sh", "-c", "echo a; echo b"], "two lines") == "a\nb"
    with pytest.raises(PipelineError, match="exited with status 2; output ends with:\nlast words"):
        run_logged(["sh", "-c", "echo 'last words'; exit 2"], "failing")
