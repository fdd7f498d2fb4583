"""Opening a connection to a broker. The data path's upstream connections and the proxy's own client both
open theirs here, so `upstream.bind_address` (the one address a firewall lets through to the brokers) and
the TLS toward the brokers hold for every connection the proxy makes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..listeners.tls import UpstreamTlsTarget


def connect_broker(
    loop: asyncio.AbstractEventLoop,
    protocol: Callable[[], asyncio.Protocol],
    host: str,
    port: int,
    tls: UpstreamTlsTarget | None,
    bind_address: str | None,
) -> Awaitable[tuple[asyncio.BaseTransport, asyncio.Protocol]]:
    """The connection to a broker, with TLS when `tls` is given, from `bind_address` when given
    (`upstream.bind_address`: every connection to the brokers comes from that one address)."""
    options: dict[str, Any] = {}
    if tls is not None:
        options.update(ssl=tls.context, server_hostname=tls.hostname_for(host))
    if bind_address is not None:
        options["local_addr"] = (bind_address, 0)
    return loop.create_connection(protocol, host, port, **options)
