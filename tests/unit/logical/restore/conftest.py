"""The restore's unit tests share one small logical backup (small_backup), taken once a session."""
from __future__ import annotations

from pathlib import Path

import pytest

from .small_backup import taken


@pytest.fixture(scope="session")
def restore_backup(logical_source, tmp_path_factory) -> Path:
    """The backup's folder (`file://<folder>/latest` is the backup; see small_backup)."""
    with taken(logical_source.server(), tmp_path_factory.mktemp("unit-restore")) as dest:
        yield dest
