"""Editing the versions a broker advertises in its ApiVersions response.

The proxy must keep clients at versions it can rewrite, so each capped API's max_version is lowered
in place: the entries are fixed-size int16 triples, so the patch is a few bytes in a copy of the body
and everything else (tagged fields, features, throttle_time_ms) stays byte-for-byte as the broker
wrote it.

The proxy also answers some APIs itself (DescribeClientQuotas and AlterClientQuotas), whatever the
brokers support: `advertise_apis` sets those entries to the proxy's own range, adding them when the
broker lacks them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping

from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import (
    INT32_PACK,
    encode_uvarint,
    read_int16,
    read_int32,
    read_uvarint,
    skip_tagged_fields,
)

_FIRST_FLEXIBLE = 3
_ENTRY = struct.Struct(">hhh")  # api_key, min_version, max_version
_INT16 = struct.Struct(">h")
_MAX_VERSION_OFFSET = 4

# (api_key, broker_min_version, broker_max_version, cap)
UnclampableReport = Callable[[int, int, int, int], None]


def clamp_api_versions(
    api_version: int,
    body: memoryview | bytes,
    max_versions: Mapping[int, int],
    on_unclampable: UnclampableReport | None = None,
) -> bytes | None:
    """Lower each listed API's max_version to its cap in an ApiVersions response body.

    Never raises a version. Returns the new body, or None when nothing changed or when the response
    carries an error (error responses, including the v0-format UNSUPPORTED_VERSION answer, pass
    untouched so the client can retry with a lower version).

    A cap below the broker's min_version cannot be honoured without advertising a range the broker
    rejects, and dropping the entry would tell the client the broker lacks the API entirely. Such an
    entry is kept as the broker sent it and reported through `on_unclampable`; a client that then
    picks an unrewritable version gets ProtocolError('unsupported_version') from the rewrite, which
    closes that connection instead of leaking real broker addresses.
    """
    try:
        return _clamp(api_version, body, max_versions, on_unclampable)
    except ProtocolError as exc:
        raise ProtocolError("bad_api_versions_response", exc.detail or exc.reason) from None


def _clamp(
    api_version: int,
    body: memoryview | bytes,
    max_versions: Mapping[int, int],
    on_unclampable: UnclampableReport | None,
) -> bytes | None:
    error_code, pos = read_int16(body, 0)
    if error_code != 0:
        return None
    flexible = api_version >= _FIRST_FLEXIBLE
    if flexible:
        count_plus_one, pos = read_uvarint(body, pos)
        count = count_plus_one - 1
    else:
        count, pos = read_int32(body, pos)
    if count < 0:
        raise ProtocolError("null_array", "api_keys")
    patches: list[tuple[int, int]] = []
    size = len(body)
    for _ in range(count):
        if pos + _ENTRY.size > size:
            raise ProtocolError("truncated", "api_keys entry")
        api_key, min_version, max_version = _ENTRY.unpack_from(body, pos)
        cap = max_versions.get(api_key)
        if cap is not None and max_version > cap:
            if cap >= min_version:
                patches.append((pos + _MAX_VERSION_OFFSET, cap))
            elif on_unclampable is not None:
                on_unclampable(api_key, min_version, max_version, cap)
        pos += _ENTRY.size
        if flexible:
            pos = skip_tagged_fields(body, pos)
    if not patches:
        return None
    patched = bytearray(body)
    for offset, cap in patches:
        _INT16.pack_into(patched, offset, cap)
    return bytes(patched)


def advertise_apis(
    api_version: int, body: memoryview | bytes, ranges: Mapping[int, tuple[int, int]]
) -> bytes | None:
    """Advertise each listed API with exactly its (min, max) range, adding entries the broker lacks.

    Returns the new body, or None when nothing changed or the response carries an error. Entries the
    broker sent keep their place and tagged fields; added ones go after them, with no tagged fields.
    """
    try:
        return _advertise(api_version, body, ranges)
    except ProtocolError as exc:
        raise ProtocolError("bad_api_versions_response", exc.detail or exc.reason) from None


def _advertise(
    api_version: int, body: memoryview | bytes, ranges: Mapping[int, tuple[int, int]]
) -> bytes | None:
    error_code, pos = read_int16(body, 0)
    if error_code != 0:
        return None
    flexible = api_version >= _FIRST_FLEXIBLE
    count_start = pos
    if flexible:
        count_plus_one, pos = read_uvarint(body, pos)
        count = count_plus_one - 1
    else:
        count, pos = read_int32(body, pos)
    if count < 0:
        raise ProtocolError("null_array", "api_keys")
    entries_start = pos
    patches: list[tuple[int, int, int]] = []
    missing = dict(ranges)
    size = len(body)
    for _ in range(count):
        if pos + _ENTRY.size > size:
            raise ProtocolError("truncated", "api_keys entry")
        api_key, min_version, max_version = _ENTRY.unpack_from(body, pos)
        wanted = missing.pop(api_key, None)
        if wanted is not None and wanted != (min_version, max_version):
            patches.append((pos, api_key, *wanted))  # type: ignore[arg-type]
        pos += _ENTRY.size
        if flexible:
            pos = skip_tagged_fields(body, pos)
    if not patches and not missing:
        return None
    entries = bytearray(body[entries_start:pos])
    for offset, api_key, low, high in patches:
        _ENTRY.pack_into(entries, offset - entries_start, api_key, low, high)
    for api_key in sorted(missing):
        low, high = missing[api_key]
        entries += _ENTRY.pack(api_key, low, high)
        if flexible:
            entries += b"\x00"  # no tagged fields
    total = count + len(missing)
    count_bytes = encode_uvarint(total + 1) if flexible else INT32_PACK(total)
    return b"".join((bytes(body[:count_start]), count_bytes, bytes(entries), bytes(body[pos:])))
