"""proxy/data_path/upstream.py's UpstreamSide: the broker's bytes reach the client connection's own method."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import uvloop

from sluice.proxy.data_path.upstream import UpstreamSide


class _Client:
    def __init__(self) -> None:
        self.answers: list[bytes] = []
        self.lost: list[Exception | None] = []
        self.arrived: asyncio.Future[None] | None = None
        self.closed: asyncio.Future[None] | None = None

    def upstream_data(self, data: bytes) -> None:
        self.answers.append(bytes(data))
        if self.arrived is not None and not self.arrived.done():
            self.arrived.set_result(None)

    def upstream_lost(self, exc: Exception | None) -> None:
        self.lost.append(exc)
        if self.closed is not None and not self.closed.done():
            self.closed.set_result(None)

    def upstream_pause_writing(self) -> None:
        pass

    def upstream_resume_writing(self) -> None:
        pass


LOOPS = [asyncio.new_event_loop, uvloop.new_event_loop]


@pytest.mark.parametrize("new_loop", LOOPS, ids=["asyncio", "uvloop"])
def test_the_transport_calls_the_client_connections_method_with_no_call_of_the_protocols_between(
    new_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    client = _Client()
    side = UpstreamSide(client)
    assert side.data_received == client.upstream_data  # the bound method itself, not a protocol method

    async def relay() -> None:
        # A real connection on each loop the proxy may run: what its transport calls with the broker's
        # bytes, and its end.
        loop = asyncio.get_running_loop()
        sent = loop.create_future()
        client.arrived = loop.create_future()

        def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"answer")
            sent.set_result(writer)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport, _ = await loop.create_connection(lambda: side, "127.0.0.1", port)
        writer = await sent
        await client.arrived
        client.closed = loop.create_future()
        writer.close()  # the broker goes away: the end reaches the client connection too
        await client.closed
        transport.close()
        server.close()
        await server.wait_closed()

    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(relay())
    assert client.answers == [b"answer"] and client.lost == [None]
