"""Editing the versions a broker advertises in its ApiVersions response.

The proxy must keep clients at versions it can rewrite, so each capped API's max_version is lowered
in place: the entries are fixed-size int16 triples, so the patch is a few bytes in a copy of the body
and everything else (tagged fields, features, throttle_time_ms) stays byte-for-byte as the broker
wrote it.

Given the versions the proxy has vetted (protocol/api_vetting.py), the clamp also hides what is not
vetted: an entry for an API with no vetted version is left out (the array is rebuilt without it), and the
others are capped at their newest vetted version as well.

The proxy also answers some APIs itself (DescribeClientQuotas and AlterClientQuotas), whatever the
brokers support: `advertise_apis` sets those entries to the proxy's own range, adding them when the
broker lacks them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import NamedTuple

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.apis import FLEXIBLE_FROM
from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import (
    INT32_PACK,
    encode_uvarint,
    read_array_count,
    read_int16,
    skip_tagged_fields,
)

_FIRST_FLEXIBLE = FLEXIBLE_FROM[ApiKey.API_VERSIONS]
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
    vetted: Mapping[int, int] | None = None,
) -> bytes | None:
    """Lower each listed API's max_version to its cap in an ApiVersions response body; given `vetted` (per
    API key, its newest vetted version), leave out every API it lacks and cap the others at it too.

    Never raises a version. Returns the new body, or None when nothing changed or when the response
    carries an error (error responses, including the v0-format UNSUPPORTED_VERSION answer, pass
    untouched so the client can retry with a lower version). An entry whose lowest version is above its
    vetted cap is left out: nothing the broker offers of it is vetted.

    A cap below the broker's min_version cannot be honoured without advertising a range the broker
    rejects, and dropping the entry would tell the client the broker lacks the API entirely. Such an
    entry is kept as the broker sent it and reported through `on_unclampable`; a client that then
    picks an unrewritable version gets ProtocolError('unsupported_version') from the rewrite, which
    closes that connection instead of leaking real broker addresses.
    """
    try:
        return _clamp(api_version, body, max_versions, on_unclampable, vetted)
    except ProtocolError as exc:
        raise ProtocolError("bad_api_versions_response", exc.detail or exc.reason) from None


class _Entries(NamedTuple):
    """Where the api_keys array of a successful ApiVersions body sits, and its entries."""

    flexible: bool
    count_at: int  # offset of the array's count
    start: int  # offset of its first entry
    end: int  # offset just after its last entry
    entries: list[tuple[int, int, int, int]]  # (offset, api_key, min_version, max_version)


def _api_keys(api_version: int, body: memoryview | bytes) -> _Entries | None:
    """The api_keys array, or None when the answer carries an error (it then passes untouched)."""
    error_code, pos = read_int16(body, 0)
    if error_code != 0:
        return None
    flexible = api_version >= _FIRST_FLEXIBLE
    count_at = pos
    count, pos = read_array_count(body, pos, flexible, "api_keys")
    start = pos
    entries = []
    size = len(body)
    for _ in range(count):
        if pos + _ENTRY.size > size:
            raise ProtocolError("truncated", "api_keys entry")
        entries.append((pos, *_ENTRY.unpack_from(body, pos)))
        pos += _ENTRY.size
        if flexible:
            pos = skip_tagged_fields(body, pos)
    return _Entries(flexible, count_at, start, pos, entries)


def _clamp(
    api_version: int,
    body: memoryview | bytes,
    max_versions: Mapping[int, int],
    on_unclampable: UnclampableReport | None,
    vetted: Mapping[int, int] | None,
) -> bytes | None:
    found = _api_keys(api_version, body)
    if found is None:
        return None
    patches: list[tuple[int, int]] = []
    dropped: set[int] = set()  # positions of the entries left out
    for pos, api_key, min_version, max_version in found.entries:
        cap = max_versions.get(api_key)
        if vetted is not None:
            newest = vetted.get(api_key)
            if newest is None or newest < min_version:
                dropped.add(pos)
                continue
            cap = newest if cap is None else min(cap, newest)
        if cap is not None and max_version > cap:
            if cap >= min_version:
                patches.append((pos + _MAX_VERSION_OFFSET, cap))
            elif on_unclampable is not None:
                on_unclampable(api_key, min_version, max_version, cap)
    if not patches and not dropped:
        return None
    patched = bytearray(body)
    for offset, cap in patches:
        _INT16.pack_into(patched, offset, cap)
    if not dropped:
        return bytes(patched)
    return _without(found, patched, dropped)


def _without(found: _Entries, body: bytearray, dropped: set[int]) -> bytes:
    """The body with the entries starting at `dropped` left out of the api_keys array."""
    starts = [entry[0] for entry in found.entries]
    ends = [*starts[1:], found.end]
    kept = [body[pos:end] for pos, end in zip(starts, ends, strict=True) if pos not in dropped]
    total = len(kept)
    count = encode_uvarint(total + 1) if found.flexible else INT32_PACK(total)
    return b"".join((bytes(body[: found.count_at]), count, *kept, bytes(body[found.end :])))


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
    found = _api_keys(api_version, body)
    if found is None:
        return None
    missing = dict(ranges)
    patches = []
    for pos, api_key, min_version, max_version in found.entries:
        wanted = missing.pop(api_key, None)
        if wanted is not None and wanted != (min_version, max_version):
            patches.append((pos, api_key, *wanted))
    if not patches and not missing:
        return None
    entries = bytearray(body[found.start : found.end])
    for pos, api_key, low, high in patches:
        _ENTRY.pack_into(entries, pos - found.start, api_key, low, high)
    for api_key in sorted(missing):
        low, high = missing[api_key]
        entries += _ENTRY.pack(api_key, low, high)
        if found.flexible:
            entries += b"\x00"  # no tagged fields
    total = len(found.entries) + len(missing)
    count = encode_uvarint(total + 1) if found.flexible else INT32_PACK(total)
    return b"".join((bytes(body[: found.count_at]), count, bytes(entries), bytes(body[found.end :])))
