"""The one HTML page a person reads: every job's results that exist under the output directory.

Self-contained: inline CSS, charts drawn by plotly (`charts.py`, its script written into the page once),
no external file, font or CDN, so it opens from a mail attachment or an air-gapped share as it is. Each
job re-renders it from the CSV tables under `<out>/` (`render_report(out)`), so running `report` and then
`whatif` gives one page with both.
"""

from __future__ import annotations

import datetime
import os
from collections import OrderedDict
from html import escape

from .charts import heatmap as plotly_heatmap
from .charts import plotly_script
from .html_brokers import brokers_section
from .html_parts import cell, entity, line_chart, resolution, table, ts, when
from .html_planning import forecast_section, propose_section, whatif_section
from .svg import LineChart, Series, human_bytes
from .tables import read_csv

REPORT_NAME = "report.html"
STYLE = """
body{font-family:sans-serif;margin:24px auto;max-width:1000px;color:#222}
h1{font-size:24px}h2{font-size:19px;margin-top:36px;border-bottom:1px solid #ccc}h3{font-size:15px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 6px}
td.n{text-align:right}th{background:#f3f3f3}
.note{background:#fff6e0;border:1px solid #f0c36d;padding:8px}
svg.chart{width:100%;height:auto;margin:6px 0}figure{margin:14px 0}
figcaption{font-size:13px;font-weight:bold}pre{background:#f6f6f6;padding:8px;font-size:12px}
"""


def _report_section(directory: str) -> str:
    over_time = read_csv(directory, "cluster_over_time")
    if not over_time:
        return ""
    span = resolution(directory)
    unit = span["unit"]
    axis = f"time (UTC), one point per {unit}"
    parts = ["<h2>Usage</h2>"]
    xs = [ts(r["time"]) for r in over_time]
    produced = sum(cell(r, "produce_bytes") for r in over_time)
    fetched = sum(cell(r, "fetch_bytes") for r in over_time)
    parts.append(
        f"<p>From {escape(when(span['first']))} to {escape(when(span['last']))} (UTC): "
        f"{escape(human_bytes(produced))} produced, {escape(human_bytes(fetched))} fetched through Sluice. "
        f"Charts over time have one point per {escape(unit)}: the mean (and max) of the per-interval rates "
        "within it.</p>"
    )
    parts.append(
        line_chart(
            LineChart(
                f"Cluster rate over time (mean and max per {unit} of the per-interval rate)",
                [
                    Series("produce mean", xs, [cell(r, "produce_mean") for r in over_time], "#1f77b4"),
                    Series(
                        "produce max", xs, [cell(r, "produce_max") for r in over_time], "#1f77b4", dashed=True
                    ),
                    Series("fetch mean", xs, [cell(r, "fetch_mean") for r in over_time], "#2ca02c"),
                    Series(
                        "fetch max", xs, [cell(r, "fetch_max") for r in over_time], "#2ca02c", dashed=True
                    ),
                ],
            ),
            axis,
        )
    )
    top = read_csv(directory, "top_entities_over_time")
    by_entity: OrderedDict[str, list[dict[str, str]]] = OrderedDict()
    for row in top:
        by_entity.setdefault(entity(row), []).append(row)
    parts.append(
        line_chart(
            LineChart(
                f"Top talkers: produce + fetch rate, mean per {unit}",
                [
                    Series(
                        name,
                        [ts(r["time"]) for r in rows],
                        [cell(r, "produce_mean") + cell(r, "fetch_mean") for r in rows],
                    )
                    for name, rows in by_entity.items()
                ],
            ),
            axis,
        )
    )
    parts.append(_daily_profile(directory, span))
    parts.append("<h3>Top talkers</h3>")
    parts.append(
        table(
            read_csv(directory, "top_talkers"),
            [
                ("user", "user", "text"),
                ("client_id", "client-id", "text"),
                ("total_bytes", "bytes", "bytes"),
                ("share", "share", "share"),
                ("produce_p99", "produce p99", "rate"),
                ("fetch_p99", "fetch p99", "rate"),
                ("throttled_share", "throttled", "share"),
            ],
        )
    )
    parts.append(
        "<p><i>throttled</i>: the throttle time Sluice told the entity, summed over its responses, over "
        "its active time. Its connections (and a connection's pipelined requests) are told at once, so "
        "this passes 100 % when several were held in the same second.</p>"
    )
    return "".join(parts) + _rest_of_report(directory, unit)


def _daily_profile(directory: str, span: dict[str, str]) -> str:
    first, last = span.get("first"), span.get("last")
    if first and last and ts(last) - ts(first) < 86_400:
        return "<p>(The daily profile, by hour of day, needs a day of records or more.)</p>"
    profile = read_csv(directory, "daily_profile")
    hours = [cell(r, "hour_of_day") for r in profile]
    return line_chart(
        LineChart(
            "Daily profile (UTC hour of day): cluster rate",
            [
                Series("produce mean", hours, [cell(r, "produce_mean") for r in profile], "#1f77b4"),
                Series(
                    "produce p95",
                    hours,
                    [cell(r, "produce_p95") for r in profile],
                    "#1f77b4",
                    dashed=True,
                ),
                Series("fetch mean", hours, [cell(r, "fetch_mean") for r in profile], "#2ca02c"),
                Series("fetch p95", hours, [cell(r, "fetch_p95") for r in profile], "#2ca02c", dashed=True),
            ],
            time_axis=False,
        )
    )


def _rest_of_report(directory: str, unit: str) -> str:
    parts = []
    parts.append(_heatmap(read_csv(directory, "throttle_heatmap"), unit))
    parts.append("<h3>Topics</h3>")
    parts.append(
        table(
            read_csv(directory, "topic_summary"),
            [
                ("topic", "topic", "text"),
                ("produce_bytes", "produced", "bytes"),
                ("produce_share", "share", "share"),
                ("produce_p99", "produce p99", "rate"),
                ("fetch_bytes", "fetched", "bytes"),
                ("fetch_p99", "fetch p99", "rate"),
            ],
        )
    )
    parts.append("<h3>Cluster by day</h3>")
    parts.append(
        table(
            read_csv(directory, "cluster_daily"),
            [
                ("day", "day", "text"),
                ("produce_bytes", "produced", "bytes"),
                ("fetch_bytes", "fetched", "bytes"),
                ("produce_max", "produce peak", "rate"),
                ("fetch_max", "fetch peak", "rate"),
                ("total_max", "total peak", "rate"),
                ("active_entities", "entities", "num"),
                ("throttle_ms", "throttle time", "ms"),
            ],
            limit=62,
        )
    )
    return "".join(parts)


def _heatmap(rows: list[dict[str, str]], unit: str) -> str:
    if not rows:
        return "<h3>Throttling</h3><p>No entity was throttled in the records.</p>"
    times = sorted({ts(r["time"]) for r in rows})
    index = {t: i for i, t in enumerate(times)}
    names = list(OrderedDict.fromkeys(entity(r) for r in rows))
    values = [[0.0] * len(times) for _ in names]
    for r in rows:
        values[names.index(entity(r))][index[ts(r["time"])]] = cell(r, "throttled_share")
    title = f"Throttled share of active time, by entity and {unit}"
    chart = plotly_heatmap(names, times, values, f"time (UTC), one column per {unit}")
    return f"<h3>Throttling</h3><figure><figcaption>{escape(title)}</figcaption>{chart}</figure>"


def render_report(out: str, title: str = "Sluice usage report") -> str:
    """(Re)write `<out>/report.html` from the tables present; returns its path."""
    sections = [
        _report_section(os.path.join(out, "report")),
        brokers_section(os.path.join(out, "report")),
        whatif_section(os.path.join(out, "whatif")),
        propose_section(os.path.join(out, "propose")),
        forecast_section(os.path.join(out, "forecast")),
    ]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = "".join(sections) or "<p>No results yet: run a job first.</p>"
    page = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style><script>{plotly_script()}</script></head><body><h1>{escape(title)}</h1>"
        f"<p>Made by <code>sluice pipeline</code> on {now}.</p>{body}</body></html>"
    )
    path = os.path.join(out, REPORT_NAME)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(page)
    return path
