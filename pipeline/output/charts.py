"""The report's charts, drawn by plotly: hover for values, zoom and pan, a legend naming every series that
toggles it on a click.

The page stays self-contained: plotly.js is written into it once (`PLOTLY_SCRIPT`, ~4.8 MB, read from the
plotly package), each chart is a div with its figure as JSON and one call to draw it, and nothing is
fetched when the page is opened. The chart descriptions (`svg.LineChart`, `Series`, `Band`) are the ones
the sections already build; this module turns them into figures.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING

from .svg import LineChart

if TYPE_CHECKING:
    import plotly.graph_objects as go

_AXIS_TITLES = {"rate": "bytes/s", "bytes": "bytes", "plain": ""}
_PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
# Self-contained and quiet: no "edit in Chart Studio" link, no logo, no network at view time.
_CONFIG = {"displaylogo": False, "responsive": True}


def plotly_script() -> str:
    """plotly.js, for one <script> in the page's head."""
    from plotly.offline import get_plotlyjs

    # A literal "</script>" inside the library would end the element early.
    script: str = get_plotlyjs()
    return script.replace("</script>", "<\\/script>")


def _time(xs: Sequence[float]) -> list[str]:
    return [datetime.datetime.fromtimestamp(x, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S") for x in xs]


def _figure_html(figure: go.Figure, height: int) -> str:
    figure.update_layout(
        height=height,
        margin={"l": 60, "r": 20, "t": 10, "b": 40},
        # At the right, one entry a line: every series named, a click hides or shows it.
        legend={"orientation": "v", "x": 1.02, "y": 0.9, "font": {"size": 11}},
        hovermode="x unified",
        template="plotly_white",
    )
    html: str = figure.to_html(full_html=False, include_plotlyjs=False, config=_CONFIG)
    return html


def line_chart(chart: LineChart, x_title: str = "") -> str:
    """The chart as a plotly div; every series in the legend, dashed ones dashed, bands filled."""
    import plotly.graph_objects as go

    if not any(s.xs for s in chart.series) and not any(b.xs for b in chart.bands):
        return "<p>(no data)</p>"
    x_of = _time if chart.time_axis else list
    figure = go.Figure()
    for band in chart.bands:
        figure.add_trace(
            go.Scatter(
                x=x_of(band.xs),
                y=list(band.low),
                mode="lines",
                line={"width": 0},
                showlegend=False,
                hoverinfo="skip",
            )
        )
        figure.add_trace(
            go.Scatter(
                x=x_of(band.xs),
                y=list(band.high),
                mode="lines",
                line={"width": 0},
                fill="tonexty",
                fillcolor=_faint(band.color),
                name="range",
                hoverinfo="skip",
            )
        )
    unit = " B/s" if chart.y_format == "rate" else " B" if chart.y_format == "bytes" else ""
    for index, series in enumerate(chart.series):
        color = series.color or _PALETTE[index % len(_PALETTE)]
        figure.add_trace(
            go.Scatter(
                x=x_of(series.xs),
                y=list(series.ys),
                name=escape(series.label),
                mode="lines+markers" if len(series.xs) < 60 else "lines",
                marker={"size": 4},
                line={"color": color, "dash": "dash" if series.dashed else "solid", "width": 1.6},
                hovertemplate=f"%{{y:,.4~s}}{unit}<extra>{escape(series.label)}</extra>",
            )
        )
    for value, label in chart.hlines:
        figure.add_hline(y=value, line={"dash": "dot", "color": "#555"}, annotation_text=escape(label))
    for x, label in chart.vlines:
        at = _time([x])[0] if chart.time_axis else x
        figure.add_vline(x=at, line={"dash": "dot", "color": "#555"})
        figure.add_annotation(x=at, y=1, yref="paper", text=escape(label), showarrow=False, yanchor="bottom")
    for start, end in chart.shaded:
        a, b = (_time([start])[0], _time([end])[0]) if chart.time_axis else (start, end)
        figure.add_vrect(x0=a, x1=b, fillcolor="#d62728", opacity=0.12, line_width=0)
    figure.update_yaxes(title_text=_AXIS_TITLES.get(chart.y_format, ""), rangemode="tozero", tickformat="~s")
    if x_title:
        figure.update_xaxes(title_text=x_title)
    return _figure_html(figure, chart.height + 60)


def heatmap(
    names: Sequence[str], xs: Sequence[float], values: Sequence[Sequence[float]], x_title: str
) -> str:
    """Rows of shares (0..1) over time, darker is more; hover gives the entity, the time and the share."""
    import plotly.graph_objects as go

    figure = go.Figure(
        go.Heatmap(
            z=[list(row) for row in values],
            x=_time(xs),
            y=[escape(name) for name in names],
            colorscale="Reds",
            zmin=0,
            zmax=max(1.0, max((v for row in values for v in row), default=0.0)),
            colorbar={"title": {"text": "share"}, "tickformat": ".0%"},
            hovertemplate="%{y}<br>%{x}<br>%{z:.1%}<extra></extra>",
        )
    )
    figure.update_xaxes(title_text=x_title)
    figure.update_yaxes(autorange="reversed")
    return _figure_html(figure, 120 + 22 * len(names))


def _faint(color: str) -> str:
    red, green, blue = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red},{green},{blue},0.18)"
