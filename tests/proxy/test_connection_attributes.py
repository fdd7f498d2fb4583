"""What keeps a connection's hot path fast that no behaviour shows: CPython 3.11 keeps the attributes of a
class's instances in keys the instances share, up to a limit, and an instance past it reads every
attribute more slowly. A 30th attribute of ClientSide took the data path from 51.8k to 53.8k instructions
per small request (callgrind over section 9's load, docs/architecture.md), every read and answer paying
for it. A connection in the test's own event loop between a real client socket and a broker double
(tests/connection_harness.py), after it has served requests and answers of every size it reads
differently (one whole in a read, one spanning reads)."""

from __future__ import annotations

import asyncio
import struct

import uvloop
from connection_harness import WAIT_S, Broker, Proxy

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.headers import encode_request, encode_response
from sluice.proxy.data_path.connection import ClientSide

PRODUCE = ApiKey.PRODUCE
# What ClientSide has today: the 30th was measured past CPython 3.11's limit (SHARED_KEYS_MAX_SIZE, 30).
MAX_ATTRIBUTES = 29


def produce(correlation_id: int, records: int = 0) -> bytes:
    # Produce v3 with acks=1 and no topics (and `records` bytes after them, which the proxy does not read).
    body = struct.pack(">hhii", -1, 1, 1000, 0) + bytes(records)
    return encode_request(PRODUCE, 3, correlation_id, "attributes-test", body)


def answer(correlation_id: int, size: int) -> bytes:
    return encode_response(PRODUCE, 3, correlation_id, bytes(size))


def test_a_served_connection_keeps_fewer_attributes_than_python_shares_keys_for() -> None:
    async def scenario() -> int:
        broker = Broker()
        proxy = Proxy(await broker.start())
        try:
            reader, client = await proxy.connect()
            client.write(produce(1) + produce(2, 600_000))  # a request spanning the proxy's reads
            assert await broker.received(2) == [1, 2]
            sent = answer(1, 16) + answer(2, 600_000)  # and an answer spanning them
            await broker.send(sent)
            await asyncio.wait_for(reader.readexactly(len(sent)), WAIT_S)
            served = set(vars(proxy.connection()))
            # Every one set when the connection is made: an attribute added later, once many connections
            # exist, would leave the shared keys even below the limit.
            assert set(vars(ClientSide(proxy.settings, "fresh", lambda: []))) == served
            return len(served)
        finally:
            proxy.close()
            broker.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(scenario()) <= MAX_ATTRIBUTES
