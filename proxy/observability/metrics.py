"""Proxy metrics, counted with plain integers on the hot path and turned into Prometheus series on scrape.

`Counter.labels(...).inc()` takes a lock and a dict lookup per call; at tens of thousands of requests per
second that is measurable, so the connection bumps list slots indexed by API key and a custom collector
reads them when Prometheus asks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sluice.protocol.apis import api_spec

_KEYS = 128  # API keys seen in practice are < 100; larger keys are folded into the last slot.
# (a name, not `_KEYS - 1` in the counting: Python computes that each time; the compiled pipeline runs count
# as these two methods do, proxy/data_path/_pipeline_runs.c, and are bound to it)
OTHER_SLOT = _KEYS - 1


def api_name(api_key: int) -> str:
    spec = api_spec(api_key)
    return spec.name if spec is not None else f"Unknown{api_key}"


class ProxyMetrics:
    __slots__ = (
        "addresses_rewritten",
        "broker_listener_failures",
        "broker_listeners",
        "broker_loads",
        "brokers_not_advertised",
        "connections_active",
        "connections_total",
        "disconnects",
        "muted_connections",
        "protocol_errors",
        "request_bytes",
        "request_memory",
        "requests",
        "response_bytes",
        "responses",
    )

    def __init__(self) -> None:
        self.requests = [0] * _KEYS
        self.request_bytes = [0] * _KEYS
        self.responses = [0] * _KEYS
        self.response_bytes = [0] * _KEYS
        # Broker addresses rewritten (or left out) in answers other than Metadata, by API key.
        self.addresses_rewritten = [0] * _KEYS
        self.connections_active = 0
        self.connections_total = 0
        self.muted_connections = 0
        self.broker_listeners = 0
        self.broker_listener_failures = 0
        self.brokers_not_advertised = 0
        self.disconnects: dict[str, int] = {}
        self.protocol_errors: dict[str, int] = {}
        self.request_memory: Any = None  # the proxy's RequestMemory, read at scrape time
        self.broker_loads: Any = None  # the proxy's BrokerLoads, read at scrape time

    # The slot computed inline (no helper call): these two run for every request and response. The compiled
    # pipeline runs write them out for an exact ProxyMetrics (proxy/data_path/_pipeline_runs.c): a change to
    # either is a change there.
    def count_request(self, api_key: int, size: int) -> None:
        slot = api_key if 0 <= api_key < OTHER_SLOT else OTHER_SLOT
        self.requests[slot] += 1
        self.request_bytes[slot] += size

    def count_response(self, api_key: int, size: int) -> None:
        slot = api_key if 0 <= api_key < OTHER_SLOT else OTHER_SLOT
        self.responses[slot] += 1
        self.response_bytes[slot] += size

    def count_muted(self, change: int) -> None:
        self.muted_connections += change

    def count_disconnect(self, cause: str) -> None:
        self.disconnects[cause] = self.disconnects.get(cause, 0) + 1

    def count_protocol_error(self, reason: str) -> None:
        self.protocol_errors[reason] = self.protocol_errors.get(reason, 0) + 1


class ProxyCollector(Collector):
    def __init__(self, metrics: ProxyMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Any]:
        m = self._m
        yield GaugeMetricFamily(
            "sluice_broker_listeners", "Listeners open for broker node ids", value=m.broker_listeners
        )
        yield CounterMetricFamily(
            "sluice_broker_listener_failures",
            "Broker listeners that could not open (each such node is left out of the answers clients get)",
            value=m.broker_listener_failures,
        )
        yield GaugeMetricFamily(
            "sluice_brokers_not_advertised",
            "Broker nodes known but not advertised to clients, for want of a listener",
            value=m.brokers_not_advertised,
        )
        memory = m.request_memory
        if memory is not None:
            yield GaugeMetricFamily(
                "sluice_buffered_request_bytes",
                "Bytes reserved by requests still arriving, all connections (max_buffered_request_bytes)",
                value=memory.used,
            )
            yield GaugeMetricFamily(
                "sluice_connections_waiting_for_memory",
                "Connections not read until request memory is released",
                value=memory.waiting,
            )
            yield CounterMetricFamily(
                "sluice_request_memory_waits",
                "Times a connection's next frame did not fit the request memory budget",
                value=memory.waits,
            )
        if m.broker_loads is not None:
            yield from _broker_load_families(m.broker_loads)
        yield GaugeMetricFamily(
            "sluice_connections_active", "Client connections open now", value=m.connections_active
        )
        yield CounterMetricFamily(
            "sluice_connections", "Client connections accepted", value=m.connections_total
        )
        yield GaugeMetricFamily(
            "sluice_muted_connections",
            "Client connections muted by a throttle now",
            value=m.muted_connections,
        )
        for name, doc, values in (
            ("sluice_requests", "Requests forwarded, by API", m.requests),
            ("sluice_request_bytes", "Request bytes received from clients, by API", m.request_bytes),
            ("sluice_responses", "Responses returned to clients, by API", m.responses),
            ("sluice_response_bytes", "Response bytes sent to clients, by API", m.response_bytes),
            (
                "sluice_addresses_rewritten",
                "Broker addresses rewritten to the proxy's (or left out: no listener) in answers other than "
                "Metadata, by API",
                m.addresses_rewritten,
            ),
        ):
            family = CounterMetricFamily(name, doc, labels=["api"])
            for slot, value in enumerate(values):
                if value:
                    family.add_metric([api_name(slot)], value)
            yield family
        for name, doc, label, counts in (
            ("sluice_disconnects", "Client connections closed, by cause", "cause", m.disconnects),
            ("sluice_protocol_errors", "Malformed frames, by reason", "reason", m.protocol_errors),
        ):
            family = CounterMetricFamily(name, doc, labels=[label])
            for key, value in sorted(counts.items()):
                family.add_metric([key], value)
            yield family


def _broker_load_families(loads: Any) -> Iterator[Any]:
    in_flight = GaugeMetricFamily(
        "sluice_broker_in_flight_bytes",
        "Bytes of requests in flight toward the broker, all connections (requests of 64 KiB and more)",
        labels=["broker"],
    )
    limit = GaugeMetricFamily(
        "sluice_broker_in_flight_limit_bytes",
        "What the bytes in flight toward one broker may reach (upstream.max_in_flight_bytes_per_broker)",
        value=loads.limit,
    )
    waiting = GaugeMetricFamily(
        "sluice_connections_waiting_for_broker",
        "Connections whose next request waits for room at its broker",
        labels=["broker"],
    )
    waits = CounterMetricFamily(
        "sluice_broker_load_waits", "Requests that had to wait for room at their broker", labels=["broker"]
    )
    for load in loads:
        in_flight.add_metric([load.address], load.used)
        waiting.add_metric([load.address], load.waiting)
        waits.add_metric([load.address], load.waits)
    yield from (in_flight, limit, waiting, waits)
