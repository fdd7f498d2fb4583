"""A bare TCP relay on asyncio Protocols (uvloop when importable): the floor for the proxy's CPU cost.

No framing, no parsing, no metrics: each client connection gets its own upstream connection and bytes go
across as they arrive, with back-pressure both ways (a full write buffer on one side pauses reading on
the other). It cannot rewrite Metadata, so real Kafka clients would leave it after bootstrap; the
benchmarks drive it with a raw-socket load generator instead (tests/bench/wire_load.py).

Run: ``.venv/bin/python tests/bench/bare_relay.py --upstream HOST:PORT [--listen HOST:PORT]``. Prints
``LISTENING <port>`` on stdout once it accepts connections; stops on SIGTERM/SIGINT or when stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from typing import cast


class _Pausable:
    """Read pauses of one transport, counted by reason so that resuming one cannot undo another."""

    __slots__ = ("_reasons", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._reasons: set[str] = set()

    def add(self, reason: str) -> None:
        if not self._reasons and not self._transport.is_closing():
            self._transport.pause_reading()
        self._reasons.add(reason)

    def discard(self, reason: str) -> None:
        if reason in self._reasons:
            self._reasons.discard(reason)
            if not self._reasons and not self._transport.is_closing():
                self._transport.resume_reading()


class RelayClient(asyncio.Protocol):
    """The client's side of one relayed connection."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream_address = (upstream_host, upstream_port)
        self._transport: asyncio.Transport | None = None
        self._upstream: asyncio.Transport | None = None
        self._pauses: _Pausable | None = None
        self._upstream_pauses: _Pausable | None = None
        self._early: list[bytes] = []
        self._closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._pauses = _Pausable(self._transport)
        self._pauses.add("connecting")
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.create_connection(lambda: RelayUpstream(self), *self._upstream_address)
        except OSError:
            self.close()
            return
        if self._closed:
            transport.close()
            return
        self._upstream = cast(asyncio.Transport, transport)
        self._upstream_pauses = _Pausable(self._upstream)
        if self._early:
            self._upstream.writelines(self._early)
            self._early = []
        assert self._pauses is not None
        self._pauses.discard("connecting")

    def data_received(self, data: bytes) -> None:
        if self._upstream is None:
            self._early.append(data)  # arrived with the connection, before the pause took effect
        else:
            self._upstream.write(data)

    def upstream_data(self, data: bytes) -> None:
        assert self._transport is not None
        self._transport.write(data)

    # A full buffer toward the upstream pauses the client, and the other way round.
    def upstream_pause_writing(self) -> None:
        if self._pauses is not None:
            self._pauses.add("upstream_backlog")

    def upstream_resume_writing(self) -> None:
        if self._pauses is not None:
            self._pauses.discard("upstream_backlog")

    def pause_writing(self) -> None:
        if self._upstream_pauses is not None:
            self._upstream_pauses.add("client_backlog")

    def resume_writing(self) -> None:
        if self._upstream_pauses is not None:
            self._upstream_pauses.discard("client_backlog")

    def eof_received(self) -> bool:
        self.close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._transport is not None:
            self._transport.close()
        if self._upstream is not None:
            self._upstream.close()


class RelayUpstream(asyncio.Protocol):
    """The relay's connection to the upstream, on behalf of one client."""

    __slots__ = ("_client",)

    def __init__(self, client: RelayClient) -> None:
        self._client = client

    def data_received(self, data: bytes) -> None:
        self._client.upstream_data(data)

    def pause_writing(self) -> None:
        self._client.upstream_pause_writing()

    def resume_writing(self) -> None:
        self._client.upstream_resume_writing()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._client.close()


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    return host, int(port)


async def serve(listen: tuple[str, int], upstream: tuple[str, int]) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: RelayClient(*upstream), *listen, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(f"LISTENING {port}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Our parent holds the other end of stdin: when it dies, so do we.
    with contextlib.suppress(OSError, ValueError):
        loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.buffer.read1(1) else None)
    await stop.wait()
    server.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, type=_host_port, metavar="HOST:PORT")
    parser.add_argument("--listen", default=("127.0.0.1", 0), type=_host_port, metavar="HOST:PORT")
    args = parser.parse_args(argv)
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.listen, args.upstream))
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve(args.listen, args.upstream))
    return 0


if __name__ == "__main__":
    sys.exit(main())
