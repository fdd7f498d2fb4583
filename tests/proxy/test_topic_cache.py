"""TopicCache's look-ups, bounded whatever clients send: one at a time for every connection, what does not
exist remembered, all-topics look-ups (the only way to name a topic id) at most every ALL_TOPICS_INTERVAL_MS.

The connections are stand-ins whose own requests the admin double answers (its `answer()`, bytes built by
`protocol/`), when the test says: so a look-up can be held in flight while another connection asks.
"""

from __future__ import annotations

import asyncio
import uuid

from doubles.admin_broker import AdminBrokerDouble

from sluice.protocol.headers import encode_request, response_header_size
from sluice.proxy.cluster.topic_cache import ALL_TOPICS_INTERVAL_MS, TOPIC_TTL_MS, TopicCache


class Connection:
    """A client connection as the cache sees it; its own requests wait in `pending` until `answer_all`."""

    def __init__(self, broker: AdminBrokerDouble, clock: list[int]) -> None:
        self._broker = broker
        self._clock = clock
        self.peer = "127.0.0.1:1"
        self.upstream_peer = "127.0.0.1:9092"
        self.listener = "bootstrap"
        self.user = "ANONYMOUS"
        self.pending: list[tuple[asyncio.Future[bytes], bytes, int, int]] = []

    def now_ms(self) -> int:
        return self._clock[0]

    def send_upstream(self, api_key: int, api_version: int, body: bytes) -> asyncio.Future[bytes]:
        reply: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.pending.append(
            (reply, encode_request(api_key, api_version, 7, "sluice", body), api_key, api_version)
        )
        return reply

    def answer_all(self) -> None:
        pending, self.pending = self.pending, []
        for reply, request, api_key, version in pending:
            frame = self._broker.answer(memoryview(request))
            assert frame is not None
            reply.set_result(frame[4 + response_header_size(api_key, version, frame) :])


async def settle() -> None:
    """Ten turns of the loop: everything here is in-process, so what is due has run (turns, not time)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_second_connection_waits_for_the_look_up_under_way_and_asks_nothing_more() -> None:
    broker = AdminBrokerDouble(topics={"orders": 4})
    clock = [1_000]
    cache = TopicCache()
    a, b = Connection(broker, clock), Connection(broker, clock)
    first = cache.refresh(a, ["orders"], ids=[], need_default=False)
    second = cache.refresh(b, ["orders"], ids=[], need_default=False)
    await settle()
    assert len(a.pending) == 1 and b.pending == []  # one look-up for both
    a.answer_all()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert b.pending == [] and broker.metadata_requests == 1
    assert cache.partitions("orders") == 4


async def test_a_connection_that_waited_asks_for_what_the_other_look_up_did_not_cover() -> None:
    broker = AdminBrokerDouble(topics={"orders": 4, "audit": 2})
    clock = [1_000]
    cache = TopicCache()
    a, b = Connection(broker, clock), Connection(broker, clock)
    first = cache.refresh(a, ["orders"], ids=[], need_default=False)
    second = cache.refresh(b, ["orders", "audit"], ids=[], need_default=False)
    await settle()
    a.answer_all()
    await asyncio.wait_for(first, 5)
    await settle()
    assert len(b.pending) == 1  # only "audit" is left to ask
    b.answer_all()
    await asyncio.wait_for(second, 5)
    assert (cache.partitions("orders"), cache.partitions("audit")) == (4, 2)
    assert broker.metadata_requests == 2


async def test_what_does_not_exist_is_remembered_for_the_cache_time() -> None:
    broker = AdminBrokerDouble(topics={"orders": 4})
    clock = [1_000]
    cache = TopicCache()
    conn = Connection(broker, clock)
    made_up = uuid.uuid4().bytes
    lookup = cache.refresh(conn, ["ghost"], ids=[made_up], need_default=False)
    await settle()
    conn.answer_all()
    await asyncio.wait_for(lookup, 5)
    assert cache.missing(["ghost", "orders"], clock[0]) == []  # "orders" came with the all-topics answer
    assert not cache.id_lookup_due(made_up, clock[0] + ALL_TOPICS_INTERVAL_MS)
    clock[0] += TOPIC_TTL_MS + 1
    assert cache.missing(["ghost"], clock[0]) == ["ghost"]
    assert cache.id_lookup_due(made_up, clock[0])


async def test_all_topics_look_ups_start_at_most_once_per_interval() -> None:
    broker = AdminBrokerDouble(topics={"orders": 4})
    clock = [1_000]
    cache = TopicCache()
    conn = Connection(broker, clock)
    assert cache.id_lookup_due(uuid.uuid4().bytes, clock[0])
    lookup = cache.refresh(conn, [], ids=[uuid.uuid4().bytes], need_default=False)
    await settle()
    conn.answer_all()
    await asyncio.wait_for(lookup, 5)
    clock[0] += ALL_TOPICS_INTERVAL_MS - 1
    assert not cache.id_lookup_due(uuid.uuid4().bytes, clock[0])  # another made-up id: not yet
    clock[0] += 1
    assert cache.id_lookup_due(uuid.uuid4().bytes, clock[0])
    assert cache.name_of(broker.topic_ids["orders"]) == "orders"
    assert not cache.id_lookup_due(broker.topic_ids["orders"], clock[0])
