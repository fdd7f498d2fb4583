"""One quota, however many connections (issue 14 item 4).

Raw connections of one client-id produce flat out (one request in flight each, the next sent the moment
the answer is back) under one 50 kB/s producer_byte_rate. With `quota.mute_scope: entity` the
admitted rate stays within 5 % of the quota at 1, 100 and 2,000 connections; with Kafka's per-connection
mute (`mute_scope: connection`) 2,000 connections each get requests past their own mute and the entity
goes well over its quota.

The sensor is a token bucket (`quota.sensor: token_bucket`): it admits the quota smoothly, so 12 s
measure it to the percent, from the first throttled answer a second or more after the first one. The
bucket was empty when that request was charged, so from then on the proxy can admit only what the quota
refills. A start at a fixed time after the flood began could still see the burst where the proxy was
starved of CPU, and did once, under a load average of 5.5; a start a fixed second after the first
throttled answer saw the tokens that gathered while a starved proxy was slow to let its waiting requests
in, spent at once when it caught up. Under six busy processes on two cores, over the same 8 floods of
2,000 connections: +7.4 to +9.2 % from that start, -0.0 to +0.3 % from this one.

Kafka's sampled windows admit the same average in bursts of about two windows (measured here through the
gate: 100 connections 50.8 kB/s over 30 s, 2,000 connections 51.0 kB/s over 34 s), which a 12 s
measurement cannot resolve to 5 %.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mock_cluster_process import MockCluster
from produce_flood import ProduceFlood
from proxy_process import ProxyProcess

QUOTA = 50_000  # bytes/s
TOPIC = "one-quota"
PARTITIONS = 12
# Measured from the first throttled answer this long or more after the first one (the full bucket,
# 5 x 1 s x quota, spent by then): the answers to requests let in before it have come back.
GRACE_S = 1.0
MEASURE_S = 12.0

pytestmark = pytest.mark.slow  # starts processes (the test broker, the proxy)


@pytest.fixture(scope="module")
def quota_cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=1, topics={TOPIC: PARTITIONS}) as cluster:
        yield cluster


def admitted_rate(
    cluster: MockCluster,
    connections: int,
    scope: str,
    sensor: str = "token_bucket",
    measure_s: float = MEASURE_S,
) -> float:
    quota = {
        "window": {"samples": 5, "size_seconds": 1},
        "sensor": sensor,
        "mute_scope": scope,
        "entities": [{"client_id": "many", "producer_byte_rate": QUOTA}],
    }
    with ProxyProcess(cluster.bootstrap, extra_config={"quota": quota}, log_level="warning") as proxy:
        flood = ProduceFlood(proxy.port, connections, TOPIC, PARTITIONS, "many")
        try:
            flood.run(measure_s, from_throttle=True, settle_s=GRACE_S)
            assert flood.held_from is not None
            return flood.rate(flood.held_from, flood.held_from + measure_s)
        finally:
            flood.close()


@pytest.mark.parametrize("connections", [1, 100, 2_000])
def test_an_entity_is_held_to_its_quota_however_many_connections_it_opens(quota_cluster, connections) -> None:
    rate = admitted_rate(quota_cluster, connections, "entity")
    assert abs(rate / QUOTA - 1) <= 0.05, f"{connections} connections admitted {rate:.0f} B/s"


def test_kafkas_per_connection_mute_is_still_available_and_lets_many_connections_overshoot(
    quota_cluster,
) -> None:
    """Takes a minute: two floods of 2,000 connections, each 28 s, since a sampled window's bursts of
    about two windows need 24 s measured to resolve an overshoot from the quota."""
    # Kafka's sampled windows, as the issue measured: each of 2,000 connections gets a request past its
    # own mute, and the throttle each is given does not account for the others waiting to do the same.
    rate = admitted_rate(quota_cluster, 2_000, "connection", sensor="window", measure_s=24)
    assert rate > 1.3 * QUOTA, f"2,000 connections admitted only {rate:.0f} B/s with per-connection mutes"
    # The entity gate holds the same flood, on the same windows, to the quota on average.
    rate = admitted_rate(quota_cluster, 2_000, "entity", sensor="window", measure_s=24)
    assert rate < 1.15 * QUOTA, f"the entity gate admitted {rate:.0f} B/s"
