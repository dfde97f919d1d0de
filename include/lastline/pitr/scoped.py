"""A logical base's replay, reaching the restored databases only (see :mod:`lastline.pitr.split` for what reaches
the target and why): a first pass reads every archived segment of the span (its sha256 checked), proves each
transaction one of the kinds lastline passes on and refuses a statement that may change a restored database and
cannot run exactly once, before anything is applied; then the span is written as relay logs rebuilt for the restored
databases, the target's parallel applier runs them with `replicate_do_db` set to those databases, and the statements
run between them in order (pitr.interleave).
"""
from __future__ import annotations

import posixpath
from typing import Any

from lastline.core.errors import ConfigError, Refusal
from lastline.core.hosts import Host
from lastline.pitr import events
from lastline.pitr.sealed import Seals
from lastline.pitr.span import Span
from lastline.pitr.split import Splitter, cut, write_relay
from lastline.pitr.statement_run import Statement
from lastline.storage import Storage


def check_names(databases: list[str]) -> None:
    """replicate_do_db takes a comma-separated list: a name with a comma cannot be filtered on."""
    bad = [d for d in databases if "," in d or not d]
    if bad:
        raise ConfigError(f"database name(s) {bad!r}: a logical base's replay filters on the restored databases by name, "
                          "and a name holding a comma cannot be filtered on. Restore a physical base instead.")


def collect(storage: Storage, span: Span, applied: dict[int, int], databases: list[str],
            seals: Seals | None = None) -> tuple[list[dict[str, str]], list[events.Transaction]]:
    """The first pass: every segment read and checked (a sealed one opened by `seals`, the span's by default), every
    transaction to apply classified (a refusal names the first one lastline does not pass on); the statements left out
    and every transaction kept, in order."""
    seals = seals or span.seals()
    left_out: list[dict[str, str]] = []
    kept: list[events.Transaction] = []
    for f in span.files:
        splitter = Splitter(f.name, f.start, f.stop, applied, collect=True, databases=frozenset(databases))
        for _ in cut(storage, f, splitter, f is span.files[-1], seals):
            pass
        left_out += splitter.left_out
        kept += splitter.kept
    return left_out, kept


def cut_files(storage: Storage, span: Span, applied: dict[int, int], databases: list[str], host: Host, folder: str,
              base: str, seals: Seals | None = None) -> tuple[list[str], list[events.Transaction], int, list[Statement]]:
    """The span as relay logs rebuilt for `databases`, `<base>.NNNNNN` in `folder` on `host`: paths, transactions
    kept, bytes written, and the statements that run in the replay's session (each placed in its relay log)."""
    seals = seals or span.seals()
    paths: list[str] = []
    kept: list[events.Transaction] = []
    statements: list[Statement] = []
    written = 0
    for k, f in enumerate(span.files, start=1):
        splitter = Splitter(f.name, f.start, f.stop, applied, collect=False, databases=frozenset(databases))
        path = posixpath.join(folder, f"{base}.{k:06d}")
        written += write_relay(storage, f, splitter, f is span.files[-1], host, path, seals)
        kept += splitter.kept
        paths.append(path)
        for st in splitter.statements:
            st.relay = posixpath.basename(path)
        statements += splitter.statements
    return paths, kept, written, statements


def refuse_foreign_keys(cur: Any, databases: list[str]) -> None:
    """A foreign key between a restored table and one of another database: a replayed change would cascade out of
    the restored databases (InnoDB cascades are not filtered), or a cascade the source ran from the other side
    would be missing (its rows are filtered out). Refused before anything is applied."""
    marks = ", ".join(["%s"] * len(databases))
    cur.execute("SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, UNIQUE_CONSTRAINT_SCHEMA, REFERENCED_TABLE_NAME "
                "FROM information_schema.REFERENTIAL_CONSTRAINTS "
                f"WHERE (UNIQUE_CONSTRAINT_SCHEMA IN ({marks})) <> (CONSTRAINT_SCHEMA IN ({marks}))",
                (*databases, *databases))
    found = cur.fetchall()
    if found:
        names = "; ".join(f"{r[0]}.{r[1]} ({r[2]}) references {r[3]}.{r[4]}" for r in found[:5])
        raise Refusal(f"foreign keys cross between the restored databases and others ({names}): a replayed change would "
                      "cascade out of the restored databases, or miss a cascade from outside. Drop those keys first, or "
                      "roll forward a physical base.")
