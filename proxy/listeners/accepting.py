"""Accepting client connections, and pausing every listener while file descriptors run short.

Each client connection costs two descriptors (the client's socket and its upstream's), and the process
needs some of its own (its Kafka client, the quota store and usage plane, the metrics endpoint, its
listeners). With 10,000 idle clients on a machine allowing 20,000, new connections took the last ones:
their upstream connects failed with "Too many open files", so the proxy closed connections it had
just accepted, and connections sat in the accept queue with no log line.

Now `reserved_open_files` descriptors are kept for the process's own work, and a listener accepts a
connection only if its two descriptors fit under the open-file limit less that reserve. When they do not,
every listener stops accepting (new clients wait in the kernel's accept queue, or are refused by it when
it is full, as by a busy broker) and one `accepting_paused` warning gives the numbers; while paused the
count is taken again every RESUME_CHECK_S, and accepting resumes (`accepting_resumed`) once room for
RESUME_CONNECTIONS more connections has come back. Connections already served are never touched.
`sluice_accepting_paused` is 1 meanwhile; `sluice_accept_pauses_total` counts the pauses.

Counting open descriptors takes a read of /proc/self/fd, 15 ms with 18,000 open: too slow for every
accept. The count is estimated from the live connections instead (two each, plus the process's own,
last counted), and counted for real only near the limit, at most every REMEASURE_S.

Listening is done here rather than by `loop.create_server`, whose listeners can only be closed, not
paused: the listening socket is read by the event loop, each connection accepted is handed to
`loop.connect_accepted_socket` (which does the TLS handshake on a TLS listener).
"""

from __future__ import annotations

import asyncio
import errno
import os
import resource
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..observability.log import get_logger

_log = get_logger("sluice.accepting")

DESCRIPTORS_PER_CONNECTION = 2  # the client's socket and its upstream's
RESUME_CONNECTIONS = 8
RESUME_CHECK_S = 0.5
REMEASURE_S = 0.25
# Accepted per wake-up of a listener, so that a flood of connections cannot hold the event loop.
ACCEPTS_PER_WAKEUP = 128
# accept() failing for want of descriptors or memory: stop and count again.
_SHORT = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def count_open_descriptors() -> int:
    with os.scandir("/proc/self/fd") as entries:
        return sum(1 for _ in entries) - 1  # the directory read itself holds one


def open_file_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Accepting:
    """The listeners of one proxy, and when they may accept."""

    def __init__(
        self,
        reserved: int,
        connections: Callable[[], int],
        count_open: Callable[[], int] = count_open_descriptors,
        limit: Callable[[], int] = open_file_limit,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`reserved`: descriptors kept for the process's own work; `connections()`: the client
        connections open now."""
        self.reserved = reserved
        self._connections = connections
        self._count_open = count_open
        self._limit = limit
        self._clock = clock
        self._listeners: list[Listener] = []
        self._starting = 0  # accepted, not yet a connection (connect_accepted_socket under way)
        self.paused_since: float | None = None
        self.pauses = 0
        self._resume_timer: asyncio.TimerHandle | None = None
        self._own = self._least_own = 0
        self._measured_at = 0.0
        self.open_files = 0
        self.count_own()

    def count_own(self) -> None:
        """Count what the process holds of its own (call once its services have started): the count is
        never taken below it later (taken while connections are still connecting upstream, it would
        credit them with one descriptor each)."""
        self._least_own = 0
        self._measure()
        self._least_own = self._own

    # ---- listeners ----------------------------------------------------------------------------------

    def listen(
        self,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        tls: ssl.SSLContext | None,
    ) -> Listener:
        """Serve the listening socket `sock` (bound, listening, non-blocking)."""
        listener = Listener(self, asyncio.get_running_loop(), sock, protocol_factory, tls)
        self._listeners.append(listener)
        if self.paused_since is None:
            listener.start()
        return listener

    def forget(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def close(self) -> None:
        if self._resume_timer is not None:
            self._resume_timer.cancel()
            self._resume_timer = None

    # ---- the budget -----------------------------------------------------------------------------------

    def may_accept(self) -> bool:
        """Whether one more connection's descriptors fit under the limit less the reserve; when they do not,
        every listener pauses."""
        if self.paused_since is not None:
            return False
        usable = self._limit() - self.reserved
        if self._estimate(1) > usable - max(self.reserved, 64):  # near the line: count for real
            if self._clock() - self._measured_at >= REMEASURE_S:
                self._measure()
            if self._estimate(1) > usable:
                self._pause(None)
                return False
        return True

    def accepted(self) -> None:
        self._starting += 1

    def started(self) -> None:
        self._starting -= 1

    def short(self, error: OSError) -> None:
        """accept() failed for want of descriptors (or memory) although the count said there was room."""
        self._measure()
        self._pause(error)

    def estimate(self) -> int:
        return self._estimate(0)

    def limit(self) -> int:
        return self._limit()

    def _estimate(self, more: int) -> int:
        connections = self._connections() + self._starting + more
        return self._own + DESCRIPTORS_PER_CONNECTION * connections

    def _measure(self) -> int:
        self.open_files = self._count_open()
        self._measured_at = self._clock()
        connections = self._connections() + self._starting
        self._own = max(self._least_own, self.open_files - DESCRIPTORS_PER_CONNECTION * connections)
        return self.open_files

    def _pause(self, error: OSError | None) -> None:
        if self.paused_since is not None:
            return
        self.paused_since = self._clock()
        self.pauses += 1
        for listener in self._listeners:
            listener.stop()
        _log.warning(
            "accepting_paused",
            open_files=self._estimate(0),
            limit=self._limit(),
            reserved=self.reserved,
            connections=self._connections(),
            error=None if error is None else str(error),
            detail="new connections wait in the accept queue until descriptors come back",
        )
        self._resume_timer = asyncio.get_running_loop().call_later(RESUME_CHECK_S, self._check_resume)

    def _check_resume(self) -> None:
        self._resume_timer = None
        self._measure()
        room = self._limit() - self.reserved - self._estimate(0)
        if room < DESCRIPTORS_PER_CONNECTION * RESUME_CONNECTIONS:
            self._resume_timer = asyncio.get_running_loop().call_later(RESUME_CHECK_S, self._check_resume)
            return
        assert self.paused_since is not None
        paused_s = self._clock() - self.paused_since
        self.paused_since = None
        _log.info("accepting_resumed", open_files=self._estimate(0), paused_s=round(paused_s, 3))
        for listener in self._listeners:
            listener.start()

    def collector(self) -> Collector:
        return _AcceptingCollector(self)


class Listener:
    """One listening socket, read by the event loop; what `loop.create_server` returns, as far as the
    proxy uses it (`sockets`, `close`)."""

    def __init__(
        self,
        accepting: Accepting,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        tls: ssl.SSLContext | None,
    ) -> None:
        self._accepting = accepting
        self._loop = loop
        self.sockets = (sock,)
        self._factory = protocol_factory
        self._tls = tls
        self._reading = False
        self._closed = False

    def start(self) -> None:
        if not self._reading and not self._closed:
            self._loop.add_reader(self.sockets[0], self._ready)
            self._reading = True

    def stop(self) -> None:
        if self._reading:
            self._loop.remove_reader(self.sockets[0])
            self._reading = False

    def close(self) -> None:
        self.stop()
        self._closed = True
        self._accepting.forget(self)
        self.sockets[0].close()

    def _ready(self) -> None:
        accepting, sock = self._accepting, self.sockets[0]
        for _ in range(ACCEPTS_PER_WAKEUP):
            if not accepting.may_accept():
                return
            try:
                conn, _address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _SHORT:
                    accepting.short(exc)
                    return
                if exc.errno == errno.ECONNABORTED:  # the client left before it was accepted
                    continue
                _log.warning("accept_failed", error=str(exc))
                return
            conn.setblocking(False)
            accepting.accepted()
            task = self._loop.create_task(
                self._loop.connect_accepted_socket(self._factory, conn, ssl=self._tls)
            )
            task.add_done_callback(partial(self._started, conn))

    def _started(self, conn: socket.socket, task: asyncio.Task[Any]) -> None:
        self._accepting.started()
        if task.cancelled():
            conn.close()
            return
        error = task.exception()
        if error is not None:  # a failed TLS handshake, a client gone at once: that connection only
            _log.debug("connection_not_started", error=repr(error))
            conn.close()


class _AcceptingCollector(Collector):
    def __init__(self, accepting: Accepting) -> None:
        self._accepting = accepting

    def collect(self) -> Iterator[Any]:
        accepting = self._accepting
        yield GaugeMetricFamily(
            "sluice_accepting_paused",
            "1 while the listeners accept nothing, for want of file descriptors (reserved_open_files)",
            value=0 if accepting.paused_since is None else 1,
        )
        yield CounterMetricFamily(
            "sluice_accept_pauses",
            "Times the listeners paused for want of file descriptors",
            value=accepting.pauses,
        )
        yield GaugeMetricFamily(
            "sluice_open_files",
            "Open file descriptors: two per client connection and the process's own as last counted",
            value=accepting.estimate(),
        )
        yield GaugeMetricFamily(
            "sluice_open_files_limit", "The open-file limit (soft)", value=accepting.limit()
        )
