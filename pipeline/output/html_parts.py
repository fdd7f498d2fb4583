"""Pieces the report's sections share: reading CSV cells, entity names, tables, captioned charts."""

from __future__ import annotations

import datetime
from html import escape

from .charts import line_chart as plotly_line_chart
from .svg import LineChart, human_bytes, human_rate
from .tables import read_csv


def line_chart(chart: LineChart, x_title: str = "") -> str:
    """The chart (plotly: hover, zoom, a legend that toggles series) with its title above it."""
    return (
        f"<figure><figcaption>{escape(chart.title)}</figcaption>{plotly_line_chart(chart, x_title)}</figure>"
    )


def resolution(directory: str) -> dict[str, str]:
    """The charts' time unit the report job chose from the span of the records, and the span."""
    found = {r["name"]: r["value"] for r in read_csv(directory, "chart_resolution")}
    return found or {"unit": "hour", "seconds": "3600", "first": "", "last": ""}


def when(text: str) -> str:
    """An ISO time from a table, as the page shows it."""
    return text.replace("T", " ")[:19] if text else "?"


def ts(text: str) -> float:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=datetime.UTC).timestamp()


def cell(row: dict[str, str], key: str) -> float:
    value = row.get(key, "")
    return float(value) if value not in ("", None) else 0.0


def entity(row: dict[str, str]) -> str:
    user, client = row.get("user") or "", row.get("client_id") or ""
    if user and client:
        return f"{user} / {client}"
    return user or client or "(none)"


def table(rows: list[dict[str, str]], columns: list[tuple[str, str, str]], limit: int = 25) -> str:
    """columns: (key, header, kind) with kind text | rate | bytes | share | ms | num."""
    if not rows:
        return "<p>(none)</p>"
    head = "".join(f"<th>{escape(header)}</th>" for _, header, _ in columns)
    body = []
    for row in rows[:limit]:
        cells = []
        for key, _, kind in columns:
            value = row.get(key, "")
            if kind == "text" or value in ("", None):
                cells.append(f"<td>{escape(str(value))}</td>")
                continue
            number = float(value)
            shown = {
                "rate": human_rate(number),
                "bytes": human_bytes(number),
                "share": f"{number:.1%}",
                "ms": f"{number / 1000:,.1f} s",
                "num": f"{number:,.0f}",
            }[kind]
            cells.append(f'<td class="n">{escape(shown)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = f"<p>{len(rows) - limit} more rows in the CSV.</p>" if len(rows) > limit else ""
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{more}"
