"""The upstream side of a client connection: connecting to a broker, and the protocol that hands the
broker's bytes and flow-control events to the `ClientSide` it serves."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol, cast

from ..outbound.broker_connect import connect_broker

if TYPE_CHECKING:
    from ..listeners.tls import UpstreamTlsTarget

# asyncio's default high-water mark (64 KiB) is below one typical Produce request (librdkafka batches up to
# 1 MiB), so every large request would pause the client until the broker drained it. A 1 MiB mark keeps
# large requests flowing; memory is only used while a peer is actually slower than the other.
WRITE_HIGH_WATER = 1 << 20
# A broker address that silently drops SYNs would otherwise hold the client for the kernel's ~2 minutes.
CONNECT_TIMEOUT_S = 10.0


class UpstreamUnreachable(Exception):
    def __init__(self, tried: list[str]) -> None:
        super().__init__(", ".join(tried))
        self.tried = tried


async def connect_first(
    loop: asyncio.AbstractEventLoop,
    candidates: Iterable[tuple[str, int]],
    tls: UpstreamTlsTarget | None,
    protocol: Callable[[], asyncio.Protocol],
    bind_address: str | None = None,
) -> tuple[asyncio.Transport, str]:
    """Connect to the first candidate that answers, in order; the transport and its "host:port"."""
    failures: list[str] = []
    for host, port in candidates:
        connecting = connect_broker(loop, protocol, host, port, tls, bind_address)
        try:
            transport, _ = await asyncio.wait_for(connecting, CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            failures.append(f"{host}:{port}: {getattr(exc, 'strerror', None) or exc or 'timed out'}")
            continue
        # uvloop's transports are not asyncio.Transport subclasses, but they have its methods.
        return cast(asyncio.Transport, transport), f"{host}:{port}"
    raise UpstreamUnreachable(failures or ["no known address"])


class UpstreamEvents(Protocol):
    """What the upstream side tells the client connection it serves (ClientSide)."""

    def upstream_data(self, data: bytes) -> None: ...

    def upstream_lost(self, exc: Exception | None) -> None: ...

    def upstream_pause_writing(self) -> None: ...

    def upstream_resume_writing(self) -> None: ...


class UpstreamSide(asyncio.Protocol):
    """The proxy's connection to one broker, on behalf of one client connection."""

    __slots__ = ("_client", "data_received")
    # The method's signature, held by each instance (set in __init__) instead of defined on the class.
    data_received: Callable[[bytes], None]  # type: ignore[assignment]

    def __init__(self, client: UpstreamEvents) -> None:
        self._client = client
        # The broker's bytes go to the client connection's method itself, which the transport calls (both
        # uvloop's and asyncio's look the method up on the protocol): no call of this protocol's in between,
        # which on fetch, where the proxy idles between answers, is less to bring back into cache.
        self.data_received = client.upstream_data

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._client.upstream_lost(exc)

    def pause_writing(self) -> None:
        self._client.upstream_pause_writing()

    def resume_writing(self) -> None:
        self._client.upstream_resume_writing()
