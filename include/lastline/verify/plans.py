"""What backup_verify decides and finds: the destination and its backups (the plan), and per backup or archive the
files that differ from their authenticated manifest or chain (findings), each named with what differs."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from lastline.core.plans import Plan, Result

OK, DAMAGED, MISSING = "ok", "damaged", "missing"
GONE = "gone"  # the whole backup removed while the run read it (prune deleting an old one): not read, no problem
# what differs in a file: gone, another size, another sha256, a MAC that fails, unreadable (a link, bad JSON, ...),
# a gap in the archive (bytes or GTIDs lastline never recorded as a hole), an archive older than the head Airflow recorded,
# a sealed object that does not open (a chunk changed, cut, reordered or moved: storage.sealing), a sealed backup that
# no key of a deployment holding keys opens
PROBLEMS = ("missing", "size", "digest", "mac", "unreadable", "gap", "rollback", "sealed", "key")


@dataclasses.dataclass(frozen=True)
class VerifyPlan(Plan):
    """One destination (as the deployment's roots allow it) and the backup folders found complete in it, oldest
    first; `incomplete`: folders without a manifest (never restored, not read); `lost`: the newest backup of a kind
    that Airflow recorded and the destination no longer holds complete (`<kind> backup <id>`)."""

    destination: str
    aws_conn_id: str | None
    backups: list[str]
    incomplete: list[str] = dataclasses.field(default_factory=list)
    lost: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Finding(Result):
    """One file that is not what its manifest or chain says: `problem` (PROBLEMS), and what was expected and found."""

    file: str
    problem: str
    expected: str = ""
    found: str = ""

    def describe(self) -> str:
        """One phrase: `data/db/t/00001-000.tsv.zst: digest (expected ab12..., found 9f3c...)`."""
        said = f"expected {self.expected}, found {self.found}" if self.expected or self.found else ""
        return f"{self.file}: {self.problem}" + (f" ({said})" if said else "")


def status_of(findings: list[Finding]) -> str:
    """ok without findings; missing when every finding is a missing file; damaged otherwise."""
    if not findings:
        return OK
    return MISSING if all(f.problem == "missing" for f in findings) else DAMAGED


def _findings(value: Any) -> list[Finding]:
    return [Finding.of(f) for f in value or []]


@dataclasses.dataclass(frozen=True)
class BackupVerdict(Result):
    """One backup read back: its kind, status (ok / damaged / missing), the files and bytes read, the findings, its
    manifest's authenticity in words, and for an encrypted backup whether its sealed files were opened (`sealed`: ""
    when it is not encrypted)."""

    backup_id: str
    kind: str | None
    status: str
    files: int = 0
    bytes: int = 0
    findings: list[Finding] = dataclasses.field(default_factory=list)
    authenticity: str = ""
    sealed: str = ""

    @classmethod
    def of(cls, value: BackupVerdict | Mapping[str, Any]) -> BackupVerdict:
        """The verdict, or its XCom form with its findings typed again."""
        if isinstance(value, BackupVerdict):
            return value
        return cls(**{**value, "findings": _findings(value.get("findings"))})


@dataclasses.dataclass(frozen=True)
class Coverage(Result):
    """How far the archive rolls one base forward: its branch, the file it starts in and the newest file reached,
    and the holes after it (recorded ones and gaps) that stop it."""

    backup_id: str
    branch: str | None = None
    start: str | None = None
    end: str | None = None
    holes: list[str] = dataclasses.field(default_factory=list)
    note: str = ""


@dataclasses.dataclass(frozen=True)
class ArchiveVerdict(Result):
    """The binlog archive read back: status, segments and bytes read, findings, and each base's coverage."""

    status: str
    branches: int = 0
    segments: int = 0
    bytes: int = 0
    findings: list[Finding] = dataclasses.field(default_factory=list)
    coverage: list[Coverage] = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, value: ArchiveVerdict | Mapping[str, Any]) -> ArchiveVerdict:
        """The verdict, or its XCom form with its findings and coverage typed again."""
        if isinstance(value, ArchiveVerdict):
            return value
        return cls(**{**value, "findings": _findings(value.get("findings")),
                      "coverage": [Coverage.of(c) for c in value.get("coverage") or []]})
