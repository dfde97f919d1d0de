"""logical.format.infile, the pieces that need no server: a backup's compression as the handler's codec, the handler's
refusal read out of a failed statement, measure (decompressing a file with the handler's own reader), the FIFO fed by
a writer thread, and the loader refusing to start without the built library."""
from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from lastline.core.errors import ConfigError, IntegrityError
from lastline.logical.format import infile

ROWS = b"".join(b"%d\tvalue \\\\ %d\\n\twith a tab\n" % (i, i * 7) for i in range(20_000))
PACK = {
    "none": lambda data: data,
    "zstd": lambda data: subprocess.run(["zstd", "-q", "-1", "-c"], input=data, capture_output=True, check=True).stdout,
    "pigz": lambda data: subprocess.run(["pigz", "--fast", "-c"], input=data, capture_output=True, check=True).stdout,
}


@pytest.mark.parametrize(("compression", "codec"), [
    ("none", 0), ("zstd", 1), ("zstd-fast", 1), ("pigz", 2), ("pigz-fast", 2)],
    ids=["none", "zstd", "zstd-fast", "pigz", "pigz-fast"])
def test_codec_of(compression, codec):
    assert infile.codec_of(compression) == codec


@pytest.mark.parametrize("compression", ["bzip2", "", "ZSTD"], ids=["unknown", "empty", "wrong-case"])
def test_codec_of_an_unreadable_compression_is_refused(compression):
    with pytest.raises(ConfigError, match="reads none, zstd"):
        infile.codec_of(compression)


@pytest.mark.parametrize(("exc", "message"), [
    (Exception(2027, "lastline-infile: decompresses to more than its declared 10 bytes"),
     "chunk db.t decompresses to more than its declared 10 bytes; nothing of it was loaded."),
    (Exception("lastline-infile: cannot be decompressed (zstd: truncated)"),
     "chunk db.t cannot be decompressed (zstd: truncated); nothing of it was loaded."),
    (Exception(1062, "Duplicate entry '1' for key 'PRIMARY'"), None),
    (Exception(), None),
], ids=["the-handler-s-error-in-a-driver-error", "the-handler-s-error-alone", "another-server-error", "no-message"])
def test_refusal(exc, message):
    got = infile.refusal(exc, "db.t")
    assert (str(got) if got else None) == message
    assert got is None or isinstance(got, IntegrityError)


@pytest.mark.parametrize(("value", "client"), [(None, True), ("off", False), ("/x/lib.so", True)],
                         ids=["unset", "off", "a-named-library"])
def test_in_client(monkeypatch, value, client):
    if value is None:
        monkeypatch.delenv("LASTLINE_INFILE_LIB", raising=False)
    else:
        monkeypatch.setenv("LASTLINE_INFILE_LIB", value)
    assert infile.in_client() is client


def test_fed_fifo_hands_the_writer_s_bytes_to_the_reader():
    with infile.fed_fifo(lambda fh: fh.write(ROWS), "writer") as (fifo, errors):
        with open(fifo, "rb") as fh:
            assert fh.read() == ROWS
        folder = os.path.dirname(fifo)
        assert os.stat(folder).st_mode & 0o777 == 0o700
    assert errors == [] and not os.path.exists(folder)


def test_fed_fifo_collects_the_writer_s_error():
    def write(fh) -> None:
        fh.write(b"partial")
        raise OSError("storage went away")

    with infile.fed_fifo(write, "writer") as (fifo, errors):
        with open(fifo, "rb") as fh:
            assert fh.read() == b"partial"
    assert [str(e) for e in errors] == ["storage went away"]


@pytest.mark.parametrize("wait", [0, 0.2], ids=["at once, before the writer reached open()", "once the writer waits in open()"])
def test_fed_fifo_lets_the_writer_go_when_the_block_fails_before_reading(wait):
    """The writer is let go whenever the block fails: also before its thread reached open() (an unblock made once,
    too early, left it waiting for a reader that never came, and the join hung for good)."""
    outcome: dict = {}

    def run() -> None:
        try:
            with infile.fed_fifo(lambda fh: fh.write(ROWS), "writer") as (_, errors):
                outcome["errors"] = errors
                time.sleep(wait)
                raise RuntimeError("the statement failed")
        except RuntimeError as exc:
            outcome["raised"] = str(exc)

    block = threading.Thread(target=run, daemon=True)
    block.start()
    block.join(20)
    assert not block.is_alive(), "fed_fifo never let its writer go"
    assert outcome["raised"] == "the statement failed"
    assert len(outcome["errors"]) == 1 and isinstance(outcome["errors"][0], BrokenPipeError)


@pytest.mark.parametrize("codec", ["zstd", "pigz", "none"])
def test_measure_reads_a_file_as_the_handler_would(tmp_path, codec):
    path = tmp_path / "chunk"
    path.write_bytes(PACK[codec](ROWS))
    assert infile.measure(str(path), codec, len(ROWS), "db.t") == len(ROWS)
    with pytest.raises(IntegrityError, match=rf"chunk db\.t decompresses to more than its declared {len(ROWS) - 1} bytes"):
        infile.measure(str(path), codec, len(ROWS) - 1, "db.t")
    if codec != "none":
        path.write_bytes(path.read_bytes()[:-7])
        with pytest.raises(IntegrityError, match=r"chunk db\.t cannot be decompressed"):
            infile.measure(str(path), codec, len(ROWS), "db.t")


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_measure_fd_reads_an_anonymous_file_through_a_fifo_leaving_its_offset(tmp_path, codec):
    fd = os.open(tmp_path, os.O_TMPFILE | os.O_RDWR, 0o600)  # no path: /proc/self/fd/N is a link the reader refuses
    try:
        os.write(fd, PACK[codec](ROWS))
        os.lseek(fd, 5, os.SEEK_SET)
        assert infile.measure_fd(fd, codec, len(ROWS), "db.t") == len(ROWS)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 5
        with pytest.raises(IntegrityError, match=rf"chunk db\.t decompresses to more than its declared {len(ROWS) - 1}"):
            infile.measure_fd(fd, codec, len(ROWS) - 1, "db.t")
    finally:
        os.close(fd)


def test_without_the_built_library_the_loader_refuses(monkeypatch, tmp_path):
    monkeypatch.setenv("LASTLINE_INFILE_LIB", str(tmp_path / "missing.so"))
    infile._library.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"not built .*missing\.so does not exist.*make setup"):
            infile.require()
        monkeypatch.setenv("LASTLINE_INFILE_LIB", "off")  # the decompressor process, read by the same handler
        infile._library.cache_clear()
        infile.require()
        assert not infile.in_client()
    finally:
        infile._library.cache_clear()
    with pytest.raises(ConfigError, match="reads none, zstd"):
        infile.codec_of("bzip2")
