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


def timeline(rows: list[tuple[str, float, float, str]], top: int, title: str) -> tuple[list[str], int]:
    """SVG elements of a timeline starting at y=top: each (label, start s, duration s, color) as a bar placed
    at its start; returns them and the next free y."""
    out = [f'<text x="10" y="{top + 14}" font-weight="bold">{escape(title)}</text>']
    end = max((s + d for _, s, d, _ in rows), default=0.0) or 1.0
    scale = 560 / end
    y = top + 24
    for label, start, duration, color in rows:
        x, width = 300 + start * scale, max(1.0, duration * scale)
        out.append(f'<text x="290" y="{y + 12}" text-anchor="end">{escape(label[:48])}</text>')
        out.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{width:.1f}" height="13" fill="{color}"/>')
        out.append(f'<text x="{x + width + 5:.1f}" y="{y + 12}">{duration:,.1f} s</text>')
        y += 18
    out.append(f'<text x="300" y="{y + 12}" fill="#666">0 s</text>')
    out.append(f'<text x="860" y="{y + 12}" text-anchor="end" fill="#666">{end:,.1f} s</text>')
    return out, y + 28


Chart = tuple[list[tuple[str, float]], str, str, str]  # (rows, title, unit, color): a bar chart
Timeline = tuple[list[tuple[str, float, float, str]], str]  # (rows, title): a timeline


def document(heading: str, charts: list[Chart | Timeline]) -> str:
    """One SVG: a heading, then each chart (bars) or timeline under the one before."""
    body = [f'<text x="10" y="20" font-size="14">{escape(heading)}</text>']
    y = 30
    for chart in charts:
        if len(chart) == 2:
            part, y = timeline(chart[0], y, chart[1])
        else:
            part, y = bars(chart[0], y, chart[1], chart[2], chart[3])
        body += part
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="960" height="{y}" font-family="sans-serif" font-size="12">\n'
            '<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")
