"""pitr.event_names: an event type by the name MariaDB gives it, the number after it, for the refusals' messages."""
from __future__ import annotations

import pytest

from lastline.pitr import events
from lastline.pitr.event_names import event_name


@pytest.mark.parametrize(("kind", "name"), [
    (160, "Annotate_rows (event type 160)"),
    (events.QUERY, "Query (event type 2)"),
    (events.XA_PREPARE, "XA_prepare (event type 38)"),
    (171, "Delete_rows_compressed (event type 171)"),
    (200, "an unknown event (type 200)"),
], ids=["annotate-rows", "query", "xa-prepare", "last-mariadb-one", "unknown"])
def test_event_name_says_what_a_dump_shows(kind, name):
    assert event_name(kind) == name
