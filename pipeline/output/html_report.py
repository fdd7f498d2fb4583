"""The one HTML page a person reads: every job's results that exist under the output directory.

Self-contained: inline CSS, inline SVG charts (`svg.py`), no script, no external file, font or CDN, so it
opens from a mail attachment or an air-gapped share as it is. Each job re-renders it from the CSV tables
under `<out>/` (`render_report(out)`), so running `report` and then `whatif` gives one page with both.
"""

from __future__ import annotations

import datetime
import os
from collections import OrderedDict
from html import escape

from .svg import Band, LineChart, Series, heatmap, human_bytes, human_rate, line_chart as _svg_line_chart
from .tables import read_csv

REPORT_NAME = "report.html"
STYLE = """
body{font-family:sans-serif;margin:24px auto;max-width:1000px;color:#222}
h1{font-size:24px}h2{font-size:19px;margin-top:36px;border-bottom:1px solid #ccc}h3{font-size:15px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 6px}
td.n{text-align:right}th{background:#f3f3f3}.note{background:#fff6e0;border:1px solid #f0c36d;padding:8px}
svg.chart{width:100%;height:auto;margin:6px 0}figure{margin:14px 0}figcaption{font-size:13px;font-weight:bold}pre{background:#f6f6f6;padding:8px;font-size:12px}
"""


def line_chart(chart: LineChart) -> str:
    """The chart with its title shown above it (the SVG's own title is only a tooltip)."""
    return f"<figure><figcaption>{escape(chart.title)}</figcaption>{_svg_line_chart(chart)}</figure>"


def _ts(text: str) -> float:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=datetime.UTC).timestamp()


def _f(row: dict[str, str], key: str) -> float:
    value = row.get(key, "")
    return float(value) if value not in ("", None) else 0.0


def _entity(row: dict[str, str]) -> str:
    user, client = row.get("user") or "", row.get("client_id") or ""
    if user and client:
        return f"{user} / {client}"
    return user or client or "(none)"


def _table(rows: list[dict[str, str]], columns: list[tuple[str, str, str]], limit: int = 25) -> str:
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
                "rate": human_rate(number), "bytes": human_bytes(number), "share": f"{number:.1%}",
                "ms": f"{number / 1000:,.1f} s", "num": f"{number:,.0f}",
            }[kind]
            cells.append(f'<td class="n">{escape(shown)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = f"<p>{len(rows) - limit} more rows in the CSV.</p>" if len(rows) > limit else ""
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{more}"


def _report_section(directory: str) -> str:
    hourly = read_csv(directory, "cluster_hourly")
    if not hourly:
        return ""
    parts = ["<h2>Usage</h2>"]
    xs = [_ts(r["hour"]) for r in hourly]
    first, last = hourly[0]["hour"], hourly[-1]["hour"]
    produced = sum(_f(r, "produce_bytes") for r in hourly)
    fetched = sum(_f(r, "fetch_bytes") for r in hourly)
    parts.append(
        f"<p>From {escape(first)} to {escape(last)} (UTC): {escape(human_bytes(produced))} produced, "
        f"{escape(human_bytes(fetched))} fetched through Sluice.</p>"
    )
    parts.append(line_chart(LineChart("Cluster rate over time (hourly mean and max of the per-interval rate)", [
        Series("produce mean", xs, [_f(r, "produce_mean") for r in hourly], "#1f77b4"),
        Series("produce max", xs, [_f(r, "produce_max") for r in hourly], "#1f77b4", dashed=True),
        Series("fetch mean", xs, [_f(r, "fetch_mean") for r in hourly], "#2ca02c"),
        Series("fetch max", xs, [_f(r, "fetch_max") for r in hourly], "#2ca02c", dashed=True),
    ])))
    top = read_csv(directory, "top_entities_hourly")
    by_entity: OrderedDict[str, list[dict[str, str]]] = OrderedDict()
    for row in top:
        by_entity.setdefault(_entity(row), []).append(row)
    parts.append(line_chart(LineChart("Top talkers: produce + fetch rate, hourly mean", [
        Series(name, [_ts(r["hour"]) for r in rows], [_f(r, "produce_mean") + _f(r, "fetch_mean") for r in rows])
        for name, rows in by_entity.items()
    ])))
    profile = read_csv(directory, "daily_profile")
    hours = [_f(r, "hour_of_day") for r in profile]
    parts.append(line_chart(LineChart("Daily profile (UTC hour of day): cluster rate", [
        Series("produce mean", hours, [_f(r, "produce_mean") for r in profile], "#1f77b4"),
        Series("produce p95", hours, [_f(r, "produce_p95") for r in profile], "#1f77b4", dashed=True),
        Series("fetch mean", hours, [_f(r, "fetch_mean") for r in profile], "#2ca02c"),
        Series("fetch p95", hours, [_f(r, "fetch_p95") for r in profile], "#2ca02c", dashed=True),
    ], time_axis=False)))
    parts.append("<h3>Top talkers</h3>")
    parts.append(_table(read_csv(directory, "top_talkers"), [
        ("user", "user", "text"), ("client_id", "client-id", "text"), ("total_bytes", "bytes", "bytes"),
        ("share", "share", "share"), ("produce_p99", "produce p99", "rate"), ("fetch_p99", "fetch p99", "rate"),
        ("throttled_share", "throttled", "share"),
    ]))
    parts.append(_heatmap(read_csv(directory, "throttle_heatmap")))
    parts.append("<h3>Topics</h3>")
    parts.append(_table(read_csv(directory, "topic_summary"), [
        ("topic", "topic", "text"), ("produce_bytes", "produced", "bytes"), ("produce_share", "share", "share"),
        ("produce_p99", "produce p99", "rate"), ("fetch_bytes", "fetched", "bytes"),
        ("fetch_p99", "fetch p99", "rate"),
    ]))
    parts.append("<h3>Cluster by day</h3>")
    parts.append(_table(read_csv(directory, "cluster_daily"), [
        ("day", "day", "text"), ("produce_bytes", "produced", "bytes"), ("fetch_bytes", "fetched", "bytes"),
        ("produce_max", "produce peak", "rate"), ("fetch_max", "fetch peak", "rate"),
        ("total_max", "total peak", "rate"), ("active_entities", "entities", "num"),
        ("throttle_ms", "throttle time", "ms"),
    ], limit=62))
    return "".join(parts)


def _heatmap(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "<h3>Throttling</h3><p>No entity was throttled in the records.</p>"
    hours = sorted({_ts(r["hour"]) for r in rows})
    index = {h: i for i, h in enumerate(hours)}
    names = list(OrderedDict.fromkeys(_entity(r) for r in rows))
    values = [[0.0] * len(hours) for _ in names]
    for r in rows:
        values[names.index(_entity(r))][index[_ts(r["hour"])]] = _f(r, "throttled_share")
    title = "Throttled share of active time, by entity and hour"
    return f"<h3>Throttling</h3><figure><figcaption>{title}</figcaption>{heatmap(title, names, hours, values)}</figure>"


def _whatif_section(directory: str) -> str:
    entities = read_csv(directory, "entities")
    if not entities:
        return ""
    stats = {r["name"]: r["value"] for r in read_csv(directory, "summary")}
    parts = ["<h2>What-if: the candidate quotas replayed</h2>"]
    parts.append(
        f"<p>{escape(stats.get('sensor_groups', '?'))} sensor group(s); fetch_throttle "
        f"{escape(stats.get('fetch_throttle', '?'))}, throttle_mode {escape(stats.get('throttle_mode', '?'))}. "
        f"Not replayed: {escape(stats.get('not_replayed', '[]'))}.</p>"
    )
    understated = [r for r in entities if r.get("demand_understated") == "True"]
    if understated:
        names = ", ".join(sorted({_entity(r) for r in understated}))
        parts.append(
            f'<p class="note">Recorded demand understates what these entities wanted, because they were '
            f"already throttled when the records were made (red hours below): {escape(names)}. For them the "
            "what-if is a lower bound.</p>"
        )
    parts.append(_table(entities, [
        ("user", "user", "text"), ("client_id", "client-id", "text"), ("direction", "", "text"),
        ("bound", "quota", "rate"), ("throttle_ms", "throttle time", "ms"),
        ("throttled_seconds", "throttled s", "num"), ("throttled_share", "share", "share"),
        ("delayed_bytes", "held back", "bytes"), ("backlog_end_bytes", "still waiting", "bytes"),
        ("recorded_throttle_ms", "recorded throttle", "ms"), ("demand_understated", "understated", "text"),
    ]))
    rows = read_csv(directory, "before_after")
    groups: OrderedDict[str, list[dict[str, str]]] = OrderedDict()
    for row in rows:
        groups.setdefault(f"{_entity(row)} ({row['direction']})", []).append(row)
    for name, series in groups.items():
        xs = [_ts(r["hour"]) for r in series]
        shaded = [(x, x + 3600) for x, r in zip(xs, series, strict=True) if _f(r, "recorded_throttle_ms") > 0]
        parts.append(line_chart(LineChart(f"Before / after: {name}, hourly mean rate", [
            Series("recorded demand (before)", xs, [_f(r, "demand") / 3600 for r in series], "#777777"),
            Series("admitted under candidates (after)", xs, [_f(r, "admitted") / 3600 for r in series], "#d62728"),
        ], shaded=shaded, height=220)))
    return "".join(parts)


def _propose_section(directory: str) -> str:
    rows = read_csv(directory, "proposals")
    if not rows:
        return ""
    parts = ["<h2>Proposed quotas</h2>", _table(rows, [
        ("user", "user", "text"), ("client_id", "client-id", "text"),
        ("produce_observed", "produce observed", "rate"), ("producer_byte_rate", "producer_byte_rate", "rate"),
        ("fetch_observed", "fetch observed", "rate"), ("consumer_byte_rate", "consumer_byte_rate", "rate"),
        ("scaled", "scaled to budget", "text"), ("understated", "understated", "text"),
    ], limit=40)]
    path = os.path.join(directory, "quotas.yaml")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
        parts.append(f"<h3>quotas.yaml</h3><pre>{escape(text[:6000])}</pre>")
    return "".join(parts)


def _forecast_section(directory: str) -> str:
    summary = read_csv(directory, "forecast")
    if not summary:
        return ""
    s = summary[0]
    peaks = read_csv(directory, "daily_peaks")
    projection = read_csv(directory, "projection")
    xs = [_ts(r["day"]) for r in peaks]
    px = [_ts(r["day"]) for r in projection]
    capacity = _f(s, "capacity")
    crossing = s.get("crossing", "")
    chart = LineChart(
        f"Daily peak ({s['metric']}) and its trend, {float(s['confidence']):.0%} prediction interval",
        [
            Series("daily peak", xs, [_f(r, "peak") for r in peaks], "#1f77b4"),
            Series("trend", xs + px, [_f(r, "fitted") for r in peaks + projection], "#000000", dashed=True),
        ],
        bands=[Band(xs + px, [_f(r, "lower") for r in peaks + projection],
                    [_f(r, "upper") for r in peaks + projection], "#1f77b4")],
        hlines=[(capacity, f"capacity {human_rate(capacity)}")] if capacity else [],
        vlines=[(_ts(crossing), f"crossing {crossing}")] if crossing else [],
    )
    text = (
        f"<p>Trend {escape(human_rate(_f(s, 'slope_per_day')))} per day over {escape(s['days'])} complete days "
        f"(R² {float(s['r2']):.2f}). {escape(s['status'])}"
    )
    if crossing:
        text += (f": {escape(crossing)} (earliest {escape(s.get('earliest') or '-')}, latest "
                 f"{escape(s.get('latest') or 'not within the horizon')})")
    return "<h2>Forecast</h2>" + text + "</p>" + line_chart(chart)


def render_report(out: str, title: str = "Sluice usage report") -> str:
    """(Re)write `<out>/report.html` from the tables present; returns its path."""
    sections = [
        _report_section(os.path.join(out, "report")),
        _whatif_section(os.path.join(out, "whatif")),
        _propose_section(os.path.join(out, "propose")),
        _forecast_section(os.path.join(out, "forecast")),
    ]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = "".join(sections) or "<p>No results yet: run a job first.</p>"
    page = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>"
        f"<p>Made by <code>sluice pipeline</code> on {now}.</p>{body}</body></html>"
    )
    path = os.path.join(out, REPORT_NAME)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(page)
    return path
