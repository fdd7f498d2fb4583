"""Hand-written fast path over the brokers array of a Metadata response (v0-13).

A Metadata body is `throttle_time_ms (v3+), brokers, cluster_id, controller_id, topics, ...`. Only the
brokers carry addresses, and they come before the (possibly huge) topics array, so the fast path
parses just that far, re-encodes the brokers, and splices `prefix + new_brokers + rest` without ever
looking at topics. The rest is forwarded as the broker wrote it (not validated).
Broker entry: node_id int32, host string, port int32, rack nullable string (v1+), tagged fields (v9+);
strings and arrays are compact from v9 on. The codec path in protocol.broker_addresses is the
reference; a hypothesis test proves the two equal for every version.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.apis import FLEXIBLE_FROM
from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import (
    INT16_UNPACK,
    INT32_PACK,
    INT32_UNPACK,
    Buffer,
    encode_uvarint,
    read_int32,
    read_uvarint,
    skip_compact_nullable_string,
    skip_nullable_string,
    skip_tagged_fields,
)

METADATA_FAST_PATH_MAX_VERSION = 13
_FIRST_FLEXIBLE = FLEXIBLE_FROM[ApiKey.METADATA]
_FIRST_WITH_THROTTLE = 3
_FIRST_WITH_RACK = 1
_INT16_PACK = struct.Struct(">h").pack
_MAX_CLASSIC_STRING = 0x7FFF

# (node_id, real host, real port) -> the address to advertise, or None: this node must not be advertised
# (the proxy has no listener for it), so it is left out of the answer.
AddressMap = Callable[[int, str, int], tuple[str, int] | None]


class BrokerEntry:
    """One broker of an answer: its id and address, and where the rest of its entry sits in the body."""

    __slots__ = ("host", "node_id", "port", "tail_end", "tail_start")

    def __init__(self, node_id: int, host: str, port: int, tail_start: int, tail_end: int) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        # rack and the tagged-field block are copied through untouched: [tail_start, tail_end)
        self.tail_start = tail_start
        self.tail_end = tail_end


def _parse_brokers(version: int, body: memoryview | bytes) -> tuple[int, list[BrokerEntry]]:
    """Return (offset after the brokers array, brokers)."""
    if not 0 <= version <= METADATA_FAST_PATH_MAX_VERSION:
        raise ProtocolError("unsupported_version", f"Metadata v{version}")
    try:
        return _parse_brokers_unchecked(version, body)
    except ProtocolError as exc:
        raise ProtocolError(
            "bad_metadata_response", f"v{version} brokers: {exc.detail or exc.reason}"
        ) from None


def _parse_brokers_unchecked(version: int, body: memoryview | bytes) -> tuple[int, list[BrokerEntry]]:
    pos = 4 if version >= _FIRST_WITH_THROTTLE else 0
    return parse_broker_entries(body, pos, version >= _FIRST_FLEXIBLE, has_rack=version >= _FIRST_WITH_RACK)


def parse_broker_entries(
    body: Buffer, pos: int, flexible: bool, has_rack: bool = True
) -> tuple[int, list[BrokerEntry]]:
    """The array of broker entries at `pos` (node_id int32, host string, port int32, rack nullable string,
    tagged fields when flexible; compact encodings when flexible): the offset after it, and its entries.
    Metadata's brokers and KIP-951's NodeEndpoints share this shape. Raises ProtocolError."""
    if flexible:
        count_plus_one, pos = read_uvarint(body, pos)
        if count_plus_one == 0:
            raise ProtocolError("null_array", "brokers is not nullable")
        count = count_plus_one - 1
    else:
        count, pos = read_int32(body, pos)
        if count < 0:
            raise ProtocolError("negative_array_length", str(count))
    size = len(body)
    brokers: list[BrokerEntry] = []
    for _ in range(count):
        if pos + 4 > size:
            raise ProtocolError("truncated", "node_id")
        node_id = INT32_UNPACK(body, pos)[0]
        pos += 4
        if flexible:
            length_plus_one, pos = read_uvarint(body, pos)
            if length_plus_one == 0:
                raise ProtocolError("null_string", "host is not nullable")
            length = length_plus_one - 1
        else:
            if pos + 2 > size:
                raise ProtocolError("truncated", "host length")
            length = INT16_UNPACK(body, pos)[0]
            pos += 2
            if length < 0:
                raise ProtocolError("null_string", "host is not nullable")
        host_end = pos + length
        if host_end + 4 > size:
            raise ProtocolError("truncated", "host or port")
        try:
            host = str(body[pos:host_end], "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("bad_string", "host is not UTF-8") from None
        port = INT32_UNPACK(body, host_end)[0]
        pos = tail_start = host_end + 4
        if has_rack:
            pos = skip_compact_nullable_string(body, pos) if flexible else skip_nullable_string(body, pos)
        if flexible:
            pos = skip_tagged_fields(body, pos)
        brokers.append(BrokerEntry(node_id, host, port, tail_start, pos))
    return pos, brokers


def metadata_brokers(version: int, body: memoryview | bytes) -> list[tuple[int, str, int]]:
    """(node_id, host, port) of every broker in a Metadata response body."""
    _end, brokers = _parse_brokers(version, body)
    return [(b.node_id, b.host, b.port) for b in brokers]


def rewrite_metadata_brokers(version: int, body: memoryview | bytes, address_for: AddressMap) -> bytes | None:
    """Replace every broker's host and port by `address_for(node_id, host, port)`; leave out a broker
    for which it returns None (clients then see its partitions as leaderless and retry, as they do for
    a broker that is down).

    Returns the new body, or None when no broker's address changed (forward the original).
    """
    end, brokers = _parse_brokers(version, body)
    flexible = version >= _FIRST_FLEXIBLE
    array, changed = rewrite_broker_entries(body, brokers, address_for, flexible)
    if not changed:
        return None
    count_at = 4 if version >= _FIRST_WITH_THROTTLE else 0
    view = body if isinstance(body, memoryview) else memoryview(body)
    return b"".join([view[:count_at], array, view[end:]])


def rewrite_broker_entries(
    body: Buffer, brokers: list[BrokerEntry], address_for: AddressMap, flexible: bool
) -> tuple[bytes, int]:
    """The array (count included) of `brokers` with the addresses `address_for` gives, entries it answers
    None for left out, the rest of each entry copied from `body`; and how many entries changed or left."""
    view = body if isinstance(body, memoryview) else memoryview(body)
    entries: list[bytes | memoryview] = []
    changed = kept = 0
    for broker in brokers:
        advertised = address_for(broker.node_id, broker.host, broker.port)
        if advertised is None:
            changed += 1
            continue
        host, port = advertised
        if host != broker.host or port != broker.port:
            changed += 1
        kept += 1
        entries.append(INT32_PACK(broker.node_id))
        entries.append(_encode_host(host, flexible))
        entries.append(INT32_PACK(port))
        entries.append(view[broker.tail_start : broker.tail_end])
    count = encode_uvarint(kept + 1) if flexible else INT32_PACK(kept)
    return b"".join([count, *entries]), changed


def _encode_host(host: str, flexible: bool) -> bytes:
    encoded = host.encode("utf-8")
    if flexible:
        return encode_uvarint(len(encoded) + 1) + encoded
    if len(encoded) > _MAX_CLASSIC_STRING:
        raise ValueError(f"advertised host of {len(encoded)} bytes does not fit a Kafka string")
    return _INT16_PACK(len(encoded)) + encoded
