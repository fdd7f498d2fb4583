"""The test broker: librdkafka's mock cluster in its own process, driven by real clients."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from mock_cluster_process import MockCluster

from sluice.proxy.listeners.ports import free_port_block
from sluice.proxy.tools.mock_cluster import MockClusterError, TopicSpec, parse_bootstrap, parse_topic_spec

TOPIC = "orders"
PARTITIONS = 6

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, API_VERSIONS = 0, 1, 3, 10, 18
SASL_HANDSHAKE, CREATE_TOPICS, DELETE_TOPICS = 17, 19, 20
SASL_AUTHENTICATE, CREATE_PARTITIONS, DESCRIBE_CLUSTER = 36, 37, 60
UNSUPPORTED_VERSION = 35


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=3, topics={TOPIC: PARTITIONS}) as running:
        yield running


def _producer(cluster: MockCluster, **overrides: str | int) -> Producer:
    config: dict[str, str | int] = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 0}
    config.update(overrides)
    return Producer(config)


def _deliver(producer: Producer, records: list[tuple[int, bytes]]) -> list[tuple[KafkaError | None, int]]:
    """Produce (partition, value) pairs, flush, return (error, partition) per delivery report."""
    reports: list[tuple[KafkaError | None, int]] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        reports.append((error, message.partition()))

    for partition, value in records:
        producer.produce(TOPIC, value, partition=partition, on_delivery=on_delivery)
    assert producer.flush(15) == 0
    return reports


def _leader_of(cluster: MockCluster, partition: int) -> int:
    metadata = _producer(cluster).list_topics(TOPIC, timeout=10)
    return metadata.topics[TOPIC].partitions[partition].leader


def _refuses_connections(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def _api_versions(address: tuple[str, int]) -> dict[int, tuple[int, int]]:
    request = ApiVersionsRequest(version=0)
    request.with_header(correlation_id=1, client_id="mock-cluster-test")
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(request.encode(header=True, framed=True))
        reader = sock.makefile("rb")
        size = int.from_bytes(reader.read(4), "big")
        response = ApiVersionsResponse.decode(reader.read(size), version=0, header=True)
    assert response.error_code == 0
    return {api.api_key: (api.min_version, api.max_version) for api in response.api_keys}


def test_confluent_kafka_round_trips_records_through_every_partition(cluster: MockCluster) -> None:
    sent = {(f"key-{i}".encode(), f"value-{i}".encode()) for i in range(300)}
    producer = _producer(cluster)
    reports: list[KafkaError | None] = []
    for key, value in sorted(sent):
        producer.produce(TOPIC, value, key=key, on_delivery=lambda error, _msg: reports.append(error))
    assert producer.flush(15) == 0
    assert reports == [None] * 300

    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "round-trip", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    received: list[tuple[bytes, bytes]] = []
    partitions_seen: set[int] = set()
    deadline = time.monotonic() + 30
    while len(received) < len(sent) and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=500, timeout=0.5):
            assert message.error() is None
            received.append((message.key(), message.value()))
            partitions_seen.add(message.partition())
    consumer.close()

    assert len(received) == len(sent)
    assert set(received) == sent
    assert len(partitions_seen) > 1


def test_broker_down_fails_delivery_to_its_partitions_until_it_comes_back_up(cluster: MockCluster) -> None:
    # With replication 1, partition p lives on broker p % 3 + 1.
    assert [_leader_of(cluster, p) for p in (0, 1)] == [1, 2]
    producer = _producer(
        cluster, **{"message.timeout.ms": 1500, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200}
    )
    assert _deliver(producer, [(1, b"before")]) == [(None, 1)]

    cluster.broker_down(2)
    reports = dict((partition, error) for error, partition in _deliver(producer, [(0, b"up"), (1, b"down")]))
    assert reports[0] is None
    assert reports[1] is not None
    assert reports[1].code() == KafkaError._MSG_TIMED_OUT

    cluster.broker_up(2)
    assert _deliver(producer, [(1, b"after")]) == [(None, 1)]


def test_down_broker_refuses_connections_and_listens_on_the_same_port_when_up(cluster: MockCluster) -> None:
    address = cluster.addresses[1]
    cluster.broker_down(2)
    assert _refuses_connections(address)
    cluster.broker_up(2)
    assert not _refuses_connections(address)


def test_rtt_delays_that_brokers_responses(cluster: MockCluster) -> None:
    cluster.set_rtt(1, 400)
    started = time.monotonic()
    _api_versions(cluster.addresses[0])
    assert time.monotonic() - started >= 0.4


def test_advertises_the_client_apis_and_not_the_admin_or_sasl_ones(cluster: MockCluster) -> None:
    versions = _api_versions(cluster.addresses[0])
    assert {PRODUCE, FETCH, METADATA, FIND_COORDINATOR, API_VERSIONS} <= versions.keys()
    unsupported = {SASL_HANDSHAKE, SASL_AUTHENTICATE, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS}
    assert not (unsupported | {DESCRIBE_CLUSTER}) & versions.keys()


def test_flexible_api_versions_requests_are_refused_with_unsupported_version(cluster: MockCluster) -> None:
    # The mock tops out at ApiVersions v2; what the proxy's ApiVersions handling has to live with.
    request = ApiVersionsRequest(version=3, client_software_name="probe", client_software_version="1")
    request.with_header(correlation_id=7, client_id="mock-cluster-test")
    with socket.create_connection(cluster.addresses[0], timeout=10) as sock:
        sock.sendall(request.encode(header=True, framed=True))
        reader = sock.makefile("rb")
        body = reader.read(int.from_bytes(reader.read(4), "big"))
    correlation_id, error_code = int.from_bytes(body[0:4], "big"), int.from_bytes(body[4:6], "big")
    assert (correlation_id, error_code) == (7, UNSUPPORTED_VERSION)


def test_topic_command_creates_a_topic_and_refuses_a_duplicate(cluster: MockCluster) -> None:
    cluster.create_topic("late", 4)
    metadata = _producer(cluster).list_topics("late", timeout=10)
    assert sorted(metadata.topics["late"].partitions) == [0, 1, 2, 3]
    with pytest.raises(MockClusterError, match="already exists"):
        cluster.create_topic("late", 4)


def test_produce_to_an_unknown_topic_auto_creates_it_with_four_partitions(cluster: MockCluster) -> None:
    producer = _producer(cluster)
    errors: list[KafkaError | None] = []
    producer.produce("never-created", b"x", on_delivery=lambda error, _msg: errors.append(error))
    assert producer.flush(15) == 0
    assert errors == [None]
    metadata = producer.list_topics("never-created", timeout=10)
    assert len(metadata.topics["never-created"].partitions) == 4


def test_advertise_names_another_address_for_a_broker_in_its_answers() -> None:
    with MockCluster(brokers=2) as own:
        own.advertise(2, "127.0.0.1", 1)  # nothing listens there: only the answers change
        metadata = _producer(own).list_topics(timeout=10)
        assert (metadata.brokers[2].host, metadata.brokers[2].port) == ("127.0.0.1", 1)
        assert metadata.brokers[1].port == own.addresses[0][1]
        with pytest.raises(MockClusterError, match="broker id"):
            own.advertise(-1, "127.0.0.1", 1)
        with pytest.raises(MockClusterError, match="port"):
            own.advertise(1, "127.0.0.1", 70000)


def test_bad_commands_are_answered_with_an_error_and_the_cluster_carries_on(cluster: MockCluster) -> None:
    with pytest.raises(MockClusterError, match="broker id 4"):
        cluster.broker_down(4)
    with pytest.raises(MockClusterError, match="topic name"):
        cluster.create_topic("no/slash", 1)
    with pytest.raises(MockClusterError, match="replication 4 exceeds 3 brokers"):
        cluster.create_topic("wide", 1, replication=4)
    cluster.set_rtt(-1, 0)
    assert cluster.returncode is None


@pytest.mark.slow
def test_sigterm_exits_zero_and_closes_every_port() -> None:
    cluster = MockCluster(brokers=2)
    assert not any(_refuses_connections(address) for address in cluster.addresses)
    cluster.close()
    assert cluster.returncode == 0
    assert all(_refuses_connections(address) for address in cluster.addresses)


def _start(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sluice.proxy.tools.mock_cluster", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_with_commands_end_of_stdin_exits_zero() -> None:
    process = _start("--brokers", "1", "--commands")
    assert process.stdout is not None and process.stdin is not None
    assert process.stdout.readline().startswith(b"BOOTSTRAP 127.0.0.1:")
    process.stdin.close()
    assert process.wait(10) == 0
    process.stdout.close()


@pytest.mark.slow
def test_started_in_the_background_with_stdin_closed_it_keeps_running_until_sigterm() -> None:
    # What `sluice mock-cluster ... &` in a script does: stdin is /dev/null (or closed), no commands.
    process = subprocess.Popen(
        [sys.executable, "-m", "sluice.proxy", "mock-cluster", "--brokers", "1"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    bootstrap = process.stdout.readline().decode().strip().removeprefix("BOOTSTRAP ")
    # It reads its closed stdin (EOF at once) as soon as it has printed the bootstrap: a mock that
    # stopped at EOF (the failure) would be gone well within this second.
    time.sleep(1.0)
    assert process.poll() is None, "the mock cluster stopped on its own"
    assert not _refuses_connections(parse_bootstrap(bootstrap)[0])
    process.send_signal(signal.SIGTERM)
    assert process.wait(10) == 0
    process.stdout.close()


@pytest.mark.slow
def test_ready_file_holds_the_announced_bootstrap_and_is_removed_on_sigint(tmp_path: Path) -> None:
    ready = tmp_path / "state" / "ready"  # its folder is made if missing
    process = _start("--brokers", "2", "--ready-file", str(ready))
    assert process.stdout is not None and process.stdin is not None
    announced = process.stdout.readline().decode().rstrip("\n")
    bootstrap = announced.removeprefix("BOOTSTRAP ")
    assert announced == f"BOOTSTRAP {bootstrap}"
    assert ready.read_text() == bootstrap + "\n"
    assert [host for host, _port in parse_bootstrap(bootstrap)] == ["127.0.0.1"] * 2
    process.send_signal(signal.SIGINT)
    assert process.wait(10) == 0
    assert process.stdout.read() == b""
    assert not ready.exists(), "a stale ready file would announce a cluster that is gone"
    process.stdin.close()
    process.stdout.close()


@pytest.mark.slow
def test_port_base_puts_every_broker_on_a_fixed_port_clients_are_told_about() -> None:
    base = free_port_block(4)
    with MockCluster(brokers=3, topics={TOPIC: PARTITIONS}, port_base=base) as fixed:
        expected = [("127.0.0.1", base + n) for n in (1, 2, 3)]
        assert fixed.addresses == expected
        producer = _producer(fixed)
        metadata = producer.list_topics(TOPIC, timeout=10)
        assert sorted((b.id, b.host, b.port) for b in metadata.brokers.values()) == [
            (n, "127.0.0.1", base + n) for n in (1, 2, 3)
        ]
        reports = _deliver(producer, [(p, f"fixed-{p}".encode()) for p in range(PARTITIONS)])
        assert [error for error, _partition in reports] == [None] * PARTITIONS
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{base + 2}", "group.id": "fixed"})
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        values: set[bytes] = set()
        deadline = time.monotonic() + 20
        while len(values) < PARTITIONS and time.monotonic() < deadline:
            values |= {m.value() for m in consumer.consume(100, timeout=0.5) if m.error() is None}
        consumer.close()
        assert values == {f"fixed-{p}".encode() for p in range(PARTITIONS)}
        # A broker that is down is still down behind its relay.
        fixed.broker_down(2)
        with socket.create_connection(("127.0.0.1", base + 2), timeout=5) as sock:
            sock.settimeout(5)
            assert sock.recv(1) == b""
        fixed.broker_up(2)
        assert _api_versions(("127.0.0.1", base + 2))[API_VERSIONS] == (0, 2)
    assert all(_refuses_connections(address) for address in expected)


@pytest.mark.slow
def test_a_taken_fixed_port_exits_2_without_announcing() -> None:
    base = free_port_block(4)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 2))
        taken.listen()
        process = _start("--port-base", str(base))
        stdout, _ = process.communicate(timeout=10)
    assert process.returncode == 2
    assert stdout == b""


@pytest.mark.slow
def test_a_bad_topic_argument_exits_2_without_announcing() -> None:
    process = _start("--topic", "orders")
    stdout, _ = process.communicate(timeout=10)
    assert process.returncode == 2
    assert stdout == b""


@pytest.mark.parametrize(
    ("text", "spec"),
    [("t:6", TopicSpec("t", 6, 1)), ("a.b-c_d:1:3", TopicSpec("a.b-c_d", 1, 3))],
)
def test_parse_topic_spec_reads_name_partitions_and_replication(text: str, spec: TopicSpec) -> None:
    assert parse_topic_spec(text) == spec


@pytest.mark.parametrize("text", ["t", "t:0", "t:x", "t:1:0", "t:1:2:3", "bad name:1", ":1", "..:1"])
def test_parse_topic_spec_rejects_malformed_specs(text: str) -> None:
    with pytest.raises(MockClusterError):
        parse_topic_spec(text)
