"""Fixed ports for the test broker: a TCP relay per mock broker, on ports the operator chooses.

librdkafka's mock brokers bind kernel-chosen ports (it has no bind option), so a configuration pointing at
them would need rewriting at every start. `sluice mock-cluster --port-base P` therefore listens on
127.0.0.1:P+N for broker N, relays each connection to that broker's real port, and has the mock advertise
P+N in its Metadata answers (librdkafka's ``rd_kafka_mock_broker_set_host_port``), so every client, Sluice
included, only ever sees the fixed ports.

The relays run an asyncio loop on their own thread. A broker that is down refuses the relay's connection,
so its client sees its connection accepted and closed at once rather than refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Sequence
from functools import partial

_CHUNK = 65536
_HOST = "127.0.0.1"


class RelayError(Exception):
    """A fixed port could not be opened."""


def bind_fixed_ports(port_base: int, brokers: int) -> dict[int, socket.socket]:
    """Listening sockets on port_base + N for broker ids 1..brokers, all or none."""
    sockets: dict[int, socket.socket] = {}
    try:
        for broker_id in range(1, brokers + 1):
            port = port_base + broker_id
            if not 1 <= port <= 65535:
                raise RelayError(f"port {port} for broker {broker_id}: expected 1..65535")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets[broker_id] = sock
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((_HOST, port))
            except OSError as exc:
                raise RelayError(
                    f"cannot listen on {_HOST}:{port} for broker {broker_id}: {exc.strerror}"
                ) from None
            sock.listen(128)
            sock.setblocking(False)
    except RelayError:
        for sock in sockets.values():
            sock.close()
        raise
    return sockets


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


class BrokerRelays:
    """Relays from fixed ports to the mock brokers' real ports, on a thread of their own."""

    def __init__(self, listeners: dict[int, socket.socket], targets: dict[int, int]) -> None:
        self._listeners = listeners
        self._targets = targets  # broker id -> the mock broker's real port on 127.0.0.1
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker-relays", daemon=True)

    def start(self) -> None:
        """Serve every listener; returns once they all accept connections."""
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        servers = [
            self._loop.run_until_complete(
                asyncio.start_server(partial(self._relay, port=self._targets[broker_id]), sock=sock)
            )
            for broker_id, sock in self._listeners.items()
        ]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            for server in servers:
                server.close()
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()  # each relay closes its two connections
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, port: int) -> None:
        try:
            broker_r, broker_w = await asyncio.open_connection(_HOST, port)
        except OSError:
            client_w.close()  # the broker is down: as close to "connection refused" as a relay can get
            return
        except asyncio.CancelledError:
            client_w.close()
            return
        for writer in (client_w, broker_w):
            with contextlib.suppress(OSError):
                writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.gather(_pipe(client_r, broker_w), _pipe(broker_r, client_w))
        except asyncio.CancelledError:
            # Shutting down: asyncio's stream server would log a cancelled handler as an error (3.11).
            client_w.close()
            broker_w.close()

    def close(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
        for sock in self._listeners.values():
            sock.close()


def relay_fixed_ports(
    port_base: int,
    real_addresses: Sequence[tuple[str, int]],
    advertise: Callable[[int, str, int], None],
    blocked_signals: Sequence[signal.Signals] = (),
) -> tuple[BrokerRelays, str]:
    """Relays on port_base + N for brokers 1..N at `real_addresses`, each advertised with `advertise(id,
    host, port)`; returns them and the new bootstrap list. `blocked_signals` stay blocked on the relays'
    thread, so a signal wakes the main thread instead."""
    listeners = bind_fixed_ports(port_base, len(real_addresses))
    real_ports = {broker_id: port for broker_id, (_host, port) in enumerate(real_addresses, start=1)}
    relays = BrokerRelays(listeners, real_ports)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked_signals)  # threads inherit the mask
    try:
        relays.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    for broker_id in real_ports:
        advertise(broker_id, _HOST, port_base + broker_id)
    return relays, ",".join(f"{_HOST}:{port_base + broker_id}" for broker_id in real_ports)
