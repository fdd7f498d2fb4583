"""The Fetch pieces of throttling: the request's byte limits, Kafka's cap on them, the response's
session, and the empty answer Kafka sends to a throttled consumer (spec 2.7, 8.4).

Requests and responses are read and patched at fixed struct offsets; nothing here decodes a topic.
Request body (after the request header), in versions 0-18:
    replica_id int32 (v0-14; v15+ moved it into a tagged ReplicaState at the end), max_wait_ms int32,
    min_bytes int32, max_bytes int32 (v3+), ...
Response body: throttle_time_ms int32 (v1+), error_code int16 (v7+), session_id int32 (v7+), ...
"""

from __future__ import annotations

import struct

from kafka.protocol.consumer import FetchResponse

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.apis import API_SPECS
from sluice.protocol.codec_quirks import encode_body
from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import INT32_MAX

__all__ = [
    "FETCH_MAX_VERSION",
    "cap_fetch_request",
    "capped_limits",
    "empty_fetch_response",
    "fetch_request_limits",
    "fetch_response_session",
]

FETCH_MAX_VERSION = API_SPECS[ApiKey.FETCH].max_version

_FIRST_WITH_MAX_BYTES = 3
_FIRST_WITHOUT_REPLICA_ID = 15
_FIRST_WITH_SESSION = 7
_LIMITS = struct.Struct(">ii")  # min_bytes, max_bytes
_ERROR_AND_SESSION = struct.Struct(">hi")
_SESSION_AT = 4  # after throttle_time_ms


def _check_version(api_version: int) -> None:
    if not 0 <= api_version <= FETCH_MAX_VERSION:
        raise ProtocolError("unsupported_version", f"Fetch v{api_version}")


def _min_bytes_at(api_version: int) -> int:
    # v0-14 open with replica_id before max_wait_ms; from v15 max_wait_ms comes first.
    return 4 if api_version >= _FIRST_WITHOUT_REPLICA_ID else 8


def fetch_request_limits(api_version: int, body: memoryview | bytes | bytearray) -> tuple[int, int] | None:
    """(min_bytes, max_bytes) of a Fetch request body, or None for v0-2, which have no max_bytes."""
    _check_version(api_version)
    if api_version < _FIRST_WITH_MAX_BYTES:
        return None
    at = _min_bytes_at(api_version)
    if at + _LIMITS.size > len(body):
        raise ProtocolError("bad_fetch_request", f"v{api_version}: {len(body)} bytes")
    return _LIMITS.unpack_from(body, at)


def cap_fetch_request(api_version: int, body: bytearray | memoryview, max_bytes_cap: float) -> bool:
    """Kafka's KAFKA-9677 cap (spec 2.7), in place: max_bytes = min(max_bytes, cap), then
    min_bytes = min(min_bytes, max_bytes).

    `body` must be writable. The cap may be the quota engine's float (`getMaxValueInQuotaWindow`);
    like Kafka's toInt it is truncated, and saturates at int32's maximum. Returns False when nothing
    changed, including v0-2, which have no max_bytes to cap.
    """
    _check_cap(max_bytes_cap)
    limits = fetch_request_limits(api_version, body)
    if limits is None:
        return False
    capped = capped_limits(limits, max_bytes_cap)
    if capped == limits:
        return False
    _LIMITS.pack_into(body, _min_bytes_at(api_version), *capped)
    return True


def capped_limits(limits: tuple[int, int], max_bytes_cap: float) -> tuple[int, int]:
    """(min_bytes, max_bytes) under Kafka's cap: max_bytes = min(max_bytes, cap), then min_bytes =
    min(min_bytes, max_bytes). The cap (the quota engine's float) is truncated as Kafka's toInt truncates
    it and saturates at int32's maximum. Fetch and ShareFetch requests are capped alike."""
    _check_cap(max_bytes_cap)
    min_bytes, max_bytes = limits
    new_max = min(max_bytes, INT32_MAX if max_bytes_cap >= INT32_MAX else int(max_bytes_cap))
    return min(min_bytes, new_max), new_max


def _check_cap(max_bytes_cap: float) -> None:
    if not max_bytes_cap >= 0:  # also refuses NaN
        raise ValueError(f"max_bytes_cap must be a non-negative number, got {max_bytes_cap}")


def fetch_response_session(api_version: int, body: memoryview | bytes | bytearray) -> tuple[int, int]:
    """(error_code, session_id) of a Fetch response body; (0, 0) before v7, which had no sessions."""
    _check_version(api_version)
    if api_version < _FIRST_WITH_SESSION:
        return 0, 0
    if _SESSION_AT + _ERROR_AND_SESSION.size > len(body):
        raise ProtocolError("bad_fetch_response", f"v{api_version}: {len(body)} bytes")
    return _ERROR_AND_SESSION.unpack_from(body, _SESSION_AT)


def empty_fetch_response(api_version: int, throttle_ms: int, session_id: int) -> bytes:
    """The body Kafka sends for a throttled fetch (`getThrottledResponse`, spec 2.7 step 3).

    Error NONE, `throttle_time_ms` (v1+), `session_id` (v7+), no topics and no node endpoints. Fields
    the version lacks are simply not written. Values beyond int32 saturate.
    """
    _check_version(api_version)
    if throttle_ms < 0:
        raise ValueError(f"throttle_ms must not be negative, got {throttle_ms}")
    response = FetchResponse(
        version=api_version,
        throttle_time_ms=min(throttle_ms, INT32_MAX),
        error_code=0,
        session_id=session_id,
        responses=[],
    )
    return encode_body(response, api_version)
