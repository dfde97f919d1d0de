"""core.svg: report charts as SVG text: well-formed whatever the labels hold, bars scaled to the largest value, a
timeline's bars placed at their start."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from lastline.core.svg import bars, document, timeline

NS = "{http://www.w3.org/2000/svg}"


def parsed(text: str) -> ET.Element:
    return ET.fromstring(text)


@pytest.mark.parametrize("rows", [[], [("one", 5.0)], [("a", 1.0), ("b", 4.0), ("c", 0.0)]], ids=["empty", "one", "many"])
def test_bars_scale_to_the_largest(rows):
    svg = parsed(document("heading", [(rows, "sizes", "MB", "#123456")]))
    widths = [float(r.get("width")) for r in svg.iter(f"{NS}rect") if r.get("width") != "100%"]  # not the background
    assert len(widths) == len(rows)
    if rows:
        assert max(widths) == 520.0 and min(widths) >= 1.0  # a zero still shows as a sliver


def test_labels_with_markup_are_escaped_and_cut():
    label = "<b>&`x`" + "y" * 100
    svg = parsed(document("a < b & c", [([(label, 1.0)], "t<i>", "M&B", "#000")]))
    texts = [t.text for t in svg.iter(f"{NS}text")]
    assert "a < b & c" in texts and "t<i>" in texts and label[:48] in texts and "1.0 M&B" in texts


def test_timeline_places_each_bar_at_its_start():
    parts, y = timeline([("first", 0.0, 10.0, "#f00"), ("second", 10.0, 30.0, "#0f0")], 0, "steps")
    svg = parsed('<svg xmlns="http://www.w3.org/2000/svg">' + "".join(parts) + "</svg>")
    rects = [(float(r.get("x")), float(r.get("width"))) for r in svg.iter(f"{NS}rect")]
    assert rects == [(300.0, 140.0), (440.0, 420.0)]  # 560 px for 40 s
    assert y > 0


def test_charts_stack_under_one_another():
    _, after_one = bars([("a", 1.0)], 0, "t", "s", "#000")
    _, after_two = bars([("a", 1.0), ("b", 1.0)], 0, "t", "s", "#000")
    assert after_two - after_one == 18
    svg = parsed(document("h", [([("a", 1.0)], "bars", "s", "#000"), ([("x", 0.0, 1.0, "#f00")], "timeline")]))
    assert int(svg.get("height")) > after_one
