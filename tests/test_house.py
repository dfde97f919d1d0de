"""`make house` (tools/lastline_dev/house.py) measures what the structure tests hold: its figures agree with them."""
from __future__ import annotations

from pathlib import Path

from lastline_dev.house import measure

ROOT = Path(__file__).resolve().parents[1]


def test_the_house_figures_agree_with_the_structure_tests():
    from tests.test_structure import ACROSS_STAGES
    from tests.unit.test_mirror import ALLOWED_MODULES

    house = measure(ROOT)
    assert house["arrows_up"] == []
    assert {tuple(a.split(" -> ")) for a in house["across_stages"]} == ACROSS_STAGES
    assert set(house["without_unit_test"]) == set(ALLOWED_MODULES)  # the mirror's allow-list is exactly what lacks a file
    assert house["longest"] and all(lines >= house["longest"][-1][0] for lines, _ in house["longest"])
