"""A scratch copy of the relay path with one candidate optimisation at a time (the hot path's experiments).

Not the proxy: only what moves a client's bytes upstream, so each idea's cost shows alone. Responses are
relayed as they come. Variants (client -> upstream):

* relay   - write(data) as it arrives (bare_relay.py's path)
* join    - protocol/frames.py's FrameSplitter: a frame spanning reads joined, then one writelines per read
            (the proxy before pass-through)
* pieces  - a frame spanning reads kept as its pieces, writelines of the pieces once it is complete
* stream  - cut-through: once a frame's start is in, its bytes go on as they arrive
* bstream - stream, reading with asyncio.BufferedProtocol into a reused bytearray
* bjoin   - BufferedProtocol into a reused buffer; bytes copied out, then FrameSplitter as `join`

``--trim N`` / ``--mmap N`` set glibc's M_TRIM_THRESHOLD / M_MMAP_THRESHOLD (mallopt) first. The scratch
variants assume a frame's first 64 bytes arrive in one read (true of the loads compare_variants.py sends).

Run: ``.venv/bin/python tests/bench/experiments/relay_variants.py --upstream HOST:PORT --variant stream``;
prints ``LISTENING <port>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import signal
import sys
from typing import Any

from sluice.protocol.frames import FrameSplitter
from sluice.protocol.headers import parse_request_header

HEAD = 64  # bytes of a frame's start the scratch variants parse before forwarding it
BUFFER = 256 * 1024


class Client(asyncio.Protocol):
    variant = "relay"

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream_address = upstream
        self.transport: Any = None
        self.upstream: Any = None
        self.early: list[bytes] = []
        self.splitter = FrameSplitter()
        self.pending: list[memoryview] = []
        self.pending_len = 0
        self.need = -1
        self.remaining = 0  # stream: bytes of the current frame still to pass

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.pause_reading()
        transport.set_write_buffer_limits(high=1 << 20)
        asyncio.get_running_loop().create_task(self.connect())

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        upstream, _ = await loop.create_connection(lambda: Upstream(self), *self.upstream_address)
        upstream.set_write_buffer_limits(high=1 << 20)
        self.upstream = upstream
        for data in self.early:
            self.data_received(data)
        self.early = []
        self.transport.resume_reading()

    def data_received(self, data: Any) -> None:
        if self.upstream is None:
            self.early.append(bytes(data))
            return
        if self.variant == "relay":
            self.upstream.write(data)
        elif self.variant == "join":
            frames = self.splitter.feed(data)
            for frame in frames:
                parse_request_header(frame)
            if frames:
                self.upstream.writelines(frames)
        elif self.variant == "pieces":
            self.pieces(memoryview(data))
        else:
            self.stream(memoryview(data))

    def pieces(self, view: memoryview) -> None:
        pos, size, out = 0, len(view), []
        if self.pending_len:
            missing = self.need - self.pending_len
            if size < missing:
                self.pending.append(view)
                self.pending_len += size
                return
            self.pending.append(view[:missing])
            out.extend(self.pending)
            self.pending, self.pending_len, self.need, pos = [], 0, -1, missing
        while size - pos >= 4:
            end = pos + 4 + int.from_bytes(view[pos : pos + 4], "big")
            if end > size:
                parse_request_header(view[pos : pos + HEAD])
                self.pending, self.pending_len, self.need = [view[pos:]], size - pos, end - pos
                break
            parse_request_header(view[pos:end])
            out.append(view[pos:end])
            pos = end
        if out:
            self.upstream.writelines(out)

    def stream(self, view: memoryview) -> None:
        size, pos, out = len(view), 0, []
        if self.remaining:
            pos = min(self.remaining, size)
            self.remaining -= pos
            out.append(view[:pos])
        while pos < size:
            end = pos + 4 + int.from_bytes(view[pos : pos + 4], "big")
            parse_request_header(view[pos : min(end, size, pos + HEAD)] if end > size else view[pos:end])
            if end > size:
                out.append(view[pos:])
                self.remaining = end - size
                break
            out.append(view[pos:end])
            pos = end
        self.upstream.writelines(out)
        self.after_write()

    def after_write(self) -> None:
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None:
            self.upstream.close()


class BufferedClient(Client, asyncio.BufferedProtocol):
    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(upstream)
        self.buffer = memoryview(bytearray(BUFFER))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self.variant == "bstream":
            self.stream(self.buffer[:nbytes])
        else:
            frames = self.splitter.feed(bytes(self.buffer[:nbytes]))
            for frame in frames:
                parse_request_header(frame)
            if frames:
                self.upstream.writelines(frames)

    def after_write(self) -> None:
        # A write the transport could not finish keeps a view of our buffer: read into a fresh one.
        if self.upstream.get_write_buffer_size():
            self.buffer = memoryview(bytearray(BUFFER))


class Upstream(asyncio.Protocol):
    def __init__(self, client: Client) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        self.client.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.transport.close()


async def serve(upstream: tuple[str, int], variant: str) -> None:
    loop = asyncio.get_running_loop()
    cls = BufferedClient if variant in ("bstream", "bjoin") else Client
    cls.variant = variant
    server = await loop.create_server(lambda: cls(upstream), "127.0.0.1", 0)
    print(f"LISTENING {server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(OSError, ValueError):
        loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.buffer.read1(1) else None)
    await stop.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--upstream", required=True)
    p.add_argument(
        "--variant", default="relay", choices=("relay", "join", "pieces", "stream", "bstream", "bjoin")
    )
    p.add_argument("--trim", type=int, default=0, help="mallopt(M_TRIM_THRESHOLD)")
    p.add_argument("--mmap", type=int, default=0, help="mallopt(M_MMAP_THRESHOLD)")
    args = p.parse_args()
    libc = ctypes.CDLL("libc.so.6")
    if args.trim:
        libc.mallopt(-1, args.trim)
    if args.mmap:
        libc.mallopt(-3, args.mmap)
    host, _, port = args.upstream.rpartition(":")
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve((host, int(port)), args.variant))


if __name__ == "__main__":
    main()
