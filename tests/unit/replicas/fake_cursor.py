"""A DB-API cursor that answers scripted statements (a replica's status, its variables) and keeps what it ran."""
from __future__ import annotations

from typing import Any


class FakeCursor:
    def __init__(self, answers: dict[str, tuple[list[str], list[tuple]]]) -> None:
        self.answers = answers  # statement prefix -> (columns, rows)
        self.ran: list[tuple[str, Any]] = []
        self.description: list[tuple[str]] | None = None
        self._rows: list[tuple] = []
        self.connection = self
        self.commits = 0

    def execute(self, sql: str, args: Any = None) -> None:
        self.ran.append((sql, args))
        found = next((a for prefix, a in self.answers.items() if sql.startswith(prefix)), ([], []))
        self.description = [(c,) for c in found[0]] or None
        self._rows = list(found[1])

    def fetchone(self) -> tuple | None:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[tuple]:
        return self._rows

    def commit(self) -> None:
        self.commits += 1
