"""Rewriting `NodeEndpoints`, the broker addresses in Produce, Fetch, ShareFetch and ShareAcknowledge answers.

Since KIP-951 a broker that answers NOT_LEADER_OR_FOLLOWER (or FENCED_LEADER_EPOCH) names the new leader per
partition (`CurrentLeader`: id and epoch) and that leader's real address in `NodeEndpoints`, and clients
that implement it (librdkafka 2.4+, the Java client 3.7+) connect there without asking Metadata. The
share-group answers (KIP-932) carry the same array. Each entry:

    node_id int32, host compact string, port int32, rack compact nullable string, tagged fields

Where the array sits:
* Produce v10+ and Fetch v16+: tagged field 0 of the top-level tagged-field block, the last thing in the
  body. Finding that block means walking past every topic and partition (never reading a record); the
  common answer has an empty block (one zero byte) and costs that walk and nothing more.
* ShareFetch and ShareAcknowledge (every version): a plain array after the responses, before the
  top-level tagged fields.

The array is re-encoded with the addresses `address_for` gives; an entry it has no address for (the
proxy has no listener for that node) is left out, and the client, finding no endpoint for the leader it
was told of, falls back to a Metadata request. Rack and tagged fields are copied as they came. Malformed
bodies raise ProtocolError('bad_response_body'), versions beyond NODE_ENDPOINTS_MAX_VERSIONS
ProtocolError('unsupported_version').
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.metadata_brokers import (
    AddressMap,
    BrokerEntry,
    parse_broker_entries,
    rewrite_broker_entries,
)
from sluice.protocol.primitives import (
    Buffer,
    encode_uvarint,
    read_uvarint,
    skip_compact_nullable_string,
    skip_tagged_fields,
)
from sluice.protocol.throttle_field import produce_flexible_responses_end

__all__ = [
    "NODE_ENDPOINTS_FROM",
    "NODE_ENDPOINTS_MAX_VERSIONS",
    "decode_node_endpoints",
    "rewrite_node_endpoints",
]

_PRODUCE, _FETCH = ApiKey.PRODUCE, ApiKey.FETCH
_SHARE_FETCH, _SHARE_ACKNOWLEDGE = ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE

# The first response version that can carry the array, and the last whose layout this module knows.
NODE_ENDPOINTS_FROM: Mapping[int, int] = {_PRODUCE: 10, _FETCH: 16, _SHARE_FETCH: 0, _SHARE_ACKNOWLEDGE: 0}
NODE_ENDPOINTS_MAX_VERSIONS: Mapping[int, int] = {
    _PRODUCE: 13,
    _FETCH: 18,
    _SHARE_FETCH: 2,
    _SHARE_ACKNOWLEDGE: 2,
}
_NODE_ENDPOINTS_TAG = 0
_UUID = 16
# Fetch v16+ partition: index int32, error_code int16, high_watermark, last_stable_offset, log_start_offset.
_FETCH_PARTITION_FIXED = 4 + 2 + 8 + 8 + 8
assert _FETCH_PARTITION_FIXED == 30  # written out in _fetch_responses_end
_ABORTED_TRANSACTION = 8 + 8  # producer_id, first_offset
_PREFERRED_READ_REPLICA = 4
_ACQUIRED_RECORDS = 8 + 8 + 2  # first_offset, last_offset, delivery_count
_LEADER_ID_AND_EPOCH = 4 + 4

Endpoint = tuple[int, str, int]  # node_id, host, port


def rewrite_node_endpoints(
    api_key: int, api_version: int, body: Buffer, address_for: AddressMap, start: int = 0
) -> tuple[bytes | None, int]:
    """The body with every NodeEndpoints address replaced by `address_for(node_id, host, port)` (entries it
    answers None for left out), or None when nothing changed; and how many entries were rewritten or left
    out (what `sluice_addresses_rewritten_total` counts).

    The body begins at `start` in `body` (a caller holding the whole frame passes it and the body's offset,
    saving a view per answer); what is returned is the new body alone."""
    found = _find(api_key, api_version, body, start)
    if found is None:
        return None, 0
    at, end, endpoints = found
    array, changed = rewrite_broker_entries(body, endpoints, address_for, flexible=True)
    if not changed:
        return None, 0
    if api_key in (_SHARE_FETCH, _SHARE_ACKNOWLEDGE):
        return b"".join((body[start:at], array, body[end:])), changed
    # In the top-level tagged block: the field's size prefix changes with it.
    return b"".join((body[start:at], encode_uvarint(len(array)), array, body[end:])), changed


def decode_node_endpoints(api_key: int, api_version: int, body: Buffer, start: int = 0) -> list[Endpoint]:
    """(node_id, host, port) of every NodeEndpoints entry in a response body (empty when it has none)."""
    found = _find(api_key, api_version, body, start)
    return [] if found is None else [(entry.node_id, entry.host, entry.port) for entry in found[2]]


# ---- finding the array --------------------------------------------------------------------------------

_Parsed = tuple[int, int, list[BrokerEntry]]


def _find(api_key: int, api_version: int, body: Buffer, start: int) -> _Parsed | None:
    """Where the array's bytes sit to be replaced ([at, end): for Produce and Fetch the tagged field's size
    prefix and value, for the share answers the array itself) and its entries (node_id, host, port, and
    where the rack and tagged fields that follow the port sit), all as offsets in `body`; None when the
    body carries none."""
    first = NODE_ENDPOINTS_FROM.get(api_key)
    if first is None or api_version < first:
        return None
    if api_version > NODE_ENDPOINTS_MAX_VERSIONS[api_key]:
        raise ProtocolError("unsupported_version", f"api {api_key} v{api_version}")
    try:
        if api_key <= _FETCH:  # Produce or Fetch: every answer of theirs comes here
            if api_key == _PRODUCE:
                pos = produce_flexible_responses_end(api_version, body, start) + 4  # and throttle_time_ms
            else:
                pos = _fetch_responses_end(body, start)
            if pos == len(body) - 1 and body[pos] == 0:
                return None  # the usual empty top-level tagged block: no NodeEndpoints
            return _in_tagged_block(body, pos)
        return _share_array(body, _share_responses_end(api_key, api_version, body, start))
    except IndexError:
        raise ProtocolError("bad_response_body", f"api {api_key} v{api_version}: truncated") from None
    except ProtocolError as exc:
        detail = exc.detail or exc.reason
        raise ProtocolError("bad_response_body", f"api {api_key} v{api_version}: {detail}") from None


def _in_tagged_block(body: Buffer, pos: int) -> _Parsed | None:
    """The top-level tagged block at `pos` must end the body; tag 0, if there, is NodeEndpoints."""
    size = len(body)
    count, pos = read_uvarint(body, pos)
    found: _Parsed | None = None
    for _ in range(count):
        tag, pos = read_uvarint(body, pos)
        length_at = pos
        length, pos = read_uvarint(body, pos)
        end = pos + length
        if end > size:
            raise ProtocolError("truncated", f"tagged field {tag}")
        if tag == _NODE_ENDPOINTS_TAG:
            array_end, endpoints = parse_broker_entries(body, pos, flexible=True)
            if array_end != end:
                raise ProtocolError(
                    "bad_tagged_field", f"NodeEndpoints of {length} bytes used {array_end - pos}"
                )
            found = (length_at, end, endpoints)
        pos = end
    if pos != size:
        raise ProtocolError("trailing_bytes", f"{size - pos} after the tagged fields")
    return found


def _share_array(body: Buffer, pos: int) -> _Parsed | None:
    if body[pos] == 1 and pos + 1 < len(body):  # an empty array, the usual case
        end = pos + 1
        endpoints: list[BrokerEntry] = []
    else:
        end, endpoints = parse_broker_entries(body, pos, flexible=True)
    if skip_tagged_fields(body, end) != len(body):
        raise ProtocolError("trailing_bytes", "after the top-level tagged fields")
    return (pos, end, endpoints) if endpoints else None


# ---- the walks past the responses -----------------------------------------------------------------------


def _fetch_responses_end(body: Buffer, start: int) -> int:
    """Offset after the responses of a Fetch v16+ body: throttle_time_ms, error_code, session_id, then per
    topic a topic id and partitions (the fixed fields, aborted transactions, preferred read replica,
    records, tagged fields), tagged fields.

    Every consumer's every Fetch answer is walked, so the one-byte cases are inlined (a varint below 0x80,
    an empty or null aborted-transactions array, an empty tagged block); the rest go through the helpers.
    Reading past the end raises IndexError, which the caller turns into ProtocolError.
    """
    pos = start + 4 + 2 + 4
    b = body[pos]
    topics, pos = (b - 1, pos + 1) if b < 0x80 else _count(body, pos)
    for _ in range(topics):
        b = body[pos + 16]  # after the topic id
        partitions, pos = (b - 1, pos + 17) if b < 0x80 else _count(body, pos + 16)
        for _ in range(partitions):
            pos += 30  # _FETCH_PARTITION_FIXED, written out: a global lookup per partition shows
            if body[pos] <= 1:  # aborted transactions: null or empty
                pos += 5  # and the preferred read replica
            else:
                aborted, pos = _count(body, pos)
                for _ in range(aborted):
                    pos = _skip_tags(body, pos + _ABORTED_TRANSACTION)
                pos += 4
            b = body[pos]  # records: compact nullable bytes, length + 1 as a varint
            if b < 0x80:
                pos += b or 1
            else:
                c = body[pos + 1]
                if c < 0x80:  # up to 16 KiB
                    pos += 1 + ((b & 0x7F) | c << 7)
                else:
                    length_plus_one, pos = read_uvarint(body, pos)
                    pos += length_plus_one - 1
            pos = pos + 1 if body[pos] == 0 else skip_tagged_fields(body, pos)
        pos = pos + 1 if body[pos] == 0 else skip_tagged_fields(body, pos)
    if pos > len(body):
        raise IndexError("records")
    return pos


def _share_fetch_partition_end(body: Buffer, pos: int) -> int:
    """index, error_code, error_message, acknowledge_error_code, acknowledge_error_message, current_leader
    (leader id, epoch, tagged fields), records, acquired_records (first and last offset, delivery count,
    tagged fields), tagged fields."""
    pos = skip_compact_nullable_string(body, pos + 4 + 2)
    pos = skip_compact_nullable_string(body, pos + 2)
    pos = _skip_tags(body, pos + _LEADER_ID_AND_EPOCH)
    pos = skip_compact_nullable_string(body, pos)  # records: compact bytes share the encoding
    acquired, pos = _count(body, pos)
    for _ in range(acquired):
        pos = _skip_tags(body, pos + _ACQUIRED_RECORDS)
    return _skip_tags(body, pos)


def _share_acknowledge_partition_end(body: Buffer, pos: int) -> int:
    """index, error_code, error_message, current_leader (leader id, epoch, tagged fields), tagged fields."""
    pos = skip_compact_nullable_string(body, pos + 4 + 2)
    return _skip_tags(body, _skip_tags(body, pos + _LEADER_ID_AND_EPOCH))


# api key -> (first version with acquisition_lock_timeout_ms, the walk past one partition)
_SHARE_LAYOUTS: Mapping[int, tuple[int, Callable[[Buffer, int], int]]] = {
    _SHARE_FETCH: (1, _share_fetch_partition_end),
    _SHARE_ACKNOWLEDGE: (2, _share_acknowledge_partition_end),
}


def _share_responses_end(api_key: int, api_version: int, body: Buffer, start: int) -> int:
    """throttle_time_ms, error_code, error_message, acquisition_lock_timeout_ms (ShareFetch v1+,
    ShareAcknowledge v2+), then per topic a topic id, its partitions and tagged fields."""
    lock_timeout_from, partition_end = _SHARE_LAYOUTS[api_key]
    pos = skip_compact_nullable_string(body, start + 4 + 2)
    if api_version >= lock_timeout_from:
        pos += 4
    topics, pos = _count(body, pos)
    for _ in range(topics):
        partitions, pos = _count(body, pos + _UUID)
        for _ in range(partitions):
            pos = partition_end(body, pos)
        pos = _skip_tags(body, pos)
    return pos


def _count(body: Buffer, pos: int) -> tuple[int, int]:
    """A compact array's element count (null counts as empty); a count beyond the bytes left is malformed."""
    count_plus_one, pos = read_uvarint(body, pos)
    count = count_plus_one - 1
    if count > len(body) - pos:
        raise ProtocolError("bad_array_length", f"{count} elements in {len(body) - pos} bytes")
    return max(count, 0), pos


def _skip_tags(body: Buffer, pos: int) -> int:
    return pos + 1 if body[pos] == 0 else skip_tagged_fields(body, pos)
