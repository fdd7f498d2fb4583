"""A client that closes while its connection is not reading it ends that connection at once, whatever
the connection waits for: request memory, the upstream connect, a broker that stopped reading, a
throttle's mute, the entity's gate. Before, such connections lived until the wait ended (never, with a
broker that does not come back), holding their memory: `sluice_buffered_request_bytes` stayed at
199 MB 20 s after every client had left.

Each test waits until the connection is waiting, closes the client, and then waits (5 s at most) for the
proxy's `connection_closed` event with cause `client_closed`."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from rawclient import RawClient
from throttle_harness import metric_value
from waiting import wait_until

from sluice.protocol.client_requests import encode_produce_request
from sluice.protocol.record_batches import Record, encode_record_batch

pytestmark = pytest.mark.slow  # starts processes (the test broker, the proxy)

MIB = 1 << 20
TOPIC = "gone"
PRODUCE, PRODUCE_VERSION = 0, 3
# A Fetch request is read whole before it goes on (the client-quota filter reads its body): it holds
# request memory.
WHOLE_READ_HEADER = struct.pack(">hhih", 1, 4, 1, -1)
NOTICED_WITHIN_S = 5.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=1, topics={TOPIC: 1}) as running:
        yield running


def answered_client(port: int, client_id: str = "gone") -> RawClient:
    """A client whose first request (ApiVersions) the broker answered, as every Kafka client's is."""
    client = RawClient("127.0.0.1", port, client_id=client_id)
    assert client.call(ApiVersionsRequest[0](), 0, ApiVersionsResponse).error_code == 0
    return client


def peer_of(sock: socket.socket) -> str:
    return "{}:{}".format(*sock.getsockname()[:2])


def close_and_expect_it_noticed(proxy: ProxyProcess, sock: socket.socket) -> dict:
    peer, since = peer_of(sock), len(proxy.events())
    sock.close()
    return proxy.wait_for_event(
        "connection_closed", NOTICED_WITHIN_S, since=since, peer=peer, cause="client_closed"
    )


def wait_for_metric(proxy: ProxyProcess, name: str, value: float, timeout_s: float = 10.0) -> None:
    wait_until(
        lambda: metric_value(proxy.metrics_text(), name) == value, f"{name} reaching {value}", timeout_s
    )


def produce_body(value_bytes: int) -> bytes:
    batch = encode_record_batch([Record(b"k", b"v" * value_bytes)], now_ms=int(time.time() * 1000))
    return encode_produce_request(PRODUCE_VERSION, TOPIC, 0, batch, acks=1, timeout_ms=30_000)


def test_a_client_gone_while_its_connection_waits_for_memory(cluster: MockCluster) -> None:
    config = {"max_frame_bytes": 4 * MIB, "max_buffered_request_bytes": 8 * MIB}
    with ProxyProcess(cluster.bootstrap, extra_config=config) as proxy:
        size = 4 * MIB - 4  # with its length prefix, a frame holds 4 MiB of the budget
        holders = [answered_client(proxy.port) for _ in range(2)]
        for holder in holders:
            holder.sock.sendall(size.to_bytes(4, "big") + WHOLE_READ_HEADER + b"\0" * MIB)
        waiting = answered_client(proxy.port)
        waiting.sock.sendall(size.to_bytes(4, "big") + WHOLE_READ_HEADER + b"\0" * 1000)
        wait_for_metric(proxy, "sluice_connections_waiting_for_memory", 1)
        close_and_expect_it_noticed(proxy, waiting.sock)
        assert metric_value(proxy.metrics_text(), "sluice_connections_waiting_for_memory") == 0
        for holder in holders:
            holder.sock.close()
        wait_for_metric(proxy, "sluice_buffered_request_bytes", 0)


@contextlib.contextmanager
def proxy_of_an_upstream_that_does_not_accept() -> Iterator[ProxyProcess]:
    """A proxy whose upstream is a listener with a full accept queue: the kernel drops further SYNs, so
    connects hang (a broker too busy to accept), until the proxy's 10 s connect timeout."""
    stuck = socket.socket()
    stuck.bind(("127.0.0.1", 0))
    stuck.listen(0)
    filler = socket.create_connection(stuck.getsockname())
    try:
        with ProxyProcess(f"127.0.0.1:{stuck.getsockname()[1]}", wait_for_brokers=False) as proxy:
            yield proxy
    finally:
        filler.close()
        stuck.close()


def test_a_client_gone_while_its_connection_waits_for_the_upstream_connect() -> None:
    with proxy_of_an_upstream_that_does_not_accept() as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port))
        proxy.wait_for_event("connection_opened", peer=peer_of(client))
        close_and_expect_it_noticed(proxy, client)


def test_a_client_gone_while_its_broker_stopped_reading() -> None:
    with (
        MockCluster(brokers=1, topics={TOPIC: 1}) as cluster,
        ProxyProcess(cluster.bootstrap, extra_config={"max_frame_bytes": 64 * MIB}) as proxy,
    ):
        client = answered_client(proxy.port)
        os.kill(cluster.pid, signal.SIGSTOP)  # the broker hangs: it reads and answers nothing
        try:
            # More than the socket buffers on the way hold: once the proxy forwards it, its write buffer
            # toward the broker passes its mark, and it stops reading the client (back-pressure).
            size = 48 * MIB
            forwarded = metric_value(proxy.metrics_text(), "sluice_request_bytes_total") + size - 4
            client.sock.sendall((size - 4).to_bytes(4, "big") + WHOLE_READ_HEADER + b"\0" * (size - 14))
            wait_for_metric(proxy, "sluice_request_bytes_total", forwarded)  # forwarded: reading paused
            close_and_expect_it_noticed(proxy, client.sock)
            wait_for_metric(proxy, "sluice_connections_active", 0)
        finally:
            os.kill(cluster.pid, signal.SIGCONT)


QUOTA = {"quota": {"entities": [{"client_id": "slow", "producer_byte_rate": 1000}]}}


def test_a_client_gone_while_its_connection_is_muted(cluster: MockCluster) -> None:
    with ProxyProcess(cluster.bootstrap, extra_config=QUOTA) as proxy:
        client = answered_client(proxy.port, client_id="slow")
        client.call_body(PRODUCE, PRODUCE_VERSION, produce_body(100_000))  # earns a throttle of minutes
        close_and_expect_it_noticed(proxy, client.sock)


def test_a_client_gone_while_its_request_waits_at_the_entitys_gate(cluster: MockCluster) -> None:
    with ProxyProcess(cluster.bootstrap, extra_config=QUOTA) as proxy:
        first = answered_client(proxy.port, client_id="slow")
        first.call_body(PRODUCE, PRODUCE_VERSION, produce_body(100_000))  # shuts the entity's gate
        second = answered_client(proxy.port, client_id="slow")
        second.sock.sendall(second.encode_body(PRODUCE, PRODUCE_VERSION, produce_body(10)))
        wait_for_metric(proxy, "sluice_gate_waiting_requests", 1)  # it waits at the gate, for minutes
        close_and_expect_it_noticed(proxy, second.sock)
        wait_for_metric(proxy, "sluice_gate_waiting_requests", 0)  # and left it
        first.sock.close()


def test_a_client_is_not_read_while_its_upstream_connects() -> None:
    # The connection pauses reading until its upstream is connected. uvloop ignored that pause (made as
    # the connection opened) and read on: a client whose broker was slow to accept could pour requests
    # into the proxy's memory for the whole connect timeout.
    with proxy_of_an_upstream_that_does_not_accept() as proxy:
        client = RawClient("127.0.0.1", proxy.port)
        request = (MIB - 4).to_bytes(4, "big") + WHOLE_READ_HEADER + b"\0" * (MIB - 14)
        client.sock.settimeout(3)
        with pytest.raises(TimeoutError):  # the socket buffers fill: the proxy reads nothing meanwhile
            client.sock.sendall(request * 64)
        # Its close would wait behind the bytes the proxy does not read; a reset does not.
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        close_and_expect_it_noticed(proxy, client.sock)
