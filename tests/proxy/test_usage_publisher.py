"""The usage publisher with a stand-in for the proxy's own Kafka client: what it writes, how it waits for
Kafka without ever holding anyone else up, and what it drops when Kafka stays away."""

from __future__ import annotations

import asyncio

import pytest

from sluice.config.usage_settings import UsageSettings
from sluice.protocol.record_batches import GZIP, Record
from sluice.proxy.kafka_client import BrokerUnavailable
from sluice.proxy.usage_plane.usage_publisher import UsagePublisher
from sluice.proxy.wake_grid import next_boundary
from sluice.quota.usage_ledger import UsageLedger
from sluice.quota.usage_records import decode_batch

WALL = 1_800_000_000_000


class FakeKafka:
    """Records what is asked of it; `down` makes every call fail as an unreachable cluster does."""

    def __init__(self, partitions: int = 4) -> None:
        self.down = False
        self.topics: list[tuple[str, int, int, dict[str, str]]] = []
        self.produced: list[tuple[str, int, list[Record]]] = []
        self._partitions = partitions

    def _check(self) -> None:
        if self.down:
            raise BrokerUnavailable("127.0.0.1:9092: connection refused")

    async def create_topic(self, name, *, partitions=1, replication_factor=-1, configs=None, timeout_s=None):
        self._check()
        self.topics.append((name, partitions, replication_factor, dict(configs or {})))

    async def partitions(self, topic, *, timeout_s=None):
        self._check()
        return list(range(self._partitions))

    async def produce(self, topic, partition, records, *, timeout_s=None, compression=0):
        self._check()
        assert compression == GZIP  # the default
        self.produced.append((topic, partition, list(records)))
        return len(self.produced)

    def messages(self) -> list[bytes]:
        return [record.value for _, _, records in self.produced for record in records]


class Clock:
    def __init__(self) -> None:
        self.now = WALL

    def __call__(self) -> int:
        return self.now


async def settle() -> None:
    """Twenty turns of the loop: the fake Kafka is in-process, so what is due has run (turns, not time)."""
    for _ in range(20):
        await asyncio.sleep(0)


def publisher(kafka: FakeKafka, clock: Clock, **settings) -> tuple[UsagePublisher, UsageLedger]:
    ledger = UsageLedger("edge-a")
    usage = UsageSettings(enabled=True, **settings)
    return UsagePublisher(kafka, ledger, usage, wall_ms=clock, retry_s=(0.001, 0.002)), ledger


def test_intervals_end_on_wall_clock_boundaries() -> None:
    assert next_boundary(1_000_123, 1000) == 1_001_000
    assert next_boundary(1_001_000, 1000) == 1_002_000
    assert next_boundary(1_000_999, 250) == 1_001_000


async def test_a_batch_per_interval_goes_to_the_topic_created_with_the_operators_retention() -> None:
    kafka, clock = FakeKafka(), Clock()
    pub, ledger = publisher(kafka, clock, topic="ops.usage", retention_ms=3_600_000, partitions=2)
    await pub.start()
    try:
        ledger.entity("ANONYMOUS", "pump").produce_bytes += 5_000
        clock.now += 1000
        pub.publish_interval(WALL + 1000)
        await settle()
    finally:
        clock.now += 300
        await pub.stop()
    assert kafka.topics == [("ops.usage", 2, -1, {"retention.ms": "3600000", "cleanup.policy": "delete"})]
    first, last = (decode_batch(m) for m in kafka.messages())
    assert (first.instance, first.interval_start_ms, first.interval_ms) == ("edge-a", WALL, 1000)
    assert [(r.client_id, r.produce_bytes) for r in first.rows] == [("pump", 5_000)]
    # On stop, the interval so far is published too (here an empty one: a heartbeat).
    assert (last.interval_start_ms, last.interval_ms, last.rows) == (WALL + 1000, 300, ())
    (topic, partition, records), _ = kafka.produced
    assert topic == "ops.usage" and partition in (0, 1, 2, 3)
    assert records[0].key == b"edge-a"
    assert {p for _, p, _ in kafka.produced} == {partition}  # one instance, one partition: in order
    assert pub.stats.messages_sent == 2 and pub.stats.messages_dropped == 0


async def test_kafka_unreachable_buffers_then_drops_the_oldest_and_counts_them() -> None:
    kafka, clock = FakeKafka(), Clock()
    kafka.down = True
    pub, ledger = publisher(kafka, clock, buffer_batches=3)
    await pub.start()
    try:
        for i in range(5):
            ledger.entity("ANONYMOUS", "pump").produce_bytes += 100 + i  # the data path never waits
            clock.now += 1000
            pub.publish_interval(clock.now)
            await settle()
        assert pub.stats.buffered == 3
        assert pub.stats.messages_dropped == 2
        assert pub.stats.send_failures > 0
        assert kafka.produced == []
        kafka.down = False  # Kafka is back: the next retry sends what is buffered, oldest first
        async with asyncio.timeout(10):
            while pub.stats.buffered:
                await asyncio.sleep(0.001)  # a poll: the retries (every 1-2 ms) emptying the buffer
        await settle()
    finally:
        await pub.stop()
    sent = [decode_batch(m) for m in kafka.messages()]
    assert [b.rows[0].produce_bytes for b in sent if b.rows] == [102, 103, 104]
    assert pub.stats.messages_dropped == 2 and pub.stats.buffered == 0


async def test_a_batch_past_the_message_limit_is_split() -> None:
    kafka, clock = FakeKafka(), Clock()
    ledger = UsageLedger("edge-a")
    pub = UsagePublisher(kafka, ledger, UsageSettings(enabled=True), wall_ms=clock, max_message_bytes=2_000)
    await pub.start()
    try:
        for i in range(100):
            ledger.entity("u", f"client-{i}").produce_bytes += 1
        pub.publish_interval(WALL + 1000)
        await settle()
    finally:
        await pub.stop()
    batches = [decode_batch(m) for m in kafka.messages()]
    assert len(batches) > 2
    assert all(len(m) <= 2_000 for m in kafka.messages())
    assert sum(len(b.rows) for b in batches) == 100
    assert len({b.interval_start_ms for b in batches if b.rows}) == 1


@pytest.mark.parametrize("failure", ["create", "produce"])
async def test_stop_never_waits_long_for_an_unreachable_kafka(failure: str) -> None:
    kafka, clock = FakeKafka(), Clock()
    pub, ledger = publisher(kafka, clock)
    await pub.start()
    if failure == "produce":
        await settle()  # the topic is ready
    kafka.down = True
    ledger.entity("u", "c").produce_bytes += 1
    await asyncio.wait_for(pub.stop(), 5)
