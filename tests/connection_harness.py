"""A client connection (ClientSide) in the test's own event loop, between a real client socket and a broker
double on loopback: a few lines of asyncio that read requests and write whatever bytes the test gives it
(frames built by `protocol/`), so a test can send what no real broker would (a response nobody asked for)
or hold back what one would send."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

from sluice.protocol.headers import read_correlation_id
from sluice.proxy.data_path.connection import ClientSide
from sluice.proxy.data_path.filter_chain import FilterChain
from sluice.proxy.data_path.session import ConnectionRegistry, SessionSettings
from sluice.proxy.filter_api import FilterFactory
from sluice.proxy.observability.metrics import ProxyMetrics

WAIT_S = 10.0  # an honest bound for a loaded machine; the tests finish in milliseconds when all is well


class Broker:
    """Reads requests (their correlation ids) and writes whatever bytes the test gives it."""

    def __init__(self) -> None:
        self.requests: asyncio.Queue[int] = asyncio.Queue()
        self.writer: asyncio.StreamWriter | None = None
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accepted, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                self.requests.put_nowait(struct.unpack_from(">i", frame, 4)[0])
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    async def received(self, count: int) -> list[int]:
        return [await asyncio.wait_for(self.requests.get(), WAIT_S) for _ in range(count)]

    async def send(self, *frames: bytes) -> None:
        assert self.writer is not None
        self.writer.write(b"".join(frames))  # one write: the proxy reads them together
        await self.writer.drain()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.server is not None:
            self.server.close()


class _WatchedRegistry(ConnectionRegistry):
    """The proxy's registry, which also says when a connection joined it (ClientSide.connection_made)."""

    def __init__(self, metrics: ProxyMetrics) -> None:
        super().__init__(metrics)
        self.joined = asyncio.Event()

    def add(self, conn) -> None:  # type: ignore[no-untyped-def]
        super().add(conn)
        self.joined.set()


class Proxy:
    """One listener whose connections are ClientSides over `factories`, upstream to `broker_port`."""

    def __init__(self, broker_port: int, *factories: FilterFactory) -> None:
        metrics = ProxyMetrics()
        self.registry = _WatchedRegistry(metrics)
        self.settings = SessionSettings(FilterChain(factories), metrics, self.registry, 1 << 20, 300.0)
        self._broker_port = broker_port
        self.server: asyncio.Server | None = None

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: ClientSide(self.settings, "test", lambda: [("127.0.0.1", self._broker_port)]),
            "127.0.0.1",
            0,
        )
        return await asyncio.open_connection("127.0.0.1", self.server.sockets[0].getsockname()[1])

    def connection(self) -> ClientSide:
        (conn,) = list(self.registry)
        return conn  # type: ignore[return-value]

    async def connection_up(self) -> ClientSide:
        """The one connection, once it is connected upstream (its connect task, which made its upstream
        transport, is done)."""
        await asyncio.wait_for(self.registry.joined.wait(), WAIT_S)
        conn = self.connection()
        assert conn._connect_task is not None
        await asyncio.wait_for(asyncio.shield(conn._connect_task), WAIT_S)
        return conn

    def close(self) -> None:
        for conn in self.registry:
            conn.close("test_over")
        if self.server is not None:
            self.server.close()


async def responses_until_closed(reader: asyncio.StreamReader) -> list[int]:
    """Correlation ids of every response the client gets until the proxy closes the connection."""
    ids = []
    while True:
        prefix = await asyncio.wait_for(reader.read(4), WAIT_S)
        if not prefix:
            return ids
        frame = await asyncio.wait_for(reader.readexactly(struct.unpack(">i", prefix)[0]), WAIT_S)
        ids.append(read_correlation_id(prefix + frame))


async def run(factories: list[FilterFactory], scenario: Callable) -> list[int]:
    broker = Broker()
    proxy = Proxy(await broker.start(), *factories)
    try:
        reader, writer = await proxy.connect()
        await scenario(broker, writer)
        received = await responses_until_closed(reader)
        writer.close()
        return received
    finally:
        proxy.close()
        broker.close()
