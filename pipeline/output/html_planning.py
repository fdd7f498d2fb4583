"""The report's planning sections: what-if before/after, proposed quotas, the forecast."""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from html import escape

from .html_parts import cell, entity, line_chart, table, ts
from .svg import Band, LineChart, Series, human_rate
from .tables import read_csv


def whatif_section(directory: str) -> str:
    entities = read_csv(directory, "entities")
    if not entities:
        return ""
    stats = {r["name"]: r["value"] for r in read_csv(directory, "summary")}
    parts = ["<h2>What-if: the candidate quotas replayed</h2>"]
    skipped = json.loads(stats.get("not_replayed") or "[]")
    not_replayed = (
        f" Not replayed: {', '.join(skipped)}." if skipped else " Every candidate quota was replayed."
    )
    parts.append(
        f"<p>{escape(stats.get('sensor_groups', '?'))} sensor group(s) replayed (entities sharing a quota "
        "share its sensor); "
        f"fetch_throttle {escape(stats.get('fetch_throttle', '?'))}, "
        f"throttle_mode {escape(stats.get('throttle_mode', '?'))}.{escape(not_replayed)}</p>"
    )
    understated = [r for r in entities if r.get("demand_understated") == "True"]
    if understated:
        names = ", ".join(sorted({entity(r) for r in understated}))
        parts.append(
            f'<p class="note">Recorded demand understates what these entities wanted, because they were '
            f"already throttled when the records were made (red hours below): {escape(names)}. For them the "
            "what-if is a lower bound.</p>"
        )
    parts.append(
        table(
            entities,
            [
                ("user", "user", "text"),
                ("client_id", "client-id", "text"),
                ("direction", "produce / fetch", "text"),
                ("bound", "quota", "rate"),
                ("throttle_ms", "throttle time", "ms"),
                ("throttled_seconds", "throttled s", "num"),
                ("throttled_share", "throttled s / active s", "share"),
                ("delayed_bytes", "held back", "bytes"),
                ("backlog_end_bytes", "still waiting", "bytes"),
                ("recorded_throttle_ms", "recorded throttle", "ms"),
                ("demand_understated", "understated", "text"),
            ],
        )
    )
    parts.append(
        "<p><i>throttled s / active s</i>: the seconds the replay held the entity back, over the seconds "
        "the records show it active. Above 100 % means what the quota held back was still being let "
        "through after the entity's recorded traffic had stopped: its backlog outlasted its activity.</p>"
    )
    rows = read_csv(directory, "before_after")
    groups: OrderedDict[str, list[dict[str, str]]] = OrderedDict()
    for row in rows:
        groups.setdefault(f"{entity(row)} ({row['direction']})", []).append(row)
    for name, series in groups.items():
        xs = [ts(r["hour"]) for r in series]
        shaded = [
            (x, x + 3600) for x, r in zip(xs, series, strict=True) if cell(r, "recorded_throttle_ms") > 0
        ]
        parts.append(
            line_chart(
                LineChart(
                    f"Before / after: {name}, hourly mean rate",
                    [
                        Series(
                            "recorded demand (before)",
                            xs,
                            [cell(r, "demand") / 3600 for r in series],
                            "#777777",
                        ),
                        Series(
                            "admitted under candidates (after)",
                            xs,
                            [cell(r, "admitted") / 3600 for r in series],
                            "#d62728",
                        ),
                    ],
                    shaded=shaded,
                    height=220,
                )
            )
        )
    return "".join(parts)


def propose_section(directory: str) -> str:
    rows = read_csv(directory, "proposals")
    if not rows:
        return ""
    parts = [
        "<h2>Proposed quotas</h2>",
        table(
            rows,
            [
                ("user", "user", "text"),
                ("client_id", "client-id", "text"),
                ("produce_observed", "produce observed", "rate"),
                ("producer_byte_rate", "producer_byte_rate", "rate"),
                ("fetch_observed", "fetch observed", "rate"),
                ("consumer_byte_rate", "consumer_byte_rate", "rate"),
                ("scaled", "scaled to budget", "text"),
                ("understated", "understated", "text"),
            ],
            limit=40,
        ),
    ]
    path = os.path.join(directory, "quotas.yaml")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
        parts.append(f"<h3>quotas.yaml</h3><pre>{escape(text[:6000])}</pre>")
    return "".join(parts)


def forecast_section(directory: str) -> str:
    summary = read_csv(directory, "forecast")
    if not summary:
        return ""
    s = summary[0]
    peaks = read_csv(directory, "daily_peaks")
    projection = read_csv(directory, "projection")
    xs = [ts(r["day"]) for r in peaks]
    px = [ts(r["day"]) for r in projection]
    capacity = cell(s, "capacity")
    crossing = s.get("crossing", "")
    chart = LineChart(
        f"Daily peak ({s['metric']}) and its trend, {float(s['confidence']):.0%} prediction interval",
        [
            Series("daily peak", xs, [cell(r, "peak") for r in peaks], "#1f77b4"),
            Series("trend", xs + px, [cell(r, "fitted") for r in peaks + projection], "#000000", dashed=True),
        ],
        bands=[
            Band(
                xs + px,
                [cell(r, "lower") for r in peaks + projection],
                [cell(r, "upper") for r in peaks + projection],
                "#1f77b4",
            )
        ],
        hlines=[(capacity, f"capacity {human_rate(capacity)}")] if capacity else [],
        vlines=[(ts(crossing), f"crossing {crossing}")] if crossing else [],
    )
    text = (
        f"<p>Trend {escape(human_rate(cell(s, 'slope_per_day')))} per day "
        f"over {escape(s['days'])} complete days "
        f"(R² {float(s['r2']):.2f}). {escape(s['status'])}"
    )
    if crossing:
        text += (
            f": {escape(crossing)} (earliest {escape(s.get('earliest') or '-')}, latest "
            f"{escape(s.get('latest') or 'not within the horizon')})"
        )
    return "<h2>Forecast</h2>" + text + "</p>" + line_chart(chart)
