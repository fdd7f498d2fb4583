"""Throttling the data path end to end: real clients, the real proxy, the mock cluster.

The rate tests measure the proxy's own count of Produce request bytes (or Fetch response bytes): exactly
what the quota charges. They use Sluice's token-bucket shaping, because Kafka's sampled window lets a
flat-out client through in bursts (the book's comb: ~1 MB every ~11 s), so any 30 s span of it can sit
±25 % from the quota by design even though the long-run average is exact; the window sensor has its own
end-to-end test below, with the bound Kafka actually guarantees.

The quota window is the one each test needs, not Kafka's 11 s: N = 2 samples of 1 s make the token
bucket's first burst 2 s worth of quota, spent within the first seconds, so the steady rate is measured
from WARM_UP_S on. The tolerance is docs/quotas.md's bound for a token bucket (Q x T within one request,
~16 kB: 0.8 % at 100 kB/s over 20 s, plus 0.5 % for every 100 ms a client comes back late after its
throttle) with room for the metrics scrapes that measure it, which a loaded machine delays too.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import deque

import pytest
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from records import digest
from throttle_harness import FlatOutProducer, TrafficSampler, metric_value, metric_values

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

QUOTA = 100_000
WARM_UP_S = 4
MEASURE_S = 20
TOPICS = {
    f"throttle-{name}": 6 for name in ("librdkafka", "aiokafka", "kafkapython", "window", "shared", "fetch")
}
SMALL_WINDOW = {"samples": 2, "size_seconds": 1}
TOKEN_BUCKET = {"sensor": "token_bucket", "window": SMALL_WINDOW}


@pytest.fixture(scope="module")
def cluster():
    with MockCluster(brokers=3, topics=TOPICS) as c:
        yield c


def quota_proxy(cluster, *entities: dict, **quota: object) -> ProxyProcess:
    return ProxyProcess(cluster.bootstrap, extra_config={"quota": {**quota, "entities": list(entities)}})


def assert_near_quota(rate: float, quota: float = QUOTA, tolerance: float = 0.05) -> None:
    assert abs(rate - quota) <= tolerance * quota, f"{rate:,.0f} B/s against a quota of {quota:,.0f}"


def read_back(bootstrap: str, topic: str, expected: int, timeout_s: float = 90) -> list[bytes]:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < expected and time.monotonic() < deadline:
        values.extend(m.value() for m in consumer.consume(1000, timeout=1.0) if m.error() is None)
    consumer.close()
    return values


def test_librdkafka_is_held_by_the_mute_and_told_and_loses_nothing(cluster) -> None:
    """Takes half a minute: the first burst, the 20 s measured, and every record read back."""
    topic = "throttle-librdkafka"
    with quota_proxy(cluster, {"client_id": "pump", "producer_byte_rate": QUOTA}, **TOKEN_BUCKET) as proxy:
        sampler = TrafficSampler(proxy, "Produce").start()
        producer = FlatOutProducer(proxy.bootstrap, topic, "pump", **{"queue.buffering.max.kbytes": 512})
        producer.start()
        time.sleep(WARM_UP_S + MEASURE_S)  # the measurement: the producer runs flat out for its span
        sampler.stop()
        producer.stop()
        assert_near_quota(sampler.average_rate(WARM_UP_S))
        text = proxy.metrics_text()
        # librdkafka never backs off by itself (spec 7.2): only the mute can have held it.
        assert metric_value(text, "sluice_throttles_total", type="Produce", client_id="pump") > 10
        # The client is told: throttle_cb saw exactly the throttle times Sluice put in the responses.
        # confluent-kafka reports the throttle in seconds; the wire carries whole milliseconds.
        told = [round(t * 1000) for t in producer.throttle_events if t > 0]
        assert told, "throttle_cb never reported a throttle"
        assert len(told) == metric_value(text, "sluice_throttled_responses_total", api="Produce")
        assert sum(told) == metric_value(text, "sluice_throttled_response_ms_total", api="Produce")
        assert producer.errors == []
        values = read_back(proxy.bootstrap, topic, len(producer.sent))
    assert len(values) == len(producer.sent) == producer.delivered
    assert digest((None, v) for v in values) == digest((None, v) for v in producer.sent)


async def test_aiokafka_honours_the_field(cluster) -> None:
    """Takes half a minute: the first burst, then the 20 s measured."""
    from aiokafka import AIOKafkaProducer

    topic = "throttle-aiokafka"
    with quota_proxy(cluster, {"client_id": "pump", "producer_byte_rate": QUOTA}, **TOKEN_BUCKET) as proxy:
        sampler = TrafficSampler(proxy, "Produce").start()
        producer = AIOKafkaProducer(
            bootstrap_servers=proxy.bootstrap, client_id="pump", max_batch_size=16384, linger_ms=0
        )
        await producer.start()
        deadline = time.monotonic() + WARM_UP_S + MEASURE_S
        pending: set[asyncio.Future] = set()
        value = b"x" * 10_000
        try:
            while time.monotonic() < deadline:
                pending.add(await producer.send(topic, value))
                if len(pending) >= 50:
                    _done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.to_thread(sampler.stop)
        finally:
            await producer.stop()
        assert_near_quota(sampler.average_rate(WARM_UP_S))
        text = await asyncio.to_thread(proxy.metrics_text)
        assert metric_value(text, "sluice_throttles_total", type="Produce", client_id="pump") > 10
        # The client was told, in the responses it read.
        assert metric_value(text, "sluice_throttled_responses_total", api="Produce") > 10


def test_kafka_python_honours_the_field(cluster) -> None:
    """Takes half a minute: the first burst, then the 20 s measured."""
    from kafka import KafkaProducer

    topic = "throttle-kafkapython"
    with quota_proxy(cluster, {"client_id": "pump", "producer_byte_rate": QUOTA}, **TOKEN_BUCKET) as proxy:
        sampler = TrafficSampler(proxy, "Produce").start()
        producer = KafkaProducer(
            bootstrap_servers=proxy.bootstrap,
            client_id="pump",
            api_version=(2, 0),
            batch_size=16384,
            linger_ms=0,
        )
        deadline = time.monotonic() + WARM_UP_S + MEASURE_S
        value = b"x" * 10_000
        # At most 50 records outstanding, so the end of the test does not wait for a deep buffer to drain.
        pending: deque = deque()
        while time.monotonic() < deadline:
            pending.append(producer.send(topic, value))
            if len(pending) >= 50:
                pending.popleft().get(timeout=60)
        sampler.stop()
        producer.flush(60)
        producer.close()
        assert all(f.succeeded() for f in pending)
        assert_near_quota(sampler.average_rate(WARM_UP_S))
        text = proxy.metrics_text()
        assert metric_value(text, "sluice_throttles_total", type="Produce", client_id="pump") > 10
        # The client was told, in the responses it read.
        assert metric_value(text, "sluice_throttled_responses_total", api="Produce") > 10


def test_kafka_window_sensor_bounds_a_flat_out_producer(cluster) -> None:
    # Kafka's own sampled window (the default sensor): over any span T the bytes let through stay below
    # Q x T plus what the window can hold ((N + 1) x W x Q), and the client is not starved either
    # (docs/quotas.md, "How far from the quota"). N = 3: bursts every ~3 s, five of them in the 16 s.
    topic = "throttle-window"
    samples = 3
    with quota_proxy(
        cluster,
        {"client_id": "pump", "producer_byte_rate": QUOTA},
        window={"samples": samples, "size_seconds": 1},
    ) as proxy:
        sampler = TrafficSampler(proxy, "Produce").start()
        producer = FlatOutProducer(proxy.bootstrap, topic, "pump", **{"queue.buffering.max.kbytes": 512})
        producer.start()
        time.sleep(16)  # the measurement: the producer runs flat out for its span
        sampler.stop()
        producer.stop_now()  # what is still queued would drain at the quota, for nothing
    elapsed = sampler.samples[-1][0] - sampler.samples[0][0]
    sent = sampler.samples[-1][1] - sampler.samples[0][1]
    allowance = (samples + 1) * QUOTA + 16_384  # (N + 1) x W x Q, plus the one request that crosses the bound
    assert sent <= QUOTA * elapsed + allowance, (sent, elapsed)
    assert sent >= QUOTA * (elapsed - (samples + 1)) - allowance, (sent, elapsed)


def test_clients_sharing_a_quota_are_held_together(cluster) -> None:
    """Takes half a minute: the first burst, then the 20 s measured."""
    # A default-user quota: every ANONYMOUS client shares one sensor, whatever its client-id (spec 2.3).
    topic = "throttle-shared"
    with quota_proxy(cluster, {"user": "<default>", "producer_byte_rate": QUOTA}, **TOKEN_BUCKET) as proxy:
        sampler = TrafficSampler(proxy, "Produce").start()
        producers = [
            FlatOutProducer(proxy.bootstrap, topic, client_id, **{"queue.buffering.max.kbytes": 512})
            for client_id in ("pump-a", "pump-b")
        ]
        for p in producers:
            p.start()
        time.sleep(WARM_UP_S + MEASURE_S)  # the measurement: the producers run flat out for its span
        sampler.stop()
        for p in producers:
            p.stop_now()  # what is still queued would drain at the quota: 10 s for nothing
        text = proxy.metrics_text()
    assert_near_quota(sampler.average_rate(WARM_UP_S))
    assert all(p.delivered > 0 for p in producers), "one client starved the other"
    # One shared sensor, tagged by user only.
    assert metric_values(text, "sluice_quota_bound", type="Produce", user="ANONYMOUS", client_id="") == [
        QUOTA
    ]


def test_consumer_byte_rate(cluster) -> None:
    """Takes half a minute: 8 MB written, a group joined, the first burst read, then 20 s measured."""
    from confluent_kafka import Consumer, Producer

    topic = "throttle-fetch"
    records = 800  # 8 MB: more than the consumer can read at its quota during the test
    # One 10 kB record per batch: a fetch returns at least one whole batch, and big batches would make the
    # consumer's intake lumpy (a 1 MB lump every 5 s) and any 30 s average depend on where the lumps fall.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "batch.size": 16384})
    for i in range(records):
        # Spread evenly: the mock keeps only ~5 MB per partition, and librdkafka's sticky partitioner
        # would pile most records onto one partition, where the oldest would be dropped.
        producer.produce(topic, i.to_bytes(8, "big") * 1250, partition=i % 6)  # 10 kB
    assert producer.flush(60) == 0
    quota = 200_000
    burst = SMALL_WINDOW["samples"] * quota  # a full bucket: N x W x Q
    with quota_proxy(cluster, {"client_id": "sipper", "consumer_byte_rate": quota}, **TOKEN_BUCKET) as proxy:
        sampler = TrafficSampler(proxy, "Fetch", direction="response").start()
        consumer = Consumer(
            {
                "bootstrap.servers": proxy.bootstrap,
                "client.id": "sipper",
                "group.id": f"g-{uuid.uuid4()}",
                "auto.offset.reset": "earliest",
                "max.partition.fetch.bytes": 65536,
                "fetch.max.bytes": 131072,
                "message.max.bytes": 131072,
            }
        )
        consumer.subscribe([topic])
        # Group join takes a few seconds; the rate is measured from the moment the full bucket is spent.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            consumer.consume(500, timeout=0.5)
            if sampler.samples and sampler.samples[-1][1] - sampler.samples[0][1] >= burst:
                break
        until = time.monotonic() + MEASURE_S + 2
        while time.monotonic() < until:
            consumer.consume(500, timeout=0.5)
        sampler.stop()
        consumer.close()
        start = sampler.seconds_until(burst) + 2
        print("per second:", [round(b) for b in sampler.per_second()], "from", start)
        assert_near_quota(sampler.average_rate(start, start + MEASURE_S), quota)
        text = proxy.metrics_text()
        assert metric_value(text, "sluice_throttles_total", type="Fetch", client_id="sipper") > 5


class RequestLoop(threading.Thread):
    """Small requests as fast as one connection allows, counting answers and throttles."""

    def __init__(self, port: int, client_id: str, seconds: float) -> None:
        super().__init__(daemon=True)
        self.port, self.client_id, self.seconds = port, client_id, seconds
        self.answers = 0
        self.throttled = 0

    def run(self) -> None:
        from kafka.protocol.metadata import MetadataRequest, MetadataResponse
        from rawclient import RawClient

        with RawClient("127.0.0.1", self.port, client_id=self.client_id) as client:
            deadline = time.monotonic() + self.seconds
            while time.monotonic() < deadline:
                response = client.call(MetadataRequest[4](topics=[]), 4, MetadataResponse)
                self.answers += 1
                self.throttled += response.throttle_time_ms > 0


def test_request_percentage_throttles_a_tight_loop_and_not_a_normal_client(cluster) -> None:
    # 0.2 % of a thread = 2 ms of the proxy's CPU per second for the looping client.
    with quota_proxy(cluster, {"client_id": "looper", "request_percentage": 0.2}) as proxy:
        looper = RequestLoop(proxy.port, "looper", 8)
        normal = RequestLoop(proxy.port, "normal", 8)
        looper.start()
        normal.start()
        looper.join(30)
        normal.join(30)
        text = proxy.metrics_text()
    assert looper.throttled > 0
    assert normal.throttled == 0
    assert normal.answers > 3 * looper.answers, (normal.answers, looper.answers)
    assert metric_value(text, "sluice_throttles_total", type="Request", client_id="looper") > 0
    assert metric_value(text, "sluice_throttles_total", type="Request", client_id="normal") == 0
