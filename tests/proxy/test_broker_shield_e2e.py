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

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest
import yaml
from throttle_harness import metric_value

from sluice.proxy.tools.mock_cluster_process import MockCluster
from sluice.proxy.tools.proxy_process import ProxyProcess

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

THRESHOLD = 300_000
RECORD_BYTES = 10_000
NODES = (1, 2, 3)
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


class PacedProducer(threading.Thread):
    """A librdkafka producer sending RECORD_BYTES records at a fixed rate, round robin over `partitions`;
    what cannot be delivered yet waits in its queue (the rate asked of the proxy does not change)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float, client_id: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.throttles: list[int] = []
        self.errors: list[str] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "linger.ms": 5,
                "throttle_cb": lambda event: self.throttles.append(event.throttle_time),
                "error_cb": lambda error: self.errors.append(str(error)),
            }
        )
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self._stop_flag = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        sent = 0
        value = bytes(RECORD_BYTES)
        while not self._stop_flag.is_set():
            due = start + sent * RECORD_BYTES / self.rate
            # The pacing is the load itself: wait for the next record's turn (or the stop).
            if self._stop_flag.wait(max(0.0, due - time.monotonic())):
                break
            with contextlib.suppress(BufferError):  # a full queue: this record is skipped, the pace goes on
                self.producer.produce(self.topic, value, partition=sent % self.partitions)
            sent += 1
            self.producer.poll(0)

    def stop(self) -> None:
        self._stop_flag.set()
        self.join(10)
        self.producer.purge()
        self.producer.flush(5)


class BrokerIngress(threading.Thread):
    """Samples the proxy's per-broker Produce byte counters (a counter: scraping moves no sensor)."""

    def __init__(self, proxy: ProxyProcess, interval_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.proxy = proxy
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[int, float]]] = []
        self._stop_flag = threading.Event()
        self._sampled = threading.Condition()

    def run(self) -> None:
        while not self._stop_flag.is_set():
            text = self.proxy.metrics_text()
            counts = {
                n: metric_value(text, "sluice_broker_produce_bytes_total", node_id=str(n)) for n in NODES
            }
            with self._sampled:
                self.samples.append((time.monotonic(), counts))
                self._sampled.notify_all()
            self._stop_flag.wait(self.interval_s)

    def wait_past(self, instant: float) -> None:
        """Until a sample taken after `instant` exists (the span to measure has passed)."""
        with self._sampled:
            if not self._sampled.wait_for(lambda: self.samples and self.samples[-1][0] >= instant, 120):
                raise TimeoutError("the proxy's metrics stopped answering")

    def rate(self, node: int, start: float, seconds: int) -> float:
        """Bytes per second into `node` over `seconds` whole seconds from `start` (nearest samples)."""
        self.wait_past(start + seconds)
        first = min(self.samples, key=lambda s: abs(s[0] - start))
        last = min(self.samples, key=lambda s: abs(s[0] - (start + seconds)))
        return (last[1][node] - first[1][node]) / (last[0] - first[0])

    def stop(self) -> None:
        self._stop_flag.set()
        self.join(10)


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
