"""BrokerWatch: stands at the test brokers' own ports and records which process opened each connection there.

The proof that no client ever reaches a broker past the proxy. For each broker of a mock cluster it listens
on a port of its own, relays each connection to the broker, and has the mock name that port in every
answer (Metadata, FindCoordinator, KIP-951 NodeEndpoints: `MockCluster.advertise`). That port is then the
broker's address as far as anyone can learn it: the proxy is given it as its upstream, and a client that
learnt a broker's real address could only connect there. (The mock's own listening ports are named in no
answer; only the watch connects to them.)

Every connection is looked up the moment it is accepted, while its other end necessarily exists: the
connecting socket is found in /proc/net/tcp by its port and its owner by that socket's inode in the
/proc/<pid>/fd of our processes (Linux). `direct(allowed)` lists the connections opened by any other
process than the allowed ones (the proxy), their children and the mock's own; a connection whose owner
cannot be found counts as direct, so a client that connects and leaves at once cannot slip through.

    with BrokerWatch(cluster) as watch, ProxyProcess(watch.bootstrap) as proxy:
        ... clients through proxy.bootstrap ...
        assert watch.direct({proxy.process.pid}) == []
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from doubles.loop_thread import LoopThread

from sluice.proxy.tools.mock_cluster_process import MockCluster

_HOST = "127.0.0.1"
_LOOPBACK_HEX = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it
_ESTABLISHED = "01"
_CHUNK = 65536


@dataclass(frozen=True)
class Connection:
    broker_id: int
    peer_port: int
    pid: int | None  # the connecting process, None if it could not be found
    command: str  # its command line, for the failure message

    def __str__(self) -> str:
        return f"broker {self.broker_id} <- 127.0.0.1:{self.peer_port} from pid {self.pid} ({self.command})"


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

    def __enter__(self) -> BrokerWatch:
        self.ports = self._loop_thread.start()
        for broker_id, port in self.ports.items():
            self._cluster.advertise(broker_id, _HOST, port)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._loop_thread.stop()

    def direct(self, allowed: set[int]) -> list[Connection]:
        """The connections not opened by an allowed process (or a child of one), nor by the mock cluster's
        own process (the librdkafka handle that owns the mock follows its Metadata like any client)."""
        allowed = allowed | {self._cluster.pid}
        with self._lock:
            return [c for c in self.connections if c.pid is None or not _descends(c.pid, allowed)]

    def wait_for_direct(self, allowed: set[int], count: int = 1, timeout_s: float = 10.0) -> list[Connection]:
        """Block until `count` connections not from `allowed` have been recorded (or the timeout); return
        them all."""

        mine = allowed | {self._cluster.pid}

        def enough() -> bool:
            return sum(c.pid is None or not _descends(c.pid, mine) for c in self.connections) >= count

        with self._changed:
            self._changed.wait_for(enough, timeout_s)
        return self.direct(allowed)

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
        peer_port = writer.get_extra_info("peername")[1]
        pid = connecting_process(peer_port, writer.get_extra_info("sockname")[1])
        with self._changed:
            self.connections.append(Connection(broker_id, peer_port, pid, _command(pid)))
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


def connecting_process(peer_port: int, server_port: int) -> int | None:
    """The pid owning the client end (127.0.0.1:peer_port -> 127.0.0.1:server_port) of a connection."""
    local, remote = f"{_LOOPBACK_HEX}:{peer_port:04X}", f"{_LOOPBACK_HEX}:{server_port:04X}"
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


def _pids() -> list[int]:
    """Every process we may look into, the youngest first (the proxy and the clients are recent)."""
    return sorted((int(name) for name in os.listdir("/proc") if name.isdigit()), reverse=True)


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state, past the command's parens


def _descends(pid: int, allowed: set[int]) -> bool:
    seen = 0
    current: int | None = pid
    while current is not None and current > 1 and seen < 64:
        if current in allowed:
            return True
        current, seen = _parent(current), seen + 1
    return False


def _command(pid: int | None) -> str:
    if pid is None:
        return "gone before it could be looked up"
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"
