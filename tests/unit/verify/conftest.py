"""The destination verify's unit tests read back (destination.take), made once a session from the suite's source."""
from __future__ import annotations

import pytest

from .destination import Made, take


@pytest.fixture(scope="session")
def made(source, tmp_path_factory) -> Made:
    return take(source, tmp_path_factory.mktemp("verify") / "dest")
