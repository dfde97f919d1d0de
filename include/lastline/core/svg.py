"""Charts as SVG text: a few horizontal bar charts in one picture, written in milliseconds (no plotting
library: a report never delays the end of a run)."""
from __future__ import annotations

from xml.sax.saxutils import escape


def bars(rows: list[tuple[str, float]], top: int, title: str, unit: str, color: str) -> tuple[list[str], int]:
    """SVG elements of one horizontal bar chart starting at y=top; returns them and the next free y."""
    out = [f'<text x="10" y="{top + 14}" font-weight="bold">{escape(title)}</text>']
    peak = max((v for _, v in rows), default=0.0) or 1.0
    y = top + 24
    for label, value in rows:
        width = max(1.0, 520 * value / peak)
        out.append(f'<text x="290" y="{y + 12}" text-anchor="end">{escape(label[:48])}</text>')
        out.append(f'<rect x="300" y="{y + 2}" width="{width:.1f}" height="13" fill="{color}"/>')
        out.append(f'<text x="{305 + width:.1f}" y="{y + 12}">{value:,.1f} {escape(unit)}</text>')
        y += 18
    return out, y + 10


def document(heading: str, charts: list[tuple[list[tuple[str, float]], str, str, str]]) -> str:
    """One SVG: a heading, then each (rows, title, unit, color) as a bar chart under the one before."""
    body = [f'<text x="10" y="20" font-size="14">{escape(heading)}</text>']
    y = 30
    for rows, title, unit, color in charts:
        part, y = bars(rows, y, title, unit, color)
        body += part
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="960" height="{y}" font-family="sans-serif" font-size="12">\n'
            '<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")
