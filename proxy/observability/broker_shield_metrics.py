"""Metrics of the broker shield, per broker node, read when Prometheus scrapes.

* `sluice_broker_bytes_in_rate{node_id}`: the broker's Produce bytes per second as the shield measures it
  (the last ~5 s; in a fleet, every instance's);
* `sluice_broker_produce_bytes_total{node_id}`: Produce record bytes this instance charged to it;
* `sluice_broker_threshold_bytes{node_id}`: its threshold in force (no sample while it is open);
* `sluice_broker_holding{node_id}`: 1 while it holds topics back, else 0;
  `sluice_broker_held_topics{node_id}`: how many; `sluice_broker_held_topic{node_id, topic}`: 1 for each
  topic it holds (at most MAX_TOPICS_SHOWN per broker);
* `sluice_broker_throttles_total{node_id}`, `sluice_broker_throttle_time_ms_total{node_id}`;
* `sluice_broker_produce_p99_ms{node_id}`: the Produce round-trip p99 the latency trigger reads (with
  `trigger: latency`, once three Produce requests were answered in its window, quota/broker_shield.py);
* `sluice_broker_unattributed_bytes_total`: Produce bytes charged to no broker (a bootstrap connection
  whose upstream address is no broker's, proxy/cluster/broker_nodes.py).

Reading the bytes-in rate measures a sampled window, which only drops expired samples: the shield's
throttles are decided by its token buckets, which a scrape does not move.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sluice.quota.broker_shield import BrokerShield

MAX_TOPICS_SHOWN = 100
_NODE = ["node_id"]


class BrokerShieldCollector(Collector):
    def __init__(
        self,
        shield: Callable[[], BrokerShield | None],
        unattributed_bytes: Callable[[], int],
        now_ms: Callable[[], int],
    ) -> None:
        self._shield = shield
        self._unattributed = unattributed_bytes
        self._now_ms = now_ms

    def collect(self) -> Iterator[Any]:
        rate = GaugeMetricFamily(
            "sluice_broker_bytes_in_rate",
            "Produce bytes/s into each broker, as the shield measures",
            labels=_NODE,
        )
        produced = CounterMetricFamily(
            "sluice_broker_produce_bytes",
            "Produce record bytes this instance charged to each broker",
            labels=_NODE,
        )
        threshold = GaugeMetricFamily(
            "sluice_broker_threshold_bytes", "The bytes-in threshold in force on each broker", labels=_NODE
        )
        holding = GaugeMetricFamily(
            "sluice_broker_holding", "1 while the broker holds topics back, else 0", labels=_NODE
        )
        held_count = GaugeMetricFamily(
            "sluice_broker_held_topics", "How many topics each broker holds back", labels=_NODE
        )
        held = GaugeMetricFamily(
            "sluice_broker_held_topic", "1 for each topic a broker holds back", labels=["node_id", "topic"]
        )
        throttles = CounterMetricFamily(
            "sluice_broker_throttles", "Produce requests the shield throttled, by broker", labels=_NODE
        )
        throttle_ms = CounterMetricFamily(
            "sluice_broker_throttle_time_ms", "Sum of the shield's throttles, by broker", labels=_NODE
        )
        p99 = GaugeMetricFamily(
            "sluice_broker_produce_p99_ms", "Produce round-trip p99 the latency trigger reads", labels=_NODE
        )
        unattributed = CounterMetricFamily(
            "sluice_broker_unattributed_bytes", "Produce bytes charged to no broker (unknown upstream)"
        )
        unattributed.add_metric([], self._unattributed())
        families = [rate, produced, threshold, holding, held_count, held, throttles, throttle_ms, p99]
        families.append(unattributed)
        shield = self._shield()
        if shield is None:
            return iter(families)
        now = self._now_ms()
        for node in shield.nodes():
            view = shield.view(node, now)
            labels = [str(node)]
            rate.add_metric(labels, view.bytes_in_per_s)
            produced.add_metric(labels, view.produce_bytes)
            if view.threshold is not None:
                threshold.add_metric(labels, view.threshold)
            holding.add_metric(labels, 1 if view.held_topics else 0)
            held_count.add_metric(labels, len(view.held_topics))
            for topic in view.held_topics[:MAX_TOPICS_SHOWN]:
                held.add_metric([str(node), topic], 1)
            throttles.add_metric(labels, view.throttles)
            throttle_ms.add_metric(labels, view.throttle_ms)
            if view.p99_ms is not None:
                p99.add_metric(labels, view.p99_ms)
        return iter(families)
