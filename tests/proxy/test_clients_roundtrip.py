"""Real clients through the real proxy: every record produced comes back byte for byte, and no client ever
learns (or connects to) a broker address that is not the proxy's."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from records import digest, make_records
from sockets import connected_remote_ports
from throttle_harness import metric_value

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

RECORDS = 20_000
PARTITIONS = 6
READ_TIMEOUT_S = 120


def proxy_ports(proxy) -> set[int]:
    return {proxy.port} | {proxy.broker_port(n) for n in range(0, 8)}


def assert_only_proxy_peers(proxy, cluster) -> None:
    peers = connected_remote_ports()
    mock_ports = {port for _, port in cluster.addresses}
    assert not peers & mock_ports, f"a client connected to a mock broker directly: {peers & mock_ports}"
    assert peers & proxy_ports(proxy), "the client is not connected to the proxy at all"


def assert_advertised_are_proxy(proxy, brokers: list[tuple[str, int]]) -> None:
    assert brokers, "the client knows no brokers"
    for host, port in brokers:
        assert (host, port) in {("127.0.0.1", p) for p in proxy_ports(proxy)}, (host, port)


def test_confluent_kafka_roundtrip(proxy, cluster) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = "roundtrip-confluent"
    records = make_records(RECORDS, seed=1)
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 5})
    failures: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failures.append(str(err))

    for i, (key, value) in enumerate(records):
        while True:
            try:
                producer.produce(topic, value, key, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    assert not failures
    metadata = producer.list_topics(timeout=10)
    assert_advertised_are_proxy(proxy, [(b.host, b.port) for b in metadata.brokers.values()])
    assert_only_proxy_peers(proxy, cluster)

    consumer = Consumer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "group.id": f"g-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
        }
    )
    consumer.subscribe([topic])
    seen: list[tuple[bytes, bytes]] = []
    partitions: set[int] = set()
    deadline = time.monotonic() + READ_TIMEOUT_S
    while len(seen) < RECORDS and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=1.0):
            assert msg.error() is None, msg.error()
            seen.append((msg.key(), msg.value()))
            partitions.add(msg.partition())
    assert_only_proxy_peers(proxy, cluster)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    consumer.close()
    assert len(seen) == RECORDS
    assert digest(seen) == digest(records)
    assert partitions == set(range(PARTITIONS))
    assert all(tp.error is None for tp in committed)


async def test_aiokafka_roundtrip(proxy, cluster) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = "roundtrip-aiokafka"
    records = make_records(RECORDS, seed=2)
    producer = AIOKafkaProducer(bootstrap_servers=proxy.bootstrap, linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value=value, key=key, partition=i % PARTITIONS)
            for i, (key, value) in enumerate(records)
        ]
        await asyncio.gather(*futures)
        brokers = producer.client.cluster.brokers()
        assert_advertised_are_proxy(proxy, [(b.host, b.port) for b in brokers])
        assert_only_proxy_peers(proxy, cluster)
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=proxy.bootstrap,
        group_id=f"g-{uuid.uuid4()}",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    seen: list[tuple[bytes, bytes]] = []
    partitions: set[int] = set()
    try:
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(seen) < RECORDS and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000, max_records=5000)
            for tp, messages in batches.items():
                partitions.add(tp.partition)
                seen.extend((m.key, m.value) for m in messages)
        assert_only_proxy_peers(proxy, cluster)
        await consumer.commit()
    finally:
        await consumer.stop()
    assert len(seen) == RECORDS
    assert digest(seen) == digest(records)
    assert partitions == set(range(PARTITIONS))


def test_kafka_python_roundtrip(proxy, cluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = "roundtrip-kafkapython"
    records = make_records(RECORDS, seed=3)
    # The mock cluster needs a pinned api_version for kafka-python (its version probe misreads the mock).
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, api_version=(2, 0), linger_ms=5)
    try:
        futures = [
            producer.send(topic, value=value, key=key, partition=i % PARTITIONS)
            for i, (key, value) in enumerate(records)
        ]
        producer.flush(60)
        for f in futures:
            f.get(timeout=30)
        brokers = producer._metadata.brokers()
        assert_advertised_are_proxy(proxy, [(b.host, b.port) for b in brokers])
        assert_only_proxy_peers(proxy, cluster)
    finally:
        producer.close()

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=proxy.bootstrap,
        api_version=(2, 0),
        group_id=f"g-{uuid.uuid4()}",
        auto_offset_reset="earliest",
    )
    seen: list[tuple[bytes, bytes]] = []
    partitions: set[int] = set()
    try:
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(seen) < RECORDS and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=1000, max_records=5000).items():
                partitions.add(tp.partition)
                seen.extend((m.key, m.value) for m in messages)
        assert_only_proxy_peers(proxy, cluster)
        consumer.commit()
    finally:
        consumer.close()
    assert len(seen) == RECORDS
    assert digest(seen) == digest(records)
    assert partitions == set(range(PARTITIONS))


APIS = ("Produce", "Fetch", "Metadata", "FindCoordinator")


def requests_by_api(proxy) -> dict[str, float]:
    text = proxy.metrics_text()
    return {api: metric_value(text, "sluice_requests_total", api=api) for api in APIS}


def test_metrics_count_requests_by_api(proxy) -> None:
    """A produce and a consumer group's read through the proxy are counted under each API they use."""
    from confluent_kafka import Consumer, Producer

    topic = "metrics-by-api"
    before = requests_by_api(proxy)
    producer = Producer({"bootstrap.servers": proxy.bootstrap})
    for i in range(10):
        producer.produce(topic, b"v%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "group.id": f"g-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + READ_TIMEOUT_S
    while seen < 10 and time.monotonic() < deadline:
        seen += len([m for m in consumer.consume(10, timeout=1.0) if m.error() is None])
    consumer.close()
    assert seen == 10
    after = requests_by_api(proxy)
    for api in APIS:
        assert after[api] > before[api], (api, before, after)
