"""A wire tap: a TCP relay in front of a real broker that records every byte sent to the broker, per
connection, so a test can compare what reached the broker with what its client sent.

Not a broker double: the broker behind it (the mock cluster) answers everything; the tap only copies.

    with WireTap(cluster.addresses[0]) as tap:
        proxy = ProxyProcess(tap.address)
        ...
        assert sent in tap.upstream_bytes()
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

from doubles.loop_thread import LoopThread


class _Link(asyncio.Protocol):
    def __init__(self, peer: _Link | None, record: bytearray | None, lock: threading.Lock) -> None:
        self.peer = peer
        self.transport: asyncio.Transport | None = None
        self._record = record
        self._lock = lock
        self._early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._record is not None:
            with self._lock:
                self._record += data
        if self.peer is None or self.peer.transport is None:
            self._early.append(data)
        else:
            self.peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class WireTap:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._lock = threading.Lock()
        self._records: list[bytearray] = []
        self._server: asyncio.AbstractServer | None = None
        self._thread: LoopThread[str] = LoopThread("wire-tap", self._open, self._close)
        self.address = ""

    async def _open(self) -> str:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._accept, "127.0.0.1", 0)
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    def _accept(self) -> _Link:
        record = bytearray()
        with self._lock:
            self._records.append(record)
        client = _Link(None, record, self._lock)
        asyncio.get_running_loop().create_task(self._connect(client))
        return client

    async def _connect(self, client: _Link) -> None:
        loop = asyncio.get_running_loop()
        _, broker = await loop.create_connection(lambda: _Link(client, None, self._lock), *self._upstream)
        client.peer = broker
        for data in client._early:
            broker.transport.write(data)  # type: ignore[union-attr]
        client._early = []

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()

    def upstream_bytes(self) -> list[bytes]:
        """What each connection through the tap has sent to the broker so far, in connection order."""
        with self._lock:
            return [bytes(record) for record in self._records]

    def __enter__(self) -> WireTap:
        self.address = self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._thread.stop()
