"""Fleets of real proxies in tests: their configuration, and the usage topic read back with a real client.

What the fleet admitted is read from the usage records themselves (read with confluent-kafka, decoded
with `decode_batch`), not from metrics scrapes: a scrape measures every quota sensor, and measuring a
sampled window moves it (docs/quotas.md), which would disturb the very thing under test.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from itertools import pairwise
from typing import Any

from sluice.config.usage_settings import DEFAULT_TOPIC
from sluice.quota.usage_duplicates import RecentMessages
from sluice.quota.usage_records import UsageBatch, decode_batch

QUOTA = 100_000
CLIENT_ID = "pump"


def fleet_config(
    sensor: str,
    *,
    sharing: bool = True,
    quota: int = QUOTA,
    client_id: str = CLIENT_ID,
    samples: int | None = None,
    **usage: Any,
) -> dict[str, Any]:
    """One quota on `client_id`, usage records every second (or as `usage` says), the fleet sharing it;
    `samples` sets the quota window's N (W stays 1 s): the sampled window's span, the token bucket's
    burst of N x W x Q."""
    quota_section: dict[str, Any] = {
        "sensor": sensor,
        "throttle_mode": "kip219",
        "entities": [{"client_id": client_id, "producer_byte_rate": quota}],
    }
    if samples is not None:
        quota_section["window"] = {"samples": samples, "size_seconds": 1}
    return {
        "quota": quota_section,
        "usage": {"enabled": True, "interval_ms": 1000, **usage},
        "fleet": {"enabled": sharing},
    }


def read_usage(
    bootstrap: str,
    topic: str = DEFAULT_TOPIC,
    timeout_s: float = 60.0,
    duplicates: list[UsageBatch] | None = None,
) -> list[UsageBatch]:
    """Every batch on the usage topic, read from the start with a real Kafka client up to the end offsets
    it has when called: the processes that published have stopped, so that is every batch there is.

    Delivery is at least once (docs/usage-records.md): a publisher's produce retried on a loaded machine
    can write a message twice, and counting both would add an interval's bytes that were admitted once. So
    a message equal to one already read for the same instance and interval is dropped, as the docs tell a
    reader to (the parts of a split batch differ in their rows, and are kept); `duplicates` gets them."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"usage-reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
        }
    )
    batches: list[UsageBatch] = []
    recent = RecentMessages()  # what the fleet follower drops, dropped here too
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {}
        for partition in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high > low:
                ends[partition] = high
        # Assigned, not subscribed: no group to join, so reading starts at once.
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout_s
        while ends and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            value = message.value()
            batch = decode_batch(value)
            if recent.repeated(message.partition(), value):  # instance, interval and rows all equal
                if duplicates is not None:
                    duplicates.append(batch)
            else:
                batches.append(batch)
            if message.offset() + 1 >= ends.get(message.partition(), 0):
                ends.pop(message.partition(), None)
        assert not ends, f"the usage topic was not read to its end within {timeout_s} s: {ends}"
    finally:
        consumer.close()
    return batches


def admitted_per_interval(
    batches: Iterable[UsageBatch], client_id: str = CLIENT_ID, instances: set[str] | None = None
) -> dict[int, int]:
    """{interval end, wall ms: produce bytes admitted for `client_id`}, summed over the instances."""
    series: dict[int, int] = {}
    for batch in batches:
        if instances is not None and batch.instance not in instances:
            continue
        for row in batch.rows:
            if row.topic is None and row.client_id == client_id and row.produce_bytes:
                end = batch.interval_start_ms + batch.interval_ms
                series[end] = series.get(end, 0) + row.produce_bytes
    return series


def slope(series: dict[int, int], start_ms: int, end_ms: int) -> float:
    """Least-squares slope, bytes per second, of the cumulative bytes at each second in [start, end].

    A sampled window admits in bursts every N x W seconds; a plain sum over a span holds one burst more or
    less depending on where the span starts, the slope of the cumulative curve does not.
    """
    points = sorted(series.items())
    xs, ys = [], []
    total = 0
    j = 0
    for x in range(start_ms, end_ms + 1, 1000):
        while j < len(points) and points[j][0] <= x:
            if points[j][0] > start_ms:
                total += points[j][1]
            j += 1
        xs.append(x / 1000)
        ys.append(total)
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )


def admitted_rate(series: dict[int, int], start_ms: int, end_ms: int) -> float:
    """The admitted bytes per second in [start, end], over whole periods of the traffic's bursts (a sampled
    window lets a flat-out client through in a burst every ~N x W seconds); the slope if it has none.

    Even the slope of a staircase depends on where its few steps fall in the span: a 60 s span holding
    five ~12 s bursts measured 0.94-0.96 Q in runs whose whole periods held 0.97-1.0 Q. A span of whole
    periods runs between two points of the same phase: here the dips of the cumulative bytes less their
    mean slope, where the quiet stretch before a burst ends. They are found however much a burst spreads
    (on a loaded machine, over three to five seconds at twice the quiet rate, which no threshold on
    single seconds told apart from the quiet ones), and in steady traffic they are just two points.
    """
    seconds: dict[int, int] = {}
    for end, admitted in series.items():
        if start_ms < end <= end_ms:
            seconds[end // 1000] = seconds.get(end // 1000, 0) + admitted
    if seconds:
        first_second = min(seconds)
        per_second = [seconds.get(s, 0) for s in range(first_second, max(seconds) + 1)]
        dips = _regular(_dips(per_second))
        if len(dips) >= 2 and (dips[-1] - dips[0]) * 2 >= (end_ms - start_ms) / 1000:
            return sum(per_second[dips[0] : dips[-1]]) / (dips[-1] - dips[0])
    return slope(series, start_ms, end_ms)


def _regular(dips: list[int]) -> list[int]:
    """The dips less those at either end whose period is under 3/4 of the median period: traffic still
    settling after a death bursts at shorter intervals before the comb steadies (a real run's survivors:
    bursts 5 and 7 s apart, then every 12 s), and a span that begins with such a period holds one burst
    too many or too few for its length (0.92 Q over its dips, 0.994 over the whole span, 0.98 over the
    steady periods)."""
    while len(dips) >= 3:
        gaps = sorted(b - a for a, b in pairwise(dips))
        shortest_whole = gaps[len(gaps) // 2] * 3 / 4
        if dips[1] - dips[0] < shortest_whole:
            dips = dips[1:]
        elif dips[-1] - dips[-2] < shortest_whole:
            dips = dips[:-1]
        else:
            break
    return dips


def _dips(per_second: list[int], reach_s: int = 4) -> list[int]:
    """The offsets (in seconds, before that second's bytes) where the cumulative bytes less their mean
    slope are lowest within `reach_s` either side: in bursty traffic, the last moment before each burst.
    Offsets closer than `reach_s` to either end are left out, since what lies beyond the end is unknown.
    Four seconds either side (less than half of a ~11-14 s period) passes over the lesser dips of traffic
    still settling: at three, a real run's 42 s span began at one and measured 0.92 Q, 0.998 a second
    later."""
    mean = sum(per_second) / len(per_second)
    deviation = [0.0]
    for admitted in per_second:
        deviation.append(deviation[-1] + admitted - mean)
    return [
        i
        for i in range(reach_s, len(deviation) - reach_s)
        if deviation[i] == min(deviation[i - reach_s : i + reach_s + 1])
    ]


def instances_with_traffic(batches: Iterable[UsageBatch], client_id: str = CLIENT_ID) -> set[str]:
    return {
        batch.instance
        for batch in batches
        for row in batch.rows
        if row.topic is None and row.client_id == client_id and row.produce_bytes
    }
