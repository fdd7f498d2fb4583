"""How the proxy's own Kafka client waits for an answer (proxy/kafka_client/connection.py, retrying.py).

A request's caller awaits the answer's future itself, with a timer for its timeout, and a call's budget
bounds its attempts in the caller's task: an answer reaches its caller at the next turn of the loop (an
idle proxy's every long poll of the quota store is one), not after four more. What that must keep:

* no answer within the request's timeout fails every request waiting on the connection, and closes it
  (its answer could still come and be matched to the wrong request, as Kafka's clients reason);
* a caller cancelled while it waits (its call's budget spent) leaves its request in the queue: the late
  answer is matched and dropped, and the next request on the connection gets its own answer;
* a budget spent before an attempt starts (a backoff that slept long) gives up without starting it.

The connection runs against a stand-in transport; answers are bytes built by `protocol/`. Each test runs
on asyncio's loop and on uvloop.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine

import pytest
import uvloop

from sluice.protocol.headers import encode_response, parse_request_header
from sluice.proxy.kafka_client.backoff import RetryPolicy
from sluice.proxy.kafka_client.connection import BrokerConnection
from sluice.proxy.kafka_client.errors import BrokerUnavailable, GaveUp
from sluice.proxy.kafka_client.retrying import retrying

METADATA, VERSION = 3, 1  # a response header without tagged fields

# Every test on asyncio's loop and on uvloop, which the proxy runs on.
pytestmark = pytest.mark.parametrize(
    "new_loop", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)


def on_each_loop(
    scenario: Callable[[], Coroutine[object, object, None]],
) -> Callable[[Callable[[], asyncio.AbstractEventLoop]], None]:
    """The test that runs `scenario` to its end on a fresh loop of each kind (`new_loop`, above)."""

    def test(new_loop: Callable[[], asyncio.AbstractEventLoop]) -> None:
        loop = new_loop()
        try:
            loop.run_until_complete(scenario())
        finally:
            loop.close()

    test.__name__ = test.__qualname__ = scenario.__name__
    return test


class StandInTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False
        self._awaited: list[tuple[int, asyncio.Future[None]]] = []

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))
        for count, future in self._awaited:
            if len(self.written) >= count and not future.done():
                future.set_result(None)

    def wrote(self, count: int) -> asyncio.Future[None]:
        """Done once `count` requests are written (each caller writes before its first wait)."""
        future = asyncio.get_running_loop().create_future()
        self._awaited.append((count, future))
        if len(self.written) >= count:
            future.set_result(None)
        return future

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def connected() -> tuple[BrokerConnection, StandInTransport]:
    connection = BrokerConnection("broker-1", "sluice")
    transport = StandInTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


def answer_to(request: bytes, body: bytes) -> bytes:
    return encode_response(METADATA, VERSION, parse_request_header(request).correlation_id, body)


@on_each_loop
async def test_an_answer_reaches_its_caller_at_the_next_turn_of_the_loop() -> None:
    connection, transport = connected()
    call = asyncio.ensure_future(connection.request(METADATA, VERSION, b"ask", 5.0))
    await transport.wrote(1)
    connection.data_received(answer_to(transport.written[0], b"the answer"))
    # The event under test is one turn of the loop; sleep(0) is exactly one: the caller wakes in it.
    await asyncio.sleep(0)
    assert call.done()
    assert bytes(call.result()) == b"the answer"


@on_each_loop
async def test_no_answer_in_time_fails_every_waiting_request_and_closes_the_connection() -> None:
    connection, transport = connected()
    short = asyncio.ensure_future(connection.request(METADATA, VERSION, b"first", 0.05))
    long = asyncio.ensure_future(connection.request(METADATA, VERSION, b"second", 30.0))
    with pytest.raises(BrokerUnavailable, match=re.escape("broker-1: no answer to API 3 within 0.05 s")):
        await short
    with pytest.raises(BrokerUnavailable, match=re.escape("no answer to API 3 within 0.05 s")):
        await long
    assert transport.closed
    with pytest.raises(BrokerUnavailable):  # the connection is done for: the next call reconnects
        await connection.request(METADATA, VERSION, b"third", 5.0)


@on_each_loop
async def test_a_cancelled_caller_leaves_its_answer_to_be_dropped_and_the_next_one_gets_its_own() -> None:
    connection, transport = connected()
    cut_short = asyncio.ensure_future(connection.request(METADATA, VERSION, b"first", 30.0))
    await transport.wrote(1)
    cut_short.cancel()  # as a call's budget running out cancels it
    with pytest.raises(asyncio.CancelledError):
        await cut_short
    following = asyncio.ensure_future(connection.request(METADATA, VERSION, b"second", 30.0))
    await transport.wrote(2)
    first, second = transport.written
    connection.data_received(answer_to(first, b"late") + answer_to(second, b"on time"))
    assert bytes(await following) == b"on time"
    assert not transport.closed
    assert connection.in_flight == 0


@on_each_loop
async def test_an_answered_requests_timeout_is_gone_and_leaves_the_connection_open() -> None:
    loop = asyncio.get_running_loop()
    connection, transport = connected()
    answered = asyncio.ensure_future(connection.request(METADATA, VERSION, b"first", 0.05))
    await transport.wrote(1)
    connection.data_received(answer_to(transport.written[0], b"in time"))
    assert bytes(await answered) == b"in time"
    waiting = asyncio.ensure_future(connection.request(METADATA, VERSION, b"second", 30.0))
    await transport.wrote(2)
    # A timer due no sooner than the answered request's was: had that one stayed, it fired first.
    past_its_timeout: asyncio.Future[None] = loop.create_future()
    loop.call_later(0.05, past_its_timeout.set_result, None)
    await past_its_timeout
    assert not transport.closed
    connection.data_received(answer_to(transport.written[1], b"still served"))
    assert bytes(await waiting) == b"still served"


@on_each_loop
async def test_a_lost_connection_fails_the_waiting_requests_and_passes_over_a_cancelled_one() -> None:
    connection, transport = connected()
    cancelled = asyncio.ensure_future(connection.request(METADATA, VERSION, b"first", 30.0))
    waiting = asyncio.ensure_future(connection.request(METADATA, VERSION, b"second", 30.0))
    await transport.wrote(2)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    connection.connection_lost(None)
    with pytest.raises(BrokerUnavailable, match="broker-1: connection closed"):
        await waiting


@on_each_loop
async def test_an_attempt_runs_in_its_callers_task_and_its_result_comes_back_at_the_next_turn() -> None:
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    started: asyncio.Future[asyncio.Task[object] | None] = asyncio.get_running_loop().create_future()

    async def attempt() -> str:
        started.set_result(asyncio.current_task())
        return await answer

    call = asyncio.ensure_future(retrying("Fetch t-0", attempt, 30.0, RetryPolicy()))
    assert await started is call
    answer.set_result("records")
    # The event under test is one turn of the loop; sleep(0) is exactly one: the caller wakes in it.
    await asyncio.sleep(0)
    assert call.done()
    assert call.result() == "records"


@on_each_loop
async def test_a_budget_that_runs_out_cuts_the_attempt_short_and_names_the_last_failure() -> None:
    attempts: list[str] = []

    async def attempt() -> None:
        if not attempts:
            attempts.append("refused")
            raise BrokerUnavailable("broker-1: connection refused")
        attempts.append("waiting")
        try:
            await asyncio.get_running_loop().create_future()  # never answered
        except asyncio.CancelledError:
            attempts.append("cut short")
            raise

    policy = RetryPolicy(initial_s=0.01, max_s=0.01, jitter=0.0)
    with pytest.raises(GaveUp, match=re.escape("Fetch t-0: gave up after 1 s: broker-1: connection refused")):
        await retrying("Fetch t-0", attempt, 1.0, policy)
    assert attempts == ["refused", "waiting", "cut short"]


@on_each_loop
async def test_a_budget_spent_before_an_attempt_starts_gives_up_without_starting_it() -> None:
    started: list[int] = []

    async def attempt() -> None:
        started.append(1)

    with pytest.raises(GaveUp, match=re.escape("gave up after 0 s")):
        await retrying("Fetch t-0", attempt, 0.0, RetryPolicy())
    assert started == []
