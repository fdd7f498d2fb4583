"""The grip, end to end: while partition leadership moves (and a broker stops and starts again, as in a
rolling restart), real clients produce and consume through the proxy, no record is lost, and no client ever
opens a connection to a broker's own port.

The brokers' ports are watched (tests/broker_watch.py): the mock cluster names a watching relay's port for
each broker in every answer, Metadata and KIP-951 NodeEndpoints alike, and the watch records who opened each
connection there, by its source address: the proxy connects to the brokers from its own
(`upstream.bind_address`), and only the proxy may. librdkafka implements KIP-951: given a NOT_LEADER answer
naming the new leader's address, it connects there at once, so without the NodeEndpoints rewrite the
librdkafka tests fail on their first leader move.

Leaders move with the mock's `leader` command; the partition's log moves with it. Each round of records is
flushed (delivered) before the next move, so a move always meets a client that still believes in the old
leader: its next request gets NOT_LEADER_OR_FOLLOWER with the new leader's address.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from broker_watch import BrokerWatch
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from throttle_harness import metric_value

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

BROKERS = 3
PARTITIONS = 6
ROUNDS = 4
PER_ROUND = 150
READ_TIMEOUT_S = 60


@contextmanager
def gripped(topic: str) -> Iterator[tuple[MockCluster, BrokerWatch, ProxyProcess]]:
    """A mock cluster whose brokers' ports are watched, and the proxy in front of them. On the way out, no
    connection may have reached a broker's port from anyone but the proxy."""
    with (
        MockCluster(brokers=BROKERS, topics={topic: PARTITIONS}) as cluster,
        BrokerWatch(cluster) as watch,
        ProxyProcess(watch.bootstrap, watch.proxy_config) as proxy,
    ):
        yield cluster, watch, proxy
        assert_only_the_proxy_reached_the_brokers(watch)


def assert_only_the_proxy_reached_the_brokers(watch: BrokerWatch) -> None:
    direct = watch.direct()
    assert direct == [], "connections straight to a broker's port:\n" + "\n".join(map(str, direct))
    assert any(c.from_proxy for c in watch.connections), "the proxy never reached the brokers"


def leader_of(partition: int, round_: int) -> int:
    """Round 0 is the mock's own placement (partition p on broker p % N + 1); each round shifts it by one."""
    return (partition + round_) % BROKERS + 1


def move_leaders(cluster: MockCluster, topic: str, round_: int) -> None:
    for partition in range(PARTITIONS):
        cluster.set_leader(topic, partition, leader_of(partition, round_))


def rewritten(proxy: ProxyProcess, api: str) -> float:
    return metric_value(proxy.metrics_text(), "sluice_addresses_rewritten_total", api=api)


def values(round_: int) -> list[bytes]:
    return [b"%d-%d" % (round_, i) for i in range(PER_ROUND)]


# ---- the watch itself ----------------------------------------------------------------------------------


def test_the_watch_catches_direct_connections_and_knows_the_proxys_by_their_source_address() -> None:
    """A socket of this process, one of another process, one that leaves at once, and a librdkafka producer
    bootstrapped at the brokers' ports are all caught; the proxy's own connections are not."""
    from confluent_kafka import Producer

    with (
        MockCluster(brokers=2, topics={"watched": 2}) as cluster,
        BrokerWatch(cluster) as watch,
        ProxyProcess(watch.bootstrap, watch.proxy_config),
    ):
        assert watch.direct() == [] and any(c.from_proxy for c in watch.connections)  # discovery
        with socket.create_connection(("127.0.0.1", watch.ports[2])):
            (caught,) = watch.wait_for_direct()
        assert (caught.broker_id, caught.peer[0], caught.pid) == (2, "127.0.0.1", os.getpid())

        port = watch.ports[1]
        code = f"import socket,sys; s=socket.create_connection(('127.0.0.1',{port})); sys.stdin.read()"
        child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
        try:
            direct = watch.wait_for_direct(count=2)
            assert [(c.broker_id, c.pid) for c in direct] == [(2, os.getpid()), (1, child.pid)], direct
            assert "socket.create_connection" in direct[1].command
        finally:
            child.communicate(b"", timeout=10)

        socket.create_connection(("127.0.0.1", port)).close()  # gone before anyone could look it up
        assert len(watch.wait_for_direct(count=3)) == 3

        producer = Producer({"bootstrap.servers": watch.bootstrap})
        producer.produce("watched", b"straight to the broker", partition=1)
        assert producer.flush(30) == 0
        from_producer = watch.direct()[3:]
        # Every one whose process could still be looked up is this one's (librdkafka may close one, the
        # bootstrap connection, before the watch looks: on a loaded machine it found no owner, pid None).
        found = {c.pid for c in from_producer if c.pid is not None}
        assert from_producer and found == {os.getpid()}, from_producer


# ---- librdkafka (KIP-951) -------------------------------------------------------------------------------


def confluent_produce_rounds(
    cluster: MockCluster, topic: str, bootstrap: str, between: Callable[[int], None] | None = None
) -> list[bytes]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    sent: list[bytes] = []
    for round_ in range(ROUNDS):
        for i, value in enumerate(values(round_)):
            producer.produce(topic, value, partition=i % PARTITIONS, on_delivery=on_delivery)
        assert producer.flush(30) == 0
        sent += values(round_)
        (between or (lambda r: move_leaders(cluster, topic, r)))(round_ + 1)
    assert failures == []
    return sent


def confluent_consume_all(
    cluster: MockCluster,
    topic: str,
    bootstrap: str,
    expected: set[bytes],
    until: Callable[[], bool] = lambda: True,
    **config: str,
) -> set[bytes]:
    """Read every partition from the start, moving every leader each time a quarter of the records is in
    (three times in all, the last ones once everything is in if it came faster), and go on fetching until
    `until()` holds too: an idle consumer still fetches, and its next fetch meets the moved leaders."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            **config,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: set[bytes] = set()
    moves, moved_at = 0, time.monotonic()
    deadline = time.monotonic() + READ_TIMEOUT_S
    while not (expected <= seen and moves >= 3 and until()) and time.monotonic() < deadline:
        for message in consumer.consume(200, timeout=0.5):
            assert message.error() is None, message.error()
            seen.add(message.value())
        quarter_in = moves < 3 and (len(seen) >= (moves + 1) * len(expected) // 4 or expected <= seen)
        # Everything read but `until()` not yet seen: the consumer may have learnt the last leaders from a
        # Metadata refresh before fetching from an old one (a matter of timing on a loaded machine), so the
        # leaders move again, every 2 s, until an answer shows what the test waits for.
        waiting_on_until = moves >= 3 and expected <= seen and time.monotonic() - moved_at > 2
        if quarter_in or waiting_on_until:
            moves += 1
            moved_at = time.monotonic()
            move_leaders(cluster, topic, ROUNDS + moves)
    consumer.close()
    return seen


def test_librdkafka_follows_moving_leaders_through_the_proxy_only() -> None:
    topic = "grip-librdkafka"
    with gripped(topic) as (cluster, _watch, proxy):
        sent = confluent_produce_rounds(cluster, topic, proxy.bootstrap)
        assert rewritten(proxy, "Produce") > 0  # the new leaders' addresses came in NodeEndpoints
        fetch_rewritten = lambda: rewritten(proxy, "Fetch") > 0  # noqa: E731
        seen = confluent_consume_all(cluster, topic, proxy.bootstrap, set(sent), until=fetch_rewritten)
        assert set(sent) <= seen, f"{len(set(sent) - seen)} records lost"
        assert fetch_rewritten()


def test_librdkafka_through_a_rolling_restart_and_a_preferred_leader_election() -> None:
    """Broker 2 stops; its partitions move to the others (as the controller moves them); it starts again and a
    preferred leader election gives them back; all while a producer and then a consumer work."""
    topic = "grip-restart"
    with gripped(topic) as (cluster, _watch, proxy):
        led_by_2 = [p for p in range(PARTITIONS) if leader_of(p, 0) == 2]

        def restart_step(step: int) -> None:
            if step == 1:
                cluster.broker_down(2)
                for partition in led_by_2:
                    cluster.set_leader(topic, partition, 1)
            elif step == 2:
                cluster.broker_up(2)
            elif step == 3:
                for partition in led_by_2:
                    cluster.set_leader(topic, partition, 2)  # back to its preferred leader

        sent = confluent_produce_rounds(cluster, topic, proxy.bootstrap, between=restart_step)
        seen = confluent_consume_all(cluster, topic, proxy.bootstrap, set(sent))
        assert set(sent) <= seen, f"{len(set(sent) - seen)} records lost"
        assert rewritten(proxy, "Produce") > 0


def test_a_kip848_consumer_follows_moving_leaders_through_the_proxy_only() -> None:
    topic = "grip-kip848"
    with gripped(topic) as (cluster, _watch, proxy):
        sent = confluent_produce_rounds(cluster, topic, proxy.bootstrap)
        seen = confluent_consume_all(
            cluster, topic, proxy.bootstrap, set(sent), **{"group.protocol": "consumer"}
        )
        assert set(sent) <= seen, f"{len(set(sent) - seen)} records lost"


def test_a_share_group_consumer_follows_moving_leaders_through_the_proxy_only() -> None:
    """KIP-932: records acquired and acknowledged through ShareFetch, whose answers name the new leaders."""
    from confluent_kafka import Producer, ShareConsumer

    topic = "grip-share"
    with gripped(topic) as (cluster, _watch, proxy):
        consumer = ShareConsumer({"bootstrap.servers": proxy.bootstrap, "group.id": f"share-{uuid.uuid4()}"})
        consumer.subscribe([topic])
        producer = Producer({"bootstrap.servers": proxy.bootstrap, "acks": "all"})
        # A share group starts a partition at its latest offset when a member first fetches it, and the
        # member is given its partitions a few at a time: a mark goes to every partition until each comes
        # back, so that no record below is written before its partition's start.
        deadline = time.monotonic() + READ_TIMEOUT_S
        unmarked = set(range(PARTITIONS))
        while unmarked:
            assert time.monotonic() < deadline, f"partitions {sorted(unmarked)} never reached the consumer"
            for partition in unmarked:
                producer.produce(topic, b"mark", partition=partition)
            assert producer.flush(30) == 0
            for message in consumer.poll(0.5):
                if message.error() is None and message.value() == b"mark":
                    unmarked.discard(message.partition())
        expected = set()
        seen: set[bytes] = set()
        for round_ in range(ROUNDS):
            for i, value in enumerate(values(round_)):
                producer.produce(topic, value, partition=i % PARTITIONS)
            assert producer.flush(30) == 0
            expected |= set(values(round_))
            while not expected <= seen and time.monotonic() < deadline:
                seen |= {m.value() for m in consumer.poll(0.5) if m.error() is None}
            move_leaders(cluster, topic, round_ + 1)
        consumer.close()
        assert expected <= seen, f"{len(expected - seen)} records never delivered"
        assert rewritten(proxy, "ShareFetch") + rewritten(proxy, "ShareAcknowledge") > 0


# ---- kafka-python and aiokafka (Metadata-driven: no KIP-951) ------------------------------------------


def test_kafka_python_follows_moving_leaders_through_the_proxy_only() -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = "grip-kafkapython"
    with gripped(topic) as (cluster, _watch, proxy):
        # The mock needs a pinned api_version for kafka-python (its version probe misreads the mock).
        producer = KafkaProducer(
            bootstrap_servers=proxy.bootstrap, api_version=(2, 0), acks="all", retries=10
        )
        sent: list[bytes] = []
        try:
            for round_ in range(ROUNDS):
                futures = [
                    producer.send(topic, value=v, partition=i % PARTITIONS)
                    for i, v in enumerate(values(round_))
                ]
                producer.flush(30)
                for future in futures:
                    future.get(timeout=30)
                sent += values(round_)
                move_leaders(cluster, topic, round_ + 1)
        finally:
            producer.close()
        consumer = KafkaConsumer(
            bootstrap_servers=proxy.bootstrap, api_version=(2, 0), auto_offset_reset="earliest"
        )
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        seen: set[bytes] = set()
        try:
            deadline = time.monotonic() + READ_TIMEOUT_S
            moved = False
            while not set(sent) <= seen and time.monotonic() < deadline:
                for messages in consumer.poll(timeout_ms=500).values():
                    seen |= {m.value for m in messages}
                if not moved and len(seen) >= len(sent) // 2:
                    move_leaders(cluster, topic, ROUNDS + 1)
                    moved = True
        finally:
            consumer.close()
        assert set(sent) <= seen, f"{len(set(sent) - seen)} records lost"


async def test_aiokafka_follows_moving_leaders_through_the_proxy_only() -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = "grip-aiokafka"
    with gripped(topic) as (cluster, _watch, proxy):
        producer = AIOKafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all")
        await producer.start()
        sent: list[bytes] = []
        try:
            for round_ in range(ROUNDS):
                batch = [
                    await producer.send(topic, v, partition=i % PARTITIONS)
                    for i, v in enumerate(values(round_))
                ]
                for future in batch:
                    await future
                sent += values(round_)
                move_leaders(cluster, topic, round_ + 1)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=proxy.bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        seen: set[bytes] = set()
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + READ_TIMEOUT_S
            moved = False
            while not set(sent) <= seen and time.monotonic() < deadline:
                for messages in (await consumer.getmany(timeout_ms=500)).values():
                    seen |= {m.value for m in messages}
                if not moved and len(seen) >= len(sent) // 2:
                    move_leaders(cluster, topic, ROUNDS + 1)
                    moved = True
        finally:
            await consumer.stop()
        assert set(sent) <= seen, f"{len(set(sent) - seen)} records lost"
