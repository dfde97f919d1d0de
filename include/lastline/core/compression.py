"""Compressors for backup streams and chunk files: how to compress, decompress, and the file suffix."""
from __future__ import annotations

from dataclasses import dataclass

from lastline.core.errors import PreflightError


@dataclass(frozen=True)
class Codec:
    """A compressor: how to compress with n threads, how to decompress, the file suffix."""

    name: str
    suffix: str
    tool: str | None
    compress: tuple[str, ...]
    decompress: tuple[str, ...]
    fast: tuple[str, ...] = ()

    def compress_argv(self, threads: int, fast: bool = False) -> list[str]:
        """The compress command with `threads` threads (`fast`: the quickest level, for chunk files)."""
        return [a.format(n=threads) for a in self.compress] + (list(self.fast) if fast else [])

    def decompress_argv(self, threads: int) -> list[str]:
        """The decompress command."""
        return [a.format(n=threads) for a in self.decompress]


# Measured on 2 cores (bench/physical_bench.py): zstd -T2 is the fastest at a similar ratio, so it is
# the default; pigz --fast is offered for sites standardised on gzip. Logical chunk files use the
# fast level (zstd -1: 1.7x quicker than -3 on sysbench rows, within a few % of its size).
CODECS: dict[str, Codec] = {
    "zstd": Codec("zstd", ".zst", "zstd", ("zstd", "-q", "-T{n}", "-c"), ("zstd", "-q", "-d", "-c"), ("-1",)),
    # the fast level for streams that are not kept (replica rebuild; bench/rebuild_bench.py times it)
    "zstd-fast": Codec("zstd-fast", ".zst", "zstd", ("zstd", "-q", "-1", "-T{n}", "-c"), ("zstd", "-q", "-d", "-c")),
    "pigz": Codec("pigz", ".gz", "pigz", ("pigz", "-c", "-p", "{n}"), ("pigz", "-d", "-c"), ("--fast",)),
    "pigz-fast": Codec("pigz-fast", ".gz", "pigz", ("pigz", "--fast", "-c", "-p", "{n}"), ("pigz", "-d", "-c")),
    "none": Codec("none", "", None, (), ()),
}
DEFAULT_COMPRESSION = "zstd"


def codec(name: str) -> Codec:
    """The codec called `name`, or a clear error listing the choices."""
    try:
        return CODECS[name]
    except KeyError:
        raise PreflightError(f"unknown compression {name!r}; choose one of {', '.join(CODECS)}.") from None
