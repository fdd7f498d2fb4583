"""PeerWatch on real sockets: a hang-up closes a connection that is not reading at once, is left to a
connection that is still reading (it will read to the end of the stream) until it stops, and a
descriptor taken over by the next connection is not forgotten on the last one's behalf."""

from __future__ import annotations

import asyncio
import socket

from sluice.proxy.data_path.peer_watch import PeerWatch


class Connection:
    """What PeerWatch asks of a connection (proxy/data_path/connection.py's ClientSide), on a real socket."""

    def __init__(self, sock: socket.socket, reading_paused: bool) -> None:
        self.sock = sock
        self.reading_paused = reading_paused
        self.closed = False
        self.cause = ""
        self.closed_event = asyncio.Event()

    def close(self, cause: str, **detail: object) -> None:
        self.closed, self.cause = True, cause
        self.closed_event.set()


class Transport:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def get_extra_info(self, name: str) -> object:
        return self._sock if name == "socket" else None


def pair() -> tuple[socket.socket, socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    server.close()
    return accepted, client


async def test_a_hang_up_closes_a_connection_that_is_not_reading() -> None:
    watch = PeerWatch(asyncio.get_running_loop())
    accepted, client = pair()
    conn = Connection(accepted, reading_paused=True)
    watch.watch(conn, Transport(accepted))  # type: ignore[arg-type]
    client.close()
    await asyncio.wait_for(conn.closed_event.wait(), 5)
    assert conn.cause == "client_closed"
    watch.close()
    accepted.close()


class RecheckSpy:
    """The running loop, noting when the watch decides to look at a connection again later."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.rechecks = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._loop, name)

    def call_later(self, delay: float, callback, *args):  # type: ignore[no-untyped-def]
        self.rechecks.set()
        return self._loop.call_later(delay, callback, *args)


async def test_a_connection_still_reading_is_left_to_read_then_looked_at_again() -> None:
    loop = RecheckSpy(asyncio.get_running_loop())
    watch = PeerWatch(loop)  # type: ignore[arg-type]
    accepted, client = pair()
    conn = Connection(accepted, reading_paused=False)
    watch.watch(conn, Transport(accepted))  # type: ignore[arg-type]
    client.close()
    await asyncio.wait_for(loop.rechecks.wait(), 5)  # seen, and left to read to the end of the stream
    assert not conn.closed
    conn.reading_paused = True  # it stopped reading before it got there: the next look closes it
    await asyncio.wait_for(conn.closed_event.wait(), 5)
    watch.close()
    accepted.close()


async def test_a_descriptor_reused_by_the_next_connection_stays_watched() -> None:
    watch = PeerWatch(asyncio.get_running_loop())
    accepted, client = pair()
    first = Connection(accepted, reading_paused=True)
    fd = watch.watch(first, Transport(accepted))  # type: ignore[arg-type]
    second = Connection(accepted, reading_paused=True)  # the first's socket closed, its fd given anew
    assert watch.watch(second, Transport(accepted)) == fd  # type: ignore[arg-type]
    watch.forget(first, fd)  # the first closes late: the second's registration stays
    client.close()
    await asyncio.wait_for(second.closed_event.wait(), 5)
    assert not first.closed
    watch.close()
    accepted.close()
