"""The Prometheus endpoint, served on the proxy's own event loop.

Our collectors read the quota engine's sensors, which only the event loop may touch, so they run on the
loop (prometheus_client's own server would run them on a thread of its own). What they cost the data path
is bounded, since a scrape of many sensors done in one go would stall every client while it renders:

* a collector with `collect_async` (the quota collector) hands the loop back every few hundred sensors;
* the text is rendered off the loop, in a thread, from the families collected (plain values by then);
* the number of quota sensors, and so the size of a scrape, is capped by `quota.max_entities`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

_READ_TIMEOUT_S = 5.0
_MAX_HEADER_LINES = 100


class _Collected(Collector):
    """Families already collected, for rendering on another thread."""

    def __init__(self, families: list[Any]) -> None:
        self._families = families

    def collect(self) -> Iterator[Any]:
        return iter(self._families)


def _render(families: list[Any]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collected(families))
    return generate_latest(registry)


async def scrape(collectors: Sequence[Collector]) -> bytes:
    """Collect on the loop (incrementally where a collector can), render off it."""
    families: list[Any] = []
    for collector in collectors:
        collect_async = getattr(collector, "collect_async", None)
        families.extend(await collect_async() if collect_async is not None else collector.collect())
    return await asyncio.to_thread(_render, families)


async def serve_metrics(collectors: Sequence[Collector], sock: socket.socket) -> asyncio.Server:
    """Serve scrapes on `sock`, a bound, listening socket."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), _READ_TIMEOUT_S)
            for _ in range(_MAX_HEADER_LINES):
                if (await asyncio.wait_for(reader.readline(), _READ_TIMEOUT_S)) in (b"\r\n", b"\n", b""):
                    break
            parts = request_line.split()
            path = parts[1] if len(parts) > 1 else b""
            if path.split(b"?")[0] in (b"/metrics", b"/"):
                status, content_type, body = b"200 OK", CONTENT_TYPE_LATEST.encode(), await scrape(collectors)
            else:
                status, content_type, body = b"404 Not Found", b"text/plain", b"try /metrics\n"
            writer.write(
                b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                % (status, content_type, len(body))
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError, ValueError):
            pass  # a slow, vanished or oversized scrape request: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return await asyncio.start_server(answer, sock=sock)


class MetricsEndpoint:
    """The endpoint as a service: listening from start() (a port in use stops start-up) until stop().

    `bind` makes its listening socket as the proxy's other listeners are made (the process passes
    proxy/listeners' bind), so a port in use is said in the same words ("cannot listen on ...: Address
    already in use"), whichever listener it is.
    """

    name = "metrics_endpoint"

    def __init__(
        self,
        collectors: Sequence[Collector],
        host: str,
        port: int,
        bind: Callable[[str, int], socket.socket],
    ) -> None:
        self._collectors = list(collectors)
        self.host = host
        self.port = port
        self._bind = bind
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        sock = self._bind(self.host, self.port)
        try:
            self._server = await serve_metrics(self._collectors, sock)
        except BaseException:
            sock.close()
            raise
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
