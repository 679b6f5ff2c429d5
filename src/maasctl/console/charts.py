"""Charts drawn on the server as inline SVG: no chart library and nothing fetched by the browser.

Every label is escaped here; the result is Markup so templates embed it as is. The chart carries a text
alternative (role="img", <title>, <desc>) and the same figures appear in a table next to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from markupsafe import Markup, escape

from maasctl.contract.quantities import format_tokens


def _nice_max(value: int, ticks: int = 4) -> int:
    """A round axis maximum at or above `value`: `ticks` steps of 1, 2 or 5 x 10^n (so every tick is whole)."""
    scale = 1
    while True:
        for step in (1, 2, 5):
            if step * scale * ticks >= value:
                return step * scale * ticks
        scale *= 10


def bar_chart(points: Sequence[tuple[str, int]], title: str, ident: str = "chart", width: int = 720,
              height: int = 220, fmt: Callable[[int], str] | None = None, unit: str = "tokens") -> Markup:
    """A bar per (label, value) point, with a y axis in token quantities (100M, 1.5B); `fmt` writes a value
    otherwise (the billing pages give money in integer micro-units and write them as decimal strings: the
    bars' geometry is pixels, never an amount). Negative values are drawn as empty bars (the table says)."""
    show = fmt or format_tokens
    unit = f" {unit}" if unit else ""
    points = [(label, max(value, 0)) for label, value in points]
    ident = "".join(c for c in ident if c.isalnum() or c == "-") or "chart"
    left, bottom, top, right = 56, 28, 12, 8
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = _nice_max(max((v for _, v in points), default=0))
    n = max(len(points), 1)
    slot = plot_w / n
    bar_w = max(slot * 0.7, 1.0)
    total = sum(v for _, v in points)
    parts = [
        f'<svg class="chart" role="img" aria-labelledby="{ident}-t {ident}-d" viewBox="0 0 {width} {height}" '
        f'width="100%" preserveAspectRatio="xMidYMid meet" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="{ident}-t">{escape(title)}</title>',
        f'<desc id="{ident}-d">{len(points)} periods, {escape(show(total))}{escape(unit)} in all</desc>',
    ]
    for i in range(5):
        value = peak * i // 4
        y = top + plot_h - plot_h * i / 4
        parts.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f'{escape(show(value))}</text>')
    every = max(1, n // 12)  # at most ~12 x labels
    for i, (label, value) in enumerate(points):
        h = plot_h * value / peak
        x = left + i * slot + (slot - bar_w) / 2
        y = top + plot_h - h
        parts.append(f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}">'
                     f'<title>{escape(label)}: {escape(show(value))}{escape(unit)}</title></rect>')
        if i % every == 0:
            parts.append(f'<text class="axis" x="{x + bar_w / 2:.1f}" y="{height - 8}" text-anchor="middle">'
                         f'{escape(label)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
