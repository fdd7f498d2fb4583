"""The proxy in this test's own event loop, for what only its insides can show: a listener that opens the
moment a broker is first seen, back-pressure holding a slow client's responses at the broker, and the
collector's state once `sluice run` has started it."""

from __future__ import annotations

import asyncio
import gc
import socket

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.helpers import create_ssl_context
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from mock_cluster_process import MockCluster
from rawclient import RawClient
from tls_certs import TestCA

from sluice.config.load import load_config
from sluice.config.model import ProxyConfig
from sluice.proxy.listeners.ports import free_port_block
from sluice.proxy.process.server import SluiceServer
from sluice.proxy.tools.perf_test import run_perf_test

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

TOPIC = "backpressure"


@pytest.fixture(scope="module")
def cluster():
    with MockCluster(brokers=3, topics={TOPIC: 1}) as c:
        yield c


def proxy_config(cluster, **more: str) -> ProxyConfig:
    base = free_port_block(16)
    return load_config(
        None,
        {
            "listen": f"127.0.0.1:{base}",
            "upstream.bootstrap": cluster.bootstrap,
            "broker_port_base": base + 1,
            "log.level": "warning",
            **more,
        },
    )


async def started_server(cluster) -> SluiceServer:
    server = SluiceServer(proxy_config(cluster))
    await server.start()
    async with asyncio.timeout(30):  # discovery asks the test broker, another process
        while len(server.directory.known_nodes()) != 3:
            await asyncio.sleep(0.01)  # a poll: the brokers known is the event
    return server


async def test_broker_first_seen_in_an_answer_gets_a_listener_at_once(cluster) -> None:
    server = await started_server(cluster)
    try:
        real_host, real_port = cluster.addresses[0]
        new_node = 9
        host, port = server.directory.advertise(new_node, real_host, real_port)
        assert port == server.config.broker_port(new_node)
        # No await in between: the answer naming this node could reach a client right now.
        with socket.create_connection((host, port), timeout=2):
            pass

        def ask() -> ApiVersionsResponse:
            with RawClient(host, port) as client:
                return client.call(ApiVersionsRequest[0](), 0, ApiVersionsResponse)

        response = await asyncio.to_thread(ask)
        assert response.error_code == 0 and response.api_keys
    finally:
        await server.shutdown()


async def test_slow_client_pauses_reading_from_the_broker(cluster) -> None:
    # ~4 MB in the one partition, in batches of ~1 MB: the test broker answers a Fetch with one batch, the
    # first, and a producer on a busy machine (slower than its linger.ms) would make that first batch small.
    # Held until a batch is full instead, every answer is ~1 MB however slowly the records come.
    produced = await asyncio.to_thread(
        run_perf_test,
        TOPIC,
        4000,
        1000,
        -1,
        {"linger.ms": "60000", "batch.size": "1000000"},
        bootstrap_servers=cluster.bootstrap,
    )
    # Every record in: with fewer, the answers could fit the sockets and the test would prove nothing.
    assert produced.failed == 0 and produced.records == 4000, produced
    server = await started_server(cluster)
    try:
        host, port = "127.0.0.1", server.config.broker_port(1)  # partition 0 lives on broker 1
        client = RawClient(host, port)
        partition = FetchRequest.FetchTopic.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20
        )
        request = FetchRequest[4](
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=0,
            topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[partition])],
        )
        sent = [client.encode(request, 4)[1] for _ in range(40)]
        await asyncio.to_thread(client.sock.sendall, b"".join(sent))
        # The client reads nothing: ~40 MB of answers cannot fit in its socket, so the proxy must stop
        # reading from the broker instead of buffering them.
        conn = None
        deadline = asyncio.get_running_loop().time() + 30
        while asyncio.get_running_loop().time() < deadline:
            conn = next((c for c in server.registry if c.listener == "broker-1"), None)
            if conn is not None and conn._upstream_pauses and "client_backlog" in conn._upstream_pauses:
                break
            await asyncio.sleep(0.01)  # a poll: the pause is the event
        assert conn is not None and conn._upstream_pauses is not None
        assert "client_backlog" in conn._upstream_pauses
        buffered = conn._transport.get_write_buffer_size()
        assert buffered < 8 << 20, f"{buffered} bytes held for a client that does not read"
        # Once the client reads again, every answer arrives.
        frames = await asyncio.to_thread(lambda: [client.receive_frame() for _ in sent])
        # Every fetch read offset 0, so every answer (after its correlation id) is the same, and whole.
        assert len(frames) == 40
        assert len({frame[8:] for frame in frames}) == 1
        assert len(frames[0]) > 500_000  # a full batch: the answers the test needs
        assert "client_backlog" not in conn._upstream_pauses
        client.close()
    finally:
        await server.shutdown()


async def test_sluice_run_moves_what_start_up_built_out_of_the_collectors_way(cluster, monkeypatch) -> None:
    # `sluice run` freezes the objects alive once the proxy has started (gc.freeze): a full collection
    # under load then skips them. Served here for no time at all: stopped as soon as it is running.
    from sluice.proxy.commands.run import _serve

    async def stop_at_once(server: SluiceServer) -> int:
        await server.shutdown()
        return server.exit_code

    monkeypatch.setattr(SluiceServer, "run_until_stopped", stop_at_once)
    gc.unfreeze()
    try:
        assert await _serve(proxy_config(cluster)) == 0
        assert gc.get_freeze_count() > 10_000  # the modules, codecs and configuration loaded by then
    finally:
        gc.unfreeze()


async def test_requests_of_many_tls_records_come_whole_on_asyncios_own_loop(cluster, tmp_path) -> None:
    """Where uvloop is not installed the proxy serves on asyncio's own loop, whose TLS transport reads a
    client's TLS records into slices of the buffer the connection lends it: slices of a view, which write
    into the buffer (a bytearray's slices are copies, and what they read would be lost while the read still
    counted it). Record batches of several TLS records each (a record holds 16 KiB at most), written in one
    go, reach the broker whole and read back as they were sent."""
    assert type(asyncio.get_running_loop()).__module__.startswith("asyncio")  # not uvloop
    ca = TestCA(tmp_path)
    cert, key = ca.issue("proxy", common_name="localhost")
    listener = {"tls.listener.cert": str(cert), "tls.listener.key": str(key)}
    server = SluiceServer(proxy_config(cluster, **listener))
    await server.start()
    bootstrap = f"127.0.0.1:{server.config.listen.port}"
    tls = {"security_protocol": "SSL", "ssl_context": create_ssl_context(cafile=str(ca.ca_path))}
    values = [bytes([n]) * (40_000 + n) for n in range(1, 31)]
    try:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_batch_size=50_000, linger_ms=5, **tls)
        await producer.start()
        try:
            # ~40 KB a record, so a batch a request (one partition): each request is three TLS records.
            delivered = [await producer.send(TOPIC, value) for value in values]
            sent = await asyncio.gather(*delivered)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **tls)
        await consumer.start()
        try:
            partition = TopicPartition(TOPIC, 0)
            consumer.assign([partition])
            first, last = min(r.offset for r in sent), max(r.offset for r in sent)
            consumer.seek(partition, first)
            read: dict[int, bytes] = {}
            async with asyncio.timeout(60):
                while last not in read:
                    message = await consumer.getone()
                    read[message.offset] = message.value
        finally:
            await consumer.stop()
        assert [read[r.offset] for r in sent] == values
    finally:
        await server.shutdown()
