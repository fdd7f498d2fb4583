"""Metrics of the usage plane: the publisher's sends and drops, the ledger's overflow, the fleet's peers."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from sluice.quota.fleet import DELAY_BUCKETS_MS, FleetQuotas
from sluice.quota.usage_ledger import UsageLedger

from .fleet_follower import FollowerStats
from .usage_publisher import UsageStats


def _counter(name: str, text: str, value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, text)
    family.add_metric([], value)
    return family


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text)
    family.add_metric([], value)
    return family


def _delay_histogram(fleet: FleetQuotas) -> HistogramMetricFamily:
    buckets: list[tuple[str, float]] = []
    cumulative = 0
    for bound_ms, count in zip((*DELAY_BUCKETS_MS, math.inf), fleet.delay_counts, strict=True):
        cumulative += count
        buckets.append(("+Inf" if bound_ms == math.inf else str(bound_ms / 1000), cumulative))
    return HistogramMetricFamily(
        "sluice_fleet_delivery_delay_seconds",
        "How long after its interval ended each batch of another instance was read",
        buckets=buckets,
        sum_value=fleet.delay_sum_ms / 1000,
    )


class UsageCollector(Collector):
    def __init__(
        self,
        ledger: UsageLedger,
        stats: UsageStats,
        fleet: FleetQuotas | None = None,
        follower: FollowerStats | None = None,
    ) -> None:
        self._ledger = ledger
        self._stats = stats
        self._fleet = fleet
        self._follower = follower

    def collect(self) -> Iterator[Any]:
        stats, ledger = self._stats, self._ledger
        yield _counter("sluice_usage_batches", "Usage intervals drained into a batch", stats.batches)
        yield _counter(
            "sluice_usage_messages_sent", "Usage messages written to the topic", stats.messages_sent
        )
        yield _counter("sluice_usage_bytes_sent", "Bytes of usage messages written", stats.bytes_sent)
        yield _counter(
            "sluice_usage_batches_dropped",
            "Usage messages dropped from a full buffer while Kafka could not take them",
            stats.messages_dropped,
        )
        yield _counter(
            "sluice_usage_send_failures", "Failed attempts to write usage messages", stats.send_failures
        )
        yield _gauge("sluice_usage_buffered_messages", "Usage messages waiting to be written", stats.buffered)
        yield _counter(
            "sluice_usage_overflow_entities",
            "Entities left out of usage records (usage.max_entities per interval)",
            ledger.overflow_entities_total,
        )
        yield _counter(
            "sluice_usage_overflow_bytes",
            "Produce and fetch bytes of entities and topics left out of usage records",
            ledger.overflow_bytes_total,
        )
        if self._fleet is not None:
            yield _gauge("sluice_fleet_peers", "Other instances heard from recently", len(self._fleet.live))
            yield _gauge(
                "sluice_fleet_delivery_delay_ms",
                "How long after its interval ended the latest batch was read",
                self._fleet.last_delay_ms,
            )
            yield _delay_histogram(self._fleet)
            yield _counter(
                "sluice_fleet_batches_charged",
                "Batches of other instances charged",
                self._fleet.batches_charged,
            )
            yield _counter(
                "sluice_fleet_batches_stale",
                "Batches skipped as older than the quota window",
                self._fleet.batches_stale,
            )
        if self._follower is not None:
            yield _counter("sluice_fleet_rows_charged", "Entity rows charged", self._follower.rows_charged)
            yield _counter(
                "sluice_fleet_duplicates_skipped",
                "Usage messages read twice (a publisher's retried produce) and charged once",
                self._follower.duplicates,
            )
            yield _counter(
                "sluice_fleet_bad_records",
                "Records on the usage topic that are not usage batches",
                self._follower.bad_records,
            )
