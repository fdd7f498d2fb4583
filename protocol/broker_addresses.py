"""Rewriting the broker addresses a client learns from Metadata, FindCoordinator and DescribeCluster.

Metadata goes through the hand-written fast path (protocol.metadata_brokers); FindCoordinator and
DescribeCluster are small and rare, so they go through kafka-python's codecs via
protocol.codec_quirks. `rewrite_metadata_with_codec` is the reference the fast path is tested against.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka.errors import CoordinatorNotAvailableError
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.codec_quirks import decode_body, encode_body
from sluice.protocol.metadata_brokers import (
    METADATA_FAST_PATH_MAX_VERSION,
    AddressMap,
    metadata_brokers,
    rewrite_metadata_brokers,
)

NO_NODE = -1
COORDINATOR_NOT_AVAILABLE = CoordinatorNotAvailableError.errno
COORDINATOR_NOT_ADVERTISED = "The coordinator's broker is not reachable through this proxy."
_FIRST_COORDINATORS_LIST = 4
_FIRST_WITH_ERROR_MESSAGE = 1

# The highest response version of each address-carrying API this package can rewrite. The ApiVersions
# clamp must keep clients at or below these.
REWRITABLE_MAX_VERSIONS: Mapping[int, int] = {
    ApiKey.METADATA: min(METADATA_FAST_PATH_MAX_VERSION, MetadataResponse.max_version),
    ApiKey.FIND_COORDINATOR: FindCoordinatorResponse.max_version,
    ApiKey.DESCRIBE_CLUSTER: DescribeClusterResponse.max_version,
}

__all__ = [
    "REWRITABLE_MAX_VERSIONS",
    "AddressMap",
    "decode_brokers",
    "rewrite_broker_addresses",
    "rewrite_metadata_with_codec",
]


def rewrite_broker_addresses(
    api_key: int, api_version: int, body: memoryview | bytes, address_for: AddressMap
) -> bytes | None:
    """Advertise `address_for(node_id, real_host, real_port)` instead of each real broker address.

    `body` is the response body (after the response header). Returns the new body, or None when the
    API carries no addresses or no address changed (forward the original bytes). Coordinators with
    node_id -1 (FindCoordinator errors) are left untouched and address_for is not called for them.
    Raises ProtocolError for a malformed body or a version above REWRITABLE_MAX_VERSIONS.

    A node for which `address_for` returns None is never advertised: Metadata and DescribeCluster
    leave it out of their brokers, FindCoordinator answers COORDINATOR_NOT_AVAILABLE for it (node -1),
    which clients retry, as they do while a coordinator moves.
    """
    if api_key == ApiKey.METADATA:
        return rewrite_metadata_brokers(api_version, body, address_for)
    if api_key == ApiKey.FIND_COORDINATOR:
        return _rewrite_find_coordinator(api_version, body, address_for)
    if api_key == ApiKey.DESCRIBE_CLUSTER:
        return _rewrite_describe_cluster(api_version, body, address_for)
    return None


def decode_brokers(api_key: int, api_version: int, body: memoryview | bytes) -> list[tuple[int, str, int]]:
    """(node_id, host, port) of every broker or coordinator (node_id -1 entries excluded) in a body."""
    if api_key == ApiKey.METADATA:
        return metadata_brokers(api_version, body)
    if api_key == ApiKey.FIND_COORDINATOR:
        message = decode_body(FindCoordinatorResponse, api_version, body)
        return [(n.node_id, n.host, n.port) for n in _coordinator_nodes(api_version, message)]
    if api_key == ApiKey.DESCRIBE_CLUSTER:
        message = decode_body(DescribeClusterResponse, api_version, body)
        return [(b.broker_id, b.host, b.port) for b in message.brokers]
    raise ValueError(f"API key {api_key} carries no broker addresses")


def rewrite_metadata_with_codec(api_version: int, body: memoryview | bytes, address_for: AddressMap) -> bytes:
    """Reference implementation of the Metadata rewrite: full decode, rewrite, full encode."""
    message = decode_body(MetadataResponse, api_version, body)
    kept = []
    for broker in message.brokers:
        advertised = address_for(broker.node_id, broker.host, broker.port)
        if advertised is not None:
            broker.host, broker.port = advertised
            kept.append(broker)
    message.brokers = kept
    return encode_body(message, api_version)


def _rewrite_find_coordinator(
    api_version: int, body: memoryview | bytes, address_for: AddressMap
) -> bytes | None:
    message = decode_body(FindCoordinatorResponse, api_version, body)
    changed = False
    for node in _coordinator_nodes(api_version, message):
        advertised = address_for(node.node_id, node.host, node.port)
        if advertised is None:
            # What a broker answers while no coordinator is available (node -1, host "", port -1).
            node.node_id, node.host, node.port = NO_NODE, "", -1
            node.error_code = COORDINATOR_NOT_AVAILABLE
            if api_version >= _FIRST_WITH_ERROR_MESSAGE:
                node.error_message = COORDINATOR_NOT_ADVERTISED
            changed = True
        elif advertised != (node.host, node.port):
            node.host, node.port = advertised
            changed = True
    return encode_body(message, api_version) if changed else None


def _coordinator_nodes(api_version: int, message: Any) -> list[Any]:
    """The objects carrying node_id/host/port: the message itself (v0-3) or its coordinators (v4+)."""
    nodes = message.coordinators if api_version >= _FIRST_COORDINATORS_LIST else [message]
    return [node for node in nodes if node.node_id != NO_NODE]


def _rewrite_describe_cluster(
    api_version: int, body: memoryview | bytes, address_for: AddressMap
) -> bytes | None:
    message = decode_body(DescribeClusterResponse, api_version, body)
    changed = False
    kept = []
    for broker in message.brokers:
        advertised = address_for(broker.broker_id, broker.host, broker.port)
        if advertised is None:
            changed = True
            continue
        if advertised != (broker.host, broker.port):
            broker.host, broker.port = advertised
            changed = True
        kept.append(broker)
    message.brokers = kept
    return encode_body(message, api_version) if changed else None
