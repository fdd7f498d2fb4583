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

from collections.abc import Mapping

from sluice.protocol import compiled, response_walks
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
    skip_tagged_fields,
)
from sluice.protocol.response_walks import fetch_responses, produce_responses_end, share_responses_end
from sluice.protocol.schema_table import KNOWN_APIS

__all__ = [
    "NODE_ENDPOINTS_FROM",
    "NODE_ENDPOINTS_MAX_VERSIONS",
    "decode_node_endpoints",
    "rewrite_node_endpoints",
    "rewrite_node_endpoints_in_python",
]

_PRODUCE, _FETCH = ApiKey.PRODUCE, ApiKey.FETCH
_SHARE_FETCH, _SHARE_ACKNOWLEDGE = ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE

# The last response version whose layout this module's walks know (protocol/response_walks.py).
NODE_ENDPOINTS_MAX_VERSIONS: Mapping[int, int] = {
    _PRODUCE: 13,
    _FETCH: 18,
    _SHARE_FETCH: 2,
    _SHARE_ACKNOWLEDGE: 2,
}
# The first response version that can carry the array, as Kafka's schemas say (protocol/schema_table.py).
NODE_ENDPOINTS_FROM: Mapping[int, int] = {
    key: next(first for path, first, _last in KNOWN_APIS[key].addresses if path == "NodeEndpoints")
    for key in NODE_ENDPOINTS_MAX_VERSIONS
}
# api key -> (NODE_ENDPOINTS_FROM, NODE_ENDPOINTS_MAX_VERSIONS), keyed by plain ints (an enum member's hash
# is the int's, but a dict keyed by members compares them by their own __eq__).
_VERSIONS: Mapping[int, tuple[int, int]] = {
    int(key): (first, NODE_ENDPOINTS_MAX_VERSIONS[key]) for key, first in NODE_ENDPOINTS_FROM.items()
}
_NODE_ENDPOINTS_TAG = 0

Endpoint = tuple[int, str, int]  # node_id, host, port


def rewrite_node_endpoints_in_python(
    api_key: int,
    api_version: int,
    body: Buffer,
    address_for: AddressMap,
    start: int = 0,
    remember: bool = False,
) -> tuple[bytes | None, int]:
    """The body with every NodeEndpoints address replaced by `address_for(node_id, host, port)` (entries it
    answers None for left out), or None when nothing changed; and how many entries were rewritten or left
    out (what `sluice_addresses_rewritten_total` counts).

    The body begins at `start` in `body` (a caller holding the whole frame passes it and the body's offset,
    saving a view per answer); what is returned is the new body alone. `remember`: the answer's walk is kept
    for the filters that may read it next (a Produce answer's for the throttle patch, a Fetch answer's
    topics for the usage records; protocol/response_walks.py says for which frames).

    The reference for the compiled one (protocol/_compiled.c), which answers the common case, a Produce or
    Fetch answer with an empty top-level tagged block, itself, and calls this for every other."""
    found = _find(api_key, api_version, body, start, remember)
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


rewrite_node_endpoints = rewrite_node_endpoints_in_python  # (its signature is the compiled one's, too)
if compiled.rewrite_node_endpoints is not None and compiled.bind_node_endpoints is not None:
    # What the compiled one writes as the reference's walks do: response_walks' remembered walks.
    compiled.bind_node_endpoints(_VERSIONS, vars(response_walks), rewrite_node_endpoints_in_python)
    rewrite_node_endpoints = compiled.rewrite_node_endpoints


def decode_node_endpoints(api_key: int, api_version: int, body: Buffer, start: int = 0) -> list[Endpoint]:
    """(node_id, host, port) of every NodeEndpoints entry in a response body (empty when it has none)."""
    found = _find(api_key, api_version, body, start)
    return [] if found is None else [(entry.node_id, entry.host, entry.port) for entry in found[2]]


# ---- finding the array --------------------------------------------------------------------------------

_Parsed = tuple[int, int, list[BrokerEntry]]


def _find(api_key: int, api_version: int, body: Buffer, start: int, remember: bool = False) -> _Parsed | None:
    """Where the array's bytes sit to be replaced ([at, end): for Produce and Fetch the tagged field's size
    prefix and value, for the share answers the array itself) and its entries (node_id, host, port, and
    where the rack and tagged fields that follow the port sit), all as offsets in `body`; None when the
    body carries none."""
    versions = _VERSIONS.get(api_key)  # one look-up: every Produce and Fetch answer comes here
    if versions is None or api_version < versions[0]:
        return None
    if api_version > versions[1]:
        raise ProtocolError("unsupported_version", f"api {api_key} v{api_version}")
    try:
        if api_key <= _FETCH:  # Produce or Fetch: every answer of theirs comes here
            if api_key == _PRODUCE:
                pos = produce_responses_end(api_version, body, start, remember) + 4  # and throttle_time_ms
            else:
                pos = fetch_responses(api_version, body, start, remember, remember)[1]
            if pos == len(body) - 1 and body[pos] == 0:
                return None  # the usual empty top-level tagged block: no NodeEndpoints
            return _in_tagged_block(body, pos)
        return _share_array(body, share_responses_end(api_key, api_version, body, start))
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
