"""ShareFetch's piece of throttling (KIP-932): the request's byte limits and Kafka's cap on them.

A broker charges a ShareFetch answer to the fetch quota (consumer_byte_rate) as it does a Fetch, and caps
the request's MaxBytes at what the quota window can hold (`KafkaApis.handleShareFetchRequest`, as
KAFKA-9677 does for Fetch). The limits sit at the same place in every version (0-2):

    group_id compact nullable string, member_id compact nullable string, share_session_epoch int32,
    max_wait_ms int32, min_bytes int32, max_bytes int32, ...

Everything ShareFetch has is flexible; nothing here reads past max_bytes.
"""

from __future__ import annotations

import struct

from sluice.protocol.errors import ProtocolError
from sluice.protocol.fetch import capped_limits
from sluice.protocol.primitives import skip_compact_nullable_string

__all__ = ["SHARE_FETCH_MAX_VERSION", "cap_share_fetch_request", "share_fetch_request_limits"]

SHARE_FETCH_MAX_VERSION = 2
_LIMITS = struct.Struct(">ii")  # min_bytes, max_bytes
_EPOCH_AND_MAX_WAIT = 4 + 4


def _limits_at(api_version: int, body: memoryview | bytes | bytearray) -> int:
    if not 0 <= api_version <= SHARE_FETCH_MAX_VERSION:
        raise ProtocolError("unsupported_version", f"ShareFetch v{api_version}")
    try:
        at = skip_compact_nullable_string(body, skip_compact_nullable_string(body, 0)) + _EPOCH_AND_MAX_WAIT
    except ProtocolError as exc:
        raise ProtocolError("bad_share_fetch_request", exc.detail or exc.reason) from None
    if at + _LIMITS.size > len(body):
        raise ProtocolError("bad_share_fetch_request", f"v{api_version}: {len(body)} bytes")
    return at


def share_fetch_request_limits(api_version: int, body: memoryview | bytes | bytearray) -> tuple[int, int]:
    """(min_bytes, max_bytes) of a ShareFetch request body."""
    return _LIMITS.unpack_from(body, _limits_at(api_version, body))


def cap_share_fetch_request(api_version: int, body: bytearray | memoryview, max_bytes_cap: float) -> bool:
    """Kafka's cap (`capped_limits`, as for a Fetch), in place (`body` must be writable). Returns False
    when nothing changed."""
    at = _limits_at(api_version, body)
    limits: tuple[int, int] = _LIMITS.unpack_from(body, at)
    capped = capped_limits(limits, max_bytes_cap)
    if capped == limits:
        return False
    _LIMITS.pack_into(body, at, *capped)
    return True
