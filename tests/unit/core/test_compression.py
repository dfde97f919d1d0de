"""core.compression: each codec's commands and suffix, and an unknown name refused with the choices."""
from __future__ import annotations

import pytest

from lastline.core.compression import CODECS, DEFAULT_COMPRESSION, codec
from lastline.core.errors import PreflightError


@pytest.mark.parametrize(("name", "threads", "fast", "argv"), [
    ("zstd", 4, False, ["zstd", "-q", "-T4", "-c"]),
    ("zstd", 2, True, ["zstd", "-q", "-T2", "-c", "-1"]),
    ("zstd-fast", 3, False, ["zstd", "-q", "-1", "-T3", "-c"]),
    ("zstd-fast", 3, True, ["zstd", "-q", "-1", "-T3", "-c"]),
    ("pigz", 8, False, ["pigz", "-c", "-p", "8"]),
    ("pigz", 8, True, ["pigz", "-c", "-p", "8", "--fast"]),
    ("pigz-fast", 1, False, ["pigz", "--fast", "-c", "-p", "1"]),
    ("none", 4, True, []),
], ids=["zstd", "zstd-fast-level-for-chunks", "zstd-fast", "zstd-fast-has-no-extra-level", "pigz", "pigz-fast-level",
        "pigz-fast", "none-is-no-command"])
def test_compress_argv(name, threads, fast, argv):
    assert codec(name).compress_argv(threads, fast=fast) == argv


@pytest.mark.parametrize(("name", "argv", "suffix", "tool"), [
    ("zstd", ["zstd", "-q", "-d", "-c"], ".zst", "zstd"),
    ("zstd-fast", ["zstd", "-q", "-d", "-c"], ".zst", "zstd"),
    ("pigz", ["pigz", "-d", "-c"], ".gz", "pigz"),
    ("pigz-fast", ["pigz", "-d", "-c"], ".gz", "pigz"),
    ("none", [], "", None),
], ids=["zstd", "zstd-fast", "pigz", "pigz-fast", "none"])
def test_decompress_argv_suffix_and_tool(name, argv, suffix, tool):
    c = codec(name)
    assert (c.decompress_argv(2), c.suffix, c.tool) == (argv, suffix, tool)


def test_the_default_is_a_known_codec_and_names_match_their_keys():
    assert DEFAULT_COMPRESSION in CODECS
    assert all(c.name == key for key, c in CODECS.items())


@pytest.mark.parametrize("name", ["gzip", "ZSTD", ""], ids=["unlisted", "wrong-case", "empty"])
def test_an_unknown_codec_is_refused_naming_the_choices(name):
    with pytest.raises(PreflightError, match="unknown compression") as err:
        codec(name)
    assert all(choice in str(err.value) for choice in CODECS)
