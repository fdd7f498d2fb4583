"""Lowering the versions a broker advertises in its ApiVersions response.

The proxy must keep clients at versions it can rewrite, so each capped API's max_version is lowered
in place: the entries are fixed-size int16 triples, so the patch is a few bytes in a copy of the body
and everything else (tagged fields, features, throttle_time_ms) stays byte-for-byte as the broker
wrote it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping

from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import read_int16, read_int32, read_uvarint, skip_tagged_fields

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
