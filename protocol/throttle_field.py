"""Finding, reading and patching `throttle_time_ms` in a response body, in place (spec section 5).

`body` is always the response body: the bytes after the response header (the proxy gets the header
size from `protocol.headers.response_header_size`). The field is a fixed 4-byte int32 in every version,
flexible or not, so patching never changes the body's size.

Where the field sits:
* FIRST (almost every API) and SECOND (OffsetDelete, after its int16 ErrorCode): a constant offset.
* AFTER_RESPONSES (Produce): the field follows the Responses array. A non-flexible body (v1-8) ends
  with it, so it is the last 4 bytes and needs no walk, which keeps the hot path O(1) however many
  partitions the response has. From v9 a tagged-field block (NodeEndpoints, v10+) follows it, so the
  array is walked with struct offsets, never decoded (protocol/response_walks.py, whose walk of an answer
  the NodeEndpoints rewrite has made already is not made again: `throttle_field_at`).
* AFTER_API_KEYS (ApiVersions) and LAST (the delegation-token APIs): rare, walked field by field.

Every walk checks that the field is followed by exactly what may follow it (nothing, or one
tagged-field block), so a walk that went wrong cannot patch the wrong 4 bytes unnoticed.
Versions above the API table's maximum are refused for walked positions (their layout is unknown);
`THROTTLE_PATCHABLE_MAX_VERSIONS` lists those limits for the ApiVersions clamp.

Why this module is long: the per-API layout table and the walkers for the APIs whose field sits after
variable-length data belong together; each layout stays next to the code that trusts it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.apis import API_SPECS, FLEXIBLE_FROM, ThrottlePosition
from sluice.protocol.codec_quirks import api_versions_body_version
from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import (
    INT32_MAX,
    Buffer,
    read_int32,
    read_uvarint,
    skip_compact_nullable_string,
    skip_nullable_bytes,
    skip_nullable_string,
    skip_tagged_fields,
)
from sluice.protocol.response_walks import produce_responses_end, walked_produce_responses_end

__all__ = [
    "THROTTLE_PATCHABLE_MAX_VERSIONS",
    "patch_frame_throttle_ms",
    "patch_throttle_ms",
    "raise_frame_throttle_ms",
    "raise_throttle_ms",
    "read_throttle_ms",
    "throttle_field_at",
    "throttle_field_offset",
]

_ResponsesEnd = Callable[[int, Buffer, int], int]
_INT32 = struct.Struct(">i")
_UNPACK_INT32 = _INT32.unpack_from
_PACK_INT32_INTO = _INT32.pack_into
_FIELD_SIZE = 4
_FRAME_PREFIX = 4

_API_VERSIONS = ApiKey.API_VERSIONS
_PRODUCE = ApiKey.PRODUCE

_PRODUCE_FIRST_FLEXIBLE = FLEXIBLE_FROM[_PRODUCE]
_API_VERSIONS_FIRST_FLEXIBLE = FLEXIBLE_FROM[_API_VERSIONS]
_API_VERSION_ENTRY = 6  # api_key, min_version, max_version: three int16s
# The four delegation-token APIs turned flexible at the same version.
_DELEGATION_FIRST_FLEXIBLE = FLEXIBLE_FROM[ApiKey.CREATE_DELEGATION_TOKEN]
_DELEGATION_FIRST_WITH_REQUESTER = 3
_TIMESTAMPS = 3 * 8  # issue, expiry and max timestamps
_RENEW_EXPIRE_OFFSET = 2 + 8  # after ErrorCode and ExpiryTimestampMs


def throttle_field_offset(api_key: int, api_version: int, body: memoryview | bytes | bytearray) -> int | None:
    """Offset of the int32 `throttle_time_ms` inside `body`, or None if this API/version has none.

    Raises ProtocolError('bad_response_body') if the body is too short or malformed where it was
    read, and ProtocolError('unsupported_version') for a version above the table's maximum of an
    API whose field position needs a walk.
    """
    fixed = _FIXED_OFFSETS.get(api_key)
    if fixed is not None:
        field_from, offset = fixed
        if api_version < field_from:
            return None
        if offset + _FIELD_SIZE > len(body):
            raise ProtocolError("bad_response_body", f"api {api_key} v{api_version}: {len(body)} bytes")
        return offset
    walk = _WALKS.get(api_key)
    if walk is None:
        return None  # an unknown API, or one without the field
    spec = API_SPECS[api_key]
    if not spec.has_throttle_field(api_version):
        return None
    try:
        return walk(api_version, body)
    except ProtocolError as exc:
        if exc.reason == "unsupported_version":
            raise
        raise ProtocolError(
            "bad_response_body", f"{spec.name} v{api_version}: {exc.detail or exc.reason}"
        ) from None


def throttle_field_at(api_key: int, api_version: int, frame: Buffer, start: int) -> int | None:
    """throttle_field_offset for a body that begins at `start` in `frame` (a whole frame, say), as an
    offset in `frame`. A flexible Produce answer's walk is the one the NodeEndpoints rewrite made of the
    same frame, when it has (protocol/response_walks.py), and no view of the body is made for it."""
    if api_key == _PRODUCE:
        if not API_SPECS[_PRODUCE].has_throttle_field(api_version):
            return None
        try:
            # The NodeEndpoints rewrite has walked this answer already (v10+): its walk is remembered.
            return _produce_offset(api_version, frame, start, walked_produce_responses_end)
        except ProtocolError as exc:
            if exc.reason == "unsupported_version":
                raise
            detail = exc.detail or exc.reason
            raise ProtocolError("bad_response_body", f"Produce v{api_version}: {detail}") from None
    offset = throttle_field_offset(api_key, api_version, memoryview(frame)[start:])
    return None if offset is None else start + offset


def read_throttle_ms(api_key: int, api_version: int, body: memoryview | bytes | bytearray) -> int | None:
    """The value of `throttle_time_ms`, or None if this API/version has no such field."""
    offset = throttle_field_offset(api_key, api_version, body)
    if offset is None:
        return None
    throttle_ms: int = _UNPACK_INT32(body, offset)[0]
    return throttle_ms


def patch_throttle_ms(api_key: int, api_version: int, body: bytearray | memoryview, throttle_ms: int) -> bool:
    """Write `throttle_ms` into the field in place; False (nothing written) if there is no field.

    `body` must be writable (a bytearray or a memoryview over one). Values beyond int32 saturate.
    """
    fixed = _FIXED_OFFSETS.get(api_key)
    # The fixed-offset case inline: most responses, Fetch among them, take this path.
    if fixed is not None and api_version >= fixed[0] and fixed[1] + _FIELD_SIZE <= len(body):
        offset = fixed[1]
    else:
        found = throttle_field_offset(api_key, api_version, body)
        if found is None:
            return False
        offset = found
    _PACK_INT32_INTO(body, offset, throttle_ms if 0 <= throttle_ms <= INT32_MAX else _as_int32(throttle_ms))
    return True


def raise_throttle_ms(
    api_key: int, api_version: int, body: bytearray | memoryview, throttle_ms: int
) -> int | None:
    """Make the field at least `throttle_ms` (KIP-219: max of the broker's value and ours).

    Returns the value the field now holds, or None if there is no field. Writes only when it grows.
    """
    offset = throttle_field_offset(api_key, api_version, body)
    if offset is None:
        return None
    current: int = _UNPACK_INT32(body, offset)[0]
    wanted = _as_int32(throttle_ms)
    if wanted <= current:
        return current
    _PACK_INT32_INTO(body, offset, wanted)
    return wanted


def patch_frame_throttle_ms(
    api_key: int, api_version: int, frame: bytearray | memoryview, header_size: int, throttle_ms: int
) -> bool:
    """patch_throttle_ms on a whole writable frame (4-byte length prefix included)."""
    return patch_throttle_ms(api_key, api_version, _frame_body(frame, header_size), throttle_ms)


def raise_frame_throttle_ms(
    api_key: int, api_version: int, frame: bytearray | memoryview, header_size: int, throttle_ms: int
) -> int | None:
    """raise_throttle_ms on a whole writable frame (4-byte length prefix included)."""
    return raise_throttle_ms(api_key, api_version, _frame_body(frame, header_size), throttle_ms)


def _frame_body(frame: bytearray | memoryview, header_size: int) -> memoryview:
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    return view[_FRAME_PREFIX + header_size :]


def _as_int32(throttle_ms: int) -> int:
    if throttle_ms < 0:
        raise ValueError(f"throttle_ms must not be negative, got {throttle_ms}")
    return throttle_ms if throttle_ms <= INT32_MAX else INT32_MAX


# ---------------------------------------------------------------------------------------------------
# Walks. Each returns the field's offset or raises ProtocolError; all share the same ending check.


def _check_version(api_key: int, api_version: int) -> None:
    spec = API_SPECS[api_key]
    if api_version > spec.max_version:
        raise ProtocolError("unsupported_version", f"{spec.name} v{api_version}")


def _field_then_end(body: Buffer, pos: int, flexible: bool) -> int:
    """`pos` is where the field must be: check the int32 fits and only a tagged block (if flexible)
    follows it. Returns pos."""
    end = pos + _FIELD_SIZE
    size = len(body)
    if end > size:
        raise ProtocolError("truncated", f"throttle_time_ms at {pos}")
    if flexible:
        end = _skip_tags(body, end)
    if end != size:
        raise ProtocolError("trailing_bytes", f"{size - end} after throttle_time_ms")
    return pos


def _array_length(body: Buffer, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's element count (a null array counts as empty) and the offset after the count.

    Every element takes at least one byte, so a count larger than the bytes left is malformed; the
    check keeps junk counts from spinning a loop.
    """
    if flexible:
        size = len(body)
        if pos < size and body[pos] < 0x80:
            count = body[pos] - 1
            pos += 1
        else:
            count_plus_one, pos = read_uvarint(body, pos)
            count = count_plus_one - 1
    else:
        count, pos = read_int32(body, pos)
        if count < -1:
            raise ProtocolError("bad_array_length", str(count))
    if count > len(body) - pos:
        raise ProtocolError("bad_array_length", f"{count} elements in {len(body) - pos} bytes")
    return (count if count > 0 else 0), pos


def _skip_string(body: Buffer, pos: int, flexible: bool) -> int:
    return skip_compact_nullable_string(body, pos) if flexible else skip_nullable_string(body, pos)


def _skip_bytes(body: Buffer, pos: int, flexible: bool) -> int:
    # Compact bytes share the compact string's encoding: unsigned varint length + 1, then the bytes.
    return skip_compact_nullable_string(body, pos) if flexible else skip_nullable_bytes(body, pos)


def _skip_tags(body: Buffer, pos: int) -> int:
    if pos < len(body) and body[pos] == 0:  # the usual empty tagged-field block
        return pos + 1
    return skip_tagged_fields(body, pos)


def _produce_offset(
    api_version: int, body: Buffer, start: int = 0, responses_end: _ResponsesEnd = produce_responses_end
) -> int:
    """The field's offset in `body`, whose answer begins at `start`."""
    _check_version(ApiKey.PRODUCE, api_version)
    if api_version < _PRODUCE_FIRST_FLEXIBLE:
        # Nothing follows the field in a non-flexible Produce body: it is the last 4 bytes.
        if len(body) - start < _FIELD_SIZE:
            raise ProtocolError("truncated", f"{len(body) - start} bytes")
        return len(body) - _FIELD_SIZE
    return _field_then_end(body, responses_end(api_version, body, start), True)


def _api_versions_offset(api_version: int, body: Buffer) -> int | None:
    # An UNSUPPORTED_VERSION answer is written as v0, which has no throttle field (codec quirk Q5).
    if api_versions_body_version(api_version, body) == 0:
        return None
    _check_version(_API_VERSIONS, api_version)
    flexible = api_version >= _API_VERSIONS_FIRST_FLEXIBLE
    count, pos = _array_length(body, 2, flexible)
    for _ in range(count):
        pos += _API_VERSION_ENTRY
        if flexible:
            pos = _skip_tags(body, pos)
    return _field_then_end(body, pos, flexible)


def _create_delegation_token_offset(api_version: int, body: Buffer) -> int:
    """error_code, principal type and name, requester type and name (v3+), three timestamps,
    token_id, hmac (bytes), then the field."""
    _check_version(ApiKey.CREATE_DELEGATION_TOKEN, api_version)
    flexible = api_version >= _DELEGATION_FIRST_FLEXIBLE
    pos = _skip_principals(body, 2, api_version, flexible)
    pos = _skip_string(body, pos + _TIMESTAMPS, flexible)
    pos = _skip_bytes(body, pos, flexible)
    return _field_then_end(body, pos, flexible)


def _renew_or_expire_delegation_token_offset(api_key: int) -> Callable[[int, Buffer], int]:
    def offset(api_version: int, body: Buffer) -> int:
        _check_version(api_key, api_version)
        return _field_then_end(body, _RENEW_EXPIRE_OFFSET, api_version >= _DELEGATION_FIRST_FLEXIBLE)

    return offset


def _describe_delegation_token_offset(api_version: int, body: Buffer) -> int:
    """error_code, tokens (each: principals as in Create, three timestamps, token_id, hmac, renewers
    (principal type and name, tagged fields), tagged fields), then the field."""
    _check_version(ApiKey.DESCRIBE_DELEGATION_TOKEN, api_version)
    flexible = api_version >= _DELEGATION_FIRST_FLEXIBLE
    tokens, pos = _array_length(body, 2, flexible)
    for _ in range(tokens):
        pos = _skip_principals(body, pos, api_version, flexible)
        pos = _skip_string(body, pos + _TIMESTAMPS, flexible)
        pos = _skip_bytes(body, pos, flexible)
        renewers, pos = _array_length(body, pos, flexible)
        for _ in range(renewers):
            pos = _skip_string(body, _skip_string(body, pos, flexible), flexible)
            if flexible:
                pos = _skip_tags(body, pos)
        if flexible:
            pos = _skip_tags(body, pos)
    return _field_then_end(body, pos, flexible)


def _skip_principals(body: Buffer, pos: int, api_version: int, flexible: bool) -> int:
    strings = 4 if api_version >= _DELEGATION_FIRST_WITH_REQUESTER else 2
    for _ in range(strings):
        pos = _skip_string(body, pos, flexible)
    return pos


_Walk = Callable[[int, Buffer], int | None]

_WALK_BY_KEY: dict[int, _Walk] = {
    ApiKey.PRODUCE: _produce_offset,
    _API_VERSIONS: _api_versions_offset,
    ApiKey.CREATE_DELEGATION_TOKEN: _create_delegation_token_offset,
    ApiKey.RENEW_DELEGATION_TOKEN: _renew_or_expire_delegation_token_offset(ApiKey.RENEW_DELEGATION_TOKEN),
    ApiKey.EXPIRE_DELEGATION_TOKEN: _renew_or_expire_delegation_token_offset(ApiKey.EXPIRE_DELEGATION_TOKEN),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: _describe_delegation_token_offset,
}


def _build_tables() -> tuple[dict[int, tuple[int, int]], dict[int, _Walk]]:
    fixed: dict[int, tuple[int, int]] = {}
    walks: dict[int, _Walk] = {}
    for key, spec in API_SPECS.items():
        position = spec.throttle_position
        if spec.throttle_field_from is None or position is None:
            continue
        if position is ThrottlePosition.FIRST:
            fixed[key] = (spec.throttle_field_from, 0)
        elif position is ThrottlePosition.SECOND:
            fixed[key] = (spec.throttle_field_from, 2)
        else:
            walks[key] = _WALK_BY_KEY[key]  # a KeyError here means a new walked API lacks a walk
    return fixed, walks


# Precomputed per key so the hot path is one dict lookup: key -> (first version with the field, offset).
_FIXED_OFFSETS, _WALKS = _build_tables()

THROTTLE_PATCHABLE_MAX_VERSIONS: Mapping[int, int] = {key: API_SPECS[key].max_version for key in _WALKS}
