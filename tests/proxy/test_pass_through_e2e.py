"""Large Produce requests through the real proxy, written by a raw socket in chunks: what reaches the broker
is byte for byte what the client sent, the start of a large request reaches the broker before the client
has sent the rest (it is passed through, not assembled), and a throttle that request earns does not hold
back its own remaining bytes.

The broker is the mock cluster; a wire tap (tests/doubles/wire_tap.py) between the proxy and it records
the bytes the proxy sent. The sans-IO side, cut at every boundary: tests/proxy/test_pipeline_pass_through.py.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest
from doubles.wire_tap import WireTap
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.headers import encode_request
from sluice.proxy.data_path.connection import STREAM_HEAD_BYTES, STREAM_MIN_FRAME_BYTES

pytestmark = pytest.mark.slow  # the mock cluster and proxy processes

TOPIC = "pass-through"
CLIENT_ID = "pass-e2e"


def produce(correlation_id: int, value_bytes: int, records: int = 1) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=records * (value_bytes + 100))
    for i in range(records):
        builder.append(0, None, bytes((i + j) % 251 for j in range(value_bytes)), [])
    builder.close()
    partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=bytes(builder.buffer()))
    request = ProduceRequest(
        version=7,
        acks=1,
        timeout_ms=10000,
        topic_data=[ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[partition])],
    )
    request.transactional_id = None
    return encode_request(ApiKey.PRODUCE, 7, correlation_id, CLIENT_ID, bytes(request.encode(version=7)))


def read_response(sock: socket.socket) -> tuple[int, ProduceResponse]:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    size = struct.unpack(">i", exactly(4))[0]
    payload = exactly(size)
    return struct.unpack_from(">i", payload)[0], ProduceResponse[7].decode(payload[4:])


def errors(response: ProduceResponse) -> list[int]:
    return [p.error_code for t in response.responses for p in t.partition_responses]


@pytest.fixture(scope="module")
def tapped() -> Iterator[tuple[MockCluster, WireTap]]:
    with MockCluster(brokers=1, topics={TOPIC: 1}) as cluster, WireTap(cluster.addresses[0]) as tap:
        yield cluster, tap


def _wait_for(predicate, timeout_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)  # a poll: the predicate is the event
    return False


def _connection_carrying(tap: WireTap, marker: bytes) -> bytes:
    found = [sent for sent in tap.upstream_bytes() if marker in sent]
    assert len(found) == 1
    return found[0]


def test_chunked_large_requests_reach_the_broker_byte_for_byte(tapped) -> None:  # type: ignore[no-untyped-def]
    _, tap = tapped
    big_1, small, big_2 = produce(1, 200_000), produce(2, 100), produce(3, 90_000, records=3)
    assert len(big_1) >= STREAM_MIN_FRAME_BYTES and len(big_2) >= STREAM_MIN_FRAME_BYTES
    stream = big_1 + small + big_2
    b1, b2 = len(big_1), len(big_1) + len(small)
    # Cuts inside a length prefix, a header, around the head the proxy waits for, in bodies, at and next
    # to request boundaries, and in the last request's last bytes.
    cuts = sorted({2, 9, 30, STREAM_HEAD_BYTES - 1, STREAM_HEAD_BYTES, STREAM_HEAD_BYTES + 1, 70_000,
                   b1 - 1, b1, b1 + 3, b2 - 5, b2 + 1, b2 + STREAM_HEAD_BYTES + 7, b2 + 150_000,
                   len(stream) - 1})  # fmt: skip
    with ProxyProcess(tap.address) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = 0
        for cut in [*cuts, len(stream)]:
            sock.sendall(stream[start:cut])
            start = cut
            time.sleep(0.02)  # so the proxy reads the chunks apart
        answers = [read_response(sock) for _ in range(3)]
    assert [cid for cid, _ in answers] == [1, 2, 3]
    assert all(errors(response) == [0] for _, response in answers)
    assert _connection_carrying(tap, CLIENT_ID.encode()) == stream


# (STREAM_HEAD_BYTES: the least that must have come, in the very read that brings it: the connection's check
# of the splitter's buffered bytes before it asks for the head must let exactly that much through)
@pytest.mark.parametrize("sent_first", [STREAM_HEAD_BYTES, 100_000])
def test_the_start_of_a_large_request_reaches_the_broker_before_its_end_is_sent(tapped, sent_first) -> None:  # type: ignore[no-untyped-def]
    _, tap = tapped
    big = produce(7, 300_000)
    first = big[:sent_first]
    with ProxyProcess(tap.address) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(first)
        # Only passing it through can get these bytes to the broker: the request is not complete yet.
        assert _wait_for(lambda: any(sent.endswith(first) for sent in tap.upstream_bytes()))
        sock.sendall(big[sent_first:])
        cid, response = read_response(sock)
    assert cid == 7 and errors(response) == [0]
    assert any(sent.endswith(big) for sent in tap.upstream_bytes())


def test_a_throttle_earned_by_a_passing_request_lets_its_own_end_through(tapped) -> None:  # type: ignore[no-untyped-def]
    _, tap = tapped
    big = produce(9, 400_000)
    # 1 kB/s: the first request alone puts the client seconds over its quota.
    quota = {"quota": {"entities": [{"client_id": CLIENT_ID, "producer_byte_rate": 1000}]}}
    with (
        ProxyProcess(tap.address, extra_config=quota) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port)) as sock,
    ):
        sock.settimeout(30)  # a request stuck behind its own mute would wait ~390 s
        sock.sendall(produce(8, 10))  # a small one first: the connection is then open and forwarding
        assert read_response(sock)[0] == 8
        sock.sendall(big[:50_000])  # the head is charged now, and the connection muted for seconds
        assert _wait_for(lambda: any(sent.endswith(big[:50_000]) for sent in tap.upstream_bytes()))
        sent_all = time.monotonic()
        sock.sendall(big[50_000:])
        cid, response = read_response(sock)
        answered_after = time.monotonic() - sent_all
    assert cid == 9 and errors(response) == [0]
    # The answer carries the throttle, and came long before it ran out: the mute did not stop the rest
    # of the request at the client's socket.
    assert response.throttle_time_ms >= 5000
    assert answered_after < response.throttle_time_ms / 1000 / 2
