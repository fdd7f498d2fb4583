"""What the connections of one proxy share: their settings, and the registry of the live ones."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

# uvloop reads at most 256 KiB at a time.
READ_BUFFER_BYTES = 256 * 1024

if TYPE_CHECKING:
    from sluice.config.identity_settings import SaslSettings

    from ..listeners.tls import UpstreamTlsTarget
    from ..observability.metrics import ProxyMetrics
    from .broker_load import BrokerLoads
    from .filter_chain import FilterChain
    from .peer_watch import PeerWatch
    from .request_memory import RequestMemory


class LiveConnection(Protocol):
    """What shutdown asks of a connection (LiveConnection)."""

    @property
    def in_flight(self) -> int: ...

    def drain(self) -> None: ...

    def close(self, cause: str, **detail: object) -> None: ...


class ConnectionRegistry:
    """The live connections of one proxy, so shutdown can drain them and metrics can count them."""

    def __init__(self, metrics: ProxyMetrics) -> None:
        self._metrics = metrics
        self._live: set[LiveConnection] = set()
        # The most connections live at once since it was last reset (proxy/process/memory_return.py does).
        self.peak = 0
        self._empty = asyncio.Event()
        self._empty.set()

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[LiveConnection]:
        return iter(list(self._live))

    def add(self, conn: LiveConnection) -> None:
        self._live.add(conn)
        self._empty.clear()
        if len(self._live) > self.peak:
            self.peak = len(self._live)
        self._metrics.connections_total += 1
        self._metrics.connections_active = len(self._live)

    def remove(self, conn: LiveConnection) -> None:
        self._live.discard(conn)
        self._metrics.connections_active = len(self._live)
        if not self._live:
            self._empty.set()

    async def wait_empty(self) -> None:
        await self._empty.wait()


class SessionSettings:
    """What every connection of one proxy shares."""

    __slots__ = (
        "admission",
        "broker_loads",
        "chain",
        "client_principal",
        "cpu_time_needed",
        "idle_timeout_s",
        "max_frame_bytes",
        "max_request_bytes",
        "max_request_limit_name",
        "metrics",
        "peer_watch",
        "read_buffer",
        "registry",
        "request_memory",
        "sasl_required",
        "unproven_limits",
        "upstream_bind_address",
        "upstream_tls",
    )

    def __init__(
        self,
        chain: FilterChain,
        metrics: ProxyMetrics,
        registry: ConnectionRegistry,
        max_frame_bytes: int,
        idle_timeout_s: float,
        upstream_tls: UpstreamTlsTarget | None = None,
        client_principal: Callable[[object], str | None] | None = None,
        request_memory: RequestMemory | None = None,
        sasl_required: SaslSettings | None = None,
        admission: Callable[[object], int] | None = None,
        unproven_limits: SaslSettings | None = None,
        broker_loads: BrokerLoads | None = None,
        upstream_bind_address: str | None = None,
    ) -> None:
        self.chain = chain
        self.metrics = metrics
        self.registry = registry
        self.max_frame_bytes = max_frame_bytes
        # The largest request a client may send: max_frame_bytes, or less when the brokers say so
        # (socket.request.max.bytes, proxy/cluster/broker_limits.py); named in a refusal.
        self.max_request_bytes = max_frame_bytes
        self.max_request_limit_name = "max_frame_bytes"
        self.idle_timeout_s = idle_timeout_s
        # Only a filter charging CPU time (a request_percentage quota) needs it, so the clock is read around
        # a pass only while some filter says so (asked per pass: quotas come and go at run time).
        self.cpu_time_needed = chain.cpu_time_needed()
        self.upstream_tls = upstream_tls
        self.upstream_bind_address = upstream_bind_address  # upstream.bind_address
        # The user a client certificate proves (mTLS listeners only); SASL, when used, overrides it.
        self.client_principal = client_principal
        # The client connections' shared read buffer (ClientSide.get_buffer).
        self.read_buffer = bytearray(READ_BUFFER_BYTES)
        if request_memory is None:
            from .request_memory import RequestMemory

            request_memory = RequestMemory(max(max_frame_bytes, 256 << 20))
        # Bytes of requests still arriving, across connections (max_buffered_request_bytes).
        self.request_memory = request_memory
        # The SASL settings when the brokers require SASL (sasl.required), else None.
        self.sasl_required = sasl_required
        # The limits before a connection proves itself (sasl.max_receive_bytes and its frame timeout),
        # whatever the brokers' security protocol; None: none (tests of other things).
        self.unproven_limits = unproven_limits if unproven_limits is not None else sasl_required
        # Bytes in flight toward each broker (None: not bounded).
        self.broker_loads = broker_loads
        # Asked with a new connection's peer address: 0 to serve it, else the ms to hold it unserved before
        # closing it (KIP-612's connection_creation_rate).
        self.admission = admission
        # Notices clients that hang up while their connection does not read them (set when serving).
        self.peer_watch: PeerWatch | None = None
