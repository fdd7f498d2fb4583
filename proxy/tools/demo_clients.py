"""The demo's clients: confluent-kafka producers and a consumer, each on its own thread, counting what they
got per second (record payload, as the client sees it) and the throttles they were told."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Message, Producer, ThrottleEvent

RECORD_SIZE = 10_000


@dataclass(frozen=True)
class ClientPlan:
    """One demo client. A producer sends RECORD_SIZE records; the consumer reads a topic filled beforehand."""

    label: str  # as the demo prints it
    client_id: str
    quota: int | None  # the byte rate Sluice enforces on it, bytes/s; None: no quota
    pace: int | None = None  # a producer's own rate limit, bytes/s; None: flat out
    read_back: bool = False  # whether its records are read back and checked afterwards
    route: str = "main"  # which Sluice it goes through: "main", or "other" (the other sensor)
    consumer: bool = False
    topic_name: str | None = None

    @property
    def topic(self) -> str:
        return self.topic_name or f"demo-{self.label}"


def record_value(client_id: str, i: int, size: int = RECORD_SIZE) -> bytes:
    """Distinct, reproducible content per record, so the read-back checksum would catch any mix-up."""
    seed = hashlib.sha256(f"{client_id}:{i}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def order_free_digest(record_hashes: Sequence[bytes]) -> str:
    # A consumer sees partitions interleaved, so compare the sorted per-record hashes.
    return hashlib.sha256(b"".join(sorted(record_hashes))).hexdigest()


class CountingClient(threading.Thread):
    """Bytes and told throttles per second since `started`."""

    def __init__(self, plan: ClientPlan, started: float) -> None:
        super().__init__(name=f"demo-{plan.label}", daemon=True)
        self.plan = plan
        self.started = started
        self.errors: list[str] = []
        self.bytes_by_second: dict[int, int] = {}
        self.throttles_by_second: dict[int, list[int]] = {}
        self._stop_flag = threading.Event()

    def _second(self) -> int:
        return int(time.monotonic() - self.started)

    def _count(self, size: int) -> None:
        second = self._second()
        self.bytes_by_second[second] = self.bytes_by_second.get(second, 0) + size

    def _on_throttle(self, event: ThrottleEvent) -> None:
        # librdkafka reports seconds as a float, and also reports the return to zero.
        throttle_ms = round(event.throttle_time * 1000)
        if throttle_ms > 0:
            self.throttles_by_second.setdefault(self._second(), []).append(throttle_ms)

    def stop(self) -> None:
        self._stop_flag.set()

    def finish(self) -> None:
        """After `stop`: wait for the thread, then flush and close the client it ran."""
        raise NotImplementedError

    def rate(self, second: int) -> float:
        return float(self.bytes_by_second.get(second, 0))

    def average_rate(self, from_s: int, to_s: int) -> float:
        return sum(self.rate(s) for s in range(from_s, to_s)) / max(1, to_s - from_s)

    def told(self, second: int | None = None) -> list[int]:
        if second is not None:
            return self.throttles_by_second.get(second, [])
        return [ms for values in self.throttles_by_second.values() for ms in values]


class DemoProducer(CountingClient):
    """One confluent-kafka producer, flat out or at its own pace."""

    def __init__(self, bootstrap: str, plan: ClientPlan, started: float) -> None:
        super().__init__(plan, started)
        # Imported here: confluent-kafka is an optional extra, and `sluice run` must not need it.
        import confluent_kafka

        self.sent = 0
        self.delivered = 0
        self.sent_hashes: list[bytes] = []
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "client.id": plan.client_id,
            "linger.ms": 0,
            "batch.size": 16384,
            # A small local queue: what is queued when the demo stops must drain at the quota rate.
            "queue.buffering.max.kbytes": 128,
            "message.timeout.ms": 120_000,
            # Requests held by a throttle must not time out and be sent twice (docs/quotas.md).
            "enable.idempotence": True,
            "throttle_cb": self._on_throttle,
        }
        self.producer: Producer | None = confluent_kafka.Producer(config)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        self.delivered += 1
        self._count(len(msg.value() or b""))

    def run(self) -> None:
        producer = self.producer
        assert producer is not None, "a DemoProducer runs once"
        pace = self.plan.pace
        while not self._stop_flag.is_set():
            if pace is not None:
                due = self.started + self.sent * RECORD_SIZE / pace
                wait = due - time.monotonic()
                if wait > 0:
                    # Sleep by polling, so delivery reports keep their timing.
                    producer.poll(min(wait, 0.05))
                    continue
            value = record_value(self.plan.client_id, self.sent)
            try:
                producer.produce(self.plan.topic, value, on_delivery=self._on_delivery)
            except BufferError:
                producer.poll(0.05)
                continue
            if self.plan.read_back:
                self.sent_hashes.append(hashlib.sha256(value).digest())
            self.sent += 1
            producer.poll(0)

    def finish(self, timeout_s: float = 60.0) -> None:
        self.stop()
        self.join(10)
        producer = self.producer
        assert producer is not None, "finish() is called once"
        left = producer.flush(timeout_s)
        if left:
            self.errors.append(f"{left} records not delivered within {timeout_s:.0f} s")
        # The client holds our bound callbacks and we hold it: drop our end so it is destroyed now, before
        # the proxy stops, instead of reconnecting (and logging) until the garbage collector gets to it.
        self.producer = None
        del producer


class DemoConsumer(CountingClient):
    """One confluent-kafka consumer reading every partition of its topic from the start."""

    def __init__(
        self, bootstrap: str, plan: ClientPlan, started: float, extra: dict[str, Any] | None = None
    ) -> None:
        super().__init__(plan, started)
        import confluent_kafka

        self.received = 0
        self.consumer: Consumer | None = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": plan.client_id,
                "group.id": f"demo-{uuid.uuid4()}",
                "auto.offset.reset": "earliest",
                "throttle_cb": self._on_throttle,
                **(extra or {}),
            }
        )

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        consumer = self.consumer
        assert consumer is not None, "a DemoConsumer runs once"
        # Assigned, not subscribed: no group join, so the quota's first burst falls in the first second.
        partitions = consumer.list_topics(self.plan.topic, timeout=10).topics[self.plan.topic].partitions
        consumer.assign([TopicPartition(self.plan.topic, p, OFFSET_BEGINNING) for p in sorted(partitions)])
        while not self._stop_flag.is_set():
            for message in consumer.consume(500, timeout=0.05):
                if message.error() is None:
                    self.received += 1
                    self._count(len(message.value() or b""))

    def finish(self) -> None:
        self.stop()
        self.join(10)
        consumer = self.consumer
        assert consumer is not None, "finish() is called once"
        consumer.close()
        self.consumer = None
        del consumer


def read_back(bootstrap: str, expected: dict[str, int], timeout_s: float = 90.0) -> dict[str, list[bytes]]:
    """Per topic, the sha256 of every record a fresh consumer group reads through the proxy."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"demo-{uuid.uuid4()}",
            "client.id": "demo-checker",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(list(expected))
    hashes: dict[str, list[bytes]] = {topic: [] for topic in expected}
    deadline = time.monotonic() + timeout_s
    started = time.monotonic()
    while any(len(hashes[t]) < n for t, n in expected.items()) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=1.0):
            topic, value = msg.topic(), msg.value()
            if msg.error() is None and topic is not None and value is not None:
                hashes[topic].append(hashlib.sha256(value).digest())
    consumer.close()
    got = sum(len(v) for v in hashes.values())
    print(f"  checker read {got:,} records in {time.monotonic() - started:.1f}s")
    return hashes


def fill_topic(bootstrap: str, topic: str, size_bytes: int) -> int:
    """Write about `size_bytes` of records to `topic` directly (not through Sluice), the same number to each
    partition; returns how many records the topic then holds (raises if any was dropped).

    Round-robin by hand, not by librdkafka's sticky partitioner: that one keeps to one partition for
    `sticky.partitioning.linger.ms`, so a fast fill can put every record in one partition, past the mock's
    ~5 MB per partition, which then drops the oldest: the consumer would run out of records mid-run and
    its rate fall to zero, as if Sluice had stalled it."""
    from confluent_kafka import Consumer, Producer

    # One record per batch: a fetch returns at least one whole batch, so small batches keep the consumer's
    # fetches (and the throttles they earn) small.
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384, "client.id": "demo-filler"}
    producer = Producer(config)
    partitions = sorted(producer.list_topics(topic, timeout=10).topics[topic].partitions)
    count = max(1, size_bytes // RECORD_SIZE)
    value = b"h" * RECORD_SIZE
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=partitions[i % len(partitions)])
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(60)
    if left:
        raise RuntimeError(f"{left} of {count} records were not written to {topic} within 60 s")
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-filler", "client.id": "demo-filler"})
    try:
        held = sum(high - low for low, high in readable_offsets(reader, topic, partitions))
    finally:
        reader.close()
    if held != count:
        raise RuntimeError(f"{topic} holds {held:,} of the {count:,} records written: some were dropped")
    return held


def readable_offsets(consumer: Consumer, topic: str, partitions: Sequence[int]) -> list[tuple[int, int]]:
    """(log start, high watermark) of each partition: what a consumer from the beginning can read."""
    from confluent_kafka import TopicPartition

    return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions]
