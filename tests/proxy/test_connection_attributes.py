"""What keeps a connection's hot path fast that no behaviour shows: ClientSide keeps its attributes in slots,
which the compiled passes and queries (proxy/data_path/_connection_passes.c, _connection_queries.c) read at
their offsets, as Python 3.11's bytecode reads them (by name, through the C API, each read cost ~190
instructions, some twenty a pass). Every slot is set when the connection is made: a slot set only later would
be read unset (an AttributeError) by whatever reads it first, and an attribute outside the slots cannot be set
at all. Checked on a connection in the test's own event loop between a real client socket and a broker
double (tests/connection_harness.py), after it has served requests and answers of every size it reads
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


def produce(correlation_id: int, records: int = 0) -> bytes:
    # Produce v3 with acks=1 and no topics (and `records` bytes after them, which the proxy does not read).
    body = struct.pack(">hhii", -1, 1, 1000, 0) + bytes(records)
    return encode_request(PRODUCE, 3, correlation_id, "attributes-test", body)


def answer(correlation_id: int, size: int) -> bytes:
    return encode_response(PRODUCE, 3, correlation_id, bytes(size))


def test_a_connection_keeps_its_attributes_in_slots_all_set_when_it_is_made() -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        broker = Broker()
        proxy = Proxy(await broker.start())
        try:
            reader, client = await proxy.connect()
            client.write(produce(1) + produce(2, 600_000))  # a request spanning the proxy's reads
            assert await broker.received(2) == [1, 2]
            sent = answer(1, 16) + answer(2, 600_000)  # and an answer spanning them
            await broker.send(sent)
            await asyncio.wait_for(reader.readexactly(len(sent)), WAIT_S)
            served = proxy.connection()
            fresh = ClientSide(proxy.settings, "fresh", lambda: [])
            assert not hasattr(served, "__dict__") and not hasattr(fresh, "__dict__")
            return unset(fresh), unset(served)
        finally:
            proxy.close()
            broker.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(scenario()) == ([], [])


def unset(connection: ClientSide) -> list[str]:
    return [name for name in ClientSide.__slots__ if not hasattr(connection, name)]
