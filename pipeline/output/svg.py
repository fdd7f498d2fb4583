"""Charts as inline SVG text: line charts over time (with bands and marks), heat maps, nothing external.

Every label that comes from data goes through `html.escape`, so a client-id such as `<script>` is drawn
as text. Sizes are in SVG user units; the charts scale to the page width through `viewBox`.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
WIDTH, HEIGHT = 900, 300
LEFT, RIGHT, TOP, BOTTOM = 78, 16, 14, 44


def human_rate(value: float) -> str:
    """1234567 -> '1.23 MB/s' (decimal units, as Kafka's byte rates are plain bytes)."""
    return human_bytes(value) + "/s"


def human_bytes(value: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.3g} B"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    if not math.isfinite(low) or not math.isfinite(high) or high <= low:
        return [low]
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def time_ticks(low: float, high: float) -> list[tuple[float, str]]:
    """Ticks at whole hours or days (epoch seconds), labelled in UTC."""
    span = high - low
    choices = ((3600, "%H:%M"), (6 * 3600, "%d %b %H:%M"), (86400, "%d %b"), (7 * 86400, "%d %b"))
    for step, fmt in choices:  # noqa: B007 - the loop picks the first (step, fmt) that fits
        if span / step <= 10:
            break
    else:
        step, fmt = 30 * 86400, "%b %Y"
    first = math.ceil(low / step) * step
    ticks: list[tuple[float, str]] = []
    t = first
    while t <= high:
        label = datetime.datetime.fromtimestamp(t, datetime.UTC).strftime(fmt)
        ticks.append((t, label))
        t += step
    return ticks


@dataclass
class Series:
    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    color: str = ""
    dashed: bool = False


@dataclass
class Band:
    xs: Sequence[float]
    low: Sequence[float]
    high: Sequence[float]
    color: str = "#1f77b4"


@dataclass
class LineChart:
    title: str
    series: list[Series]
    bands: list[Band] = field(default_factory=list)
    hlines: list[tuple[float, str]] = field(default_factory=list)
    vlines: list[tuple[float, str]] = field(default_factory=list)
    # x ranges (start, end) shaded red: e.g. hours the records show the entity already throttled
    shaded: list[tuple[float, float]] = field(default_factory=list)
    time_axis: bool = True
    y_format: str = "rate"  # rate | bytes | plain
    width: int = WIDTH
    height: int = HEIGHT


def _fmt(value: float, kind: str) -> str:
    if kind == "rate":
        return human_rate(value)
    if kind == "bytes":
        return human_bytes(value)
    return f"{value:g}"


def line_chart(chart: LineChart) -> str:
    xs = [x for s in chart.series for x in s.xs] + [x for b in chart.bands for x in b.xs]
    ys = [y for s in chart.series for y in s.ys] + [y for b in chart.bands for y in (*b.low, *b.high)]
    ys += [y for y, _ in chart.hlines]
    xs += [x for x, _ in chart.vlines]
    if not xs or not ys:
        return _empty(chart.title, chart.width)
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1
    y1 = max(ys) * 1.08 or 1.0
    y0 = min(0.0, min(ys))
    w, h = chart.width, chart.height
    pw, ph = w - LEFT - RIGHT, h - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return TOP + ph - (y - y0) / (y1 - y0) * ph

    parts = [_open(chart.title, w, h)]
    for a, b in chart.shaded:
        parts.append(
            f'<rect class="shaded" x="{px(a):.1f}" y="{TOP}" width="{max(1.0, px(b) - px(a)):.1f}" '
            f'height="{ph}" fill="#d62728" fill-opacity="0.12"/>'
        )
    for tick in nice_ticks(y0, y1):
        y = py(tick)
        parts.append(f'<line x1="{LEFT}" x2="{w - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">'
            f"{escape(_fmt(tick, chart.y_format))}</text>"
        )
    x_ticks = time_ticks(x0, x1) if chart.time_axis else [(t, f"{t:g}") for t in nice_ticks(x0, x1, 8)]
    for tick, label in x_ticks:
        x = px(tick)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP + ph}" y2="{TOP + ph + 4}" stroke="#555"/>')
        parts.append(
            f'<text x="{x:.1f}" y="{TOP + ph + 18}" text-anchor="middle" font-size="11">'
            f"{escape(label)}</text>"
        )
    parts.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    for index, band in enumerate(chart.bands):
        upper = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(band.xs, band.high, strict=True))
        lower = " ".join(
            f"{px(x):.1f},{py(y):.1f}" for x, y in reversed(list(zip(band.xs, band.low, strict=True)))
        )
        color = band.color or PALETTE[index % len(PALETTE)]
        parts.append(f'<polygon class="band" points="{upper} {lower}" fill="{color}" fill-opacity="0.18"/>')
    for index, series in enumerate(chart.series):
        color = series.color or PALETTE[index % len(PALETTE)]
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(series.xs, series.ys, strict=True))
        dash = ' stroke-dasharray="5,4"' if series.dashed else ""
        parts.append(
            f'<polyline class="series" points="{points}" fill="none" stroke="{color}" '
            f'stroke-width="1.6"{dash}>'
            f"<title>{escape(series.label)}</title></polyline>"
        )
        if len(series.xs) == 1:
            # One point draws no line (a run shorter than the chart's step): mark it.
            x, y = px(series.xs[0]), py(series.ys[0])
            parts.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}"/>')
    for y, label in chart.hlines:
        parts.append(
            f'<line class="hline" x1="{LEFT}" x2="{w - RIGHT}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
            f'stroke="#000" stroke-dasharray="6,3"/>'
            f'<text x="{w - RIGHT - 4}" y="{py(y) - 4:.1f}" text-anchor="end" font-size="11">'
            f"{escape(label)}</text>"
        )
    for x, label in chart.vlines:
        parts.append(
            f'<line class="vline" x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{TOP}" y2="{TOP + ph}" '
            f'stroke="#d62728"/>'
            f'<text x="{px(x) + 4:.1f}" y="{TOP + 12}" font-size="11" fill="#d62728">{escape(label)}</text>'
        )
    parts.append(_legend([s.label for s in chart.series], [s.color for s in chart.series], w, h))
    parts.append("</svg>")
    return "".join(parts)


def heatmap(
    title: str,
    rows: list[str],
    columns: list[float],
    values: list[list[float]],
    column_labels: list[tuple[int, str]] | None = None,
    width: int = WIDTH,
) -> str:
    """Rows x columns of shares in [0, 1], white to dark red; `columns` are epoch seconds (hours)."""
    if not rows or not columns:
        return _empty(title, width)
    left = 190
    cell_h = 16
    h = TOP + cell_h * len(rows) + BOTTOM
    cell_w = (width - left - RIGHT) / len(columns)
    parts = [_open(title, width, h)]
    for r, label in enumerate(rows):
        y = TOP + r * cell_h
        parts.append(
            f'<text x="{left - 6}" y="{y + 12}" text-anchor="end" font-size="11">{escape(label[:30])}</text>'
        )
        for c, value in enumerate(values[r]):
            if value <= 0:
                continue
            share = min(1.0, value)
            shade = int(255 - 200 * share)
            parts.append(
                f'<rect class="cell" x="{left + c * cell_w:.2f}" y="{y}" width="{max(cell_w, 0.5):.2f}" '
                f'height="{cell_h - 1}" fill="rgb(255,{shade},{shade})">'
                f"<title>{escape(label)}: {share:.0%} throttled</title></rect>"
            )
    parts.append(
        f'<rect x="{left}" y="{TOP}" width="{width - left - RIGHT}" height="{cell_h * len(rows)}" '
        'fill="none" stroke="#999"/>'
    )
    if column_labels is None:
        index_of = {t: i for i, t in enumerate(columns)}
        column_labels = [(index_of[t], s) for t, s in time_ticks(columns[0], columns[-1]) if t in index_of]
    for index, label in column_labels:
        x = left + index * cell_w
        parts.append(
            f'<text x="{x:.1f}" y="{TOP + cell_h * len(rows) + 16}" text-anchor="middle" font-size="11">'
            f"{escape(label)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _open(title: str, w: int, h: int) -> str:
    return (
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" role="img" '
        f'aria-label="{escape(title)}" font-family="sans-serif"><title>{escape(title)}</title>'
    )


def _legend(labels: list[str], colors: list[str], w: int, h: int) -> str:
    parts = []
    x: float = LEFT
    for index, label in enumerate(labels):
        color = colors[index] or PALETTE[index % len(PALETTE)]
        text = escape(label[:40])
        parts.append(
            f'<rect x="{x}" y="{h - 16}" width="10" height="10" fill="{color}"/>'
            f'<text x="{x + 14}" y="{h - 7}" font-size="11">{text}</text>'
        )
        x += 24 + 6.5 * min(len(label), 40)
        if x > w - 100:
            break
    return "".join(parts)


def _empty(title: str, w: int) -> str:
    return (
        f'{_open(title, w, 60)}<text x="{LEFT}" y="34" font-size="13" fill="#777">'
        "no data for this chart</text></svg>"
    )
