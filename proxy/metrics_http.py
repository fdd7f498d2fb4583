"""The Prometheus endpoint, served on the proxy's own event loop.

prometheus_client's own server runs collectors on a separate thread; ours read the quota engine's sensors,
which only the event loop may touch, so scrapes are answered on the loop instead (they are rare and cheap).
"""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

_READ_TIMEOUT_S = 5.0
_MAX_HEADER_LINES = 100


async def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> asyncio.AbstractServer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), _READ_TIMEOUT_S)
            for _ in range(_MAX_HEADER_LINES):
                if (await asyncio.wait_for(reader.readline(), _READ_TIMEOUT_S)) in (b"\r\n", b"\n", b""):
                    break
            parts = request_line.split()
            path = parts[1] if len(parts) > 1 else b""
            if path.split(b"?")[0] in (b"/metrics", b"/"):
                status, content_type, body = (
                    b"200 OK",
                    CONTENT_TYPE_LATEST.encode(),
                    generate_latest(registry),
                )
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

    return await asyncio.start_server(answer, host, port)


class MetricsEndpoint:
    """The endpoint as a service: listening from start() (a port in use stops start-up) until stop()."""

    name = "metrics_endpoint"

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self._registry = registry
        self.host = host
        self.port = port
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._server = await serve_metrics(self._registry, self.host, self.port)
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
