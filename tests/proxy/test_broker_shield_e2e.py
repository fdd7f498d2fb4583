"""The broker shield end to end: the real proxy in front of a three-broker mock cluster whose leadership is
skewed (broker 1 leads five of the hot topic's six partitions, and the warm topic), real librdkafka
producers at paced rates.

* Without the shield (a threshold no broker reaches, so each broker's ingress is measured) broker 1 takes
  about twice its threshold; a reload brings the threshold in, and from
  then on broker 1's ingress is held at its threshold (+-5 % over whole seconds, docs/quotas.md) while
  brokers 2 and 3 carry what they carried before, and the topics under their share (warm on broker 1,
  side on brokers 2 and 3) are never throttled.
* With `trigger: latency`, round-trip time added to broker 1 (the mock cluster's `rtt`) makes the loop
  engage on broker 1 only, and taking it away makes it release.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from shield_harness import NODES, BrokerIngress, PacedProducer
from throttle_harness import metric_value

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

THRESHOLD = 300_000
HOT_LEADERS = (1, 1, 1, 1, 1, 2)  # partition -> leader: broker 1 leads five of six
MEASURE_S = 20
TOLERANCE = 0.05  # the tolerance docs/quotas.md gives a held rate over whole periods


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=3, topics={"hot": 6, "warm": 1, "side": 2}) as running:
        for partition, leader in enumerate(HOT_LEADERS):
            running.set_leader("hot", partition, leader)
        running.set_leader("warm", 0, 1)
        running.set_leader("side", 0, 2)
        running.set_leader("side", 1, 3)
        yield running


def _reload(proxy: ProxyProcess, quota: dict) -> None:
    config = yaml.safe_load(proxy.config_path.read_text())
    config["quota"] = quota
    proxy.config_path.write_text(yaml.safe_dump(config))
    since = len(proxy.events())
    proxy.process.send_signal(1)  # SIGHUP
    proxy.wait_for_event("config_reloaded", since=since)


def test_the_hot_broker_is_held_at_its_threshold_and_the_others_are_untouched(cluster) -> None:
    # First a threshold no broker reaches: the shield measures each broker and holds nothing (no shield).
    unreachable = {"quota": {"broker_protection": {"bytes_in_per_s": 10**12}}}
    with ProxyProcess(cluster.bootstrap, unreachable) as proxy:
        ingress = BrokerIngress(proxy)
        producers = [
            PacedProducer(proxy.bootstrap, "hot", 6, 600_000, "hot"),  # 500 kB/s to broker 1, 100 to 2
            PacedProducer(proxy.bootstrap, "warm", 1, 50_000, "warm"),  # under its share of broker 1
            PacedProducer(proxy.bootstrap, "side", 2, 200_000, "side"),  # 100 kB/s to each of 2 and 3
        ]
        ingress.start()
        for producer in producers:
            producer.start()
        try:
            proxy.wait_for_event("connection_opened", listener="broker-1")
            settled = time.monotonic() + 3  # librdkafka's first metadata and connections
            unshielded = {node: ingress.rate(node, settled, 5) for node in NODES}
            assert unshielded[1] > 1.7 * THRESHOLD, unshielded  # no shield: broker 1 takes all of it
            since = len(proxy.events())
            _reload(proxy, {"broker_protection": {"bytes_in_per_s": THRESHOLD}})
            proxy.wait_for_event("broker_throttle_started", since=since, node_id=1)
            start = time.monotonic() + 2  # the buckets' one second of burst, and what waited in queues
            shielded = {node: ingress.rate(node, start, MEASURE_S) for node in NODES}
            text = proxy.metrics_text()
        finally:
            for producer in producers:
                producer.stop()
            ingress.stop()
    assert shielded[1] == pytest.approx(THRESHOLD, rel=TOLERANCE), shielded
    for node in (2, 3):
        assert shielded[node] == pytest.approx(unshielded[node], rel=TOLERANCE), (node, unshielded, shielded)
        assert metric_value(text, "sluice_broker_throttles_total", node_id=str(node)) == 0
    hot, warm, side = producers
    assert hot.throttles, "the hot topic's producer was told of its throttles"
    assert warm.throttles == [] and side.throttles == []  # under their share: never throttled
    assert metric_value(text, "sluice_broker_held_topic", node_id="1", topic="hot") == 1
    assert metric_value(text, "sluice_broker_held_topic", node_id="1", topic="warm") == 0
    assert metric_value(text, "sluice_broker_threshold_bytes", node_id="1") == THRESHOLD


def test_latency_added_to_one_broker_engages_the_loop_there_and_its_end_releases_it(cluster) -> None:
    # A target far above what a loaded two-core machine adds by itself (tens of ms at worst), and a
    # floor the loop reaches while the latency lasts (from about 250 kB/s into broker 1, three steps).
    shield = {
        "trigger": "latency",
        "latency": {"produce_p99_ms": 200, "floor_bytes_in_per_s": 150_000},
    }
    with ProxyProcess(cluster.bootstrap, {"quota": {"broker_protection": shield}}) as proxy:
        producer = PacedProducer(proxy.bootstrap, "hot", 6, 300_000, "hot")
        producer.start()
        try:
            proxy.wait_for_event("connection_opened", listener="broker-1")
            since = len(proxy.events())
            cluster.set_rtt(1, 500)
            engaged = proxy.wait_for_event("broker_latency_engaged", 20, since=since, node_id=1)
            assert engaged["produce_p99_ms"] > 200
            held = proxy.wait_for_event("broker_throttle_started", 20, since=since, node_id=1)
            assert held["topics"] == ["hot"]
            since = len(proxy.events())
            cluster.set_rtt(1, 0)
            proxy.wait_for_event("broker_latency_released", 120, since=since, node_id=1)
            events = proxy.events()
        finally:
            cluster.set_rtt(1, 0)
            producer.stop()
    engaged_nodes = {e["node_id"] for e in events if e.get("event") == "broker_latency_engaged"}
    assert engaged_nodes == {1}  # brokers 2 and 3 answered as fast as ever
