"""The proxy's own Metadata request, used once at start-up to learn the cluster's brokers."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.broker_addresses import decode_brokers
from sluice.protocol.headers import encode_request, response_header_size
from sluice.protocol.topic_metadata import encode_topic_metadata_request

if TYPE_CHECKING:
    from .tls import UpstreamTlsTarget

METADATA = ApiKey.METADATA
# v1 is the oldest version that can ask for brokers without topics (an empty topic array); every broker
# this proxy can front speaks it.
_METADATA_VERSION = 1
_TIMEOUT_S = 5.0
# Even a cluster with 100,000 partitions answers a topic-less Metadata request in a few kB.
_MAX_ANSWER_BYTES = 16 << 20


async def fetch_brokers(
    host: str, port: int, tls: UpstreamTlsTarget | None = None
) -> list[tuple[int, str, int]]:
    """Ask one broker for the cluster's brokers: [(node_id, host, port)].

    A broker that requires SASL refuses this unauthenticated request; the proxy then learns brokers from
    the Metadata answers it rewrites for clients instead.
    """
    connecting = (
        asyncio.open_connection(host, port)
        if tls is None
        else asyncio.open_connection(host, port, ssl=tls.context, server_hostname=tls.hostname_for(host))
    )
    reader, writer = await asyncio.wait_for(connecting, _TIMEOUT_S)
    try:
        body = encode_topic_metadata_request(_METADATA_VERSION, topics=[])
        writer.write(encode_request(METADATA, _METADATA_VERSION, 1, "sluice-discovery", body))
        length = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), _TIMEOUT_S), "big", signed=True)
        if not 4 <= length <= _MAX_ANSWER_BYTES:
            raise ValueError(f"implausible Metadata answer length {length}")
        payload = await asyncio.wait_for(reader.readexactly(length), _TIMEOUT_S)
    finally:
        writer.close()
    frame = length.to_bytes(4, "big") + payload
    header_size = response_header_size(METADATA, _METADATA_VERSION, frame)
    return decode_brokers(METADATA, _METADATA_VERSION, frame[4 + header_size :])
