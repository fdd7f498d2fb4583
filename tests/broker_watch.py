"""BrokerWatch: stands at the test brokers' own ports and records who opened each connection there.

The proof that no client ever reaches a broker past the proxy. For each broker of a mock cluster it listens
on a port of its own, relays each connection to the broker, and has the mock name that port in every
answer (Metadata, FindCoordinator, KIP-951 NodeEndpoints: `MockCluster.advertise`). That port is then the
broker's address as far as anyone can learn it: the proxy is given it as its upstream, and a client that
learnt a broker's real address could only connect there. (The mock's own listening ports are named in no
answer; only the watch connects to them.)

Who connected is told by the connection's source address, which the accepted socket carries whatever its
other end has done since: the proxy under test connects to the brokers from its own loopback address
(`PROXY_SOURCE`, its `upstream.bind_address`), everyone else in the test from 127.0.0.1. A connection from
any other source is direct, unless it is the mock cluster's own process (the librdkafka handle that owns
the mock follows its Metadata like any client), which is looked up in /proc: the connecting socket by its
port in /proc/net/tcp, its owner by that socket's inode in /proc/<pid>/fd. That lookup names the process
in the failure message too; a connection whose owner cannot be found (it was gone before it could be
looked up) counts as direct, so a client that connects and leaves at once cannot slip through.

    with BrokerWatch(cluster) as watch, ProxyProcess(watch.bootstrap, watch.proxy_config) as proxy:
        ... clients through proxy.bootstrap ...
        assert watch.direct() == []
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from doubles.loop_thread import LoopThread
from mock_cluster_process import MockCluster

_HOST = "127.0.0.1"
# The proxy's upstream connections come from here (its upstream.bind_address); all of 127/8 is loopback.
PROXY_SOURCE = "127.0.0.2"
_ESTABLISHED = "01"
_CHUNK = 65536


@dataclass(frozen=True)
class Connection:
    broker_id: int
    peer: tuple[str, int]  # the connection's source address and port
    pid: int | None  # the connecting process (not looked up for the proxy's), None if it could not be found
    command: str  # its command line, for the failure message

    @property
    def from_proxy(self) -> bool:
        return self.peer[0] == PROXY_SOURCE

    def __str__(self) -> str:
        host, port = self.peer
        return f"broker {self.broker_id} <- {host}:{port} from pid {self.pid} ({self.command})"


class BrokerWatch:
    def __init__(self, cluster: MockCluster) -> None:
        self._cluster = cluster
        self._real = dict(enumerate(cluster.addresses, start=1))  # broker id -> the mock's own address
        self.ports: dict[int, int] = {}
        self.connections: list[Connection] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop_thread = LoopThread("broker-watch", self._open, self._close)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{_HOST}:{port}" for _id, port in sorted(self.ports.items()))

    @property
    def proxy_config(self) -> dict[str, object]:
        """The proxy under test's upstream section: these brokers, connected to from PROXY_SOURCE."""
        return {"upstream": {"bootstrap": self.bootstrap, "bind_address": PROXY_SOURCE}}

    def __enter__(self) -> BrokerWatch:
        self.ports = self._loop_thread.start()
        for broker_id, port in self.ports.items():
            self._cluster.advertise(broker_id, _HOST, port)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._loop_thread.stop()

    def direct(self) -> list[Connection]:
        """The connections not from the proxy's source address, nor from the mock cluster's own process."""
        with self._lock:
            return [c for c in self.connections if self._direct(c)]

    def wait_for_direct(self, count: int = 1, timeout_s: float = 10.0) -> list[Connection]:
        """Block until `count` direct connections have been recorded (or the timeout); return them all."""
        with self._changed:
            self._changed.wait_for(lambda: sum(map(self._direct, self.connections)) >= count, timeout_s)
        return self.direct()

    def _direct(self, connection: Connection) -> bool:
        return not connection.from_proxy and connection.pid != self._cluster.pid

    # ---- the relays -----------------------------------------------------------------------------------

    async def _open(self) -> dict[int, int]:
        ports = {}
        for broker_id in self._real:
            server = await asyncio.start_server(
                lambda r, w, b=broker_id: self._accepted(b, r, w), _HOST, 0, backlog=512
            )
            self._servers.append(server)
            ports[broker_id] = server.sockets[0].getsockname()[1]
        return ports

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.close()  # each relay's pipes then end by themselves
        await asyncio.wait(self._tasks, timeout=5) if self._tasks else None

    async def _accepted(
        self, broker_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer_host, peer_port = writer.get_extra_info("peername")[:2]
        if peer_host == PROXY_SOURCE:
            connection = Connection(broker_id, (peer_host, peer_port), None, "the proxy (its source address)")
        else:
            pid = connecting_process(peer_host, peer_port, writer.get_extra_info("sockname")[1])
            connection = Connection(broker_id, (peer_host, peer_port), pid, _command(pid))
        with self._changed:
            self.connections.append(connection)
            self._changed.notify_all()
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            host, port = self._real[broker_id]
            try:
                up_reader, up_writer = await asyncio.open_connection(host, port)
            except OSError:
                return  # the broker is down: the client sees its connection closed, as through any relay
            self._writers.add(up_writer)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)
            self._writers.discard(up_writer)
            up_writer.close()
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):  # RuntimeError: the transport is closing
            writer.write_eof()


# ---- /proc ------------------------------------------------------------------------------------------------


def connecting_process(peer_host: str, peer_port: int, server_port: int) -> int | None:
    """The pid owning the client end (peer_host:peer_port -> 127.0.0.1:server_port) of a connection."""
    local, remote = f"{_proc_hex(peer_host)}:{peer_port:04X}", f"{_proc_hex(_HOST)}:{server_port:04X}"
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == local and fields[2] == remote and fields[3] == _ESTABLISHED:
            inode = fields[9]
            break
    if inode is None or inode == "0":
        return None
    target = f"socket:[{inode}]"
    for pid in _pids():
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                        return pid
    return None


def _proc_hex(ip: str) -> str:
    """An IPv4 address as /proc/net/tcp writes it (the 32-bit value in host order: little-endian)."""
    return socket.inet_aton(ip)[::-1].hex().upper()


def _pids() -> list[int]:
    """Every process we may look into, the youngest first (the proxy and the clients are recent)."""
    return sorted((int(name) for name in os.listdir("/proc") if name.isdigit()), reverse=True)


def _command(pid: int | None) -> str:
    if pid is None:
        return "gone before it could be looked up"
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"
