"""The report's Brokers section: each broker's produce and fetch rate over time, how many of the bytes name
no broker, each broker's totals and its top topics (the tables `jobs/brokers.py` writes)."""

from __future__ import annotations

from html import escape

from .html_parts import cell, line_chart, resolution, table, ts
from .svg import LineChart, Series
from .tables import read_csv

NO_BROKER = "(no broker)"


def brokers_section(directory: str) -> str:
    summary = read_csv(directory, "broker_summary")
    if not summary:
        return ""
    unit = resolution(directory)["unit"]
    parts = [
        "<h2>Brokers</h2>",
        "<p>Each broker's load: the bytes produced to it and fetched from it, by the broker the usage "
        "records' topic rows name, summed over Sluice instances, entities and topics. Topic rows count the "
        "record batches' bytes, a little less than the request bytes the Usage section counts. A rate over "
        f"time is the broker's mean over each {escape(unit)}.</p>",
        _no_broker(summary),
    ]
    over_time = read_csv(directory, "broker_over_time")
    if not over_time:
        return "".join(parts)
    brokers = [r["broker"] for r in summary if r["broker"]]
    # Every time the report has, so a unit in which a broker had no traffic draws as zero, not as a line
    # across the gap.
    times = sorted(
        {ts(r["time"]) for r in read_csv(directory, "cluster_over_time")} | {ts(r["time"]) for r in over_time}
    )
    axis = f"time (UTC), one point per {unit}"
    for kind, title in (
        ("produce", f"Produce to each broker, mean per {unit}"),
        ("fetch", f"Fetch from each broker, mean per {unit}"),
    ):
        rates: dict[str, dict[float, float]] = {broker: {} for broker in brokers}
        for r in over_time:
            rates[r["broker"]][ts(r["time"])] = cell(r, f"{kind}_rate")
        series = [Series(f"broker {b}", times, [rates[b].get(t, 0.0) for t in times]) for b in brokers]
        parts.append(line_chart(LineChart(title, series), axis))
    named = [{**r, "broker": r["broker"] or NO_BROKER} for r in summary]
    parts.append("<h3>Each broker's bytes</h3>")
    parts.append(
        table(
            named,
            [
                ("broker", "broker", "text"),
                ("produce_bytes", "produced", "bytes"),
                ("produce_share", "share", "share"),
                ("produce_peak", f"produce peak ({unit})", "rate"),
                ("fetch_bytes", "fetched", "bytes"),
                ("fetch_share", "share", "share"),
                ("fetch_peak", f"fetch peak ({unit})", "rate"),
            ],
            limit=len(named),
        )
    )
    top = read_csv(directory, "broker_top_topics")
    parts.append("<h3>Each broker's top topics</h3>")
    parts.append(
        table(
            top,
            [
                ("broker", "broker", "text"),
                ("topic", "topic", "text"),
                ("produce_bytes", "produced", "bytes"),
                ("fetch_bytes", "fetched", "bytes"),
                ("share", "share of the broker's bytes", "share"),
            ],
            limit=len(top),
        )
    )
    return "".join(parts)


def _no_broker(summary: list[dict[str, str]]) -> str:
    """The bytes no broker is named for, said plainly: they are in no chart or row of a broker below."""
    unnamed = next((r for r in summary if not r["broker"]), None)
    if unnamed is None or cell(unnamed, "share") == 0:
        return "<p>Every topic byte in the records names its broker.</p>"
    why = (
        "records of version 1 (from a Sluice before the broker dimension) name none, and Sluice names none "
        "for a bootstrap connection whose address is no broker's"
    )
    if len(summary) == 1:
        return f'<p class="note">No topic byte in the records names a broker: {why}.</p>'
    share, produced, fetched = (cell(unnamed, key) for key in ("share", "produce_share", "fetch_share"))
    return (
        f'<p class="note">{share:.1%} of the topic bytes ({produced:.1%} of those produced, {fetched:.1%} '
        f"of those fetched) name no broker: {why}. The charts leave them out; the table counts them in its "
        f"row {escape(NO_BROKER)}.</p>"
    )
