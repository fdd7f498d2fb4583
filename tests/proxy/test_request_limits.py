"""What a client may put on the brokers (issue 27 item 1), through the real proxy:

* before a connection has proven itself (here: before the broker answered its first request, on a
  PLAINTEXT upstream), a frame over 512 KiB is refused when its length is read, with one log event naming
  the peer and the limit, and nothing of it reaches the broker. Before, eight such connections each
  sending the start of a 95 MiB frame were streamed to the brokers, which died of OutOfMemoryError;
* afterwards, requests of any size the cluster takes pass;
* the cluster's own limit (the brokers' socket.request.max.bytes, learned with DescribeConfigs) refuses a
  larger frame the same way, naming it;
* the bytes in flight toward one broker, all connections together, stay under
  upstream.max_in_flight_bytes_per_broker: further requests wait until answers come back, in their
  clients' sockets (not read into the proxy meanwhile).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from doubles.admin_broker import AdminBrokerDouble
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from rawclient import RawClient
from throttle_harness import metric_value
from waiting import wait_until

from sluice.protocol.client_requests import decode_produce, encode_produce_request
from sluice.protocol.record_batches import Record, encode_record_batch

pytestmark = pytest.mark.slow  # starts processes (the test broker, the proxy)

MIB = 1 << 20
TOPIC = "limits"
PRODUCE, PRODUCE_VERSION = 0, 3


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=1, topics={TOPIC: 1}) as running:
        yield running


def closed_by_peer(sock: socket.socket, timeout_s: float = 10) -> bool:
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def answered_client(port: int) -> RawClient:
    client = RawClient("127.0.0.1", port, client_id="limits")
    assert client.call(ApiVersionsRequest[0](), 0, ApiVersionsResponse).error_code == 0
    return client


def request_bytes(proxy: ProxyProcess) -> float:
    return metric_value(proxy.metrics_text(), "sluice_request_bytes_total")


def test_a_giant_frame_before_the_first_answer_is_refused_on_a_plaintext_upstream(cluster) -> None:
    with ProxyProcess(cluster.bootstrap) as proxy:
        before = request_bytes(proxy)
        # A Produce header, then the start of 95 MiB: a large Produce is forwarded as it arrives.
        body = encode_produce_request(PRODUCE_VERSION, TOPIC, 0, b"", acks=1, timeout_ms=30_000)
        client = RawClient("127.0.0.1", proxy.port)
        start = client.encode_body(PRODUCE, PRODUCE_VERSION, body)[4:]
        peer = "{}:{}".format(*client.sock.getsockname()[:2])
        client.sock.sendall((95 * MIB).to_bytes(4, "big") + start + b"\0" * MIB)
        event = proxy.wait_for_event("protocol_error", peer=peer)
        assert event["reason"] == "unauthenticated_frame_too_large"
        assert (event["limit"], event["limit_name"]) == (512 * 1024, "sasl.max_receive_bytes")
        assert closed_by_peer(client.sock)
        assert request_bytes(proxy) == before  # nothing of it was forwarded
        # 512 KiB itself is allowed (Kafka's limit is inclusive), and a connection past its first answer
        # sends what the cluster takes.
        ok = RawClient("127.0.0.1", proxy.port)
        ok.sock.sendall((512 * 1024).to_bytes(4, "big") + start)
        assert not closed_by_peer(ok.sock, timeout_s=0.5)
        assert len([e for e in proxy.events() if e.get("event") == "protocol_error"]) == 1


def test_after_the_first_answer_requests_of_any_size_pass(cluster) -> None:
    with ProxyProcess(cluster.bootstrap) as proxy:
        delivered: list[bool] = []
        producer = Producer(
            {"bootstrap.servers": proxy.bootstrap, "message.max.bytes": 2_000_000, "linger.ms": 0}
        )
        for _ in range(2):
            producer.produce(
                TOPIC, b"r" * 1_500_000, on_delivery=lambda err, _m: delivered.append(err is None)
            )
        producer.flush(30)
        assert delivered == [True, True]  # 1.5 MB Produce requests, well over 512 KiB
        assert not [e for e in proxy.events() if e.get("event") == "protocol_error"]


def test_a_frame_over_what_the_brokers_read_is_refused_naming_their_limit() -> None:
    configs = {"socket.request.max.bytes": str(MIB)}
    with (
        AdminBrokerDouble(node_id=1, broker_configs=configs) as broker,
        ProxyProcess(broker.bootstrap) as proxy,
    ):
        proxy.wait_for_event("broker_limits_learned", node_id=1)
        client = answered_client(proxy.port)
        peer = "{}:{}".format(*client.sock.getsockname()[:2])
        client.sock.sendall((2 * MIB).to_bytes(4, "big") + b"\0" * 1000)
        event = proxy.wait_for_event("protocol_error", peer=peer)
        assert event["reason"] == "frame_too_large"
        assert (event["limit"], event["limit_name"]) == (MIB, "the brokers' socket.request.max.bytes")
        assert closed_by_peer(client.sock)


def produce_frame(client: RawClient, value_bytes: int) -> bytes:
    batch = encode_record_batch([Record(b"k", b"v" * value_bytes)], now_ms=int(time.time() * 1000))
    body = encode_produce_request(PRODUCE_VERSION, TOPIC, 0, batch, acks=1, timeout_ms=30_000)
    return client.encode_body(PRODUCE, PRODUCE_VERSION, body)


def metric(proxy: ProxyProcess, name: str) -> float:
    return metric_value(proxy.metrics_text(), name)


@contextlib.contextmanager
def bounded_and_stopped(
    limit: int, clients: int
) -> Iterator[tuple[ProxyProcess, list[RawClient], MockCluster]]:
    """A proxy allowing `limit` bytes in flight per broker, `clients` answered connections to it, and its
    broker stopped (SIGSTOP: it reads and answers nothing) until the block ends, or a SIGCONT."""
    upstream: dict[str, object] = {"max_in_flight_bytes_per_broker": limit}
    with MockCluster(brokers=1, topics={TOPIC: 1}) as cluster:
        upstream["bootstrap"] = [cluster.bootstrap]
        with ProxyProcess(cluster.bootstrap, extra_config={"upstream": upstream}) as proxy:
            answered = [answered_client(proxy.port) for _ in range(clients)]
            os.kill(cluster.pid, signal.SIGSTOP)
            try:
                yield proxy, answered, cluster
            finally:
                os.kill(cluster.pid, signal.SIGCONT)


def wait_for_waiting(proxy: ProxyProcess, count: int) -> None:
    wait_until(
        lambda: metric(proxy, "sluice_connections_waiting_for_broker") == count,
        f"{count} connections waiting for their broker",
        timeout_s=10,
    )


def test_the_bytes_in_flight_toward_a_broker_stay_under_its_limit() -> None:
    with bounded_and_stopped(4 * MIB, clients=4) as (proxy, clients, cluster):
        for client in clients:  # 3 MiB each: one fits under 4 MiB, the others wait
            client.sock.sendall(produce_frame(client, 3 * MIB))
        wait_for_waiting(proxy, 3)
        assert 3 * MIB < metric(proxy, "sluice_broker_in_flight_bytes") <= 4 * MIB
        os.kill(cluster.pid, signal.SIGCONT)  # the broker goes on: as answers come back, the others go
        for client in clients:
            length = struct.unpack(">i", client._read_exactly(4))[0]
            answer = client._read_exactly(length)
            assert decode_produce(PRODUCE_VERSION, answer[4:], TOPIC, 0).error_code in (0, 10)
        assert metric(proxy, "sluice_broker_in_flight_bytes") == 0
        assert metric(proxy, "sluice_broker_load_waits_total") == 3


def test_a_request_without_room_at_its_broker_is_not_read_meanwhile() -> None:
    # Waiting requests are left in their clients' sockets, not read into the proxy: else the proxy would
    # hold what the brokers cannot take (32 MiB each here; the proxy's own request memory counts a request
    # only until it is whole).
    batch = encode_record_batch([Record(b"k", b"v" * (32 * MIB))], now_ms=int(time.time() * 1000))
    body = encode_produce_request(PRODUCE_VERSION, TOPIC, 0, batch, acks=1, timeout_ms=30_000)
    with bounded_and_stopped(40 * MIB, clients=3) as (proxy, clients, _cluster):
        sent_whole = 0
        for client in clients:
            client.sock.settimeout(1)
            with contextlib.suppress(TimeoutError):  # what the sockets on the way do not take waits
                client.sock.sendall(client.encode_body(PRODUCE, PRODUCE_VERSION, body))
                sent_whole += 1
        # The first goes on toward the stopped broker, as far as the sockets on the way take it; the other
        # two are not read at all: no client got its 32 MiB out.
        assert sent_whole == 0
        wait_for_waiting(proxy, 2)
        assert metric(proxy, "sluice_broker_in_flight_bytes") <= 40 * MIB
        assert metric(proxy, "sluice_buffered_request_bytes") == 0  # the two waiting are not being read
