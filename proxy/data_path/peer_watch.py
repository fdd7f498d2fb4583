"""Notice a client that hung up while its connection is not being read.

A connection stops reading its client for many reasons (waiting for request memory, for the upstream
connect, for a throttle to pass, for the entity's gate, for a broker that stopped reading). While it does
not read, it cannot see the client's close: the event loop only reports the end of a stream it reads to.
Such connections lived on until the wait ended (a throttle of minutes, a broker that never came back),
holding their upstream connection, their held requests and their share of the request memory for
clients long gone.

`PeerWatch` asks the kernel instead: every client socket is registered, once, in an epoll set of the
proxy's own for EPOLLRDHUP (the peer shut down its side; a reset also reports EPOLLHUP/EPOLLERR), and
that set's descriptor is read by the event loop like any other. When a client hangs up:

* its connection not being read: it is closed at once (cause `client_closed`), returning its memory and
  leaving every queue it waits in. What the client sent and the proxy never read goes with it, as a
  broker that never read it would drop it;
* being read: nothing is done; the connection reads what the client sent before its close, then the end
  of the stream, and closes as it always has. If its reading stops before it gets there, the watch looks
  again every RECHECK_S.

Each registration fires once (EPOLLONESHOT), so a connection that is still reading costs no more wake-ups.
Linux only (epoll); elsewhere nothing is watched.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from typing import Protocol

# How often a hung-up client whose connection was still reading is looked at again.
RECHECK_S = 1.0


class WatchedConnection(Protocol):
    @property
    def reading_paused(self) -> bool: ...

    @property
    def closed(self) -> bool: ...

    def close(self, cause: str, **detail: object) -> None: ...


class PeerWatch:
    """One per proxy: the client sockets of its live connections, watched for hang-ups."""

    __slots__ = ("_epoll", "_loop", "_watched")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._epoll = select.epoll()
        # fd -> its connection; an fd may be reused by the next connection as soon as the last is closed.
        self._watched: dict[int, WatchedConnection] = {}
        loop.add_reader(self._epoll.fileno(), self._hung_up)

    @classmethod
    def create(cls, loop: asyncio.AbstractEventLoop) -> PeerWatch | None:
        """A watch for `loop`, or None where there is no epoll."""
        return cls(loop) if hasattr(select, "epoll") else None

    def watch(self, conn: WatchedConnection, transport: asyncio.BaseTransport) -> int:
        """Watch the client socket of `conn`; returns its descriptor (for `forget`), -1 when it has none."""
        sock = transport.get_extra_info("socket")
        fd = sock.fileno() if sock is not None else -1
        if fd < 0:
            return -1
        events = select.EPOLLRDHUP | select.EPOLLONESHOT
        try:
            self._epoll.register(fd, events)
        except FileExistsError:  # a closed connection's fd, not forgotten yet, reused by this one
            self._epoll.modify(fd, events)
        self._watched[fd] = conn
        return fd

    def forget(self, conn: WatchedConnection, fd: int) -> None:
        """`conn` is closing: stop watching its socket (not another connection's that took its fd)."""
        if fd >= 0 and self._watched.get(fd) is conn:
            del self._watched[fd]
            with contextlib.suppress(OSError):  # the socket may be gone already (and with it the entry)
                self._epoll.unregister(fd)

    def close(self) -> None:
        self._loop.remove_reader(self._epoll.fileno())
        self._epoll.close()
        self._watched.clear()

    def _hung_up(self) -> None:
        for fd, _events in self._epoll.poll(0):
            conn = self._watched.get(fd)
            if conn is not None:
                self._check(conn)

    def _check(self, conn: WatchedConnection) -> None:
        if conn.closed:
            return
        if conn.reading_paused:
            conn.close("client_closed", noticed="while not reading")
        else:
            self._loop.call_later(RECHECK_S, self._check, conn)
