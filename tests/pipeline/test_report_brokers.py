"""The report's brokers, on a handful of records whose answers are worked out by hand below.

Three instances publish every 10 s (so the charts are drawn per minute) from 00:00:30 to 00:01:40: two
write version 2 (topic rows name their broker, one of them a bootstrap connection's that names none), one
still writes version 1 (no broker at all).

    broker 1, minute 0: orders 3000 (a) + 1500 (b) produced over its 30 s in the span  -> 150 B/s
    broker 1, minute 1: orders 6000 produced, clicks 600 fetched over 40 s           -> 150 and 15 B/s
    broker 2, minute 0: orders 600 produced, clicks 1200 fetched over 30 s          -> 20 and 40 B/s
    broker 2, minute 1: clicks 1400 produced, 2400 fetched over 40 s                -> 35 and 60 B/s
    no broker: orders 1125 produced (bootstrap), clicks 2000 produced + 800 fetched (version 1)

Produced 15,625 bytes in all, 3,125 naming no broker (20 %); fetched 5,000, 800 naming none (16 %).
"""

from __future__ import annotations

import csv
import json
import os

import pytest

from sluice.pipeline.inputs import read_usage
from sluice.pipeline.jobs.report import ReportOptions, run_report
from sluice.pipeline.jobs.synth import DEFAULT_START_MS
from sluice.pipeline.output.html_report import render_report
from sluice.quota.usage_records import UsageBatch, UsageRow, encode_batch

START = DEFAULT_START_MS  # a whole minute
TEN_S = 10_000


def batch(instance: str, second: int, entity: tuple[str, str], *topics: tuple) -> bytes:
    """A version-2 message: the entity's row (its bytes the topic rows' sum) and topic rows
    (topic, broker, produced, fetched)."""
    rows = [UsageRow(*entity, topic=t, broker=b, produce_bytes=p, fetch_bytes=f) for t, b, p, f in topics]
    head = UsageRow(
        *entity,
        produce_bytes=sum(r.produce_bytes for r in rows),
        fetch_bytes=sum(r.fetch_bytes for r in rows),
    )
    return encode_batch(UsageBatch(instance, START + second * 1000, TEN_S, (head, *rows)))


def version_1(instance: str, second: int) -> bytes:
    """What a Sluice from before the broker dimension published: topic rows without `broker`."""
    rows = [
        {"user": "carol", "client_id": "old", "produce_bytes": 2000, "fetch_bytes": 800},
        {"user": "carol", "client_id": "old", "topic": "clicks", "produce_bytes": 2000, "fetch_bytes": 800},
    ]
    document = {
        "schema": "sluice.usage",
        "version": 1,
        "instance": instance,
        "interval_start_ms": START + second * 1000,
        "interval_ms": TEN_S,
        "rows": rows,
    }
    return json.dumps(document).encode()


MESSAGES = [
    batch("a", 30, ("alice", "app"), ("orders", 1, 3000, 0), ("orders", 2, 600, 0), ("clicks", 2, 0, 1200)),
    batch("b", 30, ("bob", "cli"), ("orders", 1, 1500, 0), ("orders", None, 1125, 0)),
    batch("a", 60, ("alice", "app"), ("orders", 1, 6000, 0)),
    version_1("c", 60),
    batch("b", 90, ("bob", "cli"), ("clicks", 2, 1400, 2400), ("clicks", 1, 0, 600)),
]


def rows(out: str, name: str) -> list[dict[str, str]]:
    with open(os.path.join(out, "report", f"{name}.csv")) as stream:
        return list(csv.DictReader(stream))


@pytest.fixture(scope="module")
def reported(spark, tmp_path_factory) -> str:
    base = tmp_path_factory.mktemp("brokers")
    path = base / "usage.jsonl"
    path.write_bytes(b"\n".join(MESSAGES) + b"\n")
    out = str(base / "out")
    run_report(spark, read_usage(spark, str(path)), out, ReportOptions(broker_topics=1))
    render_report(out)
    return out


def test_each_brokers_rate_per_minute_sums_instances_entities_and_topics(reported) -> None:
    resolution = {r["name"]: r["value"] for r in rows(reported, "chart_resolution")}
    assert resolution["unit"] == "minute"
    got = {
        (r["broker"], r["time"]): (float(r["seconds"]), float(r["produce_rate"]), float(r["fetch_rate"]))
        for r in rows(reported, "broker_over_time")
    }
    assert got == {
        ("1", "2026-03-02T00:00:00"): (30.0, 150.0, 0.0),
        ("1", "2026-03-02T00:01:00"): (40.0, 150.0, 15.0),
        ("2", "2026-03-02T00:00:00"): (30.0, 20.0, 40.0),
        ("2", "2026-03-02T00:01:00"): (40.0, 35.0, 60.0),
    }


def test_the_summary_states_the_bytes_no_broker_is_named_for(reported) -> None:
    summary = {r["broker"]: r for r in rows(reported, "broker_summary")}
    assert list(summary) == ["1", "2", ""]  # brokers by node id, then the bytes naming none
    expected = {
        # broker: produced, its share of 15,625, produce peak, fetched, share of 5,000, fetch peak
        "1": (10_500, 0.672, "150", 600, 0.12, "15"),
        "2": (2000, 0.128, "35", 3600, 0.72, "60"),
        "": (3125, 0.2, "", 800, 0.16, ""),
    }
    for broker, (produced, produce_share, produce_peak, fetched, fetch_share, fetch_peak) in expected.items():
        row = summary[broker]
        assert int(row["produce_bytes"]) == produced and int(row["fetch_bytes"]) == fetched
        assert float(row["produce_share"]) == pytest.approx(produce_share)
        assert float(row["fetch_share"]) == pytest.approx(fetch_share)
        assert (row["produce_peak"], row["fetch_peak"]) == (produce_peak, fetch_peak)
        assert float(row["share"]) == pytest.approx((produced + fetched) / 20_625)


def test_each_brokers_top_topics_with_their_share_of_its_bytes(reported) -> None:
    # One topic a broker here (ReportOptions(broker_topics=1)): broker 1 carries orders 10,500 of its
    # 11,100 bytes; broker 2 carries clicks (1,400 + 3,600) of its 5,600.
    top = [
        (r["broker"], r["rank"], r["topic"], int(r["total_bytes"]), r["share"])
        for r in rows(reported, "broker_top_topics")
    ]
    assert [t[:4] for t in top] == [("1", "1", "orders", 10_500), ("2", "1", "clicks", 5000)]
    assert float(top[0][4]) == pytest.approx(10_500 / 11_100) and float(top[1][4]) == pytest.approx(
        5000 / 5600
    )


def test_the_page_says_how_many_bytes_name_no_broker(reported) -> None:
    with open(os.path.join(reported, "report.html"), encoding="utf-8") as stream:
        html = stream.read()
    section = html[html.index("<h2>Brokers</h2>") :]
    assert (
        "19.0% of the topic bytes (20.0% of those produced, 16.0% of those fetched) name no broker" in section
    )
