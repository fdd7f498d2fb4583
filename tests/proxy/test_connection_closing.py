"""A connection in this test's own event loop, between a real client socket and a fake broker on loopback:
what it still sends when it closes on an error (a throttle delays, never drops), and the CPU time it counts
on the paths that run outside a read (an unmute, a deferral's resume).

The broker is a double (tests/connection_harness.py) that answers as the test says (frames built by
`protocol/`), so it can send what no real broker would: a response nobody asked for.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable

from connection_harness import Broker, Proxy, run
from filter_factories import Factory
from structlog.testing import capture_logs

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.headers import RequestHeader, encode_request, encode_response
from sluice.proxy.cluster.brokers import BrokerDirectory
from sluice.proxy.filter_api import (
    Answer,
    Close,
    Defer,
    Filter,
    FilterFactory,
    Forward,
    Frame,
    InFlight,
    Respond,
)
from sluice.proxy.filters import BrokerAddressRewriteFactory

METADATA, PRODUCE, API_VERSIONS = ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.API_VERSIONS
LONG_DELAY_MS = 60_000  # far longer than any test waits: a held response must leave by the flush


def produce(correlation_id: int) -> bytes:
    # Produce v3 with acks=1 and no topics: all the proxy reads is acks.
    return encode_request(PRODUCE, 3, correlation_id, "closing-test", struct.pack(">hhii", -1, 1, 1000, 0))


def api_versions(correlation_id: int) -> bytes:
    return encode_request(API_VERSIONS, 0, correlation_id, "closing-test", b"")


def metadata(correlation_id: int) -> bytes:
    return encode_request(METADATA, 1, correlation_id, "closing-test", b"")


def response(key: int, correlation_id: int) -> bytes:
    return encode_response(key, 1, correlation_id, b"ack")


class DelaysProduceAcks(Filter):
    """Delay mode (pre-KIP-219): every Produce response is held back a long time."""

    response_api_keys = frozenset({PRODUCE})

    def on_response(self, request: InFlight, frame: Frame) -> Respond:
        return Respond(frame, LONG_DELAY_MS)


class FailsOnSecondMetadataResponse(Filter):
    response_api_keys = frozenset({METADATA})

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        if request.header.correlation_id == 2:
            raise RuntimeError("a filter bug")
        return frame


class AnswersApiVersions(Filter):
    request_api_keys = frozenset({API_VERSIONS})

    def on_request(self, header: RequestHeader, frame: Frame) -> Answer:
        return Answer(encode_response(API_VERSIONS, 0, header.correlation_id, b"mine"))


class ClosesOnMetadata(Filter):
    request_api_keys = frozenset({METADATA})

    def on_request(self, header: RequestHeader, frame: Frame) -> Close:
        return Close("not allowed")


# ---- an error close sends what the client is owed first -------------------------------------------


async def test_acks_held_by_a_delay_reach_the_client_before_a_bad_broker_frame_closes_it() -> None:
    async def scenario(broker: Broker, client: asyncio.StreamWriter) -> None:
        client.write(produce(1) + produce(2))
        assert await broker.received(2) == [1, 2]
        await broker.send(response(PRODUCE, 1))  # held back by the delay
        # A moment for the proxy (on this loop) to read it apart from the bad frame; read together, the
        # client is owed the same acks, so the assertion holds either way.
        await asyncio.sleep(0.05)
        await broker.send(response(PRODUCE, 2), response(PRODUCE, 99))  # 99: nobody asked for it

    assert await run([Factory(DelaysProduceAcks)], scenario) == [1, 2]


async def test_responses_read_before_a_filter_fails_reach_the_client() -> None:
    async def scenario(broker: Broker, client: asyncio.StreamWriter) -> None:
        client.write(metadata(1) + metadata(2))
        assert await broker.received(2) == [1, 2]
        await broker.send(response(METADATA, 1), response(METADATA, 2))  # the filter fails on 2

    assert await run([Factory(FailsOnSecondMetadataResponse)], scenario) == [1]


async def test_an_answer_made_before_a_filter_closes_the_connection_reaches_the_client() -> None:
    async def scenario(broker: Broker, client: asyncio.StreamWriter) -> None:
        client.write(api_versions(1) + metadata(2))  # answered by the proxy, then closed on

    factories = [Factory(AnswersApiVersions), Factory(ClosesOnMetadata)]
    assert await run(factories, scenario) == [1]


async def test_an_answer_to_a_request_for_a_version_never_offered_is_refused_as_the_clients_doing() -> None:
    """ShareAcknowledge v3 (newer than the rewrite reads): a proxy that does not gate requests
    (`protocol.unvetted_apis: pass`) forwards it, and refuses the answer; the client asked for it."""
    share_acknowledge = ApiKey.SHARE_ACKNOWLEDGE

    async def scenario(broker: Broker, client: asyncio.StreamWriter) -> None:
        client.write(encode_request(share_acknowledge, 3, 1, "closing-test", bytes(8)))
        assert await broker.received(1) == [1]
        await broker.send(encode_response(share_acknowledge, 3, 1, bytes(16)))

    rewrite = BrokerAddressRewriteFactory(BrokerDirectory("127.0.0.1", lambda node: 9000 + node))
    with capture_logs() as logs:
        assert await run([rewrite], scenario) == []
    (event,) = [e for e in logs if e["event"] == "protocol_error"]
    assert (event["side"], event["reason"]) == ("client", "unadvertised_api_version")
    assert event["detail"] == "ShareAcknowledge v3: the proxy offers up to v2"


# ---- CPU time spent outside a read is counted too ----------------------------------------------------

BURN_NS = 30_000_000


def burn_cpu() -> None:
    started = time.thread_time_ns()
    while time.thread_time_ns() - started < BURN_NS:
        pass


class ThrottlesFirstThenBurns(Filter):
    """Throttles request 1 (so request 2 is held until the mute ends), burns CPU on every other."""

    request_api_keys = frozenset({METADATA})

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame | Forward:
        if header.correlation_id == 1:
            return Forward(frame, 50)
        burn_cpu()
        return frame


class DefersThenBurns(Filter):
    """Defers request 1 on `ready` (and says so through `deferred`); burns CPU when it runs again on the
    resume."""

    request_api_keys = frozenset({METADATA})
    ready: asyncio.Future[object]
    deferred: asyncio.Event

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame | Defer:
        if not self.ready.done():
            self.deferred.set()
            return Defer(self.ready)
        burn_cpu()
        return frame


async def cpu_counted_while(factory: FilterFactory, scenario: Callable) -> int:
    """The connection's CPU time counted while `scenario` runs (after the connection is up)."""
    broker = Broker()
    proxy = Proxy(await broker.start(), factory)
    try:
        _reader, writer = await proxy.connect()
        while broker.writer is None:  # the connection is up once the broker accepted it
            await asyncio.sleep(0.01)  # a poll: the acceptance is the event
        before = proxy.connection().cpu_ns
        await scenario(broker, writer)
        return proxy.connection().cpu_ns - before
    finally:
        proxy.close()
        broker.close()


async def test_cpu_time_of_requests_forwarded_when_a_mute_ends_is_counted() -> None:
    async def scenario(broker: Broker, client: asyncio.StreamWriter) -> None:
        client.write(metadata(1) + metadata(2))
        assert await broker.received(1) == [1]
        await broker.send(response(METADATA, 1))  # the mute ends 50 ms after request 1: 2 is forwarded
        assert await broker.received(1) == [2]

    assert await cpu_counted_while(Factory(ThrottlesFirstThenBurns, cpu=True), scenario) >= BURN_NS


async def test_cpu_time_of_a_resumed_request_is_counted() -> None:
    ready: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    deferred = asyncio.Event()

    async def scenario(broker: Broker, client: asyncio.StreamWriter) -> None:
        client.write(metadata(1))
        await asyncio.wait_for(deferred.wait(), 10)  # the proxy has the request, and holds it
        assert broker.requests.empty()
        ready.set_result(None)
        assert await broker.received(1) == [1]

    factory = Factory(DefersThenBurns, cpu=True, ready=ready, deferred=deferred)
    assert await cpu_counted_while(factory, scenario) >= BURN_NS


# ---- a pass is charged its wall time, as Kafka charges a handler's -----------------------------------


class Blocks(Filter):
    """Blocks the event loop's thread without using CPU: the thread CPU clock would not see it."""

    request_api_keys = frozenset({METADATA})

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame:
        # Not a wait for an event: the sleep is the pass's work under test, time in which the thread
        # holds the pass without running (as preemption would), which the charge must include.
        time.sleep(BURN_NS / 1e9)
        return frame


async def test_a_pass_is_charged_its_wall_time_as_kafka_charges_a_handlers_time() -> None:
    """Kafka times a handler's work on the monotonic clock, so time the thread was not running is charged
    too; so does the proxy (docs/quotas.md, "Request time")."""

    async def scenario(broker: Broker, client: asyncio.StreamWriter) -> None:
        client.write(metadata(1))
        assert await broker.received(1) == [1]

    assert await cpu_counted_while(Factory(Blocks, cpu=True), scenario) >= BURN_NS
